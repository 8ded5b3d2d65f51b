// flash_sm90_candidates_bwd_a.cu — candidates 1 to 3 of the Hopper backward at head dim 128, bf16
// (kSm90BwdCandidates128 in flash_traits.h; the others in flash_sm90_candidates_bwd_b.cu, so that the
// build parallelises), each run instead of the tile table's when a call asks for it
// (force_flash_backward_variant), so that one GPU run can time them all.
#include "ops/attention/cuda/flash_launch_template.cuh"

namespace ft::flash {

template <int kVariant>
void run_flash_bwd_sm90_candidate(const FlashBwdParams& p, cudaStream_t stream) {
  run_flash_bwd_sm90<__nv_bfloat16, 128, kVariant>(p, stream);
}

template void run_flash_bwd_sm90_candidate<1>(const FlashBwdParams&, cudaStream_t);
template void run_flash_bwd_sm90_candidate<2>(const FlashBwdParams&, cudaStream_t);
template void run_flash_bwd_sm90_candidate<3>(const FlashBwdParams&, cudaStream_t);

}  // namespace ft::flash
