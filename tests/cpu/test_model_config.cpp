// test_model_config.cpp — model configs and the parameter layout: the size table, lookup errors, parameter
// counts of every config (computed from the layout, nothing allocated, against the closed-form count and
// the figures the issue quotes), state-dict names and order, packing without gaps, initialisation statistics
// and determinism, the activation arena's accounting, and bf16 mode's weight slots in the workspace in place
// of a bf16 copy of the parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "core/allocator.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "model/config.h"
#include "model/init.h"
#include "model/parameters.h"
#include "model/transformer.h"
#include "test_ops_util.h"

namespace ft {
namespace {

// vocab * d (embedding) + vocab * d (LM head) + d (final norm) + L * (4 d^2 + 3 d d_ff + 2 d).
std::int64_t closed_form_count(const ModelConfig& c) {
  const std::int64_t d = c.d_model;
  return 2 * c.vocab_size * d + d + c.num_layers * (4 * d * d + 3 * d * c.d_ff + 2 * d);
}

TEST(ModelConfig, TableMatchesDesign) {
  struct Row {
    const char* name;
    std::int64_t d_model, d_ff, layers, heads;
  };
  const Row rows[] = {{"small", 768, 3072, 12, 12},
                      {"medium", 1024, 4096, 24, 16},
                      {"large", 1280, 5120, 36, 20},
                      {"xl", 1600, 6400, 48, 25},
                      {"2.7b", 2560, 10240, 32, 32}};
  for (const Row& r : rows) {
    const ModelConfig c = model_config(r.name);
    EXPECT_EQ(c.name, r.name);
    EXPECT_EQ(c.d_model, r.d_model) << r.name;
    EXPECT_EQ(c.d_ff, r.d_ff) << r.name;
    EXPECT_EQ(c.num_layers, r.layers) << r.name;
    EXPECT_EQ(c.num_heads, r.heads) << r.name;
    EXPECT_EQ(c.vocab_size, 10000) << r.name;
    EXPECT_NO_THROW(c.validate());
  }
  EXPECT_EQ(model_config_names(),
            (std::vector<std::string>{"tiny", "small", "medium", "large", "xl", "2.7b", "8b"}));
  // The CS336 leaderboard shape: about 8.13B parameters.
  const ModelConfig b8 = model_config("8b");
  EXPECT_EQ(b8.d_model, 4096);
  EXPECT_EQ(b8.d_ff, 11008);
  EXPECT_EQ(b8.num_layers, 34);
  EXPECT_EQ(b8.num_heads, 32);
  EXPECT_EQ(b8.head_dim(), 128);
  EXPECT_EQ(b8.vocab_size, 151936);
  EXPECT_EQ(b8.context_length, 32768);
  EXPECT_EQ(ParameterLayout(b8).numel(), closed_form_count(b8));
  EXPECT_NEAR(static_cast<double>(closed_form_count(b8)), 8.13e9, 0.01e9);
}

TEST(ModelConfig, OverridesReplaceTheSetFields) {
  ModelShapeOverrides o;
  o.vocab_size = 500;
  o.rope_theta = 5e5;
  ModelConfig c = with_overrides(model_config("small"), o);
  EXPECT_EQ(c.name, "small");
  EXPECT_EQ(c.vocab_size, 500);
  EXPECT_EQ(c.rope_theta, 5e5);
  EXPECT_EQ(c.d_model, 768);
  o.num_layers = 3;
  o.d_model = 512;
  o.num_heads = 4;
  c = with_overrides(model_config("small"), o);
  EXPECT_EQ(c.name, "small-custom");
  EXPECT_EQ(c.num_layers, 3);
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_EQ(c.d_ff, 3072);
  o.num_heads = 1;  // head dim 512
  test::expect_error([&] { with_overrides(model_config("small"), o); }, ErrorKind::invalid_argument,
                     {"at most 256", "512"});
}

TEST(ModelConfig, UnknownNameListsTheKnownOnes) {
  test::expect_error([] { model_config("huge"); }, ErrorKind::invalid_argument,
                     {"huge", "tiny", "small", "medium", "large", "xl", "2.7b", "8b"});
  test::expect_error([] { parse_precision("fp8"); }, ErrorKind::invalid_argument, {"fp8", "fp32", "bf16"});
  EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
}

TEST(ModelConfig, ValidateNamesTheField) {
  ModelConfig c = model_config("tiny");
  c.num_heads = 3;
  test::expect_error([&] { c.validate(); }, ErrorKind::invalid_argument, {"num_heads", "64", "3"});
  c = model_config("tiny");
  c.vocab_size = 0;
  test::expect_error([&] { ParameterLayout layout(c); }, ErrorKind::invalid_argument, {"vocab_size", "0"});
  c = model_config("tiny");
  c.num_heads = 64;  // head dim 1: RoPE needs pairs
  test::expect_error([&] { c.validate(); }, ErrorKind::invalid_argument, {"even", "RoPE"});
}

TEST(ParameterLayout, CountsOfEveryConfig) {
  for (const std::string& name : model_config_names()) {
    const ModelConfig c = model_config(name);
    const ParameterLayout layout(c);
    EXPECT_EQ(layout.numel(), closed_form_count(c)) << name;
    EXPECT_EQ(layout.size(), static_cast<std::size_t>(9 * c.num_layers + 3)) << name;
  }
  // The figures of the issue (vocabulary 10000).
  const ParameterLayout small(model_config("small"));
  EXPECT_EQ(std::round(static_cast<double>(small.numel()) / 1e5) / 10, 128.6);
  EXPECT_EQ(small.size(), 111u);
  const ParameterLayout xl(model_config("xl"));
  EXPECT_EQ(std::round(static_cast<double>(xl.numel()) / 1e6) / 1e3, 1.998);
  EXPECT_EQ(xl.size(), 435u);
}

TEST(ParameterLayout, VocabularyIsAnOption) {
  ModelConfig c = model_config("small");
  c.vocab_size = 50257;
  EXPECT_EQ(ParameterLayout(c).numel(), closed_form_count(c));
}

TEST(ParameterLayout, NamesOrderShapesAndPacking) {
  const ModelConfig c = model_config("tiny");
  const ParameterLayout layout(c);
  const std::int64_t d = c.d_model, f = c.d_ff, V = c.vocab_size;
  std::vector<std::pair<std::string, Shape>> expected = {{"token_embeddings.weight", {V, d}}};
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "output_proj"})
      expected.push_back({p + "attn." + proj + ".weight", {d, d}});
    expected.push_back({p + "ln1.weight", {d}});
    expected.push_back({p + "ffn.w1.weight", {f, d}});
    expected.push_back({p + "ffn.w2.weight", {d, f}});
    expected.push_back({p + "ffn.w3.weight", {f, d}});
    expected.push_back({p + "ln2.weight", {d}});
  }
  expected.push_back({"ln_final.weight", {d}});
  expected.push_back({"lm_head.weight", {V, d}});
  ASSERT_EQ(layout.size(), expected.size());
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(layout[i].index, i);
    EXPECT_EQ(layout[i].name, expected[i].first);
    EXPECT_EQ(layout[i].shape, expected[i].second) << expected[i].first;
    EXPECT_EQ(layout[i].offset, offset) << expected[i].first;  // back to back, no padding
    EXPECT_EQ(layout.index_of(expected[i].first), i);
    offset += layout[i].numel;
  }
  EXPECT_EQ(offset, layout.numel());
  EXPECT_EQ(layout.layer_index(1, LayerSlot::w3), layout.index_of("layers.1.ffn.w3.weight"));
  EXPECT_EQ(layout.lm_head_index(), layout.index_of("lm_head.weight"));
  EXPECT_EQ(layout.ln_final_index(), layout.index_of("ln_final.weight"));
  test::expect_error([&] { layout.index_of("layers.9.ln1.weight"); }, ErrorKind::invalid_argument,
                     {"layers.9.ln1.weight", "token_embeddings.weight", "lm_head.weight"});
}

