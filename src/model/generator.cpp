// generator.cpp — the KV-cache prefill and decode passes over the model's parameters, and the generate loop
// (see generator.h for the memory plan and Note [Graphed decode step]).
#include "model/generator.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "core/nvtx.h"
#include "model/cuda_graph.h"
#include "ops/argmax.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/decode_attention.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/skinny_linear.h"
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
  stream_ = model.options().stream;
  if (dev.is_cuda() && stream_.handle() == nullptr) {
    stream_ = Stream::create(dev);  // the legacy default stream cannot be captured
    own_stream_ = true;
  }
  const Stream& stream = stream_;
  const DType c = compute_dtype();
  const std::int64_t d = cfg.d_model, f = cfg.d_ff, R = max_batch * max_len, H = cfg.num_heads;
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
  qkv_ = OwnedTensor({max_batch, 3 * d}, c, dev, "generator decode qkv", stream);
  rstd_ = OwnedTensor({R}, DType::f32, dev, "generator rstd", stream);
  lse_ = OwnedTensor({R * H}, DType::f32, dev, "generator lse", stream);
  logits_ = OwnedTensor({max_batch, cfg.vocab_size}, DType::f32, dev, "generator logits", stream);
  ids_ = Buffer(static_cast<std::size_t>(R) * sizeof(std::int32_t), dev, "generator ids", stream);
  position_ = Buffer(sizeof(std::int32_t), dev, "generator position", stream);
  // The fused few-row GEMMs (ops/skinny_linear.h) take bf16 weights and fp32 norm weights starting 16-byte
  // aligned.
  skinny_ok_ = c == DType::bf16;
  for (std::size_t i = 0; skinny_ok_ && i < model.layout().size(); ++i)
    skinny_ok_ = reinterpret_cast<std::uintptr_t>(casts_[i].data()) % 16 == 0 &&
                 reinterpret_cast<std::uintptr_t>(model.parameters()[i].data()) % 16 == 0;
  if (skinny_ok_) {
    rope_table_ = OwnedTensor({max_len, cfg.head_dim() / 2, 2}, DType::f32, dev, "generator rope table", stream);
    rope_table(rope_table_, {cfg.rope_theta, 0, stream});
  }
  // The decode attention's workspace, for the largest any batch size up to max_batch needs.
  for (std::int64_t b = 1; b <= max_batch; ++b)
    attention_workspace_bytes_ = std::max(attention_workspace_bytes_,
                                          decode_attention_workspace_bytes(b, H, H, 1, cfg.head_dim(), max_len, dev));
  greedy_workspace_bytes_ = greedy_next_workspace_bytes(max_batch, dev);
  if (greedy_workspace_bytes_ > 0) {
    greedy_workspace_ = Buffer(greedy_workspace_bytes_, dev, "generator greedy workspace", stream);
    fill(Tensor(greedy_workspace_.data(), DType::f32, dev,
                {static_cast<std::int64_t>(greedy_workspace_bytes_ / sizeof(float))}),
         0.0, stream);
  }
  if (attention_workspace_bytes_ > 0) {
    attention_workspace_ = Buffer(attention_workspace_bytes_, dev, "generator decode attention workspace", stream);
    fill(Tensor(attention_workspace_.data(), DType::f32, dev,
                {static_cast<std::int64_t>(attention_workspace_bytes_ / sizeof(float))}),
         0.0, stream);
  }
}

Tensor Generator::weight(std::size_t index) const {
  return compute_dtype() == DType::bf16 ? casts_[index] : model_.parameters()[index];
}

Tensor Generator::rows(const OwnedTensor& t, std::int64_t count, std::int64_t cols) const {
  return Tensor(t.tensor().data(), t.tensor().dtype(), t.tensor().device(), {count, cols});
}

char* Generator::layer_cache(std::int64_t l) const {
  const std::int64_t d = model_.config().d_model;
  return static_cast<char*>(cache_.data()) +
         static_cast<std::size_t>(l * max_len_ * max_batch_ * 2 * d) * size_of(compute_dtype());
}

