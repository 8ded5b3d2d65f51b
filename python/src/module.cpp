// module.cpp — flashtrain._C, the nanobind extension: attention forward and backward (every variant of
// the attention contract, dense and over packed sequences: varlen) over DLPack arrays from any framework, on
// the host or a CUDA device, and the Transformer LM's forward (model_bindings.h: load a safetensors file, logits). The attention
// caller allocates the outputs; CUDA work is ordered on the stream handle the caller passes (its
// current stream, e.g. torch.cuda.current_stream().cuda_stream; 0 = the legacy default stream).
// The GIL is released while the attention runs.
#include <cstdint>
#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "core/device.h"
#include "core/version.h"
#include "dlpack_tensor.h"
#include "errors.h"
#include "model_bindings.h"
#include "ops/attention.h"
#include "ops/attention_varlen.h"
#include "ops/gemm_tuning.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace ft::python {

namespace {

// The variant and the stream, as the Python keywords give them.
struct Variant {
  bool causal = false;
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  std::int64_t sink_tokens = 0;
  std::optional<double> scale;
  std::string impl = "flash";
  std::uintptr_t stream = 0;
  std::string kernels = "auto";  // AttentionOptions::kernels: auto, sm80 or sm90 (CUDA flash only)
  bool deterministic = true;     // backward only (AttentionOptions::deterministic)
};

AttentionOptions options_for(const Variant& variant, Device device) {
  AttentionOptions options;
  options.causal = variant.causal;
  options.window_left = variant.window_left;
  options.window_right = variant.window_right;
  options.sink_tokens = variant.sink_tokens;
  options.scale = variant.scale;
  options.impl = parse_attention_impl(variant.impl);
  options.kernels = parse_flash_kernels(variant.kernels);
  options.deterministic = variant.deterministic;
  if (device.is_cuda()) options.stream = Stream::wrap(reinterpret_cast<void*>(variant.stream), device);
  return options;
}

// Views of q, k, v, o, lse and sinks; o and lse are outputs of forward and inputs of backward.
template <class OArray>
AttentionTensors tensors_of(const InputArray& q, const InputArray& k, const InputArray& v, const OArray& o,
                            const OArray& lse, const std::optional<InputArray>& sinks) {
  AttentionTensors t;
  t.q = tensor_view(q, "q");
  t.k = tensor_view(k, "k");
  t.v = tensor_view(v, "v");
  t.o = tensor_view(o, "o");
  t.lse = tensor_view(lse, "lse");
  if (sinks) t.sinks = tensor_view(*sinks, "sinks");
  return t;
}

// Views of the gradient arrays of a backward call (AttentionGrads or VarlenAttentionGrads).
template <class Grads>
Grads grads_of(const InputArray& d_o, const OutputArray& dq, const OutputArray& dk, const OutputArray& dv,
               const std::optional<OutputArray>& dsinks) {
  Grads g;
  g.d_o = tensor_view(d_o, "d_o");
  g.dq = tensor_view(dq, "dq");
  g.dk = tensor_view(dk, "dk");
  g.dv = tensor_view(dv, "dv");
  if (dsinks) g.dsinks = tensor_view(*dsinks, "dsinks");
  return g;
}

// q (B, Hq, Nq, D), k/v (B, Hkv, Nk, D), o (B, Hq, Nq, D) written, lse (B, Hq, Nq) fp32 written,
// sinks (Hq) fp32 or None.
void forward(const InputArray& q, const InputArray& k, const InputArray& v, const OutputArray& o,
             const OutputArray& lse, const std::optional<InputArray>& sinks, bool causal, std::int64_t window_left,
             std::int64_t window_right, std::int64_t sink_tokens, std::optional<double> scale,
             const std::string& impl, const std::string& kernels, std::uintptr_t stream) {
  const AttentionTensors t = tensors_of(q, k, v, o, lse, sinks);
  const AttentionOptions options =
      options_for({causal, window_left, window_right, sink_tokens, scale, impl, stream, kernels}, t.q.device());
  nb::gil_scoped_release unlocked;
  attention_forward(t, options);
}

// Inputs as forward, plus o and lse from forward and d_o (B, Hq, Nq, D); dq, dk, dv (shaped like
// q, k, v) and dsinks (Hq) fp32 — given exactly when sinks are — are overwritten.
void backward(const InputArray& q, const InputArray& k, const InputArray& v, const InputArray& o,
              const InputArray& lse, const InputArray& d_o, const OutputArray& dq, const OutputArray& dk,
              const OutputArray& dv, const std::optional<InputArray>& sinks,
              const std::optional<OutputArray>& dsinks, bool causal, std::int64_t window_left,
              std::int64_t window_right, std::int64_t sink_tokens, std::optional<double> scale,
              const std::string& impl, const std::string& kernels, bool deterministic, std::uintptr_t stream) {
  const AttentionTensors t = tensors_of(q, k, v, o, lse, sinks);
  const auto g = grads_of<AttentionGrads>(d_o, dq, dk, dv, dsinks);
  const AttentionOptions options = options_for(
      {causal, window_left, window_right, sink_tokens, scale, impl, stream, kernels, deterministic}, t.q.device());
  nb::gil_scoped_release unlocked;
  attention_backward(t, g, options);
}

// Views of one varlen call: q (total_q, Hq, D), k, v (total_k, Hkv, D), o (total_q, Hq, D), lse (Hq, total_q),
// the int32 cumulative lengths (B + 1) and sinks (Hq) or None.
template <class OArray>
VarlenAttentionTensors varlen_tensors_of(const InputArray& q, const InputArray& k, const InputArray& v,
                                         const OArray& o, const OArray& lse, const InputArray& cu_seqlens_q,
                                         const InputArray& cu_seqlens_k, std::int64_t max_seqlen_q,
                                         std::int64_t max_seqlen_k, const std::optional<InputArray>& sinks) {
  VarlenAttentionTensors t;
  t.q = tensor_view(q, "q");
  t.k = tensor_view(k, "k");
  t.v = tensor_view(v, "v");
  t.o = tensor_view(o, "o");
  t.lse = tensor_view(lse, "lse");
  t.cu_seqlens_q = lengths_view(cu_seqlens_q, "cu_seqlens_q");
  t.cu_seqlens_k = lengths_view(cu_seqlens_k, "cu_seqlens_k");
  t.max_seqlen_q = max_seqlen_q;
  t.max_seqlen_k = max_seqlen_k;
  if (sinks) t.sinks = tensor_view(*sinks, "sinks");
  return t;
}

void varlen_forward(const InputArray& q, const InputArray& k, const InputArray& v, const OutputArray& o,
                    const OutputArray& lse, const InputArray& cu_seqlens_q, const InputArray& cu_seqlens_k,
                    std::int64_t max_seqlen_q, std::int64_t max_seqlen_k, const std::optional<InputArray>& sinks,
                    bool causal, std::int64_t window_left, std::int64_t window_right, std::int64_t sink_tokens,
                    std::optional<double> scale, const std::string& impl, const std::string& kernels,
                    std::uintptr_t stream) {
  const VarlenAttentionTensors t =
      varlen_tensors_of(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sinks);
  const AttentionOptions options =
      options_for({causal, window_left, window_right, sink_tokens, scale, impl, stream, kernels}, t.q.device());
  nb::gil_scoped_release unlocked;
  attention_varlen_forward(t, options);
}

void varlen_backward(const InputArray& q, const InputArray& k, const InputArray& v, const InputArray& o,
                     const InputArray& lse, const InputArray& d_o, const OutputArray& dq, const OutputArray& dk,
                     const OutputArray& dv, const InputArray& cu_seqlens_q, const InputArray& cu_seqlens_k,
                     std::int64_t max_seqlen_q, std::int64_t max_seqlen_k, const std::optional<InputArray>& sinks,
                     const std::optional<OutputArray>& dsinks, bool causal, std::int64_t window_left,
                     std::int64_t window_right, std::int64_t sink_tokens, std::optional<double> scale,
                     const std::string& impl, const std::string& kernels, bool deterministic,
                     std::uintptr_t stream) {
  const VarlenAttentionTensors t =
      varlen_tensors_of(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sinks);
  const auto g = grads_of<VarlenAttentionGrads>(d_o, dq, dk, dv, dsinks);
  const AttentionOptions options = options_for(
      {causal, window_left, window_right, sink_tokens, scale, impl, stream, kernels, deterministic}, t.q.device());
  nb::gil_scoped_release unlocked;
  attention_varlen_backward(t, g, options);
}

}  // namespace

}  // namespace ft::python

