// test_generate_cuda.cpp — KV-cache generation (model/generator.h) on CUDA with the tiny model (d_ff 128, so
// that bf16 decode steps can run the fused few-row GEMMs): every greedy token of the graphed decode is the
// argmax of a full forward without a cache over the tokens so far — at least 90% exactly, every one within a
// small logit margin of the argmax (cuBLASLt may pick other algorithms for the decode's few rows than for the
// full forward's, the fused few-row GEMMs sum in another order, and the flash kernels run fp32 attention on
// TF32, so near ties may split: margin 1e-3 in fp32, 0.05 in bf16, fused GEMMs or not) — for a batch of 3 in a
// generator sized for 4; the graphed decode (fused few-row GEMMs in bf16, and the unfused ops) gives exactly
// the tokens of the ungraphed one, with and without overlapping launches (greedy and sampled; batch sizes 3
// then 1, one graph each; the model's legacy default stream and a stream of its own); seeded sampling is
// reproducible.
// Run on a GPU machine: ./build/bin/gpu_test_generate_cuda
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "model/generator.h"

namespace ft {
namespace {

// tiny (vocab 97, context 32) with d_ff 128: a multiple of 8, so bf16 decode steps run the fused GEMMs.
const ModelConfig kTiny = [] {
  ModelShapeOverrides d_ff;
  d_ff.d_ff = 128;
  return with_overrides(model_config("tiny"), d_ff);
}();
using Rows = std::vector<std::vector<std::int32_t>>;

ModelOptions options(Precision precision, Device device, const Stream& stream = {}) {
  ModelOptions o;
  o.precision = precision;
  o.max_batch = 4;
  o.max_seq_len = kTiny.context_length;
  o.seed = 1234;
  o.device = device;
  o.training = false;
  o.loss_chunk = 0;  // the materialised loss: the reference reads the logits
  o.stream = stream;
  return o;
}

// The last position's logits (B, V) of a full forward over seqs, as doubles.
std::vector<double> last_logits(TransformerLM& model, const Rows& seqs) {
  const auto B = static_cast<std::int64_t>(seqs.size()), T = static_cast<std::int64_t>(seqs[0].size());
  const std::int64_t V = kTiny.vocab_size;
  std::vector<std::int32_t> host;
  for (const auto& s : seqs) host.insert(host.end(), s.begin(), s.end());
  Buffer ids(host.size() * sizeof(std::int32_t), model.options().device, "test ids");
  EXPECT_EQ(cudaMemcpy(ids.data(), host.data(), host.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice),
            cudaSuccess);
  const TokenIds inputs{static_cast<const std::int32_t*>(ids.data()), {B, T}, ids.device()};
  model.forward(inputs, inputs);
  const std::vector<double> all = read_as_double(model.logits());  // (B, T, V)
  std::vector<double> out;
  for (std::int64_t b = 0; b < B; ++b)
    out.insert(out.end(), all.begin() + (b * T + T - 1) * V, all.begin() + (b * T + T) * V);
  return out;
}

void expect_greedy_matches_full_forwards(Precision precision, double margin, bool fused = true) {
  SCOPED_TRACE(str(name_of(precision), fused ? "" : " unfused GEMMs"));
  TransformerLM model(kTiny, options(precision, Device::cuda(0)));
  Generator generator(model, 4, kTiny.context_length);
  const Rows prompts{{5, 17, 3, 60}, {90, 1, 44, 44}, {0, 0, 0, 1}};
  GenerationOptions g;
  g.max_new_tokens = kTiny.context_length - 4;
  g.sampling.temperature = 0;
  g.fused_gemms = fused;
  const Rows out = generator.generate(prompts, g);
  Rows seqs = prompts;
  int exact = 0, total = 0;
  for (std::int64_t i = 0; i < g.max_new_tokens; ++i) {
    const std::vector<double> logits = last_logits(model, seqs);
    for (std::size_t b = 0; b < prompts.size(); ++b) {
      const auto row = logits.begin() + static_cast<std::ptrdiff_t>(b * kTiny.vocab_size);
      const auto best = std::max_element(row, row + kTiny.vocab_size);
      const std::int32_t got = out[b][static_cast<std::size_t>(i)];
      EXPECT_LE(*best - row[got], margin)
          << "row " << b << " token " << i << ": generated " << got << ", argmax " << (best - row);
      exact += got == best - row;
      ++total;
      seqs[b].push_back(got);  // follow the generated tokens either way
    }
  }
  EXPECT_GE(exact, total * 9 / 10);
}

TEST(GenerateCuda, GreedyEqualsRepeatedFullForwards) {
  expect_greedy_matches_full_forwards(Precision::fp32, 1e-3);
  expect_greedy_matches_full_forwards(Precision::bf16, 0.05);
  expect_greedy_matches_full_forwards(Precision::bf16, 0.05, false);
}

TEST(GenerateCuda, GraphedEqualsUngraphed) {
  const Stream own = Stream::create(Device::cuda(0));
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (const Stream* stream : {static_cast<const Stream*>(nullptr), &own}) {
      SCOPED_TRACE(str(name_of(precision), stream ? " own stream" : " legacy default stream"));
      TransformerLM model(kTiny, options(precision, Device::cuda(0), stream ? *stream : Stream()));
      Generator generator(model, 4, kTiny.context_length);
      for (const Rows& prompts : {Rows{{5, 17, 3, 60}, {90, 1, 44, 44}, {0, 0, 0, 1}}, Rows{{7, 8}}})
        for (double temperature : {0.0, 0.9})
          for (bool fused : {true, false}) {
            SCOPED_TRACE(str("temperature ", temperature, fused ? " fused GEMMs" : " unfused GEMMs"));
            GenerationOptions g;
            g.fused_gemms = fused;
            g.max_new_tokens = kTiny.context_length - 4;
            g.sampling = {temperature, 20, 0.95};
            g.seed = 3;
            g.cuda_graph = true;
            const Rows graphed = generator.generate(prompts, g);
            EXPECT_TRUE(generator.stats().graphed);
            EXPECT_EQ(generator.stats().fused_gemms, fused && precision == Precision::bf16);
            EXPECT_EQ(generator.stats().decode_steps, g.max_new_tokens - 1);
            EXPECT_EQ(generator.generate(prompts, g), graphed) << "a replay of the captured graph";
            g.cuda_graph = false;
            EXPECT_EQ(generator.generate(prompts, g), graphed) << "ungraphed";
            EXPECT_FALSE(generator.stats().graphed);
            g.overlap_launches = false;
            EXPECT_EQ(generator.generate(prompts, g), graphed) << "no overlapping launches";
            g.cuda_graph = true;
            EXPECT_EQ(generator.generate(prompts, g), graphed) << "graphed, no overlapping launches";
          }
    }
}

TEST(GenerateCuda, SeededSamplingIsReproducible) {
  const Rows prompts{{1, 2, 3}, {4, 5, 6}};
  GenerationOptions g;
  g.max_new_tokens = 20;
  g.sampling = {0.9, 20, 0.9};
  g.seed = 11;
  TransformerLM gpu(kTiny, options(Precision::fp32, Device::cuda(0)));
  Generator on_gpu(gpu, 2, kTiny.context_length);
  const Rows a = on_gpu.generate(prompts, g);
  EXPECT_EQ(on_gpu.generate(prompts, g), a);
  g.seed = 12;
  EXPECT_NE(on_gpu.generate(prompts, g), a);
}

}  // namespace
}  // namespace ft
