// transformer_backward.cpp — TransformerLM backward: LM head (in bf16 mode with the forward's cast of its
// weight; the fused loss made its gradients in the forward), final RMSNorm, the blocks from the last to the
// first (in bf16 mode the cast of the block's weights again; with recomputation the block's forward again,
// see Note [Recomputation]; FFN: w2's input gradient, SwiGLU's backward recomputing h, w2's weight gradient, w3
// and w1 (adding its input gradient to w3's), ln2; attention: output projection, attention, inverse RoPE, fused
// QKV, ln1 — the norms writing the residual stream's gradient and, in bf16 mode, its bf16 copy; with offloading,
// each block's unit copied back ahead of it), the embedding; the gradient-ready hook told as each gradient is
// final.
#include "core/error.h"
#include "core/nvtx.h"
#include "model/transformer.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace ft {

double TransformerLM::forward_backward(const TokenIds& inputs, const TokenIds& targets,
                                       const BackwardOptions& options) {
  return run_forward_backward("forward_backward", inputs, targets, options, nullptr);
}

void TransformerLM::forward_backward_to(double* loss, const TokenIds& inputs, const TokenIds& targets,
                                        const BackwardOptions& options) {
  FT_CHECK(loss != nullptr, "TransformerLM::forward_backward_to: loss must point to one double on the model's device, "
           "given null");
  run_forward_backward("forward_backward_to", inputs, targets, options, loss);
}

double TransformerLM::run_forward_backward(const char* what, const TokenIds& inputs, const TokenIds& targets,
                                           const BackwardOptions& options, double* loss_to) {
  check_training(what);
  const Batch b = check_batch(inputs, targets);
  logits_batch_ = {};
  // The fused loss stays in its slot until the backward is enqueued: read back between forward and backward, it
  // would hold the host until the forward's last kernel and leave the GPU idle while the host launches the
  // backward's first ones (with ZeRO-3, its collectives).
  double* const deferred = loss_to == nullptr && fused_loss() ? fused_loss_slot() : nullptr;
  const double loss = run_forward(b, inputs, targets, &options, loss_to ? loss_to : deferred);
  if (options.on_backward_start) options.on_backward_start();
  run_backward(b, inputs, options);
  return deferred ? read_back(deferred) : loss;
}

void TransformerLM::notify(const BackwardOptions& options, std::size_t index) const {
  if (options.on_gradient_ready) options.on_gradient_ready(layout_[index], grads_[index]);
}

Tensor TransformerLM::dres_cast(const Batch& b, bool wanted) const {
  if (!wanted || options_.precision != Precision::bf16) return Tensor();
  return work(ws_.dres_c, DType::bf16, {b.B, b.T, config_.d_model});  // (B, T, d)
}