void Generator::prefill_layer(std::int64_t l, std::int64_t B, std::int64_t T) {
  NvtxRange range(str("generate prefill layer ", l));
  const ModelConfig& cfg = model_.config();
  const ModelOptions& mo = model_.options();
  const ParameterLayout& layout = model_.layout();
  const ParameterBuffer& params = model_.parameters();
  const Stream& stream = stream_;
  const std::int64_t d = cfg.d_model, H = cfg.num_heads, Dh = cfg.head_dim(), R = T * B;
  const DType c = compute_dtype();
  const Device dev = mo.device;
  const LinearOptions lin{mo.allow_tf32, stream};
  const RmsNormOptions norm{cfg.norm_eps, stream};
  const auto index = [&](LayerSlot slot) { return layout.layer_index(l, slot); };

  // This layer's cache: (max_len, B, 2, H, Dh); positions [0, T) are rows written by the K/V GEMM.
  char* cache = layer_cache(l);
  const Shape cache_strides{2 * d, Dh, B * 2 * d, 1};  // (B, H, N, Dh) views of the cache
  const Shape row_strides{d, Dh, B * d, 1};            // (B, H, T, Dh) views of (T, B, H, Dh) rows

  // Attention sub-block: x_mid = x + output_proj(attention(rope(q), cache k, cache v)).
  const Tensor x = rows(x_, R, d), ln = rows(ln_, R, d);  // (T*B, d)
  rmsnorm_forward(ln, Tensor(rstd_.tensor().data(), DType::f32, dev, {R}), x, params[index(LayerSlot::ln1)], norm);
  const Tensor q = rows(q_, R, d);
  linear_forward(q, ln, weight(index(LayerSlot::q_proj)), lin);
  const Tensor w_k = weight(index(LayerSlot::k_proj));
  const Tensor w_kv(w_k.data(), w_k.dtype(), w_k.device(), {2 * d, d});  // k_proj and v_proj are adjacent
  linear_forward(Tensor(cache, c, dev, {R, 2 * d}), ln, w_kv, lin);
  const RopeOptions rope{cfg.rope_theta, 0, stream};
  AttentionTensors t;
  t.q = Tensor(q.data(), c, dev, {B, H, T, Dh}, row_strides);
  rope_forward(t.q, rope);
  rope_forward(Tensor(cache, c, dev, {B, H, T, Dh}, cache_strides), rope);
  t.k = Tensor(cache, c, dev, {B, H, T, Dh}, cache_strides);
  t.v = Tensor(cache + static_cast<std::size_t>(d) * size_of(c), c, dev, {B, H, T, Dh}, cache_strides);
  const Tensor o = rows(o_, R, d);
  t.o = Tensor(o.data(), c, dev, {B, H, T, Dh}, row_strides);
  t.lse = Tensor(lse_.tensor().data(), DType::f32, dev, {B, H, T});
  AttentionOptions attention;
  attention.causal = true;
  attention.impl = mo.attention;
  attention.stream = stream;
  attention_forward(t, attention);
  block_rest(l, R);
}

