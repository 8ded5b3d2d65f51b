// residual.cpp — validation of residual adds and dispatch to the CPU kernel (cpu/residual.cpp) or the CUDA
// kernel (cuda/residual.cu).
#include "ops/residual.h"

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_common.h"

namespace ft {

void residual_add(const Tensor& x, const Tensor& y, [[maybe_unused]] const Stream& stream) {
  constexpr const char* op = "residual_add";
  NvtxRange range(op);
  ops::check_dtype(op, x, "x", {DType::f32});
  ops::check_dtype(op, y, "y", {DType::f32, DType::bf16});
  ops::check_device(op, y, "y", x.device());
  ops::check_shape(op, y, "y", x.shape());
  const ops::RowView xv = ops::row_view(op, x, "x");
  const ops::RowView yv = ops::row_view(op, y, "y");
#if FT_HAS_CUDA
  if (x.device().is_cuda()) return gpu::residual_add(xv, yv, x.device(), stream);
#else
  if (x.device().is_cuda()) ops::no_cuda_build(op, x.device());
#endif
  cpu::residual_add(xv, yv);
}

}  // namespace ft
