// generator.cpp — the KV-cache prefill and decode passes over the model's parameters, and the generate loop
// (see generator.h for the memory plan).
#include "model/generator.h"

#include <algorithm>

#include "core/error.h"
#include "core/nvtx.h"
#include "model/cuda_graph.h"
#include "ops/cast.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace ft {

namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

DType Generator::compute_dtype() const {
  return model_.options().precision == Precision::bf16 ? DType::bf16 : DType::f32;
}

Generator::Generator(const TransformerLM& model, std::int64_t max_batch, std::int64_t max_len)
    : model_(model), max_batch_(max_batch), max_len_(max_len) {
  const ModelConfig& cfg = model.config();
  FT_CHECK(max_batch >= 1, "Generator: the batch must hold at least one row, given ", max_batch);
  FT_CHECK(max_len >= 1 && max_len <= cfg.context_length, "Generator: the length must be in [1, context length ",
           cfg.context_length, "], given ", max_len);
  const Device dev = model.options().device;
  const Stream& stream = model.options().stream;
  const DType c = compute_dtype();
  const std::int64_t d = cfg.d_model, f = cfg.d_ff, R = max_batch * max_len;
  cache_ = Buffer(static_cast<std::size_t>(cfg.num_layers * max_len * max_batch * 2 * d) * size_of(c), dev,
                  "generator kv cache", stream);
  if (c == DType::bf16) casts_ = ParameterBuffer(model.layout(), DType::bf16, dev, "generator weights", stream);
  x_ = OwnedTensor({R, d}, DType::f32, dev, "generator x", stream);
  x_mid_ = OwnedTensor({R, d}, DType::f32, dev, "generator x_mid", stream);
  ln_ = OwnedTensor({R, d}, c, dev, "generator norm", stream);
  q_ = OwnedTensor({R, d}, c, dev, "generator q", stream);
  o_ = OwnedTensor({R, d}, c, dev, "generator attention output", stream);
  a_ = OwnedTensor({R, f}, c, dev, "generator ffn a", stream);
  b_ = OwnedTensor({R, f}, c, dev, "generator ffn b", stream);
  h_ = OwnedTensor({R, f}, c, dev, "generator ffn h", stream);
  rstd_ = OwnedTensor({R}, DType::f32, dev, "generator rstd", stream);
  lse_ = OwnedTensor({R * cfg.num_heads}, DType::f32, dev, "generator lse", stream);
  logits_ = OwnedTensor({max_batch, cfg.vocab_size}, DType::f32, dev, "generator logits", stream);
  if (dev.is_cuda())
    device_ids_ = Buffer(static_cast<std::size_t>(R) * sizeof(std::int32_t), dev, "generator ids", stream);
}

Tensor Generator::weight(std::size_t index) const {
  return compute_dtype() == DType::bf16 ? casts_[index] : model_.parameters()[index];
}

Tensor Generator::rows(const OwnedTensor& t, std::int64_t count, std::int64_t cols) const {
  return Tensor(t.tensor().data(), t.tensor().dtype(), t.tensor().device(), {count, cols});
}

