// flash_sm90_candidates_fwd.cu — the candidate schedules of the Hopper forward at head dim 128, bf16
// (kSm90FwdCandidates128 in flash_traits.h), each run instead of the tile table's when a call asks for it
// (force_flash_forward_variant), so that one GPU run can time them all.
#include "ops/attention/cuda/flash_launch_template.cuh"

namespace ft::flash {

template <int kVariant>
void run_flash_fwd_sm90_candidate(const FlashFwdParams& p, cudaStream_t stream) {
  run_flash_fwd_sm90<__nv_bfloat16, 128, kVariant>(p, stream);
}

static_assert(kSm90FwdCandidates == 2, "one instantiation per candidate");
template void run_flash_fwd_sm90_candidate<1>(const FlashFwdParams&, cudaStream_t);
template void run_flash_fwd_sm90_candidate<2>(const FlashFwdParams&, cudaStream_t);

}  // namespace ft::flash
