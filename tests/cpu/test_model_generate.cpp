// test_model_generate.cpp — KV-cache generation (model/generator.h) on the tiny model on the CPU: greedy
// tokens equal the argmax of repeated full forwards without a cache (fp32 and bf16, flash and naive
// attention, batch of 2; and bf16 with d_ff 128, where the decode step runs the fused few-row GEMMs), seeded
// sampling is reproducible, top-k 1 / a tiny top-p fall back to greedy, top-k, top-p and an id limit keep to
// their ids, plain temperature sampling follows the softmax, and bad requests (prompt longer than the context,
// too many new tokens, ragged prompts, ids outside the vocabulary, top-p outside (0, 1], negative
// temperature) are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "common/error_of.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "model/generator.h"
#include "test_model_util.h"

namespace ft {
namespace {

using testing_util::error_of;

const ModelConfig kTiny = model_config("tiny");  // vocab 97, context 32

using Rows = std::vector<std::vector<std::int32_t>>;

ModelOptions options(Precision precision, AttentionImpl impl, std::int64_t max_batch = 2) {
  ModelOptions o = test::tiny_options(precision, impl, max_batch, kTiny.context_length);
  o.training = false;
  o.loss_chunk = 0;  // the materialised loss: the reference reads the logits
  return o;
}

// The argmax of the last position's logits of a full forward over each row of seqs.
std::vector<std::int32_t> full_forward_argmax(TransformerLM& model, const Rows& seqs) {
  const auto B = static_cast<std::int64_t>(seqs.size()), T = static_cast<std::int64_t>(seqs[0].size());
  std::vector<std::int32_t> inputs, targets(static_cast<std::size_t>(B * T), 0);
  for (const auto& s : seqs) inputs.insert(inputs.end(), s.begin(), s.end());
  model.forward({inputs.data(), {B, T}, Device::cpu()}, {targets.data(), {B, T}, Device::cpu()});
  const std::vector<double> logits = read_as_double(model.logits());  // (B, T, V)
  const std::int64_t V = kTiny.vocab_size;
  std::vector<std::int32_t> out;
  for (std::int64_t b = 0; b < B; ++b) {
    const auto row = logits.begin() + (b * T + T - 1) * V;
    out.push_back(static_cast<std::int32_t>(std::max_element(row, row + V) - row));
  }
  return out;
}

// Greedy generation of config's model against repeated full forwards, token for token.
void expect_greedy_equals_full_forwards(const ModelConfig& config, Precision precision, AttentionImpl impl,
                                        bool fused_gemms) {
  SCOPED_TRACE(str(config.name, " ", name_of(precision), " ", name_of(impl)));
  const Rows prompts{{5, 17, 3, 60, 2}, {90, 1, 44, 44, 7}};
  TransformerLM model(config, options(precision, impl));
  Generator generator(model, 2, config.context_length);
  GenerationOptions g;
  g.max_new_tokens = config.context_length - 5;  // to the end of the context
  g.sampling.temperature = 0;
  const Rows out = generator.generate(prompts, g);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(generator.stats().fused_gemms, fused_gemms);
  Rows seqs = prompts;
  for (std::int64_t i = 0; i < g.max_new_tokens; ++i) {
    const std::vector<std::int32_t> want = full_forward_argmax(model, seqs);
    for (std::size_t b = 0; b < 2; ++b) {
      ASSERT_EQ(out[b][i], want[b]) << "row " << b << " new token " << i;
      seqs[b].push_back(out[b][i]);
    }
  }
  EXPECT_EQ(generator.stats().decode_steps, g.max_new_tokens - 1);
  // A second call reuses the cache from position 0: the same tokens.
  EXPECT_EQ(generator.generate(prompts, g), out);
}

TEST(Generate, GreedyEqualsRepeatedFullForwards) {
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (AttentionImpl impl : {AttentionImpl::flash, AttentionImpl::naive})
      expect_greedy_equals_full_forwards(kTiny, precision, impl, false);  // d_ff 172: no fused GEMMs
  // d_ff a multiple of 8: bf16 decode steps run the fused few-row GEMMs (composed of the same ops on the CPU).
  ModelShapeOverrides d_ff;
  d_ff.d_ff = 128;
  expect_greedy_equals_full_forwards(with_overrides(kTiny, d_ff), Precision::bf16, AttentionImpl::flash, true);
}

TEST(Generate, SeededSamplingIsReproducible) {
  TransformerLM model(kTiny, options(Precision::fp32, AttentionImpl::flash));
  Generator generator(model, 2, kTiny.context_length);
  const Rows prompts{{1, 2, 3}, {1, 2, 3}};
  GenerationOptions g;
  g.max_new_tokens = 20;
  g.sampling = {1.5, 0, 0.95};
  g.seed = 7;
  const Rows a = generator.generate(prompts, g);
  EXPECT_EQ(generator.generate(prompts, g), a);
  EXPECT_NE(a[0], a[1]);  // each row draws its own tokens
  g.seed = 8;
  EXPECT_NE(generator.generate(prompts, g), a);

  GenerationOptions greedy = g;
  greedy.sampling = {0, 0, 1};
  const Rows want = generator.generate(prompts, greedy);
  g.sampling = {1.0, 1, 1.0};  // top-k 1
  EXPECT_EQ(generator.generate(prompts, g), want);
  g.sampling = {1.0, 0, 1e-9};  // the nucleus of the top token alone
  EXPECT_EQ(generator.generate(prompts, g), want);
}

TEST(Generate, SamplingKeepsToTopKAndTopP) {
  // Logits favouring ids 3 > 1 > 0 > 2: probabilities about 0.64, 0.24, 0.09, 0.03 at temperature 1.
  const std::vector<float> logits{1.0f, 2.0f, 0.0f, 3.0f};
  Rng rng(3);
  std::vector<int> seen(4, 0);
  for (int i = 0; i < 2000; ++i) seen[sample_tokens(logits, 1, 4, {1.0, 2, 1.0}, rng)[0]] += 1;
  EXPECT_EQ(seen[0] + seen[2], 0);             // top-k 2: ids 3 and 1 only
  EXPECT_NEAR(seen[3] / 2000.0, 0.731, 0.04);  // renormalised over the two: e / (e + 1)
  std::fill(seen.begin(), seen.end(), 0);
  for (int i = 0; i < 2000; ++i) seen[sample_tokens(logits, 1, 4, {1.0, 0, 0.8}, rng)[0]] += 1;
  EXPECT_EQ(seen[0] + seen[2], 0);  // top-p 0.8: 0.64 + 0.24 reaches it
  EXPECT_GT(seen[1], 0);
  // Neither top-k nor top-p: softmax over every id (drawn in id order, no sort), rows reproducible.
  std::fill(seen.begin(), seen.end(), 0);
  for (int i = 0; i < 4000; ++i) seen[sample_tokens(logits, 1, 4, {1.0, 0, 1.0}, rng)[0]] += 1;
  const double want[] = {0.0871, 0.2369, 0.0321, 0.6439};  // softmax(1, 2, 0, 3)
  for (int id = 0; id < 4; ++id) EXPECT_NEAR(seen[id] / 4000.0, want[id], 0.03) << "id " << id;
  const std::vector<float> rows{1, 2, 0, 3, 3, 0, 2, 1, 0, 0, 0, 0};
  Rng a(5), b(5);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(sample_tokens(rows, 3, 4, {0.7, 0, 1.0}, a), sample_tokens(rows, 3, 4, {0.7, 0, 1.0}, b));
  // An id limit bars the ids past it, greedy or sampled.
  EXPECT_EQ(sample_tokens(logits, 1, 4, {0, 0, 1.0, 3}, rng)[0], 1);
  for (int i = 0; i < 200; ++i) EXPECT_LT(sample_tokens(logits, 1, 4, {2.0, 0, 1.0, 2}, rng)[0], 2);
}

TEST(Generate, BadRequestsAreClearErrors) {
  TransformerLM model(kTiny, options(Precision::fp32, AttentionImpl::flash));
  Generator generator(model, 2, kTiny.context_length);
  GenerationOptions g;
  g.max_new_tokens = 4;
  const auto gen = [&](const Rows& prompts, const GenerationOptions& o) { generator.generate(prompts, o); };
  EXPECT_NE(error_of([&] { gen({std::vector<std::int32_t>(32, 1)}, g); })
                .message()
                .find("too long for the model's context of 32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { gen({std::vector<std::int32_t>(30, 1)}, g); }).message().find("at most 2 new tokens"),
            std::string::npos);
  EXPECT_NE(error_of([&] { gen({{1, 2}, {3}}, g); }).message().find("prompt 1 has 1"), std::string::npos);
  EXPECT_NE(error_of([&] { gen({{1, 2}, {3, 97}}, g); }).message().find("id 97 at position 1"), std::string::npos);
  EXPECT_NE(error_of([&] { gen({{1}, {2}, {3}}, g); }).message().find("1 to 2 prompts, given 3"), std::string::npos);
  EXPECT_NE(error_of([&] { gen({{}}, g); }).message().find("prompt is empty"), std::string::npos);
  for (double p : {0.0, -0.5, 1.5}) {
    GenerationOptions bad = g;
    bad.sampling.top_p = p;
    EXPECT_NE(error_of([&] { gen({{1}}, bad); }).message().find("top-p must be in (0, 1]"), std::string::npos) << p;
  }
  GenerationOptions bad = g;
  bad.sampling.temperature = -1;
  EXPECT_NE(error_of([&] { gen({{1}}, bad); }).message().find("temperature must be >= 0"), std::string::npos);
  EXPECT_NE(error_of([&] { Generator(model, 1, 33); }).message().find("context length 32"), std::string::npos);
}

}  // namespace
}  // namespace ft
