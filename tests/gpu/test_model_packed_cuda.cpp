// test_model_packed_cuda.cpp — training on packed documents on the GPU (see Note [Packed documents]):
//   * a packed step's loss and gradients equal the documents' own steps (each a (1, length) batch, weighted by
//     its share of the tokens), fp32 and bf16;
//   * the packed step on the GPU matches the packed step on the CPU (the CPU tiled varlen attention);
//   * GraphedTrainStep with packed documents whose layout changes every step (fixed capacity, values in
//     place) gives the eager steps' (the documents' entries only) losses and final parameters bit for bit.
// Needs the CUDA varlen kernels; skips without a device.
// Run: ./build/bin/gpu_test_model_packed_cuda
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "common/value_compare.h"
#include "core/buffer.h"
#include "core/tensor_io.h"
#include "model/config.h"
#include "model/data_loader.h"
#include "model/graphed_step.h"
#include "model/packed_documents.h"
#include "model/token_staging.h"
#include "model/trainer.h"
#include "model/transformer.h"

namespace ft {
namespace {

using testing_util::max_abs;
using testing_util::max_abs_diff;

const Device kGpu = Device::cuda(0);
constexpr std::int32_t kEos = 3;
constexpr std::int64_t kB = 4, kT = 64;

ModelOptions options_of(Device device, Precision precision, const Stream& stream = {}) {
  ModelOptions o;
  o.precision = precision;
  o.max_batch = kB;
  o.max_seq_len = kT;
  o.seed = 99;
  o.device = device;
  o.stream = stream;
  return o;
}

// Random ids with end-of-document tokens every few positions (document lengths 1 to 20, some rows unfinished).
TokenBatch packed_batch(std::uint64_t seed, std::int64_t vocab) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int32_t> id(kEos + 1, static_cast<std::int32_t>(vocab - 1));
  std::uniform_int_distribution<int> gap(0, 19);
  TokenBatch b{kB, kT, std::vector<std::int32_t>(kB * kT), std::vector<std::int32_t>(kB * kT)};
  for (auto& x : b.inputs) x = id(gen);
  for (auto& x : b.targets) x = id(gen);
  for (std::int64_t i = gap(gen); i < kB * kT; i += 1 + gap(gen)) b.inputs[i] = kEos;
  return b;
}

struct Step {
  double loss = 0;
  std::vector<double> grads;
};

Step packed_step(TransformerLM& model, const TokenBatch& batch) {
  TokenStaging tokens(model.options().device, kB, kT);
  DocumentStaging docs(model.options().device, kB, kT, /*capacity=*/0);
  const auto [inputs, targets] = tokens.place(batch);
  model.set_documents(&docs.place(batch, kEos));
  Step s;
  s.loss = model.forward_backward(inputs, targets);
  model.set_documents(nullptr);
  s.grads = read_as_double(model.gradients().flat());
  return s;
}

Step per_document_steps(TransformerLM& model, const TokenBatch& batch) {
  DocumentLayout layout;
  layout_documents(batch.inputs.data(), kB, kT, kEos, layout);
  TokenStaging tokens(kGpu, kB, kT);
  const auto [inputs, targets] = tokens.place(batch);  // (B, T) on the device; documents are row slices of it
  Step s;
  for (std::int64_t d = 0; d < layout.documents; ++d) {
    const std::int32_t start = layout.cu_seqlens[d], length = layout.cu_seqlens[d + 1] - start;
    BackwardOptions options;
    options.loss_scale = static_cast<double>(length) / (kB * kT);
    options.accumulate = d > 0;
    s.loss += model.forward_backward({inputs.data + start, {1, length}, kGpu}, {targets.data + start, {1, length}, kGpu},
                                     options) * options.loss_scale;
  }
  s.grads = read_as_double(model.gradients().flat());
  return s;
}

ModelConfig config() {
  ModelConfig c = model_config("tiny");
  c.context_length = kT;
  c.d_model = 128;
  c.num_heads = 2;  // head dim 64
  c.validate();
  return c;
}

TEST(PackedCuda, StepEqualsTheDocumentsSteps) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(name_of(precision));
    TransformerLM model(config(), options_of(kGpu, precision));
    const TokenBatch batch = packed_batch(7, config().vocab_size);
    const Step packed = packed_step(model, batch);
    const Step documents = per_document_steps(model, batch);
    // The tolerances of test_model_cuda.cpp (fp32 flash attention runs on TF32 tensor cores).
    const bool bf16 = precision == Precision::bf16;
    const double loss_tol = bf16 ? 1e-2 : 1e-3, grad_tol = bf16 ? 5e-2 : 2e-2;
    EXPECT_NEAR(packed.loss, documents.loss, loss_tol * documents.loss);
    EXPECT_LE(max_abs_diff(packed.grads, documents.grads), grad_tol * max_abs(documents.grads));
  }
}

TEST(PackedCuda, StepMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  TransformerLM gpu(config(), options_of(kGpu, Precision::fp32));
  TransformerLM cpu(config(), options_of(Device::cpu(), Precision::fp32));
  const TokenBatch batch = packed_batch(8, config().vocab_size);
  const Step got = packed_step(gpu, batch), want = packed_step(cpu, batch);
  EXPECT_NEAR(got.loss, want.loss, 1e-3 * want.loss);
  EXPECT_LE(max_abs_diff(got.grads, want.grads), 2e-2 * max_abs(want.grads));
}

// Five steps, a new document layout each: graphed (warm-up, capture, replays) against eager, bit for bit.
TEST(PackedCuda, GraphedStepsEqualEagerSteps) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  TrainerConfig trainer_config;
  trainer_config.max_grad_norm = 0.5;
  std::vector<double> losses[2], params[2];
  for (int graphed = 0; graphed < 2; ++graphed) {
    const Stream stream = Stream::create(kGpu);
    TransformerLM model(config(), options_of(kGpu, Precision::bf16, stream));
    Trainer trainer(model, trainer_config);
    TokenStaging tokens(kGpu, kB, kT);
    DocumentStaging docs(kGpu, kB, kT, /*capacity=*/graphed == 1 ? kB * kT : 0);  // a graph captures the count
    model.set_documents(&docs.documents());
    std::optional<GraphedTrainStep> graph;
    if (graphed) graph.emplace(trainer);
    for (int step = 0; step < 5; ++step) {
      const TokenBatch batch = packed_batch(100 + step, config().vocab_size);
      docs.place(batch, kEos);
      if (graphed) {
        graph->step(batch.input_ids(), batch.target_ids());
        losses[graphed].push_back(graph->loss());
      } else {
        const auto [inputs, targets] = tokens.place(batch);
        trainer.zero_grads();
        losses[graphed].push_back(trainer.forward_backward(inputs, targets));
        trainer.optimizer_step();
        stream.synchronize();
      }
    }
    if (graphed) EXPECT_TRUE(graph->graphed());
    params[graphed] = read_as_double(model.parameters().flat());
  }
  EXPECT_EQ(losses[1], losses[0]);
  EXPECT_TRUE(testing_util::same_bits(params[1], params[0])) << "parameters after five steps";
}

}  // namespace
}  // namespace ft
