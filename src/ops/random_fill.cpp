// random_fill.cpp — validation of random fills and dispatch to the CPU loop (cpu/random_fill.cpp) or the
// CUDA kernel (cuda/random_fill.cu).
#include "ops/random_fill.h"

#include <cmath>

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_common.h"
#include "ops/truncated_normal_draw.h"

namespace ft {

void fill_truncated_normal(const Tensor& out, const TruncatedNormalFill& fill) {
  constexpr const char* op = "fill_truncated_normal";
  NvtxRange range(op);
  ops::check_defined(op, out, "out");
  ops::check_dtype(op, out, "out", {DType::f32});
  ops::check_contiguous(op, out, "out");
  FT_CHECK(fill.first >= 0, op, ": first must be >= 0, given ", fill.first);
  FT_CHECK(std::isfinite(fill.stddev) && fill.stddev >= 0, op, ": stddev must be finite and >= 0, given ",
           fill.stddev);
  FT_CHECK(std::isfinite(fill.cut) && fill.cut > 0, op, ": cut must be finite and > 0, given ", fill.cut);
  auto* data = static_cast<float*>(out.data());
#if FT_HAS_CUDA
  if (out.device().is_cuda())
    return gpu::fill_truncated_normal(data, out.numel(), fill.key, fill.first, fill.stddev, fill.cut, out.device(),
                                      fill.stream);
#else
  if (out.device().is_cuda()) ops::no_cuda_build(op, out.device());
#endif
  cpu::fill_truncated_normal(data, out.numel(), fill.key, fill.first, fill.stddev, fill.cut);
}

std::uint64_t derive_key(std::uint64_t seed, std::uint64_t id) {
  return ops::draw::splitmix64(seed ^ ops::draw::splitmix64(id));
}

}  // namespace ft
