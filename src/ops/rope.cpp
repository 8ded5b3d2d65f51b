// rope.cpp — validation of RoPE calls and dispatch to the CPU kernel (cpu/rope.cpp).
#include "ops/rope.h"

#include <cmath>

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/op_common.h"

namespace ft {

namespace {

void validate(const char* op, const Tensor& x, const char* name, const RopeOptions& options) {
  ops::check_dtype(op, x, name, {DType::f32, DType::bf16, DType::f16});
  FT_CHECK(x.dim() == 4, op, ": ", name, " must be (B, H, T, Dh): expected 4 dims, given ", x.dim(), " (",
           x.describe(), ")");
  FT_CHECK(x.size(3) % 2 == 0, op, ": ", name, " must have an even head dim (interleaved pairs): given Dh = ",
           x.size(3));
  FT_CHECK(x.size(3) <= 1 || x.stride(3) == 1, op, ": ", name,
           " must have a contiguous last dim: expected stride 1, given ", x.stride(3), " (", x.describe(), ")");
  FT_CHECK(std::isfinite(options.theta) && options.theta > 0, op, ": theta must be finite and > 0, given ",
           options.theta);
  FT_CHECK(options.position_offset >= 0, op, ": position_offset must be >= 0, given ", options.position_offset);
}

}  // namespace

void rope_forward(const Tensor& x, const RopeOptions& options) {
  constexpr const char* op = "rope_forward";
  NvtxRange range(op);
  validate(op, x, "x", options);
  ops::require_cpu_implementation(op, x.device());
  cpu::rope(x, options.theta, options.position_offset, false);
}

void rope_backward(const Tensor& dx, const RopeOptions& options) {
  constexpr const char* op = "rope_backward";
  NvtxRange range(op);
  validate(op, dx, "dx", options);
  ops::require_cpu_implementation(op, dx.device());
  cpu::rope(dx, options.theta, options.position_offset, true);
}

}  // namespace ft