void TransformerLM::run_backward(const Batch& b, const TokenIds& inputs, const BackwardOptions& options) {
  NvtxRange range("model backward");
  const Stream& stream = options_.stream;
  const std::int64_t L = config_.num_layers, d = config_.d_model, V = config_.vocab_size;
  const DType c = compute_dtype();
  const bool acc = options.accumulate && !options_.parameter_source;  // a source accumulates its shards
  const std::size_t lm_head = layout_.lm_head_index(), ln_final = layout_.ln_final_index();

  // LM head: dlogits (from the cross-entropy) -> d ln_final.y, d lm_head. In bf16 mode its weight is the cast
  // the forward made, still in its slot (nothing was cast since). The fused loss made both already.
  bind_gradients(L + 1);  // a source: the same views the fused loss wrote through
  const Tensor dnorm = work(ws_.dnorm, DType::f32, {b.B, b.T, d});  // (B, T, d) fp32
  if (!fused_loss()) {
    const Tensor dlogits = act(options_.precision == Precision::bf16 ? dlogits_ : logits_, c, {b.B, b.T, V});
    linear_backward({dnorm, grads_[lm_head], acc}, dlogits, act(lnf_y_, c, {b.B, b.T, d}), lm_head_weight(),
                    {options_.allow_tf32, stream});
  }
  notify(options, lm_head);

  // Final norm: starts the residual stream's gradient dres = d x_L (bf16 mode: and its copy, the last block's
  // first GEMM operand).
  const Tensor dres = work(ws_.dres, DType::f32, {b.B, b.T, d});  // (B, T, d) fp32
  rmsnorm_backward({.dx = dres, .dw = grads_[ln_final], .accumulate_dw = acc, .dx_cast = dres_cast(b, true)}, dnorm,
                   residual(L, b), params_[ln_final], act(lnf_rstd_, DType::f32, {b.B, b.T}),
                   {config_.norm_eps, stream});
  notify(options, ln_final);
  offload_.release(L);  // x_L's slot (see Note [Activation offloading])

  for (std::int64_t l = L - 1; l >= 0; --l) {
    offload_.make_readable(l);  // see Note [Activation offloading]
    layer_backward(l, b, options);
    offload_.release(l);
  }
  offload_.finish();

  const std::size_t embedding = ParameterLayout::embedding_index();
  bind_gradients(0);
  embedding_backward(grads_[embedding], inputs, dres, acc, stream);
  notify(options, embedding);
}