TEST(ParameterBuffer, ViewsShareOneAllocation) {
  const ParameterLayout layout(model_config("tiny"));
  const ParameterBuffer buffer(layout, DType::bf16, Device::cpu(), "test");
  EXPECT_EQ(buffer.bytes(), static_cast<std::size_t>(layout.numel()) * 2);
  for (std::size_t i = 0; i < layout.size(); ++i) {
    EXPECT_EQ(static_cast<char*>(buffer[i].data()) - static_cast<char*>(buffer.flat().data()), layout[i].offset * 2);
    EXPECT_EQ(buffer[i].shape(), layout[i].shape);
    EXPECT_EQ(buffer[i].dtype(), DType::bf16);
  }
}

TEST(Init, StatisticsFollowTheContractAndSeedsAreDeterministic) {
  ModelConfig c = model_config("tiny");
  c.d_model = 128, c.d_ff = 344, c.vocab_size = 300;  // enough draws per tensor for tight statistics
  const ParameterLayout layout(c);
  const ParameterBuffer a(layout, DType::f32, Device::cpu(), "test"), b(layout, DType::f32, Device::cpu(), "test");
  init_parameters(layout, a, 7);
  init_parameters(layout, b, 7);
  const auto va = read_as_double(a.flat()), vb = read_as_double(b.flat());
  EXPECT_EQ(va, vb);
  const ParameterBuffer other(layout, DType::f32, Device::cpu(), "test");
  init_parameters(layout, other, 8);
  EXPECT_NE(read_as_double(other.flat()), va);
  for (const ParameterInfo& info : layout.tensors()) {
    const auto v = read_as_double(a[info.index]);
    if (info.kind == ParameterKind::norm) {
      for (double x : v) ASSERT_EQ(x, 1.0) << info.name;
      continue;
    }
    const double std = init_std(info);
    // A normal truncated at +-3 std has standard deviation 0.98654 std.
    double sum = 0, sum_sq = 0, top = 0;
    for (double x : v) sum += x, sum_sq += x * x, top = std::max(top, std::fabs(x));
    const double n = static_cast<double>(v.size());
    EXPECT_LE(top, 3 * std * (1 + 1e-6)) << info.name;
    EXPECT_GT(top, 2.5 * std) << info.name;  // the tails are drawn
    EXPECT_NEAR(sum / n, 0.0, 5 * std / std::sqrt(n)) << info.name;
    EXPECT_NEAR(std::sqrt(sum_sq / n), 0.98654 * std, 0.05 * std) << info.name;
  }
  EXPECT_DOUBLE_EQ(init_std(layout[layout.index_of("layers.0.ffn.w2.weight")]), std::sqrt(2.0 / (128 + 344)));
  EXPECT_DOUBLE_EQ(init_std(layout[0]), 1.0);
}

