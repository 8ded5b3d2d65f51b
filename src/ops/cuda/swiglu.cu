// swiglu.cu — CUDA SwiGLU elementwise forward and backward (h recomputed beside it when wanted), computed in
// fp32: a thread per pack of N elements of a row at a time (N: 16 bytes' worth, else 4, else 1, the largest every
// row stride and address allows; contiguous operands walked as one row).
// Each thread reads all its inputs before writing, so outputs may alias inputs element for element (da over a,
// db over b).
#include <algorithm>
#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace ft::gpu {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }
// h = silu(a) * b from a, sigmoid(a) and b: one formula for the forward and the backward that recomputes h.
__device__ __forceinline__ float silu_times(float a, float s, float b) { return a * s * b; }

// One (rows, cols) operand: element (r, c) at data + r * stride + c.
template <class T>
struct Rows {
  T* data;
  std::int64_t stride;
  __device__ __forceinline__ T* at(std::int64_t r, std::int64_t c) const { return data + r * stride + c; }
};

template <class T>
Rows<T> rows_of(const ops::RowView& v) {
  return {static_cast<T*>(v.data), v.row_stride};
}

// body(r, c) for the N-element packs (r, [c, c + N)) of a (rows, cols) range this thread takes: a grid-stride walk
// over rows (grid y) and the packs of a row (grid x), with no index division. The launcher collapses contiguous
// operands into one row.
template <int N, class Body>
__device__ __forceinline__ void for_each_pack(std::int64_t rows, std::int64_t cols, Body&& body) {
  for (std::int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (std::int64_t c = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * N; c < cols;
         c += static_cast<std::int64_t>(gridDim.x) * blockDim.x * N)
      body(r, c);
}

// h = silu(a) * b over (rows, cols), N-element packs.
template <class T, int N>
__global__ void forward_kernel(Rows<T> h, Rows<const T> a, Rows<const T> b, std::int64_t rows, std::int64_t cols) {
  for_each_pack<N>(rows, cols, [&](std::int64_t r, std::int64_t c) {
    const Pack<T, N> av = load_pack<N>(a.at(r, c)), bv = load_pack<N>(b.at(r, c));
    Pack<T, N> out;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float x = to_f32(av.v[i]);
      out.v[i] = from_f32<T>(silu_times(x, sigmoid(x), to_f32(bv.v[i])));
    }
    store_pack<N>(h.at(r, c), out);
  });
}

// da = dh b sigmoid(a) (1 + a (1 - sigmoid(a))), db = dh silu(a), and h = silu(a) b when h.data is not null;
// outputs may alias inputs.
template <class T, int N>
__global__ void backward_kernel(Rows<T> h, Rows<T> da, Rows<T> db, Rows<const T> dh, Rows<const T> a,
                                Rows<const T> b, std::int64_t rows, std::int64_t cols) {
  for_each_pack<N>(rows, cols, [&](std::int64_t r, std::int64_t c) {
    const Pack<T, N> av = load_pack<N>(a.at(r, c)), bv = load_pack<N>(b.at(r, c)), gv = load_pack<N>(dh.at(r, c));
    Pack<T, N> h_out, da_out, db_out;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float x = to_f32(av.v[i]), y = to_f32(bv.v[i]), g = to_f32(gv.v[i]);
      const float s = sigmoid(x);
      h_out.v[i] = from_f32<T>(silu_times(x, s, y));
      da_out.v[i] = from_f32<T>(g * y * s * (1.0f + x * (1.0f - s)));
      db_out.v[i] = from_f32<T>(g * x * s);
    }
    if (h.data) store_pack<N>(h.at(r, c), h_out);
    store_pack<N>(da.at(r, c), da_out);
    store_pack<N>(db.at(r, c), db_out);
  });
}

// launch(std::integral_constant<int, N>, rows, cols, grid) for the views' (rows, cols): one row when every view is
// contiguous; N the largest of 16 bytes' worth, 4, 1 that the views allow.
template <class T, class Launch>
void launch_packs(std::initializer_list<ops::RowView> views, Launch&& launch) {
  const ops::RowView& first = *views.begin();
  bool contiguous = true;
  for (const ops::RowView& v : views) contiguous = contiguous && (v.rows == 1 || v.row_stride == v.cols);
  const std::int64_t rows = contiguous ? 1 : first.rows, cols = contiguous ? first.rows * first.cols : first.cols;
  const auto go = [&](auto n) {
    constexpr int N = decltype(n)::value;
    constexpr std::int64_t kMaxBlocks = 8192, kMaxRowBlocks = 65535;
    const std::int64_t x_blocks = std::min(ceil_div(ceil_div(cols, N), kThreads), kMaxBlocks);
    const std::int64_t y_blocks = std::min({rows, std::max<std::int64_t>(1, kMaxBlocks / x_blocks), kMaxRowBlocks});
    launch(n, rows, cols, dim3(static_cast<unsigned>(x_blocks), static_cast<unsigned>(y_blocks)));
  };
  constexpr int kWide = 16 / static_cast<int>(sizeof(T));
  const auto fit = [&](int n) {
    if (cols % n != 0) return false;
    for (const ops::RowView& v : views)
      if ((!contiguous && v.row_stride % n != 0) || !pack_aligned(v.data, n, sizeof(T))) return false;
    return true;
  };
  if (kWide > 4 && fit(kWide))
    go(std::integral_constant<int, kWide>{});
  else if (fit(4))
    go(std::integral_constant<int, 4>{});
  else
    go(std::integral_constant<int, 1>{});
}

}  // namespace

void swiglu_forward(const ops::RowView& h, const ops::RowView& a, const ops::RowView& b, Device device,
                    const Stream& stream) {
  if (h.rows * h.cols == 0) return;
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  with_cuda_dtype(h.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_packs<T>({h, a, b}, [&](auto n, std::int64_t rows, std::int64_t cols, dim3 grid) {
      constexpr int N = decltype(n)::value;
      forward_kernel<T, N><<<grid, kThreads, 0, s>>>(rows_of<T>(h), rows_of<const T>(a), rows_of<const T>(b), rows,
                                                     cols);
    });
  });
  FT_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(const ops::RowView& h, const ops::RowView& da, const ops::RowView& db, const ops::RowView& dh,
                     const ops::RowView& a, const ops::RowView& b, Device device, const Stream& stream) {
  if (dh.rows * dh.cols == 0) return;
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  with_cuda_dtype(dh.dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto launch = [&](auto n, std::int64_t rows, std::int64_t cols, dim3 grid) {
      constexpr int N = decltype(n)::value;
      backward_kernel<T, N><<<grid, kThreads, 0, s>>>(rows_of<T>(h), rows_of<T>(da), rows_of<T>(db),
                                                      rows_of<const T>(dh), rows_of<const T>(a), rows_of<const T>(b),
                                                      rows, cols);
    };
    if (h.data)
      launch_packs<T>({h, da, db, dh, a, b}, launch);
    else
      launch_packs<T>({da, db, dh, a, b}, launch);
  });
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::gpu
