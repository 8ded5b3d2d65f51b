// attention_varlen.h — attention over packed sequences ("varlen"): B sequences of different lengths
// concatenated along the token axis and described by int32 cumulative lengths (docs/design.md, "Packed
// sequences"). Every rule of the dense contract (ops/attention.h: bottom-right alignment, window, sink
// tokens, sink logits, GQA, scale) applies within each sequence; no query ever sees another sequence's keys.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/attention.h"

namespace ft {

// Cumulative lengths of B packed sequences: B + 1 int32 entries, the first 0, non-decreasing, the last the
// total token count; sequence b is rows [cu[b], cu[b + 1]). A non-owning view like TokenIds.
// `data` lives on `device` (the device of the attention tensors). `host`, when given, is a host copy of the
// same values: the call then validates it without reading device memory (no synchronisation, so the call
// can be captured in a CUDA graph); without it a CUDA call copies the entries to the host to validate them.
struct CumulativeLengths {
  const std::int32_t* data = nullptr;  // (B + 1) on `device`
  const std::int32_t* host = nullptr;  // optional (B + 1) host mirror of `data`
  std::int64_t count = 0;              // B + 1
  Device device = Device::cpu();
};

// Tensors of one varlen call. Strides as in AttentionTensors (last dim contiguous).
struct VarlenAttentionTensors {
  Tensor q;      // (total_q, Hq, D)   bf16 | fp16 | fp32
  Tensor k;      // (total_k, Hkv, D)  same dtype, Hq % Hkv == 0
  Tensor v;      // (total_k, Hkv, D)  same dtype
  CumulativeLengths cu_seqlens_q;  // (B + 1), last entry = total_q
  CumulativeLengths cu_seqlens_k;  // (B + 1), last entry = total_k
  std::int64_t max_seqlen_q = 0;   // >= every query sequence's length (sizes the kernels' grids)
  std::int64_t max_seqlen_k = 0;   // >= every key sequence's length
  Tensor sinks;  // (Hq) fp32, optional gpt-oss sink logits (undefined = none)
  Tensor o;      // (total_q, Hq, D)  forward output, backward input
  Tensor lse;    // (Hq, total_q) fp32 natural-log logsumexp: forward output, backward input
};

struct VarlenAttentionGrads {
  Tensor d_o;     // (total_q, Hq, D)
  Tensor dq;      // (total_q, Hq, D)  outputs, same dtype as q
  Tensor dk;      // (total_k, Hkv, D)
  Tensor dv;      // (total_k, Hkv, D)
  Tensor dsinks;  // (Hq) fp32, required exactly when sinks are given
};

// Validated sizes of one varlen call. The per-sequence rules (window, causal alignment) are resolved as in
// AttentionShape, with len_q / len_k taken per sequence.
struct VarlenAttentionShape {
  std::int64_t batch = 0, heads_q = 0, heads_kv = 0, total_q = 0, total_k = 0, head_dim = 0;
  std::int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  double scale = 0;
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  std::int64_t sink_tokens = 0;
  bool has_sinks = false;
};

// Checks shapes, dtypes, devices, strides, options and the cumulative lengths (first 0, non-decreasing,
// last = total, each length <= its max_seqlen, B equal for q and k); throws ft::Error naming what was
// expected and what was given. `grads` also checks o, lse and the gradients.
VarlenAttentionShape validate_attention_varlen(const VarlenAttentionTensors& t, const AttentionOptions& options,
                                               const VarlenAttentionGrads* grads = nullptr);

// o, lse <- attention of each packed sequence. A sequence with no keys gives O = 0 and, as a dense row that
// sees no key, L = -inf, or with sink logits L = the head's sink logit; one with no queries gives nothing.
void attention_varlen_forward(const VarlenAttentionTensors& t, const AttentionOptions& options);
// dq, dk, dv (and dsinks) <- gradients, given q, k, v, o, lse and d_o. Outputs are overwritten.
void attention_varlen_backward(const VarlenAttentionTensors& t, const VarlenAttentionGrads& grads,
                               const AttentionOptions& options);

}  // namespace ft
