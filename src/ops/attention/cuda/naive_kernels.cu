// naive_kernels.cu — row kernels of the naive CUDA attention baseline: masked softmax with sink logits
// (forward), P recomputation, delta = rowsum(dO * O), dS = P (dP - delta), the sink-logit gradient and
// the fp32 -> dtype store of GQA-accumulated gradients. One warp per row, fp32 arithmetic.
#include "ops/attention/cuda/naive_kernels.h"

#include <cmath>

#include "core/cuda_check.h"
#include "ops/attention/visibility.h"
#include "ops/cuda/common.cuh"

namespace ft::attention_impl::naive {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;
constexpr int kSinkThreads = 256;

using gpu::from_f32;
using gpu::to_f32;

// (m, l) <- the running max and sum of exp(x - m) of two partial softmax rows merged; -inf max = empty.
__device__ __forceinline__ void merge_softmax(float& m, float& l, float m_other, float l_other) {
  const float m_new = fmaxf(m, m_other);
  if (m_new == -INFINITY) return;
  l = l * expf(m - m_new) + l_other * expf(m_other - m_new);
  m = m_new;
}

__device__ __forceinline__ float warp_sum(float x) { return gpu::warp_reduce(x, gpu::SumOp{}); }

// The query row this warp handles, or -1 past the end.
__device__ __forceinline__ std::int64_t warp_row(std::int64_t rows) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  return row < rows ? row : -1;
}

std::int64_t query_rows(const AttentionShape& s) { return s.batch * s.heads_q * s.len_q; }

unsigned blocks_for(std::int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

// s (B, Hq, Nq, Nk) fp32 -> p (B, Hq, Nq, Nk) T. kForward: lse is computed into lse_out; otherwise it is
// read from lse_in.
template <class T, bool kForward>
__global__ void softmax_rows_kernel(const float* __restrict__ s, T* __restrict__ p, float* lse_out,
                                    const float* lse_in, RowStrides ls, const float* __restrict__ sinks,
                                    AttentionShape shape) {
  const std::int64_t row = warp_row(shape.batch * shape.heads_q * shape.len_q);
  if (row < 0) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t i = row % shape.len_q;
  const std::int64_t h = (row / shape.len_q) % shape.heads_q;
  const std::int64_t b = row / (shape.len_q * shape.heads_q);
  const KeyRange keys =
      visible_keys(i, shape.len_q, shape.len_k, shape.window_left, shape.window_right, shape.sink_tokens);
  const float* s_row = s + row * shape.len_k;  // (Nk)
  const std::int64_t lse_at = b * ls.batch + h * ls.head + i * ls.row;

  float lse;
  if constexpr (kForward) {
    float m = -INFINITY, l = 0.0f;
    for (std::int64_t j = lane; j < keys.sink_end; j += 32) merge_softmax(m, l, s_row[j], 1.0f);
    for (std::int64_t j = keys.begin + lane; j < keys.end; j += 32) merge_softmax(m, l, s_row[j], 1.0f);
    for (int offset = 16; offset > 0; offset /= 2) {
      const float m_other = __shfl_xor_sync(0xffffffffu, m, offset);
      const float l_other = __shfl_xor_sync(0xffffffffu, l, offset);
      merge_softmax(m, l, m_other, l_other);
    }
    if (sinks) merge_softmax(m, l, sinks[h], 1.0f);
    lse = m == -INFINITY ? -INFINITY : m + logf(l);
    if (lane == 0) lse_out[lse_at] = lse;
  } else {
    lse = lse_in[lse_at];
  }

  T* p_row = p + row * shape.len_k;  // (Nk)
  const bool any = lse != -INFINITY;
  for (std::int64_t j = lane; j < shape.len_k; j += 32) {
    const float value = any && keys.contains(j) ? expf(s_row[j] - lse) : 0.0f;
    p_row[j] = from_f32<T>(value);
  }
}

// delta (B*Hq*Nq) <- rowsum(d_o * o) for strided d_o, o (B, Hq, Nq, D).
template <class T>
__global__ void row_dot_kernel(const T* __restrict__ d_o, RowStrides sd, const T* __restrict__ o, RowStrides so,
                               float* __restrict__ delta, AttentionShape shape) {
  const std::int64_t row = warp_row(shape.batch * shape.heads_q * shape.len_q);
  if (row < 0) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t i = row % shape.len_q;
  const std::int64_t h = (row / shape.len_q) % shape.heads_q;
  const std::int64_t b = row / (shape.len_q * shape.heads_q);
  const T* d_o_row = d_o + b * sd.batch + h * sd.head + i * sd.row;  // (D)
  const T* o_row = o + b * so.batch + h * so.head + i * so.row;       // (D)
  float sum = 0.0f;
  for (std::int64_t d = lane; d < shape.head_dim; d += 32) sum += to_f32(d_o_row[d]) * to_f32(o_row[d]);
  sum = warp_sum(sum);
  if (lane == 0) delta[row] = sum;
}

// p_ds (B*Hq*Nq, Nk): P in, dS = P (dP - delta) out.
template <class T>
__global__ void softmax_backward_kernel(T* __restrict__ p_ds, const float* __restrict__ dp,
                                        const float* __restrict__ delta, std::int64_t rows, std::int64_t len_k) {
  const std::int64_t row = warp_row(rows);
  if (row < 0) return;
  const int lane = threadIdx.x % 32;
  const float delta_row = delta[row];
  T* ds_row = p_ds + row * len_k;           // (Nk)
  const float* dp_row = dp + row * len_k;   // (Nk)
  for (std::int64_t j = lane; j < len_k; j += 32) ds_row[j] = from_f32<T>(to_f32(ds_row[j]) * (dp_row[j] - delta_row));
}

// dsinks (Hq): one block per head sums over (b, i) in a fixed order, then a fixed tree.
__global__ void sink_grad_kernel(const float* __restrict__ sinks, const float* __restrict__ lse, RowStrides ls,
                                 const float* __restrict__ delta, float* __restrict__ dsinks, AttentionShape shape) {
  __shared__ float partial[kSinkThreads];
  const std::int64_t h = blockIdx.x;
  const float sink = sinks[h];
  float sum = 0.0f;
  for (std::int64_t t = threadIdx.x; t < shape.batch * shape.len_q; t += kSinkThreads) {
    const std::int64_t b = t / shape.len_q;
    const std::int64_t i = t % shape.len_q;
    const float lse_row = lse[b * ls.batch + h * ls.head + i * ls.row];
    if (lse_row != -INFINITY) sum += expf(sink - lse_row) * delta[(b * shape.heads_q + h) * shape.len_q + i];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kSinkThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) dsinks[h] = -partial[0];
}

// src (batch, heads, len, dim) fp32 contiguous -> dst, the same shape with strides.
template <class T>
__global__ void store_rows_kernel(const float* __restrict__ src, T* __restrict__ dst, RowStrides sd,
                                  std::int64_t batch, std::int64_t heads, std::int64_t len, std::int64_t dim) {
  const std::int64_t row = warp_row(batch * heads * len);
  if (row < 0) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t n = row % len;
  const std::int64_t h = (row / len) % heads;
  const std::int64_t b = row / (len * heads);
  T* dst_row = dst + b * sd.batch + h * sd.head + n * sd.row;  // (dim)
  const float* src_row = src + row * dim;                      // (dim)
  for (std::int64_t d = lane; d < dim; d += 32) dst_row[d] = from_f32<T>(src_row[d]);
}

}  // namespace

