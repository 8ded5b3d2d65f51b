// cuda_ops.h — internal (CUDA builds only): the CUDA kernels' launchers behind the op families' public
// functions, one .cu file per family in this folder (the GEMM is ops/gemm_cuda.h). Each receives the
// arguments its public function has validated; RowViews carry dtypes, `device` is where every tensor
// lives and work is enqueued on `stream`. Declares no CUDA types, so the .cpp dispatchers include it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/stream.h"
#include "core/tensor.h"
#include "ops/optimizer_update.h"
#include "ops/op_common.h"
#include "ops/token_ids.h"

#if FT_HAS_CUDA

namespace ft::gpu {

// linear.cu — y (rows, d_out) = x (rows, d_in) @ w (d_out, d_in)^T [+ r (rows, d_out) fp32 when r has data];
// dx (rows, d_in) (+)= dy @ w and dw (d_out, d_in) (+)= dy^T @ x, each skipped when its view has no data.
// cuBLASLt, fp32 accumulation; the additions in the GEMM's epilogue (see Note [GEMM epilogue addend]).
void linear_forward(const ops::RowView& y, const ops::RowView& x, const ops::RowView& w, const ops::RowView& r,
                    bool allow_tf32, Device device, const Stream& stream);
void linear_backward(const ops::RowView& dx, bool accumulate_dx, const ops::RowView& dw, bool accumulate_dw,
                     const ops::RowView& dy, const ops::RowView& x, const ops::RowView& w, bool allow_tf32,
                     Device device, const Stream& stream);

// token_ids.cu — ids (device memory) all in [0, vocab), else ops::throw_token_out_of_range for the first
// bad position. Synchronises the stream (the answer is needed on the host); inside a stream capture, which
// cannot read anything back, it checks nothing (whoever fills a graph's id buffers checks them).
void check_token_range(const char* op, const TokenIds& ids, std::int64_t vocab, const char* name,
                       const Stream& stream);

// embedding.cu — out (n, d) fp32 <- weight (vocab, d) fp32 rows; dweight (vocab, d) (+)= dout (n, d) by
// id, every element summed in position order (deterministic). ids (n) int32 in range, device memory.
void embedding_forward(const ops::RowView& out, const std::int32_t* ids, const ops::RowView& weight, Device device,
                       const Stream& stream);
void embedding_backward(const ops::RowView& dweight, const std::int32_t* ids, const ops::RowView& dout,
                        bool accumulate, Device device, const Stream& stream);

// rmsnorm.cu — x (rows, d) fp32, w (d) fp32, rstd (rows) fp32, y / dy fp32 or bf16, dx (rows, d) fp32 or
// no data, dx_cast (rows, d) bf16 / fp16 or no data (dx rounded), dw (d) fp32 or null. dw is reduced over
// fixed row groups, then the groups in a fixed order.
void rmsnorm_forward(const ops::RowView& y, float* rstd, const ops::RowView& x, const float* w, float eps,
                     Device device, const Stream& stream);
void rmsnorm_backward(const ops::RowView& dx, bool accumulate_dx, const ops::RowView& dx_cast, float* dw,
                      bool accumulate_dw, const ops::RowView& dy, const ops::RowView& x, const float* w,
                      const float* rstd, Device device, const Stream& stream);

// rope.cu — x (B, H, T, Dh) any strides, contiguous last dim, rotated in place (inverse = backward); positions:
// null or (B, T) per-token positions on the device (a row whose position is outside [0, T) becomes NaN).
void rope(const Tensor& x, double theta, std::int64_t position_offset, const std::int32_t* positions, bool inverse,
          const Stream& stream);
// rope.cu — table (T, Dh/2, 2) fp32, contiguous: the (cos, sin) rope computes at positions [0, T).
void rope_table(const Tensor& table, double theta, const Stream& stream);

// swiglu.cu — all (rows, d_ff) of one dtype; outputs may alias inputs element for element.
void swiglu_forward(const ops::RowView& h, const ops::RowView& a, const ops::RowView& b, Device device,
                    const Stream& stream);
// h (null data: not wanted) <- silu(a) * b beside the backward.
void swiglu_backward(const ops::RowView& h, const ops::RowView& da, const ops::RowView& db, const ops::RowView& dh,
                     const ops::RowView& a, const ops::RowView& b, Device device, const Stream& stream);

// cross_entropy.cu — logits (rows, vocab) fp32, targets (rows) int32 in range (device memory), dlogits
// (rows, vocab) fp32 (may be logits itself) / bf16 or no data; the row losses' sum and dlogits divided by
// divisor. cross_entropy returns that mean (synchronises); cross_entropy_to leaves it in `mean` (one double,
// device memory; added to it when accumulate) and does not.
double cross_entropy(const ops::RowView& logits, const std::int32_t* targets, const ops::RowView& dlogits,
                     double grad_scale, double divisor, Device device, const Stream& stream);
void cross_entropy_to(double* mean, const ops::RowView& logits, const std::int32_t* targets,
                      const ops::RowView& dlogits, double grad_scale, double divisor, bool accumulate,
                      Device device, const Stream& stream);

// optimizer.cu — flat fp32 buffers of n elements. adamw_step uses `factors`, or reads *from (device memory)
// when the kernel runs if from is not null, and reads each gradient as g * grad_scale's factor (its sum of
// squares, if any, read when the kernel runs). sum_squares over every tensor (fp32, contiguous, one device)
// in fixed chunks reduced in a fixed order: returned (synchronises) or left in *total (one double, device
// memory; no synchronisation). clip_scale multiplies every tensor by the clipping factor of the global
// norm sqrt(*sum_squares) (device memory, read when the kernels run): by max_norm / (norm + eps) when norm
// > max_norm, else leaves them.
void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                const AdamWFactors& factors, const AdamWFactors* from, const GradScale& grad_scale, Device device,
                const Stream& stream);
void sgd_step(float* params, const float* grads, std::int64_t n, double lr, Device device, const Stream& stream);
double sum_squares(const std::vector<Tensor>& tensors, const Stream& stream);
void sum_squares_to(double* total, const std::vector<Tensor>& tensors, const Stream& stream);
void scale(float* x, std::int64_t n, double factor, Device device, const Stream& stream);
void clip_scale(const std::vector<Tensor>& tensors, const double* sum_squares, double max_norm, double eps,
                const Stream& stream);

// random_fill.cu — out (n) fp32 <- std * the truncated normals first .. first + n - 1 of sequence key,
// bit for bit the CPU's.
void fill_truncated_normal(float* out, std::int64_t n, std::uint64_t key, std::int64_t first, double stddev,
                           double cut, Device device, const Stream& stream);

// residual.cu — x (rows, d) fp32 += y (rows, d) fp32 / bf16.
void residual_add(const ops::RowView& x, const ops::RowView& y, Device device, const Stream& stream);

// cast.cu — contiguous tensors of one shape: dst <- dtype_cast(src); dst <- value everywhere.
void cast(const Tensor& dst, const Tensor& src, const Stream& stream);
void fill(const Tensor& dst, double value, const Stream& stream);

}  // namespace ft::gpu

#endif  // FT_HAS_CUDA
