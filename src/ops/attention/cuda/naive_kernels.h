// naive_kernels.h — internal (CUDA builds only): the row kernels of the naive CUDA attention baseline
// (naive_attention.cu runs the GEMMs around them). S, P, dP and dS are contiguous
// (B, Hq, Nq, Nk) workspaces; one warp handles one query row.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "core/dtype.h"
#include "ops/attention.h"

namespace ft::attention_impl::naive {

// Element strides of the leading (batch, head, row) dims of a strided tensor.
struct RowStrides {
  std::int64_t batch = 0, head = 0, row = 0;
};

// Forward softmax: lse <- log(sum_visible exp(S) + exp(sink)) per row (-inf when empty), and
// P <- exp(S - lse) on visible keys, 0 elsewhere, rounded to `dtype`.
//   s (B, Hq, Nq, Nk) fp32; p (B, Hq, Nq, Nk) dtype; lse (B, Hq, Nq) fp32 strided; sinks (Hq) fp32 or null.
void softmax_forward(const float* s, void* p, DType dtype, float* lse, RowStrides lse_strides, const float* sinks,
                     const AttentionShape& shape, cudaStream_t stream);

// Backward recomputation of P from S and the saved lse: P <- exp(S - lse) on visible keys, 0 elsewhere.
//   s (B, Hq, Nq, Nk) fp32; p (B, Hq, Nq, Nk) dtype; lse (B, Hq, Nq) fp32 strided.
void probabilities(const float* s, void* p, DType dtype, const float* lse, RowStrides lse_strides,
                   const AttentionShape& shape, cudaStream_t stream);

// delta_i = dO_i . O_i in fp32.
//   d_o, o (B, Hq, Nq, D) dtype strided; delta (B, Hq, Nq) fp32 contiguous.
void row_dot(const void* d_o, RowStrides d_o_strides, const void* o, RowStrides o_strides, DType dtype,
             float* delta, const AttentionShape& shape, cudaStream_t stream);

// In place: dS <- P * (dP - delta_row), rounded to `dtype`.
//   p_ds (B, Hq, Nq, Nk) dtype (P in, dS out); dp (B, Hq, Nq, Nk) fp32; delta (B, Hq, Nq) fp32.
void softmax_backward(void* p_ds, DType dtype, const float* dp, const float* delta, const AttentionShape& shape,
                      cudaStream_t stream);

// dsinks_h = -sum_{b,i} exp(sinks_h - lse_bhi) delta_bhi, one block per head in a fixed order (deterministic).
//   sinks, dsinks (Hq) fp32; lse (B, Hq, Nq) fp32 strided; delta (B, Hq, Nq) fp32 contiguous.
void sink_grad(const float* sinks, const float* lse, RowStrides lse_strides, const float* delta, float* dsinks,
               const AttentionShape& shape, cudaStream_t stream);

// dst <- src rounded to `dtype`: src (batch, heads, len, dim) fp32 contiguous; dst the same shape, strided.
void store_rows(const float* src, void* dst, DType dtype, RowStrides dst_strides, std::int64_t batch,
                std::int64_t heads, std::int64_t len, std::int64_t dim, cudaStream_t stream);

}  // namespace ft::attention_impl::naive
