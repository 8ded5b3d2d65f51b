// test_ddp_transformer.cpp — DDP on a small TransformerLM with the Trainer's AdamW, 2 ranks under mpirun:
// each rank trains on half of a batch of 4 sequences, starting from its own initialisation, and after 3
// steps holds the parameters of one process trained on the whole batch (fp32 round-off), for every
// strategy, bucket sizes from below one parameter to above all, and with 2 accumulation micro-batches
// (where only the last one communicates).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/tensor_io.h"
#include "cpu/test_model_util.h"
#include "dist/ddp_transformer.h"
#include "mpi/mpi_test_util.h"

namespace ft::test {
namespace {

constexpr int kSteps = 3;
constexpr std::int64_t kBatch = 4, kSeq = 16;


TrainerConfig trainer_config(std::int64_t accumulation) {
  TrainerConfig t;
  t.adamw.lr = 1e-2;
  t.accumulation_steps = accumulation;
  return t;
}

// Rows [begin, begin + count) of a batch.
TokenBatch rows(const TokenBatch& b, std::int64_t begin, std::int64_t count) {
  return {count, b.T, std::vector<std::int32_t>(b.inputs.begin() + begin * b.T, b.inputs.begin() + (begin + count) * b.T),
          std::vector<std::int32_t>(b.targets.begin() + begin * b.T, b.targets.begin() + (begin + count) * b.T)};
}

TokenBatch step_batch(int step) { return cycle_batch(kBatch, kSeq, small_transformer_config(kSeq).vocab_size, 11, 500 + step); }

std::vector<double> parameters_of(const TransformerLM& model) { return read_as_double(model.parameters().flat()); }

std::vector<double> train_reference() {
  TransformerLM model(small_transformer_config(kSeq), tiny_options(Precision::fp32, AttentionImpl::flash, kBatch, kSeq));
  Trainer trainer(model, trainer_config(1));
  for (int s = 0; s < kSteps; ++s) {
    const TokenBatch b = step_batch(s);
    trainer.forward_backward(b.input_ids(), b.target_ids());
    trainer.optimizer_step();
    trainer.zero_grads();
  }
  return parameters_of(model);
}

struct DdpResult {
  std::vector<double> params;
  std::size_t buckets = 0;
  std::int64_t all_reduces = 0;
};

DdpResult train_ddp(const DdpOptions& options, std::int64_t accumulation) {
  const int rank = world().rank();
  ModelOptions model_options = tiny_options(Precision::fp32, AttentionImpl::flash, kBatch, kSeq);
  model_options.seed += static_cast<std::uint64_t>(rank);  // the ranks start apart; DDP broadcasts rank 0's
  TransformerLM model(small_transformer_config(kSeq), model_options);
  Trainer trainer(model, trainer_config(accumulation));
  CountingCommunicator comm(world());
  DistributedDataParallel ddp(comm, ddp_model(model), options);
  attach(ddp, trainer);
  const std::int64_t local = kBatch / world().world_size(), micro = local / accumulation;
  for (int s = 0; s < kSteps; ++s) {
    const TokenBatch mine = rows(step_batch(s), rank * local, local);
    for (std::int64_t m = 0; m < accumulation; ++m) {
      const TokenBatch part = rows(mine, m * micro, micro);
      trainer.forward_backward(part.input_ids(), part.target_ids());
    }
    ddp.synchronize();
    trainer.optimizer_step();
    trainer.zero_grads();
  }
  return {parameters_of(model), ddp.plan().buckets.size(), comm.count("all_reduce")};
}

TEST(DdpTransformer, EveryStrategyMatchesOneProcessOnTheWholeBatch) {
  const std::vector<double> reference = train_reference();
  struct Case {
    DdpStrategy strategy;
    double bucket_bytes;
    std::int64_t accumulation;
  };
  const std::vector<Case> cases = {{DdpStrategy::naive, 0, 1},         {DdpStrategy::flat, 0, 1},
                                   {DdpStrategy::overlapped, 0, 1},    {DdpStrategy::bucketed, 1, 1},
                                   {DdpStrategy::bucketed, 16384, 1},  {DdpStrategy::bucketed, 1 << 24, 1},
                                   {DdpStrategy::bucketed, 16384, 2},  {DdpStrategy::overlapped, 0, 2}};
  const std::size_t num_parameters = ParameterLayout(small_transformer_config(kSeq)).size();
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(name_of(c.strategy)) + " cap " + std::to_string(c.bucket_bytes) + " B, accumulation " +
                 std::to_string(c.accumulation));
    DdpOptions options;
    options.strategy = c.strategy;
    if (c.strategy == DdpStrategy::bucketed) options.bucket_size_mb = c.bucket_bytes / (1024.0 * 1024.0);
    const DdpResult run = train_ddp(options, c.accumulation);
    if (c.strategy == DdpStrategy::flat || c.bucket_bytes == 1 << 24) EXPECT_EQ(run.buckets, 1u);
    if (c.strategy != DdpStrategy::flat && c.bucket_bytes <= 1) EXPECT_EQ(run.buckets, num_parameters);
    if (c.bucket_bytes == 16384) {
      EXPECT_GT(run.buckets, 1u);
      EXPECT_LT(run.buckets, num_parameters);
    }
    EXPECT_EQ(run.all_reduces, kSteps * static_cast<std::int64_t>(run.buckets));
    double worst = 0;
    for (std::size_t i = 0; i < reference.size(); ++i) worst = std::max(worst, std::abs(run.params[i] - reference[i]));
    EXPECT_LE(worst, 2e-5);
    std::vector<float> mine(run.params.begin(), run.params.end());
    const auto all = gather_all(mine);
    EXPECT_EQ(all[0], all[1]);
  }
}

}  // namespace
}  // namespace ft::test
