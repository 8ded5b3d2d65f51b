// test_train_zero.cpp — `flashtrain train --zero` without the binary, 2 ranks under mpirun on the tiny model:
// ZeRO-1 in both modes (reduce_scatter; owner_broadcast over two DDP strategies) takes the steps of the DDP
// run without ZeRO (same losses and gradient norms to fp32 round-off, clipping on), the ranks end with
// identical parameters, and the log names the mode; --zero with checkpoints, with an unknown mode, or in a
// single process is refused.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "flashtrain/train_options.h"
#include "mpi/mpi_test_util.h"

namespace ft::test {
namespace {

using cli::TrainOptions;

TrainOptions tiny() {
  TrainOptions o;
  o.size = "tiny";
  o.context = 16;
  o.batch = 2;
  o.precision = "fp32";
  o.device = "cpu";
  o.steps = 5;
  o.warmup = 2;
  o.lr = 3e-3;
  o.clip = 0.5;  // small enough to clip: the ZeroOptimizer's global norm must match the Trainer's
  o.log_interval = 1;
  return o;
}

TrainResult train(const TrainOptions& options, std::string* log = nullptr) {
  std::ostringstream out;
  TrainResult result = run_training(cli::resolve_train_options(options), out, world());
  if (log) *log = out.str();
  return result;
}

void expect_matches_ddp(const std::string& zero, const std::string& strategy) {
  SCOPED_TRACE(zero + " " + strategy);
  TrainOptions o = tiny();
  o.ddp_strategy = strategy;
  const TrainResult ddp = train(o);
  o.zero = zero;
  std::string log;
  const TrainResult sharded = train(o, &log);

  ASSERT_EQ(sharded.losses.size(), ddp.losses.size());
  EXPECT_EQ(sharded.losses[0], ddp.losses[0]);  // the same parameters before the first step
  for (std::size_t i = 0; i < ddp.losses.size(); ++i)
    EXPECT_NEAR(sharded.losses[i], ddp.losses[i], 2e-6 * ddp.losses[i]) << "step " << i + 1;
  ASSERT_TRUE(sharded.parameter_checksum.has_value());
  const auto all = gathered_checksums(*sharded.parameter_checksum);
  EXPECT_EQ(all[0], all[1]);
  if (world().rank() != 0) {
    EXPECT_EQ(log, "");
    return;
  }
  ASSERT_EQ(sharded.rows.size(), ddp.rows.size());
  bool clipped = false;
  for (std::size_t i = 0; i < ddp.rows.size(); ++i) {
    EXPECT_NEAR(sharded.rows[i].grad_norm, ddp.rows[i].grad_norm, 1e-5 * ddp.rows[i].grad_norm) << "step " << i + 1;
    EXPECT_EQ(sharded.rows[i].lr, ddp.rows[i].lr);
    clipped = clipped || ddp.rows[i].grad_norm > o.clip;
  }
  EXPECT_TRUE(clipped) << "no step clipped: the test would not see the ZeroOptimizer's clipping";
  EXPECT_NE(log.find("ZeRO-1 " + zero), std::string::npos) << log;
}

TEST(TrainZero, ReduceScatterMatchesDdp) { expect_matches_ddp("reduce_scatter", "bucketed"); }

TEST(TrainZero, OwnerBroadcastMatchesDdp) {
  expect_matches_ddp("owner_broadcast", "bucketed");
  expect_matches_ddp("owner_broadcast", "flat");
}

TEST(TrainZero, RefusesCheckpointsUnknownModesAndOneProcess) {
  TrainOptions o = tiny();
  o.zero = "reduce_scatter";
  o.checkpoint_dir = "unused";
  EXPECT_THROW(cli::resolve_train_options(o), Error);
  o.checkpoint_dir.clear();
  o.zero = "sharded";
  EXPECT_THROW(cli::resolve_train_options(o), Error);
  o.zero = "owner_broadcast";
  std::ostringstream out;
  EXPECT_THROW(run_training(cli::resolve_train_options(o), out), Error);  // a world of one
}

}  // namespace
}  // namespace ft::test
