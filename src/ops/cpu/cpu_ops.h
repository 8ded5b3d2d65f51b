// cpu_ops.h — internal: the CPU kernels behind the op families' public functions (the GEMM is in
// gemm.h). Each receives arguments its public function has validated; RowViews carry dtypes.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/optimizer_update.h"
#include "ops/op_common.h"

namespace ft::cpu {

// embedding.cpp — out (n, d) fp32 <- weight (vocab, d) fp32 rows; dweight (vocab, d) (+)= dout (n, d) by id.
void embedding_forward(const ops::RowView& out, const std::int32_t* ids /* (n) */, const ops::RowView& weight);
void embedding_backward(const ops::RowView& dweight, const std::int32_t* ids /* (n) */, const ops::RowView& dout,
                        bool accumulate);

// rmsnorm.cpp — x (rows, d) fp32, w (d) fp32, rstd (rows) fp32, y / dy fp32 or bf16, dx (rows, d) fp32 or
// null data (not wanted), dx_cast (rows, d) bf16 / fp16 or null data (dx rounded), dw (d) fp32 or null.
void rmsnorm_forward(const ops::RowView& y, float* rstd, const ops::RowView& x, const float* w, float eps);
void rmsnorm_backward(const ops::RowView& dx, bool accumulate_dx, const ops::RowView& dx_cast, float* dw,
                      bool accumulate_dw, const ops::RowView& dy, const ops::RowView& x, const float* w,
                      const float* rstd);

// rope.cpp — x (B, H, T, Dh) with contiguous last dim, rotated in place (inverse = backward); positions: null
// or (B, T) per-token positions in [0, T).
void rope(const Tensor& x, double theta, std::int64_t position_offset, const std::int32_t* positions, bool inverse);
// table (T, half, 2) <- (cos, sin) of (position_offset + t) * theta^(-2i / (2 half)), computed in double.
void rope_table(float* table, std::int64_t T, std::int64_t half, double theta, std::int64_t position_offset);

// swiglu.cpp — all (rows, d_ff) of one dtype.
void swiglu_forward(const ops::RowView& h, const ops::RowView& a, const ops::RowView& b);
// h (null data: not wanted) <- silu(a) * b beside the backward.
void swiglu_backward(const ops::RowView& h, const ops::RowView& da, const ops::RowView& db, const ops::RowView& dh,
                     const ops::RowView& a, const ops::RowView& b);

// cross_entropy.cpp — logits (rows, vocab) fp32, targets (rows), dlogits (rows, vocab) fp32 / bf16 or null
// data; returns the sum of the row losses / divisor (dlogits scaled by grad_scale / divisor).
double cross_entropy(const ops::RowView& logits, const std::int32_t* targets, const ops::RowView& dlogits,
                     double grad_scale, double divisor);

// optimizer.cpp — flat fp32 buffers of n elements. adamw_step reads each gradient as g * grad_factor.
void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                const AdamWFactors& factors, float grad_factor);
void sgd_step(float* params, const float* grads, std::int64_t n, double lr);
double sum_squares(const float* x, std::int64_t n);
void scale(float* x, std::int64_t n, double factor);

// random_fill.cpp — out (n) fp32 <- std * the truncated normals first .. first + n - 1 of sequence key.
void fill_truncated_normal(float* out, std::int64_t n, std::uint64_t key, std::int64_t first, double stddev,
                           double cut);

// residual.cpp — x (rows, d) fp32 += y (rows, d) fp32 / bf16.
void residual_add(const ops::RowView& x, const ops::RowView& y);

}  // namespace ft::cpu
