// rmsnorm.cpp — validation of RMSNorm calls and dispatch to the CPU kernels (cpu/rmsnorm.cpp) or the CUDA
// kernels (cuda/rmsnorm.cu).
#include "ops/rmsnorm.h"

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_common.h"

namespace ft {

namespace {

// Checks x (..., d) fp32, w (d) fp32 and rstd (rows) fp32 contiguous on x's device; returns x's rows.
ops::RowView validate_inputs(const char* op, const Tensor& x, const Tensor& w, const Tensor& rstd,
                             const RmsNormOptions& options) {
  ops::check_dtype(op, x, "x", {DType::f32});
  const ops::RowView xv = ops::row_view(op, x, "x");
  FT_CHECK(xv.cols >= 1, op, ": x must have a last dim >= 1, given ", shape_string(x.shape()));
  const Device device = x.device();
  ops::check_dtype(op, w, "w", {DType::f32});
  ops::check_device(op, w, "w", device);
  ops::check_shape(op, w, "w", {xv.cols});
  ops::check_contiguous(op, w, "w");
  ops::check_dtype(op, rstd, "rstd", {DType::f32});
  ops::check_device(op, rstd, "rstd", device);
  FT_CHECK(rstd.numel() == xv.rows, op, ": rstd must hold one value per row of x: expected ", xv.rows,
           " elements, given ", shape_string(rstd.shape()));
  ops::check_contiguous(op, rstd, "rstd");
  FT_CHECK(options.eps > 0, op, ": eps must be > 0, given ", options.eps);
  return xv;
}

// Checks a (..., d) tensor shaped like x on x's device with one of the given dtypes.
ops::RowView like_x(const char* op, const Tensor& t, const char* name, const Tensor& x,
                    std::initializer_list<DType> dtypes) {
  ops::check_dtype(op, t, name, dtypes);
  ops::check_device(op, t, name, x.device());
  ops::check_shape(op, t, name, x.shape());
  return ops::row_view(op, t, name);
}

}  // namespace

void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w,
                     const RmsNormOptions& options) {
  constexpr const char* op = "rmsnorm_forward";
  NvtxRange range(op);
  const ops::RowView xv = validate_inputs(op, x, w, rstd, options);
  const ops::RowView yv = like_x(op, y, "y", x, {DType::f32, DType::bf16});
#if FT_HAS_CUDA
  if (x.device().is_cuda())
    return gpu::rmsnorm_forward(yv, rstd.data_as<float>(), xv, w.data_as<float>(), options.eps, x.device(),
                                options.stream);
#else
  if (x.device().is_cuda()) ops::no_cuda_build(op, x.device());
#endif
  cpu::rmsnorm_forward(yv, rstd.data_as<float>(), xv, w.data_as<float>(), options.eps);
}

void rmsnorm_backward(const RmsNormGrads& grads, const Tensor& dy, const Tensor& x, const Tensor& w,
                      const Tensor& rstd, const RmsNormOptions& options) {
  constexpr const char* op = "rmsnorm_backward";
  NvtxRange range(op);
  const ops::RowView xv = validate_inputs(op, x, w, rstd, options);
  const ops::RowView dyv = like_x(op, dy, "dy", x, {DType::f32, DType::bf16});
  ops::RowView dxv;
  if (grads.dx.defined()) dxv = like_x(op, grads.dx, "dx", x, {DType::f32});
  ops::RowView castv;
  if (grads.dx_cast.defined()) {
    FT_CHECK(grads.dx.defined(), op, ": dx_cast is dx rounded to 16 bits, so it needs dx; given dx_cast ",
             grads.dx_cast.describe(), " and no dx");
    castv = like_x(op, grads.dx_cast, "dx_cast", x, {DType::bf16, DType::f16});
  }
  float* dw = nullptr;
  if (grads.dw.defined()) {
    ops::check_dtype(op, grads.dw, "dw", {DType::f32});
    ops::check_device(op, grads.dw, "dw", x.device());
    ops::check_shape(op, grads.dw, "dw", w.shape());
    ops::check_contiguous(op, grads.dw, "dw");
    dw = grads.dw.data_as<float>();
  }
#if FT_HAS_CUDA
  if (x.device().is_cuda())
    return gpu::rmsnorm_backward(dxv, grads.accumulate_dx, castv, dw, grads.accumulate_dw, dyv, xv,
                                 w.data_as<float>(), rstd.data_as<float>(), x.device(), options.stream);
#else
  if (x.device().is_cuda()) ops::no_cuda_build(op, x.device());
#endif
  cpu::rmsnorm_backward(dxv, grads.accumulate_dx, castv, dw, grads.accumulate_dw, dyv, xv, w.data_as<float>(),
                        rstd.data_as<float>());
}

}  // namespace ft
