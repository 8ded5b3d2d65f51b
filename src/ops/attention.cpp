// attention.cpp — validation of attention calls against the contract, and dispatch to the CPU or
// CUDA implementation chosen by device and AttentionImpl.
#include "ops/attention.h"

#include <cstdint>
#include <utility>

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/attention/attention_checks.h"
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

using attention_impl::check_no_alias;

constexpr std::int64_t kMaxHeadDim = 256;

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
  const attention_impl::OperandTensors operands{t.q, t.k, t.v, t.o, t.lse, t.sinks};
  attention_impl::check_operand_dims_and_dtypes(operands, 4, "(B, Hq, Nq, D)", "(B, Hkv, Nk, D)", "(B, Hq, Nq)");

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
  attention_impl::check_kv_heads(operands);
  FT_CHECK_KIND(unsupported, s.head_dim <= kMaxHeadDim, "attention: unsupported head dim ", s.head_dim,
                ": expected at most ", kMaxHeadDim);
  s.has_sinks = attention_impl::check_outputs_and_layout(operands, {s.batch, s.heads_q, s.len_q});

  // A window wider than Nq + Nk bounds nothing: resolving it to -1 keeps visible_keys' arithmetic in range.
  const attention_impl::ResolvedVariant variant =
      attention_impl::resolve_variant(options, s.head_dim, s.len_q + s.len_k, t.q.device());
  s.window_left = variant.window_left;
  s.window_right = variant.window_right;
  s.sink_tokens = options.sink_tokens;
  s.scale = variant.scale;

  if (grads) {
    attention_impl::check_gradients({grads->d_o, grads->dq, grads->dk, grads->dv, grads->dsinks}, t.q, t.k,
                                    s.has_sinks, 4, "(B, Hq, Nq, D)", "(B, Hkv, Nk, D)");
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
