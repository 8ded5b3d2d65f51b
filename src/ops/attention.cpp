// attention.cpp — validation of attention calls against the contract, and dispatch to the CPU or
// CUDA implementation chosen by device and AttentionImpl.
#include "ops/attention.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <utility>

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/attention/attention_impls.h"
#if FT_HAS_CUDA
#include "ops/attention/cuda/flash_traits.h"
#endif
#include "ops/op_common.h"

namespace ft {

const char* name_of(AttentionImpl impl) { return impl == AttentionImpl::naive ? "naive" : "flash"; }

AttentionImpl parse_attention_impl(std::string_view text) {
  if (text == "naive") return AttentionImpl::naive;
  if (text == "flash") return AttentionImpl::flash;
  FT_THROW(invalid_argument, "unknown attention implementation '", text, "': expected naive or flash");
}

const char* name_of(FlashKernels kernels) {
  switch (kernels) {
    case FlashKernels::auto_select: return "auto";
    case FlashKernels::sm80: return "sm80";
    case FlashKernels::sm90: return "sm90";
  }
  return "?";
}

FlashKernels parse_flash_kernels(std::string_view text) {
  if (text == "auto") return FlashKernels::auto_select;
  if (text == "sm80") return FlashKernels::sm80;
  if (text == "sm90") return FlashKernels::sm90;
  FT_THROW(invalid_argument, "unknown flash kernels '", text, "': expected auto, sm80 or sm90");
}

namespace {

constexpr std::int64_t kMaxHeadDim = 256;

void check_defined(const Tensor& t, const char* name) {
  FT_CHECK(t.defined(), "attention: ", name, " is required but was not given");
}

void check_dims(const Tensor& t, const char* name, int dims, const char* layout) {
  check_defined(t, name);
  FT_CHECK(t.dim() == dims, "attention: ", name, " must be ", layout, ": expected ", dims, " dims, given ",
           t.dim(), " (", t.describe(), ")");
}

void check_like(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) {
  FT_CHECK(t.dtype() == ref.dtype(), "attention: ", name, " must have the dtype of ", ref_name, ": expected ",
           name_of(ref.dtype()), ", given ", name_of(t.dtype()), " (", t.describe(), ")");
  FT_CHECK(t.device() == ref.device(), "attention: ", name, " must be on the device of ", ref_name,
           ": expected ", ref.device().to_string(), ", given ", t.device().to_string());
}

void check_last_dim_contiguous(const Tensor& t, const char* name) {
  FT_CHECK(t.size(-1) <= 1 || t.stride(-1) == 1, "attention: ", name,
           " must have a contiguous last dim: expected stride 1, given ", t.stride(-1), " (", t.describe(), ")");
}

void check_shape(const Tensor& t, const char* name, const Shape& expected) {
  FT_CHECK(t.shape() == expected, "attention: ", name, " has the wrong shape: expected ", shape_string(expected),
           ", given ", shape_string(t.shape()));
}

void check_fp32_vector(const Tensor& t, const char* name, std::int64_t length, Device device) {
  FT_CHECK(t.dtype() == DType::f32, "attention: ", name, " must be fp32: given ", t.describe());
  FT_CHECK(t.dim() == 1 && t.size(0) == length, "attention: ", name, " must have shape [", length,
           "] (one value per query head): given ", shape_string(t.shape()));
  FT_CHECK(length <= 1 || t.stride(0) == 1, "attention: ", name, " must be contiguous: given ", t.describe());
  FT_CHECK(t.device() == device, "attention: ", name, " must be on ", device.to_string(), ", given ",
           t.device().to_string());
}

// True when a and b certainly share memory: the same first element, or overlapping extents where one of
// them is dense (no gaps). Interleaved views of one buffer, such as the q, k and v of a fused projection,
// span each other's extents without sharing an element, so overlapping extents alone do not count.
bool shares_memory(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0 || a.device() != b.device()) return false;
  const auto* a0 = static_cast<const std::uint8_t*>(a.data());
  const auto* b0 = static_cast<const std::uint8_t*>(b.data());
  if (a0 == b0) return true;
  const bool dense = a.span_bytes() == a.numel() * a.element_size() || b.span_bytes() == b.numel() * b.element_size();
  return dense && a0 < b0 + b.span_bytes() && b0 < a0 + a.span_bytes();
}

// invalid_argument when an output shares memory with another output or with an input: the kernels
// would read values they have already overwritten (or two results would land in one place).
void check_no_alias(std::initializer_list<std::pair<const Tensor*, const char*>> outputs,
                    std::initializer_list<std::pair<const Tensor*, const char*>> inputs) {
  for (auto out = outputs.begin(); out != outputs.end(); ++out) {
    for (auto other = std::next(out); other != outputs.end(); ++other)
      FT_CHECK(!shares_memory(*out->first, *other->first), "attention: outputs ", out->second, " and ",
               other->second, " share memory: give each output its own array");
    for (const auto& in : inputs)
      FT_CHECK(!shares_memory(*out->first, *in.first), "attention: output ", out->second, " shares memory with input ",
               in.second, ": give the output its own array");
  }
}

void check_forward_aliases(const AttentionTensors& t) {
  check_no_alias({{&t.o, "o"}, {&t.lse, "lse"}}, {{&t.q, "q"}, {&t.k, "k"}, {&t.v, "v"}, {&t.sinks, "sinks"}});
}

void check_backward_aliases(const AttentionTensors& t, const AttentionGrads& g) {
  check_no_alias({{&g.dq, "dq"}, {&g.dk, "dk"}, {&g.dv, "dv"}, {&g.dsinks, "dsinks"}},
                 {{&t.q, "q"}, {&t.k, "k"}, {&t.v, "v"}, {&t.o, "o"}, {&t.lse, "lse"}, {&g.d_o, "d_o"},
                  {&t.sinks, "sinks"}});
}

}  // namespace