void Generator::decode_layer(std::int64_t l, std::int64_t B, const DecodePlan& plan) {
  NvtxRange range(str("generate decode layer ", l));
  const bool skinny = plan.fused, overlap = plan.overlap;
  const ModelConfig& cfg = model_.config();
  const ModelOptions& mo = model_.options();
  const ParameterLayout& layout = model_.layout();
  const ParameterBuffer& params = model_.parameters();
  const Stream& stream = stream_;
  const std::int64_t d = cfg.d_model, H = cfg.num_heads, Dh = cfg.head_dim();
  const DType c = compute_dtype();
  const Device dev = mo.device;
  const LinearOptions lin{mo.allow_tf32, stream};
  const RmsNormOptions norm{cfg.norm_eps, stream};
  const auto index = [&](LayerSlot slot) { return layout.layer_index(l, slot); };
  const Tensor rstd(rstd_.tensor().data(), DType::f32, dev, {B});

  // Attention sub-block: q, k, v of the B new tokens in one GEMM (q_proj, k_proj, v_proj are adjacent), RoPE
  // at the device position, k and v into the cache.
  const Tensor x = rows(x_, B, d), ln = rows(ln_, B, d), qkv = rows(qkv_, B, 3 * d);
  const Tensor w_q = weight(index(LayerSlot::q_proj));
  const Tensor w_qkv(w_q.data(), c, dev, {3 * d, d});
  const auto part = [&](int which) {  // (B, H, 1, Dh) view of q, k or v in the qkv rows
    return Tensor(static_cast<char*>(qkv.data()) + static_cast<std::size_t>(which * d) * size_of(c), c, dev,
                  {B, H, 1, Dh}, {3 * d, Dh, 3 * d, 1});
  };
  char* cache = layer_cache(l);
  const Shape cache_strides{2 * d, Dh, B * 2 * d, 1};  // (B, H, max_len, Dh) views of the cache
  const Tensor k_cache(cache, c, dev, {B, H, max_len_, Dh}, cache_strides);
  const Tensor v_cache(cache + static_cast<std::size_t>(d) * size_of(c), c, dev, {B, H, max_len_, Dh}, cache_strides);
  if (skinny) {  // RMSNorm, GEMM, RoPE and append in one kernel
    SkinnyLinearArgs s;
    s.epilogue = SkinnyEpilogue::rope_append;
    s.y = Tensor(qkv.data(), c, dev, {B, d}, {3 * d, 1});
    s.x = x;
    s.w = w_qkv;
    s.norm_weight = params[index(LayerSlot::ln1)];
    s.norm_eps = cfg.norm_eps;
    s.k_cache = k_cache;
    s.v_cache = v_cache;
    s.position = position();
    s.rope_theta = cfg.rope_theta;
    s.rope_table = rope_table_;
    s.overlap_launch = overlap;
    s.stream = stream;
    skinny_linear(s);
  } else {
    rmsnorm_forward(ln, rstd, x, params[index(LayerSlot::ln1)], norm);
    linear_forward(qkv, ln, w_qkv, lin);
    rope_append(part(0), part(1), part(2), k_cache, v_cache, position(), {cfg.rope_theta, 0, stream});
  }
  const Tensor o = rows(o_, B, d);
  DecodeAttentionTensors t;
  t.q = part(0);
  t.k = k_cache;
  t.v = v_cache;
  t.o = Tensor(o.data(), c, dev, {B, H, 1, Dh}, {d, Dh, d, 1});
  t.past = position();
  t.workspace = attention_workspace_.data();
  t.workspace_bytes = attention_workspace_bytes_;
  DecodeAttentionOptions attention;
  attention.overlap_launch = overlap;
  attention.stream = stream;
  decode_attention(t, attention);
  if (!skinny) return block_rest(l, B);

  // x_mid = x + output_proj(o); x = x_mid + w2(silu(w1 ln2(x_mid)) * w3 ln2(x_mid)): three kernels.
  const std::int64_t f = cfg.d_ff;
  const Tensor x_mid = rows(x_mid_, B, d), h = rows(h_, B, f);
  SkinnyLinearArgs s;
  s.stream = stream;
  s.overlap_launch = overlap;
  s.epilogue = SkinnyEpilogue::residual;
  s.y = x_mid;
  s.residual = x;
  s.x = o;
  s.w = weight(index(LayerSlot::output_proj));
  skinny_linear(s);
  s.epilogue = SkinnyEpilogue::swiglu;
  s.y = h;
  s.residual = Tensor();
  s.x = x_mid;
  s.w = weight(index(LayerSlot::w1));
  s.w3 = weight(index(LayerSlot::w3));
  s.norm_weight = params[index(LayerSlot::ln2)];
  s.norm_eps = cfg.norm_eps;
  skinny_linear(s);
  s.epilogue = SkinnyEpilogue::residual;
  s.y = x;
  s.residual = x_mid;
  s.x = h;
  s.w = weight(index(LayerSlot::w2));
  s.w3 = Tensor();
  s.norm_weight = Tensor();
  skinny_linear(s);
}

void Generator::block_rest(std::int64_t l, std::int64_t R) {
  const ModelConfig& cfg = model_.config();
  const ModelOptions& mo = model_.options();
  const std::int64_t d = cfg.d_model, f = cfg.d_ff;
  const Device dev = mo.device;
  const LinearOptions lin{mo.allow_tf32, stream_};
  const auto index = [&](LayerSlot slot) { return model_.layout().layer_index(l, slot); };
  const Tensor x = rows(x_, R, d), x_mid = rows(x_mid_, R, d), ln = rows(ln_, R, d);
  linear_forward(x_mid, rows(o_, R, d), weight(index(LayerSlot::output_proj)), lin);
  residual_add(x_mid, x, stream_);

  // FFN sub-block: x = x_mid + w2(silu(w1 ln2(x_mid)) * w3 ln2(x_mid)).
  rmsnorm_forward(ln, Tensor(rstd_.tensor().data(), DType::f32, dev, {R}), x_mid,
                  model_.parameters()[index(LayerSlot::ln2)], {cfg.norm_eps, stream_});
  const Tensor a = rows(a_, R, f), g = rows(b_, R, f), h = rows(h_, R, f);
  linear_forward(a, ln, weight(index(LayerSlot::w1)), lin);
  linear_forward(g, ln, weight(index(LayerSlot::w3)), lin);
  swiglu_forward(h, a, g, stream_);
  linear_forward(x, h, weight(index(LayerSlot::w2)), lin);
  residual_add(x, x_mid, stream_);
}

