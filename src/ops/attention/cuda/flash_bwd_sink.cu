// flash_bwd_sink.cu — the gradient of the gpt-oss sink logits: d s_h = -sum_{b,i} exp(s_h - L_i) D_i,
// summed from the backward pre-pass's per-block partials in a fixed order (one thread per head), so
// repeated runs give identical results.
#include "core/cuda_check.h"
#include "ops/attention/cuda/flash_launch.h"

namespace ft::flash {

namespace {

__global__ void flash_bwd_sink_kernel(const __grid_constant__ FlashBwdParams p) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= p.shape.heads_q) return;
  double total = 0.0;
  for (int b = 0; b < p.shape.batch; ++b) {
    // (pre_blocks) partials of head h in batch b
    const float* part = p.sink_partials + static_cast<std::int64_t>(b * p.shape.heads_q + h) * p.pre_blocks;
    for (int blk = 0; blk < p.pre_blocks; ++blk) total += part[blk];
  }
  p.dsinks[h] = static_cast<float>(-total);
}

}  // namespace

void run_flash_bwd_sink(const FlashBwdParams& p, cudaStream_t stream) {
  constexpr int kThreads = 128;
  flash_bwd_sink_kernel<<<(p.shape.heads_q + kThreads - 1) / kThreads, kThreads, 0, stream>>>(p);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::flash