// The element bits of a host fp32 tensor.
std::vector<std::uint32_t> bits_of(const Tensor& t) {
  std::vector<std::uint32_t> out(static_cast<std::size_t>(t.numel()));
  std::memcpy(out.data(), t.data(), out.size() * sizeof(std::uint32_t));
  return out;
}

TEST(Init, AnySliceEqualsThatPartOfTheWholeInitBitwise) {
  ModelConfig c = model_config("tiny");
  c.vocab_size = 101;  // parameter sizes that no slice size below divides
  const ParameterLayout layout(c);
  const ParameterBuffer whole(layout, DType::f32, Device::cpu(), "test");
  init_parameters(layout, whole, 42);
  const std::vector<std::uint32_t> expected = bits_of(whole.flat());
  // Consecutive slices of uneven sizes covering the buffer, crossing parameter boundaries.
  const std::int64_t sizes[] = {1, 7, 6463, 4096, 64, 65, 12345, 999};
  std::int64_t begin = 0;
  for (std::size_t i = 0; begin < layout.numel(); ++i) {
    const std::int64_t n = std::min(sizes[i % std::size(sizes)], layout.numel() - begin);
    OwnedTensor slice({n}, DType::f32, Device::cpu(), "slice");
    init_parameters_range(layout, slice, begin, 42, {});
    const std::vector<std::uint32_t> got = bits_of(slice);
    ASSERT_TRUE(std::equal(got.begin(), got.end(), expected.begin() + begin))
        << "slice [" << begin << ", " << begin + n << ")";
    begin += n;
  }
  test::expect_error(
      [&] {
        OwnedTensor slice({8}, DType::f32, Device::cpu(), "slice");
        init_parameters_range(layout, slice, layout.numel() - 4, 42, {});
      },
      ErrorKind::invalid_argument, {"must lie in the", std::to_string(layout.numel())});
}

TEST(TransformerLM, MemoryReportAccountsEveryBuffer) {
  const ModelConfig c = model_config("tiny");
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    ModelOptions o;
    o.precision = p;
    o.max_batch = 2;
    o.loss_chunk = 0;  // the materialised logits in the arena
    const TransformerLM model(c, o);
    const MemoryReport m = model.memory();
    const auto n = static_cast<std::size_t>(model.layout().numel());
    EXPECT_EQ(m.parameters, 4 * n);
    EXPECT_EQ(m.gradients, 4 * n);
    EXPECT_EQ(m.optimizer_state, 0u);
    EXPECT_EQ(m.activations, model.activation_layout().bytes());
    EXPECT_EQ(m.workspace, model.workspace_layout().bytes());
    // Per-tensor entries: 1 + 11 per layer + 4 (ln_final.y, rstd, logits, and dlogits in bf16); sizes add up.
    const auto& entries = model.activation_layout().entries();
    EXPECT_EQ(entries.size(), static_cast<std::size_t>(1 + 11 * c.num_layers + 3 + (p == Precision::bf16)));
    const std::size_t rows = 2 * static_cast<std::size_t>(c.context_length), c_size = p == Precision::bf16 ? 2 : 4;
    std::size_t sum = 0;
    for (const ArenaEntry& e : entries) {
      sum += e.bytes;
      if (e.name == "layers.1.attn.qkv") EXPECT_EQ(e.bytes, rows * 3 * 64 * c_size);
      if (e.name == "layers.0.x") EXPECT_EQ(e.bytes, rows * 64 * 4);
      if (e.name == "lm_head.logits") EXPECT_EQ(e.bytes, rows * 97 * 4);
    }
    EXPECT_LE(sum, m.activations);
    EXPECT_LT(m.activations - sum, entries.size() * kArenaAlignment);  // only alignment padding besides
  }
}