void Generator::lm_head(std::int64_t first, std::int64_t B, bool overlap, bool fused) {
  const ModelConfig& cfg = model_.config();
  const Device dev = model_.options().device;
  const std::int64_t d = cfg.d_model, V = cfg.vocab_size;
  const Tensor x_last(static_cast<float*>(x_.tensor().data()) + first * d, DType::f32, dev, {B, d});
  const Tensor& norm_weight = model_.parameters()[model_.layout().ln_final_index()];
  const Tensor logits = rows(logits_, B, V), w = weight(model_.layout().lm_head_index());
  if (fused && skinny_linear_fits(B, d)) {  // the final norm fused into the LM head's GEMM
    SkinnyLinearArgs s;
    s.y = logits;
    s.x = x_last;
    s.w = w;
    s.norm_weight = norm_weight;
    s.norm_eps = cfg.norm_eps;
    s.overlap_launch = overlap;
    s.stream = stream_;
    return skinny_linear(s);
  }
  const Tensor ln = rows(ln_, B, d);
  rmsnorm_forward(ln, Tensor(rstd_.tensor().data(), DType::f32, dev, {B}), x_last, norm_weight,
                  {cfg.norm_eps, stream_});
  linear_forward(logits, ln, w, {model_.options().allow_tf32, stream_});
}

void Generator::prefill(const std::vector<std::int32_t>& ids, std::int64_t B, std::int64_t T, bool fused) {
  const ModelConfig& cfg = model_.config();
  const Device dev = model_.options().device;
  const std::int64_t d = cfg.d_model, V = cfg.vocab_size;
  if (dev.is_cuda())
    upload(device_ids(), ids.data(), ids.size() * sizeof(std::int32_t), stream_);
  else
    std::copy(ids.begin(), ids.end(), device_ids());
  embedding_forward(rows(x_, T * B, d).reshape({T, B, d}), TokenIds{device_ids(), {T, B}, dev},
                    model_.parameters()[ParameterLayout::embedding_index()], stream_);
  for (std::int64_t l = 0; l < cfg.num_layers; ++l) prefill_layer(l, B, T);
  lm_head((T - 1) * B, B, false, fused);  // the logits of the last position only
  host_logits_.resize(static_cast<std::size_t>(B * V));
  if (dev.is_cuda()) {
    download(host_logits_.data(), logits_.tensor().data(), host_logits_.size() * sizeof(float), stream_);
  } else {
    std::copy_n(logits_.tensor().data_as<float>(), host_logits_.size(), host_logits_.begin());
  }
}

void Generator::embed_ids(std::int64_t B) {
  const std::int64_t d = model_.config().d_model;
  embedding_forward(rows(x_, B, d).reshape({1, B, d}), TokenIds{device_ids(), {1, B}, model_.options().device},
                    model_.parameters()[ParameterLayout::embedding_index()], stream_);
}