NB_MODULE(_C, m) {
  using namespace ft::python;
  m.doc() = "flashtrain's attention kernels (FlashAttention-2 and the naive baselines) over DLPack arrays, and the Transformer LM's forward";
  register_error_translator();
  register_model_bindings(m);

  m.attr("__version__") = ft::version();
  m.attr("git_commit") = ft::git_commit();
  m.attr("built_with_cuda") = ft::built_with_cuda();
  m.def("cuda_available", &ft::cuda_available, "True when this build has CUDA and a device is visible.");
  m.def("set_gemm_autotune", &ft::set_gemm_autotune, "candidates"_a,
        "CUDA GEMMs made after the call time their first `candidates` (2-32) cuBLASLt algorithms once and keep the "
        "fastest; 0 (the default) keeps the heuristic's choice, bit-for-bit repeatable (ops/gemm_tuning.h).");
  m.def("gemm_autotune", &ft::gemm_autotune, "The candidates set_gemm_autotune set (0: off).");

  m.def("attention_forward", &forward, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, nb::kw_only(),
        "sinks"_a = nb::none(), "causal"_a = false, "window_left"_a = -1, "window_right"_a = -1,
        "sink_tokens"_a = 0, "scale"_a = nb::none(), "impl"_a = "flash", "kernels"_a = "auto", "stream"_a = 0,
        "o (B, Hq, Nq, D), lse (B, Hq, Nq) fp32 <- attention(q (B, Hq, Nq, D), k, v (B, Hkv, Nk, D)).\n"
        "Any strides with a contiguous last dim; float32, float16 or bfloat16; host or CUDA memory.\n"
        "sinks: (Hq) fp32 sink logits or None. window_left/right: -1 = unbounded. scale: None = 1/sqrt(D).\n"
        "impl: 'flash' or 'naive'. kernels: the CUDA flash kernel family, 'auto' (the Hopper sm90 kernels\n"
        "where they run: H100/H200, bf16/fp16, head dims 64 and 128, 16-byte aligned operands), 'sm80' (the\n"
        "portable ones) or 'sm90' (an error where they cannot run); ignored elsewhere.\n"
        "stream: the cudaStream_t to run on, as an int (0 = legacy default).");
  m.def("attention_backward", &backward, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, "d_o"_a, "dq"_a, "dk"_a, "dv"_a,
        nb::kw_only(), "sinks"_a = nb::none(), "dsinks"_a = nb::none(), "causal"_a = false, "window_left"_a = -1,
        "window_right"_a = -1, "sink_tokens"_a = 0, "scale"_a = nb::none(), "impl"_a = "flash",
        "kernels"_a = "auto", "deterministic"_a = true, "stream"_a = 0,
        "dq, dk, dv (like q, k, v) and dsinks ((Hq) fp32, exactly when sinks are given) <- the gradients of\n"
        "attention, given q, k, v, o and lse from attention_forward and d_o (B, Hq, Nq, D). Options as forward.\n"
        "deterministic: True (default) gives bit-identical gradients run to run; False lets the CUDA flash\n"
        "backward accumulate dq in fp32 from the dK/dV kernel (faster; last-bit differences; ignored\n"
        "elsewhere).");
  m.def("attention_varlen_forward", &varlen_forward, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, "cu_seqlens_q"_a,
        "cu_seqlens_k"_a, "max_seqlen_q"_a, "max_seqlen_k"_a, nb::kw_only(), "sinks"_a = nb::none(),
        "causal"_a = false, "window_left"_a = -1, "window_right"_a = -1, "sink_tokens"_a = 0, "scale"_a = nb::none(),
        "impl"_a = "flash", "kernels"_a = "auto", "stream"_a = 0,
        "o (total_q, Hq, D), lse (Hq, total_q) fp32 <- attention over packed sequences: q (total_q, Hq, D), k, v\n"
        "(total_k, Hkv, D); sequence b is rows [cu[b], cu[b + 1]) of the int32 cumulative lengths cu_seqlens_q and\n"
        "cu_seqlens_k (B + 1 entries: first 0, non-decreasing, last the total, on q's device); max_seqlen_q/k bound\n"
        "every sequence's length. Every option of attention_forward applies within each sequence (causal and a\n"
        "right window need len_k >= len_q per sequence). CUDA lengths are copied to the host to be checked.");
  m.def("attention_varlen_backward", &varlen_backward, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, "d_o"_a, "dq"_a, "dk"_a,
        "dv"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a, "max_seqlen_q"_a, "max_seqlen_k"_a, nb::kw_only(),
        "sinks"_a = nb::none(), "dsinks"_a = nb::none(), "causal"_a = false, "window_left"_a = -1,
        "window_right"_a = -1, "sink_tokens"_a = 0, "scale"_a = nb::none(), "impl"_a = "flash",
        "kernels"_a = "auto", "deterministic"_a = true, "stream"_a = 0,
        "dq, dk, dv (like q, k, v) and dsinks ((Hq) fp32, exactly when sinks are given) <- the gradients of\n"
        "attention_varlen_forward, given its inputs, o, lse and d_o (total_q, Hq, D). Options as the forward.");
}