void Generator::layer(std::int64_t l, std::int64_t B, std::int64_t T, std::int64_t pos) {
  NvtxRange range(str("generate layer ", l));
  const ModelConfig& cfg = model_.config();
  const ModelOptions& mo = model_.options();
  const ParameterLayout& layout = model_.layout();
  const ParameterBuffer& params = model_.parameters();
  const Stream& stream = mo.stream;
  const std::int64_t d = cfg.d_model, f = cfg.d_ff, H = cfg.num_heads, Dh = cfg.head_dim(), R = T * B;
  const DType c = compute_dtype();
  const Device dev = mo.device;
  const LinearOptions lin{mo.allow_tf32, stream};
  const RmsNormOptions norm{cfg.norm_eps, stream};
  const auto index = [&](LayerSlot slot) { return layout.layer_index(l, slot); };

  // This layer's cache: (max_len, B, 2, H, Dh); positions [pos, pos + T) are rows written by the K/V GEMM.
  char* cache =
      static_cast<char*>(cache_.data()) + static_cast<std::size_t>(l * max_len_ * max_batch_ * 2 * d) * size_of(c);
  const auto at_position = [&](std::int64_t p, std::int64_t offset) {
    return cache + static_cast<std::size_t>(p * B * 2 * d + offset) * size_of(c);
  };
  const Shape cache_strides{2 * d, Dh, B * 2 * d, 1};  // (B, H, N, Dh) views of the cache
  const Shape row_strides{d, Dh, B * d, 1};            // (B, H, T, Dh) views of (T, B, H, Dh) rows

  // Attention sub-block: x_mid = x + output_proj(attention(rope(q), cache k, cache v)).
  const Tensor x = rows(x_, R, d), ln = rows(ln_, R, d);  // (T*B, d)
  rmsnorm_forward(ln, Tensor(rstd_.tensor().data(), DType::f32, dev, {R}), x, params[index(LayerSlot::ln1)], norm);
  const Tensor q = rows(q_, R, d);
  linear_forward(q, ln, weight(index(LayerSlot::q_proj)), lin);
  const Tensor w_k = weight(index(LayerSlot::k_proj));
  const Tensor w_kv(w_k.data(), w_k.dtype(), w_k.device(), {2 * d, d});  // k_proj and v_proj are adjacent
  linear_forward(Tensor(at_position(pos, 0), c, dev, {R, 2 * d}), ln, w_kv, lin);
  const RopeOptions rope{cfg.rope_theta, pos, stream};
  AttentionTensors t;
  t.q = Tensor(q.data(), c, dev, {B, H, T, Dh}, row_strides);
  rope_forward(t.q, rope);
  rope_forward(Tensor(at_position(pos, 0), c, dev, {B, H, T, Dh}, cache_strides), rope);
  t.k = Tensor(at_position(0, 0), c, dev, {B, H, pos + T, Dh}, cache_strides);
  t.v = Tensor(at_position(0, d), c, dev, {B, H, pos + T, Dh}, cache_strides);
  const Tensor o = rows(o_, R, d);
  t.o = Tensor(o.data(), c, dev, {B, H, T, Dh}, row_strides);
  t.lse = Tensor(lse_.tensor().data(), DType::f32, dev, {B, H, T});
  AttentionOptions attention;
  attention.causal = true;  // bottom-right aligned: query t sees the cache up to position pos + t
  attention.impl = mo.attention;
  attention.stream = stream;
  attention_forward(t, attention);
  const Tensor x_mid = rows(x_mid_, R, d);
  linear_forward(x_mid, o, weight(index(LayerSlot::output_proj)), lin);
  residual_add(x_mid, x, stream);

  // FFN sub-block: x = x_mid + w2(silu(w1 ln2(x_mid)) * w3 ln2(x_mid)).
  rmsnorm_forward(ln, Tensor(rstd_.tensor().data(), DType::f32, dev, {R}), x_mid, params[index(LayerSlot::ln2)], norm);
  const Tensor a = rows(a_, R, f), g = rows(b_, R, f), h = rows(h_, R, f);
  linear_forward(a, ln, weight(index(LayerSlot::w1)), lin);
  linear_forward(g, ln, weight(index(LayerSlot::w3)), lin);
  swiglu_forward(h, a, g, stream);
  linear_forward(x, h, weight(index(LayerSlot::w2)), lin);
  residual_add(x, x_mid, stream);
}

void Generator::forward(const std::vector<std::int32_t>& ids, std::int64_t B, std::int64_t T, std::int64_t pos) {
  const ModelConfig& cfg = model_.config();
  const ModelOptions& mo = model_.options();
  const Stream& stream = mo.stream;
  const std::int64_t d = cfg.d_model, V = cfg.vocab_size, R = T * B;
  TokenIds token_ids{ids.data(), {T, B}, mo.device};
  if (mo.device.is_cuda()) {
    upload(device_ids_.data(), ids.data(), ids.size() * sizeof(std::int32_t), stream);
    token_ids.data = static_cast<const std::int32_t*>(device_ids_.data());
  }
  embedding_forward(rows(x_, R, d).reshape({T, B, d}), token_ids,
                    model_.parameters()[ParameterLayout::embedding_index()], stream);
  for (std::int64_t l = 0; l < cfg.num_layers; ++l) layer(l, B, T, pos);

  // The logits of the last position only: rows (T - 1) * B ... of the residual stream.
  const Tensor x_last(static_cast<float*>(x_.tensor().data()) + (T - 1) * B * d, DType::f32, mo.device, {B, d});
  const Tensor ln = rows(ln_, B, d);
  rmsnorm_forward(ln, Tensor(rstd_.tensor().data(), DType::f32, mo.device, {B}), x_last,
                  model_.parameters()[model_.layout().ln_final_index()], {cfg.norm_eps, stream});
  const Tensor logits = rows(logits_, B, V);
  linear_forward(logits, ln, weight(model_.layout().lm_head_index()), {mo.allow_tf32, stream});
  host_logits_.resize(static_cast<std::size_t>(B * V));
  if (mo.device.is_cuda()) {
    download(host_logits_.data(), logits.data(), host_logits_.size() * sizeof(float), stream);
  } else {
    std::copy_n(logits.data_as<float>(), host_logits_.size(), host_logits_.begin());
  }
}

