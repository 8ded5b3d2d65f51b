// flash_sm90_candidates.h — internal (CUDA builds only): which candidate schedule of the Hopper kernels a
// call runs (kSm90FwdCandidates128 / kSm90BwdCandidates128 in flash_traits.h): 0, the tile table's,
// unless a test hook (force_flash_forward_variant / force_flash_backward_variant, attention_impls.h) set
// one. The candidates exist at head dim 128 for bf16 only.
#pragma once

namespace ft::flash {

// The forced forward / backward candidate, or 0; throws `unsupported` when one is forced and the call on the
// Hopper kernels is at another head dim or dtype (bf16 false).
int sm90_forward_variant(int head_dim, bool bf16);
int sm90_backward_variant(int head_dim, bool bf16);

}  // namespace ft::flash
