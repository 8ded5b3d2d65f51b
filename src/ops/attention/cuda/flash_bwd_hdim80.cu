// flash_bwd_hdim80.cu — the FlashAttention-2 backward kernels for head dim 80 (bf16, fp16, fp32).
// One translation unit per head dim and direction so that builds parallelise.
#include "ops/attention/cuda/flash_launch_template.cuh"

namespace ft::flash {

template void run_flash_bwd<__nv_bfloat16, 80>(const FlashBwdParams&, cudaStream_t);
template void run_flash_bwd<__half, 80>(const FlashBwdParams&, cudaStream_t);
template void run_flash_bwd<float, 80>(const FlashBwdParams&, cudaStream_t);

}  // namespace ft::flash
