// transformer_attention.cpp — TransformerLM's attention and RoPE calls: causal attention over whole rows, or
// with packed documents (see Note [Packed documents]) varlen attention with one causal sequence per document
// over the batch's tokens flattened row by row, and RoPE at each token's position in its document.
#include "core/error.h"
#include "model/transformer.h"
#include "ops/attention_varlen.h"

namespace ft {

namespace {

// A (B, H, T, Dh) view whose batch and token dims flatten (batch stride = T x token stride) as the packed
// (B T, H, Dh) view varlen attention reads.
Tensor packed_rows(const Tensor& t) {
  FT_CHECK(t.size(0) == 1 || t.stride(0) == t.size(2) * t.stride(2),
           "packed documents: the attention tensor ", t.describe(), " does not flatten to (B T, H, Dh)");
  return Tensor(t.data(), t.dtype(), t.device(), {t.size(0) * t.size(2), t.size(1), t.size(3)},
                {t.stride(2), t.stride(1), t.stride(3)});
}

// The packed form of a block's attention tensors. lse: the arena's (B, H, T) slot holds (H, B T) here
// (forward and backward agree; nothing else reads it).
VarlenAttentionTensors packed(const AttentionTensors& t, const PackedDocuments& docs) {
  VarlenAttentionTensors v;
  v.q = packed_rows(t.q);
  v.k = packed_rows(t.k);
  v.v = packed_rows(t.v);
  v.o = packed_rows(t.o);
  v.lse = Tensor(t.lse.data(), DType::f32, t.lse.device(), {t.q.size(1), t.q.size(0) * t.q.size(2)});
  v.cu_seqlens_q = v.cu_seqlens_k = docs.cu_seqlens;
  v.max_seqlen_q = v.max_seqlen_k = docs.max_seqlen;
  return v;
}

}  // namespace

void TransformerLM::check_documents(const Batch& b) const {
  if (!documents_) return;
  const Shape shape{b.B, b.T};
  FT_CHECK(documents_->positions.shape == shape, "TransformerLM: the packed documents describe a ",
           shape_string(documents_->positions.shape), " batch, given a ", shape_string(shape), " one");
  FT_CHECK(documents_->cu_seqlens.count >= 2 && documents_->cu_seqlens.count <= b.B * b.T + 1,
           "TransformerLM: packed documents need 2 to B*T + 1 = ", b.B * b.T + 1, " cumulative lengths, given ",
           documents_->cu_seqlens.count);
  FT_CHECK(documents_->positions.device == options_.device && documents_->cu_seqlens.device == options_.device,
           "TransformerLM: packed documents must be on the model's device ", options_.device.to_string());
}

RopeOptions TransformerLM::rope_options() const {
  RopeOptions rope{config_.rope_theta, 0, options_.stream};
  if (documents_) rope.positions = documents_->positions;
  return rope;
}

AttentionOptions TransformerLM::attention_options() const {
  AttentionOptions options;
  options.causal = true;
  options.deterministic = options_.deterministic_attention;
  options.impl = options_.attention;
  options.stream = options_.stream;
  return options;
}

void TransformerLM::attention_forward_pass(const AttentionTensors& t) const {
  if (!documents_) return attention_forward(t, attention_options());
  attention_varlen_forward(packed(t, *documents_), attention_options());
}

void TransformerLM::attention_backward_pass(const AttentionTensors& t, const AttentionGrads& g) const {
  if (!documents_) return attention_backward(t, g, attention_options());
  const VarlenAttentionGrads packed_grads{packed_rows(g.d_o), packed_rows(g.dq), packed_rows(g.dk),
                                          packed_rows(g.dv), Tensor()};
  attention_varlen_backward(packed(t, *documents_), packed_grads, attention_options());
}

}  // namespace ft