void softmax_forward(const float* s, void* p, DType dtype, float* lse, RowStrides lse_strides, const float* sinks,
                     const AttentionShape& shape, cudaStream_t stream) {
  gpu::with_cuda_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_rows_kernel<T, true><<<blocks_for(query_rows(shape)), kThreads, 0, stream>>>(
        s, static_cast<T*>(p), lse, nullptr, lse_strides, sinks, shape);
  });
  FT_CUDA_CHECK_LAUNCH();
}

void probabilities(const float* s, void* p, DType dtype, const float* lse, RowStrides lse_strides,
                   const AttentionShape& shape, cudaStream_t stream) {
  gpu::with_cuda_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_rows_kernel<T, false><<<blocks_for(query_rows(shape)), kThreads, 0, stream>>>(
        s, static_cast<T*>(p), nullptr, lse, lse_strides, nullptr, shape);
  });
  FT_CUDA_CHECK_LAUNCH();
}

void row_dot(const void* d_o, RowStrides d_o_strides, const void* o, RowStrides o_strides, DType dtype,
             float* delta, const AttentionShape& shape, cudaStream_t stream) {
  gpu::with_cuda_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    row_dot_kernel<T><<<blocks_for(query_rows(shape)), kThreads, 0, stream>>>(
        static_cast<const T*>(d_o), d_o_strides, static_cast<const T*>(o), o_strides, delta, shape);
  });
  FT_CUDA_CHECK_LAUNCH();
}

void softmax_backward(void* p_ds, DType dtype, const float* dp, const float* delta, const AttentionShape& shape,
                      cudaStream_t stream) {
  gpu::with_cuda_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T><<<blocks_for(query_rows(shape)), kThreads, 0, stream>>>(
        static_cast<T*>(p_ds), dp, delta, query_rows(shape), shape.len_k);
  });
  FT_CUDA_CHECK_LAUNCH();
}

void sink_grad(const float* sinks, const float* lse, RowStrides lse_strides, const float* delta, float* dsinks,
               const AttentionShape& shape, cudaStream_t stream) {
  sink_grad_kernel<<<static_cast<unsigned>(shape.heads_q), kSinkThreads, 0, stream>>>(sinks, lse, lse_strides,
                                                                                      delta, dsinks, shape);
  FT_CUDA_CHECK_LAUNCH();
}

void store_rows(const float* src, void* dst, DType dtype, RowStrides dst_strides, std::int64_t batch,
                std::int64_t heads, std::int64_t len, std::int64_t dim, cudaStream_t stream) {
  gpu::with_cuda_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    store_rows_kernel<T><<<blocks_for(batch * heads * len), kThreads, 0, stream>>>(
        src, static_cast<T*>(dst), dst_strides, batch, heads, len, dim);
  });
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::attention_impl::naive
