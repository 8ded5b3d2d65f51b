// random_fill.cu — the CUDA truncated-normal fill: one thread per element (grid-stride), the same draw as
// the CPU's (ops/truncated_normal_draw.h), so the same bits.
#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/truncated_normal_draw.h"

namespace ft::gpu {

namespace {

constexpr int kThreads = 256;

__global__ void truncated_normal_kernel(float* __restrict__ out, std::int64_t n, std::uint64_t key,
                                        std::int64_t first, double stddev, double cut) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<float>(ops::draw::mul(stddev, ops::draw::truncated_normal(
                                                        key, static_cast<std::uint64_t>(first + i), cut)));
}

}  // namespace

void fill_truncated_normal(float* out, std::int64_t n, std::uint64_t key, std::int64_t first, double stddev,
                           double cut, Device device, const Stream& stream) {
  if (n == 0) return;
  CudaDeviceGuard guard(device.index);
  truncated_normal_kernel<<<grid_for(n, kThreads), kThreads, 0, cuda_stream(stream)>>>(out, n, key, first, stddev,
                                                                                        cut);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::gpu
