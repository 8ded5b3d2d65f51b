// linear.cpp — validation of linear calls and dispatch to the CPU GEMM (cpu/gemm.h) or cuBLASLt (cuda/linear.cu).
//
// Note [GEMM epilogue addend]
// linear_forward_residual (y = x w^T + r) and LinearGrads::accumulate_dx (dx += dy w) add an fp32 tensor to
// the GEMM's fp32 result as the GEMM stores it, instead of in an elementwise pass of their own that reads and
// writes a (rows, d) fp32 tensor again (the residual adds after the output projection and w2; the sum of the
// w3 and w1 input gradients). The result is the separate add's bits: fp32 a + b is commutative and the GEMM's
// accumulation is unchanged. The CPU GEMM adds the addend to a tile's fp32 accumulators as it stores them.
// cuBLASLt runs D = alpha op(A) op(B) + beta C with alpha = beta = 1 and C = the addend: its heuristic sees
// the layouts and alignments but not alpha or beta, so with C laid out like D (fp32, the same leading
// dimension and alignment: the model's arena tensors) it picks the beta = 0 GEMM's algorithm, and the
// epilogue adds C to the unchanged fp32 accumulator once. An algorithm that splits K (gemm::splits_k) could
// add C to a partial sum instead; such a GEMM (a small output over a long K: large fp32 outputs are planned
// without split K, Note [Split K on large outputs] in ops/gemm_plan.cu) runs with beta = 0 and the add after
// it, as two passes (an in-place dx through a scratch product). gpu_test_fused_epilogues_cuda checks the bits
// against the separate GEMM and add at the model's shapes, scaled down and at the 8B width.
#include "ops/linear.h"

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cpu/gemm.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_common.h"