void TransformerLM::layer_backward(std::int64_t l, const Batch& b, const BackwardOptions& options) {
  NvtxRange range(str("layer ", l, " backward"));
  const LayerSlots& s = layer_slots_[static_cast<std::size_t>(l)];
  const Stream& stream = options_.stream;
  const std::int64_t d = config_.d_model, f = config_.d_ff;
  const DType c = compute_dtype();
  const bool acc = options.accumulate && !options_.parameter_source;  // a source accumulates its shards
  const LinearOptions lin{options_.allow_tf32, stream};
  const RmsNormOptions norm{config_.norm_eps, stream};
  const auto index = [&](LayerSlot slot) { return layout_.layer_index(l, slot); };
  const BlockWeights w = cast_block_weights(l);  // bf16: cast again, into weight slot l % 2
  bind_gradients(1 + l);
  // The last block's recomputed tensors are still in the shared slots (see Note [Recomputation]).
  if (options_.recompute != Recompute::none && l != config_.num_layers - 1) {
    NvtxRange recompute(str("layer ", l, " recompute"));
    const BlockPass pass = options_.recompute == Recompute::full        ? BlockPass::recompute_full
                           : options_.recompute == Recompute::selective ? BlockPass::recompute_selective
                                                                        : BlockPass::recompute_selective_qkv;
    block_forward(l, b, w, pass);
  }

  // dres_c, dres as a GEMM operand: in bf16 mode its copy, written by the norm backward before each reader (the
  // final norm or block l + 1's ln1 before the w2 GEMM, ln2 before the output projection's); fp32: dres itself.
  const Tensor dres = work(ws_.dres, DType::f32, {b.B, b.T, d});    // (B, T, d) fp32: d x_{l+1}, then d x_mid, d x_l
  const Tensor dres_c = work(ws_.dres_c, c, {b.B, b.T, d});         // (B, T, d) dres as a GEMM operand
  const Tensor dnorm = work(ws_.dnorm, DType::f32, {b.B, b.T, d});  // (B, T, d) fp32: d of a norm's output

  // FFN: w2's input gradient dh first (it does not need h); then h = silu(a) * g recomputed beside da, dg in one
  // pass over a, g, dh (da, dg overwrite a, g: no longer needed); then w2's weight gradient from h.
  const Tensor a = act(s.ffn_a, c, {b.B, b.T, f});       // (B, T, d_ff)
  const Tensor g = act(s.ffn_b, c, {b.B, b.T, f});       // (B, T, d_ff)
  const Tensor h = work(ws_.ffn_h, c, {b.B, b.T, f});    // (B, T, d_ff)
  const Tensor dh = work(ws_.ffn_dh, c, {b.B, b.T, f});  // (B, T, d_ff)
  const Tensor ln2_y = act(s.ln2_y, c, {b.B, b.T, d});   // (B, T, d)
  linear_backward({dh, Tensor()}, dres_c, h, w.w2, lin);  // no dw: h only gives its shape
  swiglu_recompute_backward(h, a, g, dh, a, g, stream);
  linear_backward({Tensor(), grads_[index(LayerSlot::w2)], acc}, dres_c, h, w.w2, lin);
  notify(options, index(LayerSlot::w2));
  linear_backward({dnorm, grads_[index(LayerSlot::w3)], acc}, g, ln2_y, w.w3, lin);
  notify(options, index(LayerSlot::w3));
  // d ln2.y = the w3 input gradient + the w1 one, added in the w1 GEMM's epilogue.
  linear_backward({.dx = dnorm, .dw = grads_[index(LayerSlot::w1)], .accumulate_dw = acc, .accumulate_dx = true}, a,
                  ln2_y, w.w1, lin);
  notify(options, index(LayerSlot::w1));
  const Tensor x_mid = act(s.x_mid, DType::f32, {b.B, b.T, d});  // (B, T, d) fp32
  rmsnorm_backward({.dx = dres,
                    .dw = grads_[index(LayerSlot::ln2)],
                    .accumulate_dx = true,
                    .accumulate_dw = acc,
                    .dx_cast = dres_cast(b, true)},
                   dnorm, x_mid, params_[index(LayerSlot::ln2)], act(s.ln2_rstd, DType::f32, {b.B, b.T}), norm);
  notify(options, index(LayerSlot::ln2));

  // Attention: output projection, attention (by recomputation inside), inverse RoPE, fused QKV.
  const AttentionViews attn = attention_views(l, b);
  const Tensor d_o = work(ws_.attn_do, c, {b.B, b.T, d});  // (B, T, H, Dh)
  linear_backward({d_o, grads_[index(LayerSlot::output_proj)], acc}, dres_c, attn.o_rows,
                  w.output_proj, lin);
  notify(options, index(LayerSlot::output_proj));
  const Tensor dqkv = work(ws_.attn_dqkv, c, {b.B, b.T, 3 * d});  // (B, T, 3, H, Dh)
  AttentionGrads grads;
  grads.d_o = Tensor(d_o.data(), c, options_.device, attn.tensors.o.shape(), attn.tensors.o.strides());
  grads.dq = qkv_view(dqkv, 0, b);
  grads.dk = qkv_view(dqkv, 1, b);
  grads.dv = qkv_view(dqkv, 2, b);
  attention_backward_pass(attn.tensors, grads);  // packed documents: confined to each document
  rope_backward(qkv_view(dqkv, 0, b, 2), rope_options());  // dq and dk at once, as the forward rotated q and k
  const Tensor ln1_y = act(s.ln1_y, c, {b.B, b.T, d});  // (B, T, d)
  linear_backward({dnorm, fused_qkv(grads_, l), acc}, dqkv, ln1_y, w.qkv, lin);
  notify(options, index(LayerSlot::v_proj));
  notify(options, index(LayerSlot::k_proj));
  notify(options, index(LayerSlot::q_proj));
  // The embedding's backward reads only the fp32 dres: block 0 makes no copy.
  rmsnorm_backward({.dx = dres,
                    .dw = grads_[index(LayerSlot::ln1)],
                    .accumulate_dx = true,
                    .accumulate_dw = acc,
                    .dx_cast = dres_cast(b, l > 0)},
                   dnorm, residual(l, b), params_[index(LayerSlot::ln1)], act(s.ln1_rstd, DType::f32, {b.B, b.T}),
                   norm);
  notify(options, index(LayerSlot::ln1));
}

}  // namespace ft
