// swiglu.cu — CUDA SwiGLU elementwise forward and backward (h recomputed beside it when wanted), computed in
// fp32: one thread per pack of N elements of a row (N = 4 where every row stride and address allows, else 1).
// Each thread reads all its inputs before writing, so outputs may alias inputs element for element (da over a,
// db over b).
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

// h = silu(a) * b over (rows, cols), N-element packs.
template <class T, int N>
__global__ void forward_kernel(Rows<T> h, Rows<const T> a, Rows<const T> b, std::int64_t rows, std::int64_t cols) {
  const std::int64_t per_row = cols / N;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < rows * per_row;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / per_row, c = (e % per_row) * N;
    const Pack<T, N> av = load_pack<N>(a.at(r, c)), bv = load_pack<N>(b.at(r, c));
    Pack<T, N> out;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float x = to_f32(av.v[i]);
      out.v[i] = from_f32<T>(silu_times(x, sigmoid(x), to_f32(bv.v[i])));
    }
    store_pack<N>(h.at(r, c), out);
  }
}

// da = dh b sigmoid(a) (1 + a (1 - sigmoid(a))), db = dh silu(a), and h = silu(a) b when h.data is not null;
// outputs may alias inputs.
template <class T, int N>
__global__ void backward_kernel(Rows<T> h, Rows<T> da, Rows<T> db, Rows<const T> dh, Rows<const T> a,
                                Rows<const T> b, std::int64_t rows, std::int64_t cols) {
  const std::int64_t per_row = cols / N;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < rows * per_row;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / per_row, c = (e % per_row) * N;
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
  }
}

// True when every view's rows move in 4-element packs.
bool packs_fit(std::initializer_list<ops::RowView> views) {
  for (const ops::RowView& v : views)
    if (v.cols % 4 != 0 || v.row_stride % 4 != 0 || !pack_aligned(v.data, 4, size_of(v.dtype))) return false;
  return true;
}

}  // namespace

void swiglu_forward(const ops::RowView& h, const ops::RowView& a, const ops::RowView& b, Device device,
                    const Stream& stream) {
  if (h.rows * h.cols == 0) return;
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  const bool packs = packs_fit({h, a, b});
  with_cuda_dtype(h.dtype, [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t work = h.rows * h.cols / (packs ? 4 : 1);
    if (packs)
      forward_kernel<T, 4><<<grid_for(work, kThreads), kThreads, 0, s>>>(rows_of<T>(h), rows_of<const T>(a),
                                                                          rows_of<const T>(b), h.rows, h.cols);
    else
      forward_kernel<T, 1><<<grid_for(work, kThreads), kThreads, 0, s>>>(rows_of<T>(h), rows_of<const T>(a),
                                                                          rows_of<const T>(b), h.rows, h.cols);
  });
  FT_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(const ops::RowView& h, const ops::RowView& da, const ops::RowView& db, const ops::RowView& dh,
                     const ops::RowView& a, const ops::RowView& b, Device device, const Stream& stream) {
  if (dh.rows * dh.cols == 0) return;
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  const bool packs = h.data ? packs_fit({h, da, db, dh, a, b}) : packs_fit({da, db, dh, a, b});
  with_cuda_dtype(dh.dtype, [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t work = dh.rows * dh.cols / (packs ? 4 : 1);
    if (packs)
      backward_kernel<T, 4><<<grid_for(work, kThreads), kThreads, 0, s>>>(
          rows_of<T>(h), rows_of<T>(da), rows_of<T>(db), rows_of<const T>(dh), rows_of<const T>(a),
          rows_of<const T>(b), dh.rows, dh.cols);
    else
      backward_kernel<T, 1><<<grid_for(work, kThreads), kThreads, 0, s>>>(
          rows_of<T>(h), rows_of<T>(da), rows_of<T>(db), rows_of<const T>(dh), rows_of<const T>(a),
          rows_of<const T>(b), dh.rows, dh.cols);
  });
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::gpu
