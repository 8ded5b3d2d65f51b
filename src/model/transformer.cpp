// transformer.cpp — TransformerLM construction: buffers, the activation and workspace arena plans, views of
// them for a batch, the GEMM weights (bf16 mode: cast into the workspace's weight slots), and the memory
// report. Forward and backward live in transformer_forward.cpp and transformer_backward.cpp.
#include "model/transformer.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "core/error.h"
#include "core/tensor_io.h"
#include "model/init.h"
#include "ops/cast.h"

namespace ft {

TransformerLM::TransformerLM(const ModelConfig& config, const ModelOptions& options, PlanOnly)
    : config_(config), options_(options), layout_(config) {
  if (options_.max_seq_len == 0) options_.max_seq_len = config_.context_length;
  FT_CHECK(options_.max_batch >= 1, "TransformerLM: max_batch must be >= 1, given ", options_.max_batch);
  FT_CHECK(options_.max_seq_len >= 1 && options_.max_seq_len <= config_.context_length,
           "TransformerLM: max_seq_len must be in [1, context_length = ", config_.context_length, "], given ",
           options_.max_seq_len);
  FT_CHECK(options_.loss_chunk >= 0, "TransformerLM: loss_chunk must be >= 0 (0 = materialised logits), given ",
           options_.loss_chunk);
  // The attention the model runs takes its head dim (checked now rather than at the first forward).
  check_attention_head_dim(config_.head_dim(), options_.attention, options_.device);
  plan_memory();
}

MemoryReport TransformerLM::planned_memory(const ModelConfig& config, const ModelOptions& options) {
  const TransformerLM plan(config, options, PlanOnly{});
  const std::size_t parameter_bytes = static_cast<std::size_t>(plan.layout_.numel()) * size_of(DType::f32);
  MemoryReport m;
  m.parameters = options.parameter_source ? 0 : parameter_bytes;
  m.gradients = options.parameter_source || !options.training ? 0 : parameter_bytes;
  m.activations = plan.activation_layout_.bytes();
  m.workspace = plan.workspace_layout_.bytes();
  m.offloaded = plan.offload_unit_bytes_ * static_cast<std::size_t>(ActivationOffload::host_units(
                                               config.num_layers + 1, static_cast<std::int64_t>(plan.offload_slots_.size())));
  return m;
}

TransformerLM::TransformerLM(const ModelConfig& config, const ModelOptions& options)
    : TransformerLM(config, options, PlanOnly{}) {
  const Device device = options_.device;
  if (options_.parameter_source) {
    params_ = ParameterBuffer::unbound(layout_);
    if (options_.training) grads_ = ParameterBuffer::unbound(layout_);
  } else {
    params_ = ParameterBuffer(layout_, DType::f32, device, "parameters", options_.stream);
    if (options_.training) grads_ = ParameterBuffer(layout_, DType::f32, device, "gradients", options_.stream);
  }
  activations_ = Buffer(activation_layout_.bytes(), device, "activations", options_.stream);
  workspace_ = Buffer(workspace_layout_.bytes(), device, "workspace", options_.stream);
  if (!offload_slots_.empty()) {
    std::vector<char*> slots;
    for (std::size_t offset : offload_slots_) slots.push_back(static_cast<char*>(activations_.data()) + offset);
    offload_ = ActivationOffload(config_.num_layers + 1, std::move(slots), offload_unit_bytes_, device,
                                 options_.stream);
  }
  if (!options_.parameter_source) init_parameters(layout_, params_, options_.seed, options_.stream);
}

void TransformerLM::plan_memory() {
  const auto rows = static_cast<std::size_t>(options_.max_batch * options_.max_seq_len);
  const auto d = static_cast<std::size_t>(config_.d_model), f = static_cast<std::size_t>(config_.d_ff);
  const auto vocab = static_cast<std::size_t>(config_.vocab_size);
  const auto L = static_cast<std::size_t>(config_.num_layers);
  const DType c = compute_dtype();
  const bool bf16 = options_.precision == Precision::bf16;

  const bool fused = fused_loss();
  const std::size_t chunk = fused ? std::min(static_cast<std::size_t>(options_.loss_chunk), rows) : 0;
  const Recompute recompute = options_.training ? options_.recompute : Recompute::none;

  ArenaLayout& a = activation_layout_;
  // One block's tensors (the FFN's h lives in the workspace), named with prefix p; attn.qkv only when with_qkv,
  // attn.o and attn.lse only when with_attention.
  const auto add_layer = [&](const std::string& p, bool with_qkv, bool with_attention) {
    LayerSlots s{};
    s.ln1_y = a.add(p + "ln1.y", rows * d, c);                  // (B, T, d)
    s.ln1_rstd = a.add(p + "ln1.rstd", rows, DType::f32);       // (B, T)
    if (with_qkv) s.qkv = a.add(p + "attn.qkv", rows * 3 * d, c);  // (B, T, 3, H, Dh)
    if (with_attention) {
      s.attn_o = a.add(p + "attn.o", rows * d, c);              // (B, T, H, Dh)
      s.attn_lse = a.add(p + "attn.lse", rows * static_cast<std::size_t>(config_.num_heads), DType::f32);  // (B,H,T)
    }
    s.x_mid = a.add(p + "x_mid", rows * d, DType::f32);         // (B, T, d)
    s.ln2_y = a.add(p + "ln2.y", rows * d, c);                  // (B, T, d)
    s.ln2_rstd = a.add(p + "ln2.rstd", rows, DType::f32);       // (B, T)
    s.ffn_a = a.add(p + "ffn.a", rows * f, c);                  // (B, T, d_ff)
    s.ffn_b = a.add(p + "ffn.b", rows * f, c);                  // (B, T, d_ff)
    return s;
  };
  if (options_.training) {
    // Recomputation: the tensors it remakes live once, shared by every block (see Note [Recomputation]).
    LayerSlots shared{};
    const bool keeps_qkv = recompute == Recompute::selective_qkv;
    const bool keeps_attention = recompute == Recompute::selective || keeps_qkv;
    if (recompute != Recompute::none) shared = add_layer("recomputed block.", !keeps_qkv, !keeps_attention);
    // What one block keeps beside its input x_l, named with prefix p.
    const auto add_kept = [&](const std::string& p) {
      if (recompute == Recompute::none) return add_layer(p, true, true);
      LayerSlots s = shared;
      if (keeps_qkv) s.qkv = a.add(p + "attn.qkv", rows * 3 * d, c);  // (B, T, 3, H, Dh)
      if (keeps_attention) {
        s.attn_o = a.add(p + "attn.o", rows * d, c);  // (B, T, H, Dh)
        s.attn_lse = a.add(p + "attn.lse", rows * static_cast<std::size_t>(config_.num_heads), DType::f32);
      }
      return s;
    };
    if (options_.offload_activations) {
      // A ring of units, x_l then the kept tensors (see Note [Activation offloading]).
      const std::size_t ring = std::min(static_cast<std::size_t>(kOffloadRing), L + 1);
      std::vector<std::size_t> ring_x;
      std::vector<LayerSlots> ring_kept;
      for (std::size_t k = 0; k < ring; ++k) {
        const std::string p = "offload ring slot " + std::to_string(k) + ".";
        ring_x.push_back(a.add(p + "x", rows * d, DType::f32));  // (B, T, d)
        ring_kept.push_back(add_kept(p));
        offload_slots_.push_back(ring_x.back());
        offload_unit_bytes_ = a.end() - ring_x.back();
      }
      // A unit's bytes final at a point of its block's forward: those before its first tensor made later (every
      // slot has slot 0's layout; the recomputed tensors' shared slots lie outside the unit).
      const LayerSlots& s = ring_kept[0];
      const auto final_before = [&](std::initializer_list<std::size_t> later) {
        std::size_t bytes = offload_unit_bytes_;
        for (std::size_t offset : later)
          if (offset >= ring_x[0] && offset - ring_x[0] < bytes) bytes = offset - ring_x[0];
        return bytes;
      };
      offload_parts_.attention = final_before({s.x_mid, s.ln2_y, s.ln2_rstd, s.ffn_a, s.ffn_b});
      offload_parts_.qkv = final_before({s.attn_o, s.attn_lse, s.x_mid, s.ln2_y, s.ln2_rstd, s.ffn_a, s.ffn_b});
      offload_parts_.input = final_before(
          {s.ln1_y, s.ln1_rstd, s.qkv, s.attn_o, s.attn_lse, s.x_mid, s.ln2_y, s.ln2_rstd, s.ffn_a, s.ffn_b});
      for (std::size_t l = 0; l < L; ++l) {
        residual_slots_.push_back(ring_x[l % ring]);
        layer_slots_.push_back(ring_kept[l % ring]);
      }
      residual_slots_.push_back(ring_x[L % ring]);  // x_L, the last unit
    } else {
      residual_slots_.push_back(a.add("layers.0.x", rows * d, DType::f32));  // (B, T, d)
      for (std::size_t l = 0; l < L; ++l) {
        layer_slots_.push_back(add_kept("layers." + std::to_string(l) + "."));
        const std::string next = l + 1 < L ? "layers." + std::to_string(l + 1) + ".x" : "ln_final.x";
        residual_slots_.push_back(a.add(next, rows * d, DType::f32));  // (B, T, d)
      }
    }
  } else {
    // Forward only: one residual stream, overwritten by each layer's output once its x_mid is made, and one
    // layer's temporaries that every layer reuses.
    residual_slots_.assign(L + 1, a.add("x (residual stream)", rows * d, DType::f32));  // (B, T, d)
    layer_slots_.assign(L, add_layer("layer.", true, true));
  }
  lnf_y_ = a.add("ln_final.y", rows * d, c);                     // (B, T, d)
  lnf_rstd_ = a.add("ln_final.rstd", rows, DType::f32);          // (B, T)
  if (!fused) {
    logits_ = a.add("lm_head.logits", rows * vocab, DType::f32);  // (B, T, V)
    if (bf16 && options_.training) dlogits_ = a.add("lm_head.dlogits", rows * vocab, DType::bf16);  // (B, T, V)
  }

  ArenaLayout& w = workspace_layout_;
  if (bf16 && !options_.parameter_source) {
    // The bf16 weight slots: two of one block's parameters, and the LM head's over them.
    const auto block = static_cast<std::size_t>(block_numel());
    ws_.block_weights[0] = w.add("block weights (bf16, slot 0)", block, DType::bf16);  // (block_numel)
    ws_.block_weights[1] = w.add("block weights (bf16, slot 1)", block, DType::bf16);  // (block_numel)
    w.rewind_to(0);
    ws_.lm_head_weight = w.add("lm_head.weight (bf16)", vocab * d, DType::bf16);  // (V, d)
    w.skip_to_end();
  }
  if (fused) ws_.loss = w.add("loss (one double)", 2, DType::f32);  // the bytes of one double
  // The fused loss's tiles, overlaying the per-layer temporaries from `tiles` on.
  const auto add_loss_tiles = [&](std::size_t tiles) {
    if (!fused) return;
    w.rewind_to(tiles);
    ws_.loss_logits = w.add("lm_head.logits tile", chunk * vocab, DType::f32);  // (chunk, V)
    if (bf16 && options_.training) {
      // A group of chunks, as many as the room up to the arena's end holds (at least one, at most what the rows
      // need): fewer, deeper dW GEMMs in the same memory (see Note [Fused LM head loss]).
      const std::size_t tile = chunk * vocab * size_of(DType::bf16);
      const std::size_t start = (w.end() + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
      const std::size_t room = w.bytes() > start ? (w.bytes() - start) / tile : 0;
      loss_group_ = static_cast<std::int64_t>(std::clamp<std::size_t>(room, 1, (rows + chunk - 1) / chunk));
      ws_.loss_dlogits = w.add("lm_head.dlogits tile", static_cast<std::size_t>(loss_group_) * chunk * vocab,
                               DType::bf16);  // (group chunk, V)
    }
    w.skip_to_end();
  };
  if (!options_.training) {
    const std::size_t tiles = w.end();
    ws_.ffn_h = w.add("ffn.h", rows * f, c);  // (B, T, d_ff), the forward's only temporary
    add_loss_tiles(tiles);
    return;
  }
  ws_.dres = w.add("dx (residual stream)", rows * d, DType::f32);                  // (B, T, d)
  ws_.dres_c = bf16 ? w.add("dx (bf16 copy)", rows * d, DType::bf16) : ws_.dres;  // (B, T, d)
  ws_.dnorm = w.add("d norm output", rows * d, DType::f32);                       // (B, T, d)
  const std::size_t overlay = w.end();
  ws_.ffn_h = w.add("ffn.h", rows * f, c);    // (B, T, d_ff)
  ws_.ffn_dh = w.add("ffn.dh", rows * f, c);  // (B, T, d_ff)
  w.rewind_to(overlay);
  ws_.attn_do = w.add("attn.d_o", rows * d, c);            // (B, T, H, Dh)
  ws_.attn_dqkv = w.add("attn.dqkv", rows * 3 * d, c);     // (B, T, 3, H, Dh)
  add_loss_tiles(overlay);
}

Tensor TransformerLM::act(std::size_t offset, DType dtype, Shape shape) const {
  return Tensor(static_cast<char*>(activations_.data()) + offset, dtype, options_.device, std::move(shape));
}

Tensor TransformerLM::work(std::size_t offset, DType dtype, Shape shape) const {
  return Tensor(static_cast<char*>(workspace_.data()) + offset, dtype, options_.device, std::move(shape));
}

Tensor TransformerLM::residual(std::int64_t l, const Batch& b) const {
  return act(residual_slots_.at(static_cast<std::size_t>(l)), DType::f32, {b.B, b.T, config_.d_model});
}

Tensor TransformerLM::qkv_view(const Tensor& qkv, int which, const Batch& b, int parts) const {
  const std::int64_t d = config_.d_model, H = config_.num_heads, Dh = config_.head_dim();
  char* base = static_cast<char*>(qkv.data()) + static_cast<std::size_t>(which * d) * size_of(qkv.dtype());
  return Tensor(base, qkv.dtype(), qkv.device(), {b.B, parts * H, b.T, Dh}, {b.T * 3 * d, Dh, 3 * d, 1});
}

TransformerLM::AttentionViews TransformerLM::attention_views(std::int64_t l, const Batch& b) const {
  const LayerSlots& s = layer_slots_[static_cast<std::size_t>(l)];
  const std::int64_t d = config_.d_model, H = config_.num_heads, Dh = config_.head_dim();
  const DType c = compute_dtype();
  const Tensor qkv = act(s.qkv, c, {b.B, b.T, 3 * d});  // (B, T, 3, H, Dh)
  AttentionViews v;
  v.o_rows = act(s.attn_o, c, {b.B, b.T, d});  // (B, T, H, Dh)
  v.tensors.q = qkv_view(qkv, 0, b);
  v.tensors.k = qkv_view(qkv, 1, b);
  v.tensors.v = qkv_view(qkv, 2, b);
  v.tensors.o = Tensor(v.o_rows.data(), c, options_.device, {b.B, H, b.T, Dh}, {b.T * d, Dh, d, 1});
  v.tensors.lse = act(s.attn_lse, DType::f32, {b.B, H, b.T});
  return v;
}

Tensor TransformerLM::fused_qkv(const ParameterBuffer& buffer, std::int64_t l) const {
  const Tensor& q = buffer[layout_.layer_index(l, LayerSlot::q_proj)];
  return Tensor(q.data(), q.dtype(), options_.device, {3 * config_.d_model, config_.d_model});
}

std::int64_t TransformerLM::block_numel() const {
  const ParameterInfo& first = layout_[layout_.layer_index(0, LayerSlot::q_proj)];
  const ParameterInfo& last = layout_[layout_.layer_index(0, LayerSlot::ln2)];
  return last.offset + last.numel - first.offset;
}

TransformerLM::BlockWeights TransformerLM::cast_block_weights(std::int64_t l) {
  const auto index = [&](LayerSlot slot) { return layout_.layer_index(l, slot); };
  bind_parameters(1 + l);  // a source's views are already in the compute dtype
  if (options_.precision != Precision::bf16 || options_.parameter_source)
    return {.qkv = fused_qkv(params_, l),
            .output_proj = params_[index(LayerSlot::output_proj)],
            .w1 = params_[index(LayerSlot::w1)],
            .w2 = params_[index(LayerSlot::w2)],
            .w3 = params_[index(LayerSlot::w3)]};
  const std::int64_t first = layout_[index(LayerSlot::q_proj)].offset, n = block_numel();
  char* slot = static_cast<char*>(workspace_.data()) + ws_.block_weights[l % 2];
  cast(Tensor(slot, DType::bf16, options_.device, {n}), params_.flat().narrow(0, first, n), options_.stream);
  // A parameter's bf16 view: at its offset from the block's first parameter, as in the layout.
  const auto view = [&](LayerSlot s) {
    const ParameterInfo& info = layout_[index(s)];
    return Tensor(slot + static_cast<std::size_t>(info.offset - first) * size_of(DType::bf16), DType::bf16,
                  options_.device, info.shape);
  };
  return {.qkv = Tensor(slot, DType::bf16, options_.device, {3 * config_.d_model, config_.d_model}),
          .output_proj = view(LayerSlot::output_proj),
          .w1 = view(LayerSlot::w1),
          .w2 = view(LayerSlot::w2),
          .w3 = view(LayerSlot::w3)};
}

Tensor TransformerLM::cast_lm_head() {
  const Tensor weight = lm_head_weight();  // (V, d)
  if (options_.precision == Precision::bf16 && !options_.parameter_source)
    cast(weight, params_[layout_.lm_head_index()], options_.stream);
  return weight;
}

Tensor TransformerLM::lm_head_weight() const {
  if (options_.precision != Precision::bf16 || options_.parameter_source) return params_[layout_.lm_head_index()];
  return work(ws_.lm_head_weight, DType::bf16, {config_.vocab_size, config_.d_model});
}

namespace {

// Parameter indices [first, first + count) of unit u (model/parameter_source.h).
std::pair<std::size_t, std::size_t> unit_parameters(const ParameterLayout& layout, std::int64_t L,
                                                    std::int64_t unit) {
  if (unit == 0) return {0, 1};
  if (unit == L + 1) return {layout.ln_final_index(), 2};
  return {layout.layer_index(unit - 1, LayerSlot::q_proj), kLayerSlots};
}

}  // namespace

void TransformerLM::bind_parameters(std::int64_t unit) {
  if (!options_.parameter_source) return;
  const auto [first, count] = unit_parameters(layout_, config_.num_layers, unit);
  const std::vector<Tensor> views = options_.parameter_source->parameters(unit);
  FT_CHECK(views.size() == count, "TransformerLM: the parameter source gave ", views.size(), " views for unit ", unit,
           ", which has ", count, " parameters");
  for (std::size_t i = 0; i < count; ++i) params_.bind(first + i, views[i]);
}

void TransformerLM::bind_gradients(std::int64_t unit) {
  if (!options_.parameter_source) return;
  const auto [first, count] = unit_parameters(layout_, config_.num_layers, unit);
  const std::vector<Tensor> views = options_.parameter_source->gradients(unit);
  FT_CHECK(views.size() == count, "TransformerLM: the parameter source gave ", views.size(),
           " gradient views for unit ", unit, ", which has ", count, " parameters");
  for (std::size_t i = 0; i < count; ++i) grads_.bind(first + i, views[i]);
}

double TransformerLM::read_back(const double* value) const {
  if (options_.device.is_cpu()) return *value;
  options_.stream.synchronize();
  double host = 0;  // copied as the two f32 widths of its bytes (ft::DType has no f64)
  copy(Tensor(&host, DType::f32, Device::cpu(), {2}),
       Tensor(const_cast<double*>(value), DType::f32, options_.device, {2}));
  return host;
}

double* TransformerLM::fused_loss_slot() const {
  return reinterpret_cast<double*>(static_cast<char*>(workspace_.data()) + ws_.loss);
}

Tensor TransformerLM::logits() const {
  FT_CHECK(!fused_loss(),
           "TransformerLM::logits: the model computes its loss with the fused LM head (ModelOptions::loss_chunk = ",
           options_.loss_chunk, "), which keeps no (B, T, V) logits; build it with loss_chunk = 0 to read them");
  FT_CHECK(logits_batch_.B > 0,
           "TransformerLM::logits: no logits are held; call forward() first (forward_backward "
           "overwrites them with their gradient)");
  return act(logits_, DType::f32, {logits_batch_.B, logits_batch_.T, config_.vocab_size});
}

void TransformerLM::check_training(const char* what) const {
  FT_CHECK_KIND(invalid_argument, options_.training, "TransformerLM::", what,
                ": the model was built for inference (ModelOptions::training = false), so it holds no gradients "
                "or backward buffers; build it with training = true");
}

const ParameterBuffer& TransformerLM::gradients() const {
  check_training("gradients");
  return grads_;
}

std::vector<std::size_t> TransformerLM::gradient_ready_order() const {
  std::vector<std::size_t> order = {layout_.lm_head_index(), layout_.ln_final_index()};
  constexpr LayerSlot kBackwardOrder[] = {LayerSlot::w2,     LayerSlot::w3,          LayerSlot::w1,
                                          LayerSlot::ln2,    LayerSlot::output_proj, LayerSlot::v_proj,
                                          LayerSlot::k_proj, LayerSlot::q_proj,      LayerSlot::ln1};
  for (std::int64_t l = config_.num_layers - 1; l >= 0; --l)
    for (LayerSlot slot : kBackwardOrder) order.push_back(layout_.layer_index(l, slot));
  order.push_back(ParameterLayout::embedding_index());
  return order;
}

MemoryReport TransformerLM::memory() const {
  MemoryReport m;
  m.parameters = params_.bytes();
  m.gradients = grads_.bytes();
  m.activations = activations_.bytes();
  m.workspace = workspace_.bytes();
  m.offloaded = offload_.host_bytes();
  return m;
}

}  // namespace ft
