// rope.cpp — validation of RoPE calls and dispatch to the CPU kernel (cpu/rope.cpp) or the CUDA kernel
// (cuda/rope.cu); rope_append's CPU path (rotations by cpu::rope, rows copied into the cache); rope_table.
#include "ops/rope.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/decode_ops.h"
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

namespace {

// dst (B, H, T, Dh) <- src, row by row (one dtype, contiguous last dims).
void copy_rows(const Tensor& dst, const Tensor& src) {
  const std::size_t row_bytes = static_cast<std::size_t>(src.size(3)) * src.element_size();
  for (std::int64_t b = 0; b < src.size(0); ++b)
    for (std::int64_t h = 0; h < src.size(1); ++h)
      for (std::int64_t t = 0; t < src.size(2); ++t) {
        const std::int64_t to = b * dst.stride(0) + h * dst.stride(1) + t * dst.stride(2);
        const std::int64_t from = b * src.stride(0) + h * src.stride(1) + t * src.stride(2);
        std::memcpy(static_cast<char*>(dst.data()) + to * dst.element_size(),
                    static_cast<const char*>(src.data()) + from * src.element_size(), row_bytes);
      }
}

}  // namespace

void rope_append(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache,
                 const std::int32_t* position, const RopeOptions& options) {
  constexpr const char* op = "rope_append";
  NvtxRange range(op);
  validate(op, q, "q", options);
  for (const auto& [x, name] : {std::pair{&k, "k"}, std::pair{&v, "v"}, std::pair{&k_cache, "k_cache"},
                                std::pair{&v_cache, "v_cache"}}) {
    validate(op, *x, name, options);
    FT_CHECK(x->dtype() == q.dtype(), op, ": ", name, " must have q's dtype ", name_of(q.dtype()), ", given ",
             x->describe());
    ops::check_device(op, *x, name, q.device());
  }
  const std::int64_t B = q.size(0), T = q.size(2), Dh = q.size(3), Hkv = k.size(1), capacity = k_cache.size(2);
  FT_CHECK(Hkv >= 1 && q.size(1) % Hkv == 0, op, ": the query heads (", q.size(1),
           ") must be a multiple of the key heads (", Hkv, ")");
  ops::check_shape(op, k, "k", {B, Hkv, T, Dh});
  ops::check_shape(op, v, "v", {B, Hkv, T, Dh});
  ops::check_shape(op, k_cache, "k_cache", {B, Hkv, capacity, Dh});
  ops::check_shape(op, v_cache, "v_cache", {B, Hkv, capacity, Dh});
  FT_CHECK(position != nullptr, op, ": the position is required but was not given");
#if FT_HAS_CUDA
  if (q.device().is_cuda()) return gpu::rope_append(q, k, v, k_cache, v_cache, position, options.theta, options.stream);
#else
  if (q.device().is_cuda()) ops::no_cuda_build(op, q.device());
#endif
  const std::int64_t p = *position;
  FT_CHECK(p >= 0 && p + T <= capacity, op, ": positions ", p, " to ", p + T - 1, " are outside the cache's capacity of ",
           capacity);
  const auto at = [&](const Tensor& cache) {
    return Tensor(static_cast<char*>(cache.data()) + p * cache.stride(2) * cache.element_size(), cache.dtype(),
                  cache.device(), {B, Hkv, T, Dh}, cache.strides());
  };
  cpu::rope(q, options.theta, p, nullptr, false);
  copy_rows(at(k_cache), k);
  cpu::rope(at(k_cache), options.theta, p, nullptr, false);
  copy_rows(at(v_cache), v);
}

void rope_table(const Tensor& table, const RopeOptions& options) {
  constexpr const char* op = "rope_table";
  NvtxRange range(op);
  ops::check_defined(op, table, "table");
  ops::check_dtype(op, table, "table", {DType::f32});
  FT_CHECK(table.dim() == 3 && table.size(2) == 2 && table.size(1) >= 1, op,
           ": table must be (T, Dh/2, 2) with Dh/2 >= 1: given ", table.describe());
  ops::check_contiguous(op, table, "table");
  FT_CHECK(std::isfinite(options.theta) && options.theta > 0, op, ": theta must be finite and > 0, given ",
           options.theta);
#if FT_HAS_CUDA
  if (table.device().is_cuda()) return gpu::rope_table(table, options.theta, options.stream);
#else
  if (table.device().is_cuda()) ops::no_cuda_build(op, table.device());
#endif
  cpu::rope_table(table.data_as<float>(), table.size(0), table.size(1), options.theta, 0);
}

}  // namespace ft