AttentionShape validate_attention(const AttentionTensors& t, const AttentionOptions& options,
                                  const AttentionGrads* grads) {
  check_dims(t.q, "q", 4, "(B, Hq, Nq, D)");
  check_dims(t.k, "k", 4, "(B, Hkv, Nk, D)");
  check_dims(t.v, "v", 4, "(B, Hkv, Nk, D)");
  check_dims(t.o, "o", 4, "(B, Hq, Nq, D)");
  check_dims(t.lse, "lse", 3, "(B, Hq, Nq)");

  const DType dtype = t.q.dtype();
  FT_CHECK_KIND(unsupported, dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f32,
                "attention: unsupported dtype ", name_of(dtype), ": expected bf16, fp16 or fp32");
  check_like(t.k, "k", t.q, "q");
  check_like(t.v, "v", t.q, "q");
  check_like(t.o, "o", t.q, "q");

  AttentionShape s;
  s.batch = t.q.size(0);
  s.heads_q = t.q.size(1);
  s.len_q = t.q.size(2);
  s.head_dim = t.q.size(3);
  s.heads_kv = t.k.size(1);
  s.len_k = t.k.size(2);

  FT_CHECK(s.batch >= 1 && s.heads_q >= 1 && s.len_q >= 1 && s.head_dim >= 1,
           "attention: q must have every size >= 1, given ", shape_string(t.q.shape()));
  FT_CHECK(s.heads_kv >= 1 && s.len_k >= 1, "attention: k must have every size >= 1, given ",
           shape_string(t.k.shape()));
  FT_CHECK(t.k.size(0) == s.batch, "attention: k must have the batch size of q: expected ", s.batch, ", given ",
           t.k.size(0));
  FT_CHECK(t.k.size(3) == s.head_dim, "attention: k must have the head dim of q: expected ", s.head_dim,
           ", given ", t.k.size(3));
  check_shape(t.v, "v", t.k.shape());
  FT_CHECK(s.heads_q % s.heads_kv == 0, "attention: query heads must be a multiple of key/value heads: given Hq = ",
           s.heads_q, ", Hkv = ", s.heads_kv);
  FT_CHECK_KIND(unsupported, s.head_dim <= kMaxHeadDim, "attention: unsupported head dim ", s.head_dim,
                ": expected at most ", kMaxHeadDim);
  check_shape(t.o, "o", t.q.shape());
  check_shape(t.lse, "lse", {s.batch, s.heads_q, s.len_q});
  FT_CHECK(t.lse.dtype() == DType::f32, "attention: lse must be fp32, given ", t.lse.describe());
  FT_CHECK(t.lse.device() == t.q.device(), "attention: lse must be on ", t.q.device().to_string(), ", given ",
           t.lse.device().to_string());
  check_last_dim_contiguous(t.q, "q");
  check_last_dim_contiguous(t.k, "k");
  check_last_dim_contiguous(t.v, "v");
  check_last_dim_contiguous(t.o, "o");

  s.has_sinks = t.sinks.defined();
  if (s.has_sinks) check_fp32_vector(t.sinks, "sinks", s.heads_q, t.q.device());

  FT_CHECK(options.window_left >= -1, "attention: window_left must be >= -1 (-1 = unbounded), given ",
           options.window_left);
  FT_CHECK(options.window_right >= -1, "attention: window_right must be >= -1 (-1 = unbounded), given ",
           options.window_right);
  FT_CHECK(!options.causal || options.window_right <= 0,
           "attention: causal means window_right = 0, but window_right = ", options.window_right, " was given too");
  FT_CHECK(options.sink_tokens >= 0, "attention: sink_tokens must be >= 0, given ", options.sink_tokens);
  // A window wider than Nq + Nk bounds nothing: resolving it to -1 keeps visible_keys' arithmetic in range.
  const std::int64_t widest = s.len_q + s.len_k;
  s.window_left = options.window_left >= widest ? -1 : options.window_left;
  s.window_right = options.causal ? 0 : (options.window_right >= widest ? -1 : options.window_right);
  s.sink_tokens = options.sink_tokens;
  s.scale = options.scale ? *options.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  FT_CHECK(std::isfinite(s.scale), "attention: scale must be finite, given ", s.scale);

  if (options.impl == AttentionImpl::flash && t.q.device().is_cpu()) {
    FT_CHECK(options.block_q >= 16 && options.block_k >= 16, "attention: tile sizes must be >= 16, given block_q = ",
             options.block_q, ", block_k = ", options.block_k);
  }

  if (grads) {
    check_dims(grads->d_o, "d_o", 4, "(B, Hq, Nq, D)");
    check_dims(grads->dq, "dq", 4, "(B, Hq, Nq, D)");
    check_dims(grads->dk, "dk", 4, "(B, Hkv, Nk, D)");
    check_dims(grads->dv, "dv", 4, "(B, Hkv, Nk, D)");
    const std::pair<const Tensor*, const char*> like_q[] = {{&grads->d_o, "d_o"}, {&grads->dq, "dq"}};
    for (auto [g, name] : like_q) {
      check_like(*g, name, t.q, "q");
      check_shape(*g, name, t.q.shape());
      check_last_dim_contiguous(*g, name);
    }
    const std::pair<const Tensor*, const char*> like_k[] = {{&grads->dk, "dk"}, {&grads->dv, "dv"}};
    for (auto [g, name] : like_k) {
      check_like(*g, name, t.q, "q");
      check_shape(*g, name, t.k.shape());
      check_last_dim_contiguous(*g, name);
    }
    if (s.has_sinks) {
      FT_CHECK(grads->dsinks.defined(), "attention: dsinks is required when sinks are given");
      check_fp32_vector(grads->dsinks, "dsinks", s.heads_q, t.q.device());
    } else {
      FT_CHECK(!grads->dsinks.defined(), "attention: dsinks was given but sinks were not");
    }
  }
  return s;
}

