// transformer_forward.cpp — TransformerLM forward: embedding, the pre-norm blocks (in bf16 mode the cast of
// the block's weights; RMSNorm, fused QKV GEMM, RoPE on q and k, causal attention, output projection with
// the residual add in its epilogue; RMSNorm, SwiGLU FFN, its w2 GEMM adding the residual too; or a block's
// recomputation before its backward, see Note [Recomputation]), final RMSNorm, LM head (in bf16 mode after
// the cast of its weight) and mean cross-entropy (with its softmax gradient when backward follows):
// materialised, or fused in chunks with the LM head's backward (see Note [Fused LM head loss]); with
// offloading, each block's unit copied to the host in parts as its forward makes them.
#include <algorithm>

#include "core/error.h"
#include "core/nvtx.h"
#include "model/fused_lm_head.h"
#include "model/transformer.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace ft {

TransformerLM::Batch TransformerLM::check_batch(const TokenIds& inputs, const TokenIds& targets) const {
  FT_CHECK(inputs.shape.size() == 2, "TransformerLM: inputs must be (B, T) token ids, given ",
           shape_string(inputs.shape));
  FT_CHECK(targets.shape == inputs.shape, "TransformerLM: targets must have the shape of inputs ",
           shape_string(inputs.shape), ", given ", shape_string(targets.shape));
  const Batch b{inputs.shape[0], inputs.shape[1]};
  FT_CHECK(b.B >= 1 && b.B <= options_.max_batch,
           "TransformerLM: batch size must be in [1, max_batch = ", options_.max_batch, "], given ", b.B);
  FT_CHECK(b.T >= 1 && b.T <= options_.max_seq_len,
           "TransformerLM: sequence length must be in [1, max_seq_len = ", options_.max_seq_len, "], given ", b.T);
  FT_CHECK(inputs.device == options_.device && targets.device == options_.device,
           "TransformerLM: token ids must be on the model's device ", options_.device.to_string(), ", given inputs on ",
           inputs.device.to_string(), " and targets on ", targets.device.to_string());
  check_documents(b);
  return b;
}

double TransformerLM::forward(const TokenIds& inputs, const TokenIds& targets) {
  const Batch b = check_batch(inputs, targets);
  logits_batch_ = {};
  const double loss = run_forward(b, inputs, targets, nullptr, nullptr);
  if (!fused_loss()) logits_batch_ = b;
  return loss;
}

double TransformerLM::run_forward(const Batch& b, const TokenIds& inputs, const TokenIds& targets,
                                  const BackwardOptions* backward, double* loss_to) {
  NvtxRange range("model forward");
  const Stream& stream = options_.stream;
  const std::int64_t L = config_.num_layers, d = config_.d_model;
  const DType c = compute_dtype();

  // Offloading moves the units only for a backward (see Note [Activation offloading]).
  bind_parameters(0);
  offload_.make_writable(0);
  embedding_forward(residual(0, b), inputs, params_[ParameterLayout::embedding_index()], stream);
  for (std::int64_t l = 0; l < L; ++l) layer_forward(l, b, backward != nullptr);
  bind_parameters(L + 1);

  const Tensor lnf_y = act(lnf_y_, c, {b.B, b.T, d});  // (B, T, d)
  rmsnorm_forward(lnf_y, act(lnf_rstd_, DType::f32, {b.B, b.T}), residual(L, b), params_[layout_.ln_final_index()],
                  {config_.norm_eps, stream});
  return lm_head_loss(b, targets, backward, loss_to);
}

double TransformerLM::lm_head_loss(const Batch& b, const TokenIds& targets, const BackwardOptions* backward,
                                   double* loss_to) {
  const Stream& stream = options_.stream;
  const std::int64_t d = config_.d_model, V = config_.vocab_size, rows = b.B * b.T;
  const DType c = compute_dtype();
  const Tensor lnf_y = act(lnf_y_, c, {b.B, b.T, d});  // (B, T, d)
  const double loss_scale = backward ? backward->loss_scale : 1.0;
  if (fused_loss()) {
    // Loss and, for backward, the LM head's gradients at once: d lm_head and d ln_final.y (see Note [Fused LM
    // head loss]); the backward goes on from d ln_final.y.
    const std::int64_t chunk = std::min(options_.loss_chunk, options_.max_batch * options_.max_seq_len);
    FusedLmHeadLoss f;
    f.hidden = lnf_y.reshape({rows, d});
    f.targets = {targets.data, {rows}, targets.device};
    f.weight = cast_lm_head();
    f.logits = work(ws_.loss_logits, DType::f32, {chunk, V});  // (chunk, V)
    if (backward) {
      if (options_.precision == Precision::bf16)
        f.dlogits = work(ws_.loss_dlogits, DType::bf16, {loss_group_ * chunk, V});  // (group chunk, V)
      f.dhidden = work(ws_.dnorm, DType::f32, {rows, d});  // (B T, d)
      bind_gradients(config_.num_layers + 1);  // a source: the head's gradient views, written here
      f.dweight = grads_[layout_.lm_head_index()];
      f.accumulate_dweight = backward->accumulate && !options_.parameter_source;  // a source accumulates shards
    }
    f.grad_scale = loss_scale;
    f.allow_tf32 = options_.allow_tf32;
    f.stream = stream;
    double* loss = loss_to ? loss_to : fused_loss_slot();
    fused_lm_head_loss(loss, f);
    return loss_to ? 0 : read_back(loss);
  }
  const Tensor logits = act(logits_, DType::f32, {b.B, b.T, V});  // (B, T, V)
  linear_forward(logits, lnf_y, cast_lm_head(), {options_.allow_tf32, stream});
  // fp32: the gradient overwrites the logits in place; bf16: a bf16 buffer, the LM head's backward operand.
  Tensor dlogits;
  if (backward)
    dlogits = options_.precision == Precision::bf16 ? act(dlogits_, DType::bf16, {b.B, b.T, V}) : logits;
  const CrossEntropyOptions loss_options{.grad_scale = loss_scale, .stream = stream};
  if (!loss_to) return cross_entropy(logits, targets, dlogits, loss_options);
  cross_entropy_to(loss_to, logits, targets, dlogits, loss_options);
  return 0;
}

