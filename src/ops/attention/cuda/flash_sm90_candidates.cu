// flash_sm90_candidates.cu — the test hooks that force a candidate schedule of the Hopper kernels
// (force_flash_forward_variant / force_flash_backward_variant, attention_impls.h) and the lookups of
// flash_sm90_candidates.h.
#include "ops/attention/cuda/flash_sm90_candidates.h"

#include <atomic>

#include "core/error.h"
#include "ops/attention/attention_impls.h"
#include "ops/attention/cuda/flash_traits.h"

namespace ft {

namespace {

std::atomic<int> forced_forward_variant{0};   // force_flash_forward_variant; 0: the tile table's
std::atomic<int> forced_backward_variant{0};  // force_flash_backward_variant; 0: the tile table's

int checked_variant(const std::atomic<int>& forced, const char* direction, int head_dim, bool bf16) {
  const int variant = forced.load();
  FT_CHECK_KIND(unsupported, variant == 0 || (head_dim == 128 && bf16), "flash attention: Hopper ", direction,
                " candidate ", variant, " exists at head dim 128 for bf16 only; given head dim ", head_dim,
                bf16 ? " in bf16" : " in fp16");
  return variant;
}

}  // namespace

namespace attention_impl {

void force_flash_forward_variant(int variant) {
  FT_CHECK(variant >= 0 && variant <= flash::kSm90FwdCandidates, "force_flash_forward_variant: expected 0 to ",
           flash::kSm90FwdCandidates, ", given ", variant);
  forced_forward_variant.store(variant);
}

void force_flash_backward_variant(int variant) {
  FT_CHECK(variant >= 0 && variant <= flash::kSm90BwdCandidates, "force_flash_backward_variant: expected 0 to ",
           flash::kSm90BwdCandidates, ", given ", variant);
  forced_backward_variant.store(variant);
}

}  // namespace attention_impl

namespace flash {

int sm90_forward_variant(int head_dim, bool bf16) {
  return checked_variant(forced_forward_variant, "forward", head_dim, bf16);
}
int sm90_backward_variant(int head_dim, bool bf16) {
  return checked_variant(forced_backward_variant, "backward", head_dim, bf16);
}

}  // namespace flash

}  // namespace ft