void check_attention_head_dim(std::int64_t head_dim, AttentionImpl impl, Device device) {
  FT_CHECK_KIND(unsupported, head_dim >= 1 && head_dim <= kMaxHeadDim, "attention: unsupported head dim ", head_dim,
                ": expected 1 to ", kMaxHeadDim);
#if FT_HAS_CUDA
  if (impl != AttentionImpl::flash || !device.is_cuda()) return;
  FT_CHECK_KIND(unsupported, flash::head_dim_index(static_cast<int>(head_dim)) >= 0,
                "flash attention (CUDA): unsupported head dim ", head_dim, ": expected one of ", flash::kHeadDimList);
#else
  (void)impl, (void)device;  // a CPU-only build runs no CUDA attention
#endif
}

FlashKernels flash_kernels_for(const AttentionTensors& t, const AttentionOptions& options) {
  const AttentionShape s = validate_attention(t, options);
  FT_CHECK(t.q.device().is_cuda() && options.impl == AttentionImpl::flash,
           "flash_kernels_for: expected flash attention on cuda tensors, given ", name_of(options.impl), " on ",
           t.q.device().to_string());
#if FT_HAS_CUDA
  return attention_impl::cuda_flash_kernels(t, nullptr, s, options.kernels);
#else
  ops::no_cuda_build("attention", t.q.device());
#endif
}

void attention_forward(const AttentionTensors& t, const AttentionOptions& options) {
  NvtxRange range(options.impl == AttentionImpl::naive ? "attention.forward.naive" : "attention.forward.flash");
  const AttentionShape s = validate_attention(t, options);
  if (t.q.device().is_cpu()) {
    check_forward_aliases(t);
    if (options.impl == AttentionImpl::naive)
      attention_impl::cpu_naive_forward(t, s);
    else
      attention_impl::cpu_tiled_forward(t, s, options.block_q, options.block_k);
    return;
  }
#if FT_HAS_CUDA
  check_forward_aliases(t);
  if (options.impl == AttentionImpl::naive)
    attention_impl::cuda_naive_forward(t, s, options.stream);
  else
    attention_impl::cuda_flash_forward(t, s, options.stream, options.kernels);
#else
  ops::no_cuda_build("attention", t.q.device());
#endif
}

void attention_backward(const AttentionTensors& t, const AttentionGrads& grads, const AttentionOptions& options) {
  NvtxRange range(options.impl == AttentionImpl::naive ? "attention.backward.naive" : "attention.backward.flash");
  const AttentionShape s = validate_attention(t, options, &grads);
  if (t.q.device().is_cpu()) {
    check_backward_aliases(t, grads);
    if (options.impl == AttentionImpl::naive)
      attention_impl::cpu_naive_backward(t, grads, s);
    else
      attention_impl::cpu_tiled_backward(t, grads, s, options.block_q, options.block_k);
    return;
  }
#if FT_HAS_CUDA
  check_backward_aliases(t, grads);
  if (options.impl == AttentionImpl::naive)
    attention_impl::cuda_naive_backward(t, grads, s, options.stream);
  else
    attention_impl::cuda_flash_backward(t, grads, s, options.stream, options.deterministic, options.kernels);
#else
  ops::no_cuda_build("attention", t.q.device());
#endif
}

}  // namespace ft
