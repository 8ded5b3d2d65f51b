// argmax.cu — one block per row: each thread scans a strided share of the columns (several loads in flight)
// keeping the largest value and its lowest index, then a block reduction over (value, index) pairs in a fixed
// order.
#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/decode_ops.h"

namespace ft::gpu {

namespace {

constexpr int kThreads = 1024;
constexpr int kLoads = 8;

struct Best {
  float value;
  std::int32_t index;
};

// The larger value, or the lower index of equal ones.
__device__ __forceinline__ Best better(Best a, Best b) {
  return b.value > a.value || (b.value == a.value && b.index < a.index) ? b : a;
}

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(std::int32_t* __restrict__ out, std::int32_t* __restrict__ history,
                  const std::int32_t* __restrict__ position, const float* __restrict__ logits, std::int64_t cols,
                  std::int64_t row_stride) {
  __shared__ Best scratch[kThreads / 32];
  const float* row = logits + blockIdx.x * row_stride;
  Best best{-INFINITY, static_cast<std::int32_t>(cols)};
  // kLoads values per thread loaded before any is compared: one memory round trip per kLoads x kThreads columns.
  for (std::int64_t c0 = threadIdx.x; c0 < cols; c0 += kThreads * kLoads) {
    float v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const std::int64_t c = c0 + u * kThreads;
      v[u] = c < cols ? row[c] : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const std::int64_t c = c0 + u * kThreads;
      if (c < cols) best = better(best, Best{v[u], static_cast<std::int32_t>(c)});
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const Best other{__shfl_xor_sync(0xffffffffu, best.value, offset), __shfl_xor_sync(0xffffffffu, best.index, offset)};
    best = better(best, other);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) scratch[warp] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) best = better(best, scratch[w]);
    // A row of -inf (or NaN) only: the first column, as std::max_element gives.
    const std::int32_t index = best.index < cols ? best.index : 0;
    out[blockIdx.x] = index;
    if (history) history[static_cast<std::int64_t>(*position) * gridDim.x + blockIdx.x] = index;
  }
}

}  // namespace

void argmax_rows(std::int32_t* out, std::int32_t* history, const std::int32_t* position, const float* logits,
                 std::int64_t rows, std::int64_t cols, std::int64_t row_stride, Device device, const Stream& stream) {
  if (rows == 0) return;
  CudaDeviceGuard guard(device.index);
  argmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, cuda_stream(stream)>>>(out, history, position, logits, cols,
                                                                                 row_stride);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::gpu