void TransformerLM::layer_forward(std::int64_t l, const Batch& b, bool store_unit) {
  NvtxRange range(str("layer ", l, " forward"));
  // x_l is final: its copy need not wait for the weights' cast (see Note [Activation offloading]).
  if (store_unit) offload_.store_part(l, offload_parts_.input);
  block_forward(l, b, cast_block_weights(l), BlockPass::forward, store_unit);  // bf16: cast into weight slot l % 2
  if (store_unit) offload_.store(l);  // what of the unit the block's forward did not store yet
}

void TransformerLM::block_forward(std::int64_t l, const Batch& b, const BlockWeights& w, BlockPass pass,
                                  bool store_unit) {
  const LayerSlots& s = layer_slots_[static_cast<std::size_t>(l)];
  const Stream& stream = options_.stream;
  const std::int64_t d = config_.d_model, f = config_.d_ff;
  const DType c = compute_dtype();
  const LinearOptions lin{options_.allow_tf32, stream};
  const RmsNormOptions norm{config_.norm_eps, stream};
  const auto index = [&](LayerSlot slot) { return layout_.layer_index(l, slot); };

  // Attention sub-block: x_mid = x + output_proj(attention(rope(q), rope(k), v)), q,k,v = qkv_proj(ln1(x)).
  const Tensor x = residual(l, b);                      // (B, T, d) fp32
  const Tensor ln1_y = act(s.ln1_y, c, {b.B, b.T, d});  // (B, T, d)
  rmsnorm_forward(ln1_y, act(s.ln1_rstd, DType::f32, {b.B, b.T}), x, params_[index(LayerSlot::ln1)], norm);
  const AttentionViews attn = attention_views(l, b);
  if (pass != BlockPass::recompute_selective_qkv) {  // which keeps qkv after RoPE
    const Tensor qkv = act(s.qkv, c, {b.B, b.T, 3 * d});  // (B, T, 3, H, Dh)
    linear_forward(qkv, ln1_y, w.qkv, lin);
    // q's and k's heads are adjacent: one (B, 2H, T, Dh) view rotates both. Packed documents: positions
    // restart per document.
    rope_forward(qkv_view(qkv, 0, b, 2), rope_options());
  }
  if (store_unit) offload_.store_part(l, offload_parts_.qkv);  // up to qkv (see Note [Activation offloading])
  if (pass == BlockPass::forward || pass == BlockPass::recompute_full)  // selective recomputation keeps o, lse
    attention_forward_pass(attn.tensors);
  if (store_unit) offload_.store_part(l, offload_parts_.attention);  // up to o and lse
  const Tensor x_mid = act(s.x_mid, DType::f32, {b.B, b.T, d});  // (B, T, d) fp32
  linear_forward_residual(x_mid, attn.o_rows, w.output_proj, x, lin);  // the residual add in the GEMM's epilogue

  // FFN sub-block: x_next = x_mid + w2(silu(w1 ln2(x_mid)) * w3 ln2(x_mid)).
  const Tensor ln2_y = act(s.ln2_y, c, {b.B, b.T, d});  // (B, T, d)
  rmsnorm_forward(ln2_y, act(s.ln2_rstd, DType::f32, {b.B, b.T}), x_mid, params_[index(LayerSlot::ln2)], norm);
  const Tensor a = act(s.ffn_a, c, {b.B, b.T, f});  // (B, T, d_ff) w1 y
  const Tensor g = act(s.ffn_b, c, {b.B, b.T, f});  // (B, T, d_ff) w3 y (the arena's ffn.b)
  linear_forward(a, ln2_y, w.w1, lin);
  linear_forward(g, ln2_y, w.w3, lin);
  if (pass != BlockPass::forward) return;  // the backward recomputes h itself and needs no x_next
  const Tensor h = work(ws_.ffn_h, c, {b.B, b.T, f});  // (B, T, d_ff)
  swiglu_forward(h, a, g, stream);
  offload_.make_writable(l + 1);  // x_{l+1}'s slot: as late as possible (see Note [Activation offloading])
  const Tensor x_next = residual(l + 1, b);  // (B, T, d) fp32
  linear_forward_residual(x_next, h, w.w2, x_mid, lin);
}

}  // namespace ft