void Generator::enqueue_decode(std::int64_t B, const DecodePlan& plan) {
  const ModelConfig& cfg = model_.config();
  const Device dev = model_.options().device;
  const std::int64_t d = cfg.d_model, V = cfg.vocab_size;
  if (!plan.greedy) embed_ids(B);  // the ids sampled on the host
  for (std::int64_t l = 0; l < cfg.num_layers; ++l) decode_layer(l, B, plan);
  lm_head(0, B, plan.overlap, plan.fused);
  if (!plan.greedy) return advance_position(position(), 1, dev, stream_);
  // Greedy's next ids: kept by position in ids_ (rows (position + 1) * B ..) so that generate() reads a greedy
  // generation back once, and embedded as the next step's input.
  GreedyNextArgs next;
  next.logits = rows(logits_, B, V);
  next.limit = plan.id_limit;
  next.ids = device_ids();
  next.history = device_ids() + B;
  next.position = position();
  next.embedding = model_.parameters()[ParameterLayout::embedding_index()];
  next.x = rows(x_, B, d);
  next.workspace = greedy_workspace_.data();
  next.workspace_bytes = greedy_workspace_bytes_;
  next.overlap_launch = plan.overlap;
  next.stream = stream_;
  greedy_next(next);
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
  const ModelOptions& mo = model_.options();
  const Device dev = mo.device;
  if (own_stream_) {  // the generator's stream follows the model's work so far (e.g. loading parameters)
    Event ready(dev, false);
    ready.record(mo.stream);
    ready.wait_on(stream_);
  }
  if (compute_dtype() == DType::bf16) {
    // Tensor by tensor: each cast stays far below 2^31 elements whatever the model's size.
    for (std::size_t i = 0; i < model_.layout().size(); ++i) cast(casts_[i], model_.parameters()[i], stream_);
  }
  Rng rng(options.seed);
  stats_ = {};
  std::vector<std::vector<std::int32_t>> out(static_cast<std::size_t>(B));
  const std::int64_t V = cfg.vocab_size;
  const bool greedy = options.sampling.temperature == 0;
  const std::int64_t id_limit = options.sampling.id_limit;
  const DecodePlan plan{id_limit, options.overlap_launches,
                        options.fused_gemms && skinny_ok_ && skinny_linear_fits(B, cfg.d_model) &&
                            skinny_linear_fits(B, cfg.d_ff),
                        greedy};
  stats_.fused_gemms = plan.fused;

  auto start = std::chrono::steady_clock::now();
  std::vector<std::int32_t> ids(static_cast<std::size_t>(T0 * B));  // (T0, B) position-major
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T0; ++t) ids[t * B + b] = prompts[b][t];
  {
    NvtxRange prefill_range("prefill");
    prefill(ids, B, T0, options.fused_gemms && skinny_ok_);
  }
  std::vector<std::int32_t> next = sample_tokens(host_logits_, B, V, options.sampling, rng);
  stats_.prefill_ms = ms_since(start);

  // The decode steps: the first embeds the prefill's tokens at position T0.
  const auto write_device = [&](void* dst, const void* src, std::size_t bytes) {
    if (dev.is_cuda())
      upload(dst, src, bytes, stream_);
    else
      std::copy_n(static_cast<const char*>(src), bytes, static_cast<char*>(dst));
  };
  const auto read_device = [&](void* dst, const void* src, std::size_t bytes) {
    if (dev.is_cuda())
      download(dst, src, bytes, stream_);
    else
      std::copy_n(static_cast<const char*>(src), bytes, static_cast<char*>(dst));
  };
  const auto position0 = static_cast<std::int32_t>(T0);
  write_device(position(), &position0, sizeof(position0));
  CudaGraph* graph = nullptr;
  if (dev.is_cuda() && options.cuda_graph && options.max_new_tokens > 1) {
    std::unique_ptr<CudaGraph>& slot = graphs_[{B, plan.id_limit, plan.overlap, plan.fused, plan.greedy}];
    if (!slot) {
      auto captured = std::make_unique<CudaGraph>();
      captured->capture(stream_, [&] { enqueue_decode(B, plan); });
      slot = std::move(captured);
    }
    graph = slot.get();
    stats_.graphed = true;
  }
  start = std::chrono::steady_clock::now();
  for (std::int64_t b = 0; b < B; ++b) out[b].push_back(next[b]);
  const std::int64_t steps = options.max_new_tokens - 1;
  for (std::int64_t step = 0; step < steps; ++step) {
    NvtxRange step_range(str("decode step ", step + 1));  // kernel profiles attribute the step's kernels to it
    // Greedy steps after the first find their input embedded already (by the previous step's greedy_next).
    if (step == 0 || !greedy) write_device(device_ids(), next.data(), next.size() * sizeof(std::int32_t));
    if (step == 0 && greedy) embed_ids(B);
    if (graph)
      graph->launch();
    else
      enqueue_decode(B, plan);
    if (!greedy) {
      read_device(host_logits_.data(), logits_.tensor().data(), host_logits_.size() * sizeof(float));
      next = sample_tokens(host_logits_, B, V, options.sampling, rng);
      for (std::int64_t b = 0; b < B; ++b) out[b].push_back(next[b]);
    }
    ++stats_.decode_steps;
  }
  if (greedy && steps > 0) {
    // The argmax kept each step's ids by position (see enqueue_decode): positions T0 + 1 .. T0 + steps.
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(steps * B));  // (steps, B)
    read_device(tokens.data(), device_ids() + (T0 + 1) * B, tokens.size() * sizeof(std::int32_t));
    for (std::int64_t s = 0; s < steps; ++s)
      for (std::int64_t b = 0; b < B; ++b) out[b].push_back(tokens[s * B + b]);
  }
  stats_.decode_ms = ms_since(start);
  return out;
}

}  // namespace ft