namespace ft {

namespace {

constexpr std::initializer_list<DType> kOperandTypes = {DType::f32, DType::bf16, DType::f16};

// Checks an activation-like tensor: (rows, cols) with the given leading shape, dtype and device.
ops::RowView activation(const char* op, const Tensor& t, const char* name, const Shape& leading, std::int64_t cols,
                        std::initializer_list<DType> dtypes, Device device) {
  ops::check_dtype(op, t, name, dtypes);
  ops::check_device(op, t, name, device);
  Shape expected = leading;
  expected.push_back(cols);
  ops::check_shape(op, t, name, expected);
  return ops::row_view(op, t, name);
}

// Checks the weight: 2-D (d_out, d_in), operand dtype, contiguous rows.
ops::RowView weight(const char* op, const Tensor& w, const char* name, DType dtype, Device device) {
  ops::check_dtype(op, w, name, kOperandTypes);
  FT_CHECK(w.dim() == 2, op, ": ", name, " must be (d_out, d_in): expected 2 dims, given ", w.dim(), " (",
           w.describe(), ")");
  FT_CHECK(w.dtype() == dtype, op, ": ", name, " must have the operand dtype ", name_of(dtype), ", given ",
           name_of(w.dtype()));
  ops::check_device(op, w, name, device);
  FT_CHECK(w.size(0) >= 1 && w.size(1) >= 1, op, ": ", name, " must have d_out >= 1 and d_in >= 1, given ",
           shape_string(w.shape()));
  return ops::row_view(op, w, name);
}

cpu::GemmOperand operand(const ops::RowView& v, bool transpose) { return {v.data, v.dtype, v.row_stride, transpose}; }

// y <- x @ w^T, plus r when r is defined (see Note [GEMM epilogue addend]).
void forward(const char* op, const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& r,
             [[maybe_unused]] const LinearOptions& options) {
  NvtxRange range(op);
  ops::check_dtype(op, x, "x", kOperandTypes);
  FT_CHECK(x.dim() >= 1, op, ": x must be (..., d_in), given a 0-dim tensor");
  const DType dtype = x.dtype();
  const ops::RowView wv = weight(op, w, "w", dtype, x.device());
  const std::int64_t d_out = w.size(0), d_in = w.size(1);
  FT_CHECK(x.size(-1) == d_in, op, ": x must end in d_in = ", d_in, " (w is ", shape_string(w.shape()),
           "), given ", shape_string(x.shape()));
  const ops::RowView xv = ops::row_view(op, x, "x");
  const bool add = r.defined();
  const ops::RowView yv = add ? activation(op, y, "y", ops::leading_shape(x), d_out, {DType::f32}, x.device())
                              : activation(op, y, "y", ops::leading_shape(x), d_out, {dtype, DType::f32}, x.device());
  ops::RowView rv;
  if (add) rv = activation(op, r, "r", ops::leading_shape(x), d_out, {DType::f32}, x.device());
#if FT_HAS_CUDA
  if (x.device().is_cuda()) return gpu::linear_forward(yv, xv, wv, rv, options.allow_tf32, x.device(), options.stream);
#else
  if (x.device().is_cuda()) ops::no_cuda_build(op, x.device());
#endif
  cpu::GemmArgs g;
  g.m = xv.rows, g.n = d_out, g.k = d_in;
  g.a = operand(xv, false);  // x (rows, d_in)
  g.b = operand(wv, true);   // w (d_out, d_in), used as w^T
  g.c = yv.data, g.c_dtype = yv.dtype, g.ldc = yv.row_stride;
  g.addend = static_cast<const float*>(rv.data), g.ld_addend = rv.row_stride;  // r (rows, d_out) or none
  cpu::gemm(g);
}

}  // namespace

void linear_forward(const Tensor& y, const Tensor& x, const Tensor& w, const LinearOptions& options) {
  forward("linear_forward", y, x, w, Tensor(), options);
}

void linear_forward_residual(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& r,
                             const LinearOptions& options) {
  constexpr const char* op = "linear_forward_residual";
  ops::check_defined(op, r, "r");
  forward(op, y, x, w, r, options);
}

void linear_backward(const LinearGrads& grads, const Tensor& dy, const Tensor& x, const Tensor& w,
                     [[maybe_unused]] const LinearOptions& options) {
  constexpr const char* op = "linear_backward";
  NvtxRange range(op);
  ops::check_dtype(op, x, "x", kOperandTypes);
  FT_CHECK(x.dim() >= 1, op, ": x must be (..., d_in), given a 0-dim tensor");
  const DType dtype = x.dtype();
  const Device device = x.device();
  const ops::RowView wv = weight(op, w, "w", dtype, device);
  const std::int64_t d_out = w.size(0), d_in = w.size(1);
  FT_CHECK(x.size(-1) == d_in, op, ": x must end in d_in = ", d_in, " (w is ", shape_string(w.shape()),
           "), given ", shape_string(x.shape()));
  const ops::RowView xv = ops::row_view(op, x, "x");
  const Shape leading = ops::leading_shape(x);
  const ops::RowView dyv = activation(op, dy, "dy", leading, d_out, {dtype}, device);
  ops::RowView dxv, dwv;
  FT_CHECK(grads.dx.defined() || !grads.accumulate_dx, op, ": accumulate_dx adds dy @ w into dx, so it needs dx; ",
           "given no dx");
  if (grads.dx.defined()) dxv = activation(op, grads.dx, "dx", leading, d_in, {dtype, DType::f32}, device);
  if (grads.dw.defined()) {
    ops::check_dtype(op, grads.dw, "dw", {DType::f32, dtype});
    ops::check_device(op, grads.dw, "dw", device);
    ops::check_shape(op, grads.dw, "dw", w.shape());
    dwv = ops::row_view(op, grads.dw, "dw");
  }
#if FT_HAS_CUDA
  if (device.is_cuda())
    return gpu::linear_backward(dxv, grads.accumulate_dx, dwv, grads.accumulate_dw, dyv, xv, wv, options.allow_tf32,
                                device, options.stream);
#else
  if (device.is_cuda()) ops::no_cuda_build(op, device);
#endif
  if (grads.dx.defined()) {
    cpu::GemmArgs g;
    g.m = xv.rows, g.n = d_in, g.k = d_out;
    g.a = operand(dyv, false);  // dy (rows, d_out)
    g.b = operand(wv, false);   // w (d_out, d_in)
    g.c = dxv.data, g.c_dtype = dxv.dtype, g.ldc = dxv.row_stride;
    g.accumulate = grads.accumulate_dx;
    cpu::gemm(g);
  }
  if (grads.dw.defined()) {
    cpu::GemmArgs g;
    g.m = d_out, g.n = d_in, g.k = xv.rows;
    g.a = operand(dyv, true);   // dy (rows, d_out), used as dy^T
    g.b = operand(xv, false);   // x (rows, d_in)
    g.c = dwv.data, g.c_dtype = dwv.dtype, g.ldc = dwv.row_stride;
    g.accumulate = grads.accumulate_dw;
    cpu::gemm(g);
  }
}

}  // namespace ft
