// flash_fwd_hdim80.cu — the FlashAttention-2 forward kernels for head dim 80 (bf16, fp16, fp32).
// One translation unit per head dim and direction so that builds parallelise.
#include "ops/attention/cuda/flash_launch_template.cuh"

namespace ft::flash {

template void run_flash_fwd<__nv_bfloat16, 80>(const FlashFwdParams&, cudaStream_t);
template void run_flash_fwd<__half, 80>(const FlashFwdParams&, cudaStream_t);
template void run_flash_fwd<float, 80>(const FlashFwdParams&, cudaStream_t);

}  // namespace ft::flash
