// test_model_util.h — helpers shared by the model tests (test_model_*.cpp): the tiny model with a small
// arena, seeded token batches, a learnable synthetic sequence task, and two accumulated micro-batches
// compared bit for bit between two ways of running the same model.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor_io.h"
#include "model/transformer.h"
#include "ops/token_ids.h"

namespace ft::test {

inline ModelOptions tiny_options(Precision precision = Precision::fp32, AttentionImpl impl = AttentionImpl::flash,
                                 std::int64_t max_batch = 4, std::int64_t max_seq_len = 16) {
  ModelOptions o;
  o.precision = precision;
  o.attention = impl;
  o.max_batch = max_batch;
  o.max_seq_len = max_seq_len;
  o.seed = 1234;
  return o;
}

// o with the materialised loss: (B, T, V) logits kept, readable through TransformerLM::logits().
inline ModelOptions materialised(ModelOptions o) {
  o.loss_chunk = 0;
  return o;
}

// (B, T) ids with their next-token targets, host memory.
struct TokenBatch {
  std::int64_t B = 0, T = 0;
  std::vector<std::int32_t> inputs, targets;  // (B, T) each
  TokenIds input_ids() const { return {inputs.data(), {B, T}, Device::cpu()}; }
  TokenIds target_ids() const { return {targets.data(), {B, T}, Device::cpu()}; }
};

// Uniform random inputs and targets.
inline TokenBatch random_batch(std::int64_t B, std::int64_t T, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(vocab - 1));
  TokenBatch b{B, T, std::vector<std::int32_t>(B * T), std::vector<std::int32_t>(B * T)};
  for (auto& x : b.inputs) x = id(gen);
  for (auto& x : b.targets) x = id(gen);
  return b;
}

// Sequences that walk a fixed cycle through `period` tokens of the vocabulary from random starting points:
// each next token is determined by the current one (learnable), the first one is random.
inline TokenBatch cycle_batch(std::int64_t B, std::int64_t T, std::int64_t vocab, std::int64_t period,
                              std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int64_t> start(0, period - 1);
  const auto token = [&](std::int64_t position) { return static_cast<std::int32_t>((position % period) * 7 % vocab); };
  TokenBatch b{B, T, std::vector<std::int32_t>(B * T), std::vector<std::int32_t>(B * T)};
  for (std::int64_t r = 0; r < B; ++r) {
    const std::int64_t s = start(gen);
    for (std::int64_t t = 0; t < T; ++t) {
      b.inputs[r * T + t] = token(s + t);
      b.targets[r * T + t] = token(s + t + 1);
    }
  }
  return b;
}

// What a training run records: the losses, the order of the gradient-ready hook, and every gradient.
struct TrainRun {
  std::vector<double> losses;
  std::vector<double> grads;
  std::vector<std::size_t> ready;  // gradient-ready hook order
};

// Two accumulated micro-batches of random tokens (vocabulary 97): (4, 16) with `seed`, then (3, 11) with seed + 1,
// at loss scale 0.5.
inline TrainRun train_two_micro_batches(TransformerLM& model, std::uint64_t seed) {
  TrainRun r;
  BackwardOptions options;
  options.loss_scale = 0.5;
  options.on_gradient_ready = [&](const ParameterInfo& info, const Tensor&) { r.ready.push_back(info.index); };
  const TokenBatch batches[] = {random_batch(4, 16, 97, seed), random_batch(3, 11, 97, seed + 1)};
  for (const TokenBatch& b : batches) {
    r.losses.push_back(model.forward_backward(b.input_ids(), b.target_ids(), options));
    options.accumulate = true;
  }
  r.grads = read_as_double(model.gradients().flat());
  return r;
}

// run equals expected bit for bit: losses, hook order and every gradient (counting those that differ).
inline void expect_bit_identical(const TrainRun& run, const TrainRun& expected) {
  EXPECT_EQ(run.losses, expected.losses);
  EXPECT_EQ(run.ready, expected.ready);
  ASSERT_EQ(run.grads.size(), expected.grads.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < run.grads.size(); ++i) differing += run.grads[i] != expected.grads[i];
  EXPECT_EQ(differing, 0u);
}

}  // namespace ft::test
