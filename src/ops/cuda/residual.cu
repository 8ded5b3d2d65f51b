// residual.cu — CUDA residual add x (fp32) += y (fp32 or bf16): one thread per pack of N elements of a
// row (N = 4 where every row stride and address allows, else 1).
#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace ft::gpu {

namespace {

constexpr int kThreads = 256;

// x (rows, cols) += y (rows, cols), N-element packs.
template <class T, int N>
__global__ void residual_kernel(float* __restrict__ x, std::int64_t x_stride, const T* __restrict__ y,
                                std::int64_t y_stride, std::int64_t rows, std::int64_t cols) {
  const std::int64_t per_row = cols / N;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < rows * per_row;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / per_row, c = (e % per_row) * N;
    Pack<float, N> xv = load_pack<N>(x + r * x_stride + c);
    const Pack<T, N> yv = load_pack<N>(y + r * y_stride + c);
#pragma unroll
    for (int i = 0; i < N; ++i) xv.v[i] += to_f32(yv.v[i]);
    store_pack<N>(x + r * x_stride + c, xv);
  }
}

}  // namespace

void residual_add(const ops::RowView& x, const ops::RowView& y, Device device, const Stream& stream) {
  if (x.rows * x.cols == 0) return;
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  with_cuda_dtype(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* xp = static_cast<float*>(x.data);
    const auto* yp = static_cast<const T*>(y.data);
    const bool packs = x.cols % 4 == 0 && x.row_stride % 4 == 0 && y.row_stride % 4 == 0 &&
                       pack_aligned(xp, 4, sizeof(float)) && pack_aligned(yp, 4, sizeof(T));
    const std::int64_t work = x.rows * x.cols / (packs ? 4 : 1);
    if (packs)
      residual_kernel<T, 4><<<grid_for(work, kThreads), kThreads, 0, s>>>(xp, x.row_stride, yp, y.row_stride, x.rows,
                                                                           x.cols);
    else
      residual_kernel<T, 1><<<grid_for(work, kThreads), kThreads, 0, s>>>(xp, x.row_stride, yp, y.row_stride, x.rows,
                                                                           x.cols);
  });
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::gpu
