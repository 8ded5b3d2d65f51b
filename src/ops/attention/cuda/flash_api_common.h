// flash_api_common.h — internal (CUDA builds only): what the dense and the packed-sequence flash APIs
// (flash_api.cu, flash_varlen_api.cu) share: the operand layout tests, the Hopper device test, the backward's
// scratch and the dispatch on dtype and head dim to the per-head-dim launchers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/buffer.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "ops/attention.h"
#include "ops/attention/cuda/flash_params.h"
#include "ops/attention/cuda/flash_traits.h"

namespace ft::attention_impl {

// True when the tensor's base and the strides of its non-trivial leading dims are 16-byte multiples.
inline bool aligned16(const Tensor& t) {
  if (reinterpret_cast<std::uintptr_t>(t.data()) % 16 != 0) return false;
  for (int axis = 0; axis + 1 < t.dim(); ++axis)
    if (t.size(axis) > 1 && (t.stride(axis) * static_cast<std::int64_t>(t.element_size())) % 16 != 0) return false;
  return true;
}

// True when every non-trivial leading dim steps forward in memory (the Hopper kernels' TMA maps cannot
// describe a broadcast dim of stride 0).
inline bool forward_strides(const Tensor& t) {
  for (int axis = 0; axis + 1 < t.dim(); ++axis)
    if (t.size(axis) > 1 && t.stride(axis) <= 0) return false;
  return true;
}

// Whether `test` (aligned16, forward_strides) holds for every tile operand of a dense or varlen call: q, k, v
// and o for a forward (g null); q, k, v, d_o and the gradients for a backward (whose pre-pass reads o element
// by element).
template <class Grads, class Tensors, class Test>
bool all_operands(const Tensors& t, const Grads* g, Test test) {
  const bool inputs = test(t.q) && test(t.k) && test(t.v);
  if (!g) return inputs && test(t.o);
  return inputs && test(g->d_o) && test(g->dq) && test(g->dk) && test(g->dv);
}

// True when this build carries the sm_90a kernels (FT_CUDA_SM90A, set by CMake when the architectures
// include 90a) and `device` has compute capability 9.0, where the driver runs that code.
inline bool sm90_device(int device) {
#if FT_CUDA_SM90A
  int major = 0, minor = 0;
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
#else
  (void)device;
  return false;
#endif
}

// The kernels' shape of a validated dense call; vec16: every tile operand allows 16-byte accesses.
inline flash::FlashShape flash_shape(const AttentionShape& s, bool vec16) {
  flash::FlashShape f;
  f.batch = static_cast<int>(s.batch);
  f.heads_q = static_cast<int>(s.heads_q);
  f.heads_kv = static_cast<int>(s.heads_kv);
  f.group = static_cast<int>(s.heads_q / s.heads_kv);
  f.len_q = static_cast<int>(s.len_q);
  f.len_k = static_cast<int>(s.len_k);
  f.window_left = s.window_left;
  f.window_right = s.window_right;
  f.sink_tokens = s.sink_tokens;
  f.has_mask = s.window_left >= 0 || s.window_right >= 0 || s.sink_tokens > 0;
  f.scale = static_cast<float>(s.scale);
  f.scale_log2 = static_cast<float>(s.scale * 1.4426950408889634);
  f.vec16 = vec16;
  return f;
}

// Throws `unsupported` unless the flash kernels run the head dim and the lengths.
inline void check_supported(const AttentionShape& s) {
  FT_CHECK_KIND(unsupported, flash::head_dim_index(static_cast<int>(s.head_dim)) >= 0,
                "flash attention (CUDA): unsupported head dim ", s.head_dim, ": expected one of ",
                flash::kHeadDimList);
  constexpr std::int64_t kMaxLen = std::int64_t{1} << 30;
  FT_CHECK_KIND(unsupported, s.len_q < kMaxLen && s.len_k < kMaxLen,
                "flash attention (CUDA): sequence lengths must be < 2^30, given Nq = ", s.len_q, ", Nk = ", s.len_k);
}

// The backward's scratch, each buffer tagged `<tag>.<name>` and allocated on `stream`.
struct FlashBwdScratch {
  Buffer dsum, lse_log2;  // (rows) each
  Buffer sink_partials;   // (B * Hq, pre_blocks), with sink logits only
  Buffer dq_accum;        // (rows, D) fp32, in atomic mode and on Hopper
  Buffer dq_order;        // (B * Hq, pre_blocks) int, deterministic on Hopper only
};

// Allocates the scratch of `rows` padded query rows over every query head and points p at it; p.shape.sm90
// and p.pre_blocks are set already, `batch_heads` is B * Hq.
inline FlashBwdScratch flash_bwd_scratch(flash::FlashBwdParams& p, std::size_t rows, std::int64_t batch_heads,
                                         std::int64_t head_dim, bool has_sinks, bool deterministic, Device device,
                                         std::string_view tag, const Stream& stream) {
  const auto tagged = [&](const char* name) { return std::string(tag) + "." + name; };
  const auto per_block = static_cast<std::size_t>(batch_heads) * p.pre_blocks;
  FlashBwdScratch s;
  s.dsum = Buffer(rows * sizeof(float), device, tagged("dsum"), stream);
  s.lse_log2 = Buffer(rows * sizeof(float), device, tagged("lse_log2"), stream);
  if (has_sinks) s.sink_partials = Buffer(per_block * sizeof(float), device, tagged("sink_partials"), stream);
  // The Hopper kernel accumulates dQ in both modes, in a fixed order when deterministic.
  if (!deterministic || p.shape.sm90)
    s.dq_accum = Buffer(rows * static_cast<std::size_t>(head_dim) * sizeof(float), device, tagged("dq_accum"), stream);
  if (deterministic && p.shape.sm90) s.dq_order = Buffer(per_block * sizeof(int), device, tagged("dq_order"), stream);
  p.dsum = static_cast<float*>(s.dsum.data());
  p.lse_log2 = static_cast<float*>(s.lse_log2.data());
  p.sink_partials = static_cast<float*>(s.sink_partials.data());
  p.deterministic = deterministic;
  p.dq_accum = static_cast<float*>(s.dq_accum.data());
  p.dq_order = static_cast<int*>(s.dq_order.data());
  return s;
}

// Calls fn(T{}, std::integral_constant<int, D>{}) for the tensors' dtype and head dim.
template <class Fn>
void dispatch(DType dtype, std::int64_t head_dim, Fn&& fn) {
  auto by_dim = [&](auto type_tag) {
    switch (head_dim) {
      case 16: return fn(type_tag, std::integral_constant<int, 16>{});
      case 32: return fn(type_tag, std::integral_constant<int, 32>{});
      case 64: return fn(type_tag, std::integral_constant<int, 64>{});
      case 80: return fn(type_tag, std::integral_constant<int, 80>{});
      case 96: return fn(type_tag, std::integral_constant<int, 96>{});
      case 128: return fn(type_tag, std::integral_constant<int, 128>{});
      case 256: return fn(type_tag, std::integral_constant<int, 256>{});
    }
    FT_THROW(unsupported, "flash attention (CUDA): unsupported head dim ", head_dim, ": expected one of ",
             flash::kHeadDimList);
  };
  switch (dtype) {
    case DType::bf16: return by_dim(__nv_bfloat16{});
    case DType::f16: return by_dim(__half{});
    case DType::f32: return by_dim(float{});
  }
}

}  // namespace ft::attention_impl