std::size_t aligned(std::size_t bytes) { return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// bf16 mode holds no bf16 copy of the parameters: the allocator holds the fp32 masters (and gradients), the
// activations and the workspace, nothing else; the workspace starts with two slots of one block's bf16
// parameters with the LM head's bf16 weight over them, then what it held before — ffn.h (inference) or one
// layer's backward temporaries (training). Bytes from the config.
TEST(TransformerLM, Bf16CastsWeightsIntoWorkspaceSlotsInsteadOfKeepingACopy) {
  ModelConfig wide_vocab = model_config("tiny");
  wide_vocab.vocab_size = 2000;  // the LM head's weight outgrows the two block slots
  for (const ModelConfig& c : {model_config("tiny"), wide_vocab})
    for (bool training : {true, false}) {
      SCOPED_TRACE(str("vocab ", c.vocab_size, training ? ", training" : ", inference"));
      ModelOptions o;
      o.precision = Precision::bf16;
      o.max_batch = 2;
      o.max_seq_len = 16;
      o.training = training;
      o.loss_chunk = 0;  // no fused loss tiles in the workspace
      Allocator& allocator = Allocator::instance();
      const std::int64_t before = allocator.stats(Device::cpu()).current_bytes;
      const TransformerLM model(c, o);
      const MemoryReport m = model.memory();
      EXPECT_EQ(static_cast<std::int64_t>(m.total()), allocator.stats(Device::cpu()).current_bytes - before);
      const auto n = static_cast<std::size_t>(model.layout().numel());
      EXPECT_EQ(m.parameters, 4 * n);  // the fp32 masters only
      EXPECT_EQ(m.gradients, training ? 4 * n : 0);
      EXPECT_EQ(m.activations, model.activation_layout().bytes());

      const auto d = static_cast<std::size_t>(c.d_model), f = static_cast<std::size_t>(c.d_ff);
      const auto vocab = static_cast<std::size_t>(c.vocab_size), rows = std::size_t{2 * 16};
      const std::size_t block = 2 * (4 * d * d + 3 * d * f + 2 * d);  // q, k, v, o, ln1, w1, w2, w3, ln2 in bf16
      const std::size_t head = 2 * vocab * d;                       // (V, d) bf16
      const std::size_t weights = aligned(std::max(aligned(block) + block, head));
      std::size_t rest = rows * f * 2;  // inference: ffn.h (B, T, d_ff) bf16
      if (training) {
        // dx fp32, dx bf16, d norm output fp32; then ffn.h and ffn.dh (B, T, d_ff) bf16, or attn.d_o (B, T, d)
        // and attn.dqkv (B, T, 3d) bf16 over them.
        const std::size_t temps = aligned(aligned(rows * d * 4) + rows * d * 2) + rows * d * 4;
        rest = std::max(aligned(aligned(temps) + rows * f * 2) + rows * f * 2,
                        aligned(aligned(temps) + rows * d * 2) + rows * 3 * d * 2);
      }
      EXPECT_EQ(m.workspace, weights + rest);
      EXPECT_EQ(model.workspace_layout().bytes(), weights + rest);

      std::map<std::string, ArenaEntry> entries;
      for (const ArenaEntry& e : model.workspace_layout().entries()) entries[e.name] = e;
      const auto expect_entry = [&](const std::string& name, std::size_t offset, std::size_t bytes) {
        ASSERT_TRUE(entries.count(name)) << name;
        EXPECT_EQ(entries[name].offset, offset) << name;
        EXPECT_EQ(entries[name].bytes, bytes) << name;
      };
      expect_entry("block weights (bf16, slot 0)", 0, block);
      expect_entry("block weights (bf16, slot 1)", aligned(block), block);
      expect_entry("lm_head.weight (bf16)", 0, head);
      expect_entry(training ? "dx (residual stream)" : "ffn.h", weights, training ? rows * d * 4 : rows * f * 2);

      // fp32 mode casts nothing: no weight slots.
      o.precision = Precision::fp32;
      const TransformerLM fp32(c, o);
      for (const ArenaEntry& e : fp32.workspace_layout().entries())
        EXPECT_EQ(e.name.find("weight"), std::string::npos) << e.name;
    }
}

}  // namespace
}  // namespace ft