std::vector<std::vector<std::int32_t>> Generator::generate(const std::vector<std::vector<std::int32_t>>& prompts,
                                                           const GenerationOptions& options) {
  const ModelConfig& cfg = model_.config();
  validate_sampling(options.sampling);
  const auto B = static_cast<std::int64_t>(prompts.size());
  FT_CHECK(B >= 1 && B <= max_batch_, "generate: the batch must hold 1 to ", max_batch_, " prompts, given ", B);
  const auto T0 = static_cast<std::int64_t>(prompts[0].size());
  FT_CHECK(T0 >= 1, "generate: the prompt is empty; give at least one token (e.g. the end-of-text id)");
  for (std::int64_t b = 0; b < B; ++b) {
    const std::vector<std::int32_t>& p = prompts[static_cast<std::size_t>(b)];
    FT_CHECK(static_cast<std::int64_t>(p.size()) == T0, "generate: every prompt must have the length of the first (",
             T0, " tokens), prompt ", b, " has ", p.size());
    for (std::size_t i = 0; i < p.size(); ++i)
      FT_CHECK(p[i] >= 0 && p[i] < cfg.vocab_size, "generate: prompt ", b, " has id ", p[i], " at position ", i,
               ", outside the model's vocabulary [0, ", cfg.vocab_size, ")");
  }
  FT_CHECK(T0 < cfg.context_length, "generate: the prompt is ", T0, " tokens, too long for the model's context of ",
           cfg.context_length, " tokens (a prompt may have at most ", cfg.context_length - 1,
           " tokens, leaving room for one new token)");
  FT_CHECK(options.max_new_tokens >= 1, "generate: max_new_tokens must be >= 1, given ", options.max_new_tokens);
  FT_CHECK(T0 + options.max_new_tokens <= max_len_, "generate: a prompt of ", T0, " tokens and ",
           options.max_new_tokens, " new tokens need ", T0 + options.max_new_tokens,
           " positions, more than the context of ", max_len_, " (at most ", max_len_ - T0, " new tokens)");

  NvtxRange range("generate");
  const Stream& stream = model_.options().stream;
  if (compute_dtype() == DType::bf16) {
    // Tensor by tensor: each cast stays far below 2^31 elements whatever the model's size.
    for (std::size_t i = 0; i < model_.layout().size(); ++i) cast(casts_[i], model_.parameters()[i], stream);
  }
  Rng rng(options.seed);
  stats_ = {};
  std::vector<std::vector<std::int32_t>> out(static_cast<std::size_t>(B));

  auto start = std::chrono::steady_clock::now();
  std::vector<std::int32_t> ids(static_cast<std::size_t>(T0 * B));  // (T0, B) position-major
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T0; ++t) ids[t * B + b] = prompts[b][t];
  forward(ids, B, T0, 0);
  std::vector<std::int32_t> next = sample_tokens(host_logits_, B, cfg.vocab_size, options.sampling, rng);
  stats_.prefill_ms = ms_since(start);

  start = std::chrono::steady_clock::now();
  for (std::int64_t step = 0;; ++step) {
    for (std::int64_t b = 0; b < B; ++b) out[b].push_back(next[b]);
    if (step + 1 == options.max_new_tokens) break;
    forward(next, B, 1, T0 + step);
    next = sample_tokens(host_logits_, B, cfg.vocab_size, options.sampling, rng);
    ++stats_.decode_steps;
  }
  stats_.decode_ms = ms_since(start);
  return out;
}

}  // namespace ft
