// test_model_util.h — helpers shared by the model tests (test_model_*.cpp): the tiny model with a small
// arena, seeded token batches, and a learnable synthetic sequence task.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

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

}  // namespace ft::test
