// rope.cpp — validation of RoPE calls and dispatch to the CPU kernel (cpu/rope.cpp) or the CUDA kernel
// (cuda/rope.cu).
#include "ops/rope.h"

#include <cmath>

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
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
  if (options.positions.data == nullptr) return;
  const Shape expected{x.size(0), x.size(2)};
  FT_CHECK(options.positions.shape == expected, op, ": positions must be (B, T) = ", shape_string(expected),
           " for ", name, " ", x.describe(), ", given ", shape_string(options.positions.shape));
  ops::check_token_ids(op, options.positions, "positions", x.device());
  if (!x.device().is_cpu()) return;
  const std::int64_t T = x.size(2);
  for (std::int64_t i = 0; i < options.positions.numel(); ++i) {
    const std::int32_t p = options.positions.data[i];
    FT_CHECK(p >= 0 && p < T, op, ": positions must lie in [0, T = ", T, "): given ", p, " at (", i / T, ", ", i % T,
             ")");
  }
}

}  // namespace

void rope_forward(const Tensor& x, const RopeOptions& options) {
  constexpr const char* op = "rope_forward";
  NvtxRange range(op);
  validate(op, x, "x", options);
#if FT_HAS_CUDA
  if (x.device().is_cuda()) return gpu::rope(x, options.theta, options.position_offset, options.positions.data, false, options.stream);
#else
  if (x.device().is_cuda()) ops::no_cuda_build(op, x.device());
#endif
  cpu::rope(x, options.theta, options.position_offset, options.positions.data, false);
}

void rope_backward(const Tensor& dx, const RopeOptions& options) {
  constexpr const char* op = "rope_backward";
  NvtxRange range(op);
  validate(op, dx, "dx", options);
#if FT_HAS_CUDA
  if (dx.device().is_cuda()) return gpu::rope(dx, options.theta, options.position_offset, options.positions.data, true, options.stream);
#else
  if (dx.device().is_cuda()) ops::no_cuda_build(op, dx.device());
#endif
  cpu::rope(dx, options.theta, options.position_offset, options.positions.data, true);
}

}  // namespace ft
