// swiglu.cpp — validation of SwiGLU calls (the backward with or without h recomputed) and dispatch to the CPU
// kernels (cpu/swiglu.cpp) or the CUDA kernels (cuda/swiglu.cu).
#include "ops/swiglu.h"

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_common.h"

namespace ft {

namespace {

// Checks t against a: same shape, dtype and device; returns its rows.
ops::RowView like_a(const char* op, const Tensor& t, const char* name, const Tensor& a) {
  ops::check_defined(op, t, name);
  FT_CHECK(t.dtype() == a.dtype(), op, ": ", name, " must have the dtype of a: expected ", name_of(a.dtype()),
           ", given ", name_of(t.dtype()));
  ops::check_device(op, t, name, a.device());
  ops::check_shape(op, t, name, a.shape());
  return ops::row_view(op, t, name);
}

// The backward, with h (undefined: not wanted) beside it.
void run_backward(const char* op, const Tensor& h, const Tensor& da, const Tensor& db, const Tensor& dh,
                  const Tensor& a, const Tensor& b, [[maybe_unused]] const Stream& stream) {
  NvtxRange range(op);
  ops::check_dtype(op, a, "a", {DType::f32, DType::bf16, DType::f16});
  const ops::RowView av = ops::row_view(op, a, "a");
  const ops::RowView bv = like_a(op, b, "b", a);
  const ops::RowView dhv = like_a(op, dh, "dh", a);
  const ops::RowView dav = like_a(op, da, "da", a);
  const ops::RowView dbv = like_a(op, db, "db", a);
  const ops::RowView hv = h.defined() ? like_a(op, h, "h", a) : ops::RowView{};
#if FT_HAS_CUDA
  if (a.device().is_cuda()) return gpu::swiglu_backward(hv, dav, dbv, dhv, av, bv, a.device(), stream);
#else
  if (a.device().is_cuda()) ops::no_cuda_build(op, a.device());
#endif
  cpu::swiglu_backward(hv, dav, dbv, dhv, av, bv);
}

}  // namespace

void swiglu_forward(const Tensor& h, const Tensor& a, const Tensor& b, [[maybe_unused]] const Stream& stream) {
  constexpr const char* op = "swiglu_forward";
  NvtxRange range(op);
  ops::check_dtype(op, a, "a", {DType::f32, DType::bf16, DType::f16});
  const ops::RowView av = ops::row_view(op, a, "a");
  const ops::RowView bv = like_a(op, b, "b", a);
  const ops::RowView hv = like_a(op, h, "h", a);
#if FT_HAS_CUDA
  if (a.device().is_cuda()) return gpu::swiglu_forward(hv, av, bv, a.device(), stream);
#else
  if (a.device().is_cuda()) ops::no_cuda_build(op, a.device());
#endif
  cpu::swiglu_forward(hv, av, bv);
}

void swiglu_backward(const Tensor& da, const Tensor& db, const Tensor& dh, const Tensor& a, const Tensor& b,
                     const Stream& stream) {
  run_backward("swiglu_backward", Tensor(), da, db, dh, a, b, stream);
}

void swiglu_recompute_backward(const Tensor& h, const Tensor& da, const Tensor& db, const Tensor& dh, const Tensor& a,
                               const Tensor& b, const Stream& stream) {
  run_backward("swiglu_recompute_backward", h, da, db, dh, a, b, stream);
}

}  // namespace ft
