// flash_sm90_candidates_bwd_b.cu — candidates 4 to 6 of the Hopper backward at head dim 128, bf16
// (kSm90BwdCandidates128 in flash_traits.h; 1 to 3 in flash_sm90_candidates_bwd_a.cu).
#include "ops/attention/cuda/flash_launch_template.cuh"

namespace ft::flash {

template <int kVariant>
void run_flash_bwd_sm90_candidate(const FlashBwdParams& p, cudaStream_t stream) {
  run_flash_bwd_sm90<__nv_bfloat16, 128, kVariant>(p, stream);
}

static_assert(kSm90BwdCandidates == 6, "one instantiation per candidate, here and in flash_sm90_candidates_bwd_a.cu");
template void run_flash_bwd_sm90_candidate<4>(const FlashBwdParams&, cudaStream_t);
template void run_flash_bwd_sm90_candidate<5>(const FlashBwdParams&, cudaStream_t);
template void run_flash_bwd_sm90_candidate<6>(const FlashBwdParams&, cudaStream_t);

}  // namespace ft::flash
