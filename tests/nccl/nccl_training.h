// nccl_training.h — shared by the nccl training tests (test_ddp_nccl.cpp, test_fsdp_nccl.cpp): the steps,
// batch and clip of their small 2-GPU runs, the Trainer configuration, the rows of a step's batch a rank (or
// the one-process reference) trains on, and the check that a rank's parameters after the steps match the
// reference and are bit-identical on both ranks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/test_model_util.h"
#include "model/data_loader.h"
#include "model/trainer.h"
#include "nccl/nccl_test_util.h"

namespace ft::test {

constexpr int kSteps = 3;
constexpr std::int64_t kBatch = 4, kSeq = 16;
constexpr double kClip = 0.05;  // below the first steps' gradient norms: the clip acts

// AdamW with eps 1e-3 (as test_model_cuda's Trainer step): near-zero gradients, whose last bits differ
// between a batch of 4 and two averaged halves, then cannot turn into lr-sized updates.
inline TrainerConfig trainer_config(std::int64_t accumulation, double clip, bool external) {
  TrainerConfig t;
  t.adamw.lr = 1e-2;
  t.adamw.eps = 1e-3;
  t.max_grad_norm = clip;
  t.accumulation_steps = accumulation;
  t.external_optimizer = external;
  return t;
}

// Rows [begin, begin + count) of step s's batch (tokens below vocab), as the model's token batch.
inline ft::TokenBatch rows(int step, std::int64_t begin, std::int64_t count, std::int64_t vocab) {
  const TokenBatch b = cycle_batch(kBatch, kSeq, vocab, 11, 500 + step);
  ft::TokenBatch out;
  out.batch = count;
  out.context = kSeq;
  out.inputs.assign(b.inputs.begin() + begin * kSeq, b.inputs.begin() + (begin + count) * kSeq);
  out.targets.assign(b.targets.begin() + begin * kSeq, b.targets.begin() + (begin + count) * kSeq);
  return out;
}

// Within tol of the reference, and bit-identical on both ranks.
inline void expect_matches(const std::vector<double>& params, const std::vector<double>& reference, double tol) {
  ASSERT_EQ(params.size(), reference.size());
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double diff = std::abs(params[i] - reference[i]);
    if (diff > worst) {
      worst = diff;
      at = i;
    }
  }
  EXPECT_LE(worst, tol) << "parameter element " << at << ": " << params[at] << " vs " << reference[at];
  std::vector<float> mine(params.begin(), params.end());  // exact: the parameters are fp32
  const auto n = static_cast<std::int64_t>(mine.size());
  std::vector<float> all(static_cast<std::size_t>(2 * n));  // (2, n)
  host().all_gather(Tensor(all.data(), DType::f32, Device::cpu(), {2 * n}),
                    Tensor(mine.data(), DType::f32, Device::cpu(), {n}))
      ->wait();
  EXPECT_TRUE(std::equal(all.begin(), all.begin() + n, all.begin() + n)) << "the ranks' parameters differ";
}

}  // namespace ft::test
