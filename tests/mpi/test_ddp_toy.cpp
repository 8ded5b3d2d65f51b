// test_ddp_toy.cpp — DDP on the toy model (mpi/toy_model.h), 2 ranks under mpirun: 5 SGD steps on 20 rows
// split 10/10 end with the weights of one process trained on all 20 rows (computed here on each rank),
// for every strategy and bucket sizes from below one parameter to above all; frozen parameters are never
// communicated; the tied weight is reduced once, after both uses; ranks that start from different weights
// agree after wrapping; with 2 accumulation micro-batches only the last one communicates; bf16
// communication stays within bf16 precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "dist/ddp.h"
#include "mpi/mpi_test_util.h"
#include "mpi/toy_model.h"

namespace ft::test {
namespace {

constexpr std::uint64_t kSeed = 100;
constexpr int kSteps = 5;
constexpr double kLr = 0.1;
constexpr std::int64_t kRows = 20;

std::vector<bool> all_trainable() { return std::vector<bool>(ToyModel::parameters().size(), true); }

// One process, all rows.
std::vector<float> train_reference(const std::vector<bool>& trainable) {
  ToyModel model(kSeed);
  const ToyData data = toy_data(kRows, 7);
  for (int s = 0; s < kSteps; ++s) {
    model.forward_backward(data, 1.0, false, [](std::size_t) {});
    model.sgd(kLr, trainable);
  }
  return model.params();
}

struct DdpRun {
  std::vector<float> initial;      // this rank's parameters before wrapping
  std::vector<float> params;       // after training
  std::size_t buckets = 0;
  CountingCommunicator comm{world()};
  std::vector<std::pair<std::int64_t, std::int64_t>> reduced;  // gradient all-reduces: (offset, numel)
};

// Rank r trains on rows [10 r, 10 r + 10), starting from its own seed, in `accumulation` micro-batches.
void train_ddp(DdpRun& run, const DdpOptions& options, const std::vector<bool>& trainable, int accumulation = 1) {
  const int rank = world().rank(), ranks = world().world_size();
  ToyModel model(kSeed + 7 * static_cast<std::uint64_t>(rank));
  run.initial = model.params();
  DdpModel view = model.ddp_model();
  for (std::size_t k = 0; k < trainable.size(); ++k) view.tensors[k].requires_grad = trainable[k];
  DistributedDataParallel ddp(run.comm, view, options);
  run.buckets = ddp.plan().buckets.size();
  const std::int64_t local = kRows / ranks, micro = local / accumulation;
  const ToyData data = toy_data(kRows, 7).slice(rank * local, local);
  for (int s = 0; s < kSteps; ++s) {
    for (int m = 0; m < accumulation; ++m) {
      const bool last = m == accumulation - 1;
      model.forward_backward(data.slice(m * micro, micro), 1.0 / accumulation, m > 0,
                             [&](std::size_t index) { ddp.gradient_ready(index, last); });
    }
    const std::vector<float> before = model.grads();
    ddp.synchronize();
    for (std::size_t k = 0; k < trainable.size(); ++k) {
      if (trainable[k]) continue;  // a frozen gradient stays as this rank computed it
      const DdpParameter& p = ToyModel::parameters()[k];
      for (std::int64_t i = p.offset; i < p.offset + p.numel; ++i) ASSERT_EQ(model.grads()[i], before[i]);
    }
    model.sgd(kLr, trainable);
  }
  run.params = model.params();
  for (const CollectiveRecord& r : run.comm.records)
    if (r.op == "all_reduce") run.reduced.emplace_back(static_cast<const float*>(r.data) - model.grads().data(), r.numel);
}

void expect_close_to(const std::vector<float>& got, const std::vector<float>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  EXPECT_LE(worst, tolerance);
}

void expect_ranks_agree(const std::vector<float>& params) {
  const auto all = gather_all(params);
  for (std::size_t r = 1; r < all.size(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << " differs from rank 0";
}

// Gradient all-reduces recorded over the whole run (the broadcast is recorded separately).
std::int64_t gradient_all_reduces(const DdpRun& run) { return run.comm.count("all_reduce"); }

struct Case {
  DdpStrategy strategy;
  double bucket_bytes;          // bucketed only
  std::size_t expected_buckets;
};

// Bucket caps: 1 byte (below every parameter: one bucket each), 28 bytes (out.bias + out.weight), 200
// bytes (also in.weight), 1 MiB (everything).
const std::vector<Case> kCases = {
    {DdpStrategy::naive, 0, 4},       {DdpStrategy::flat, 0, 1},         {DdpStrategy::overlapped, 0, 4},
    {DdpStrategy::bucketed, 1, 4},    {DdpStrategy::bucketed, 28, 3},    {DdpStrategy::bucketed, 200, 2},
    {DdpStrategy::bucketed, 1 << 20, 1}};

DdpOptions options_of(const Case& c) {
  DdpOptions o;
  o.strategy = c.strategy;
  if (c.strategy == DdpStrategy::bucketed) o.bucket_size_mb = c.bucket_bytes / (1024.0 * 1024.0);
  return o;
}

TEST(DdpToy, EveryStrategyMatchesOneProcessOnAllRows) {
  const std::vector<float> reference = train_reference(all_trainable());
  for (const Case& c : kCases) {
    SCOPED_TRACE(std::string(name_of(c.strategy)) + " cap " + std::to_string(c.bucket_bytes) + " B");
    DdpRun run;
    train_ddp(run, options_of(c), all_trainable());
    EXPECT_EQ(run.buckets, c.expected_buckets);
    EXPECT_EQ(gradient_all_reduces(run), kSteps * static_cast<std::int64_t>(c.expected_buckets));
    EXPECT_EQ(run.comm.count("broadcast"), 1);
    expect_close_to(run.params, reference, 1e-5);
    expect_ranks_agree(run.params);
  }
}

TEST(DdpToy, RanksStartingApartAgreeAfterWrapping) {
  const auto before = gather_all(ToyModel(kSeed + 7 * static_cast<std::uint64_t>(world().rank())).params());
  ASSERT_NE(before[0], before[1]);  // the ranks really start from different parameters
  ToyModel model(kSeed + 7 * static_cast<std::uint64_t>(world().rank()));
  DistributedDataParallel ddp(world(), model.ddp_model(), DdpOptions{});
  EXPECT_EQ(model.params(), ToyModel(kSeed).params());  // rank 0's
  expect_ranks_agree(model.params());
}

TEST(DdpToy, FrozenParameterIsNeverCommunicated) {
  std::vector<bool> trainable = all_trainable();
  trainable[ToyModel::out] = false;  // between in.weight and out.bias in memory: splits the flat buffer
  const std::vector<float> reference = train_reference(trainable);
  const DdpParameter frozen = ToyModel::parameters()[ToyModel::out];
  const std::vector<Case> cases = {{DdpStrategy::naive, 0, 3},
                                   {DdpStrategy::flat, 0, 2},
                                   {DdpStrategy::overlapped, 0, 3},
                                   {DdpStrategy::bucketed, 1, 3},
                                   {DdpStrategy::bucketed, 1 << 20, 2}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(name_of(c.strategy)) + " cap " + std::to_string(c.bucket_bytes) + " B");
    DdpRun run;
    train_ddp(run, options_of(c), trainable);
    EXPECT_EQ(run.buckets, c.expected_buckets);
    EXPECT_EQ(gradient_all_reduces(run), kSteps * static_cast<std::int64_t>(c.expected_buckets));
    for (const auto& [offset, numel] : run.reduced) {
      const bool disjoint = offset + numel <= frozen.offset || frozen.offset + frozen.numel <= offset;
      EXPECT_TRUE(disjoint) << "an all_reduce of [" << offset << ", " << offset + numel << ") covers the frozen "
                            << frozen.name;
    }
    expect_close_to(run.params, reference, 1e-5);
    // The frozen weight kept rank 0's initial value (it was broadcast, then never updated).
    const std::vector<float> initial0 = ToyModel(kSeed).params();
    for (std::int64_t i = frozen.offset; i < frozen.offset + frozen.numel; ++i) EXPECT_EQ(run.params[i], initial0[i]);
    expect_ranks_agree(run.params);
  }
}

TEST(DdpToy, TiedWeightIsReducedOnceAfterBothUses) {
  // The toy reports in.weight once, after its second use added its part; DDP reduces that sum. Bucketed
  // with one bucket per parameter: in.weight's own all-reduce is the last one of each step.
  DdpRun run;
  train_ddp(run, options_of({DdpStrategy::bucketed, 1, 4}), all_trainable());
  const DdpParameter tied = ToyModel::parameters()[ToyModel::in];
  ASSERT_EQ(run.reduced.size(), static_cast<std::size_t>(4 * kSteps));
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_EQ(run.reduced[4 * s + 3].first, tied.offset);
    EXPECT_EQ(run.reduced[4 * s + 3].second, tied.numel);
  }
  expect_close_to(run.params, train_reference(all_trainable()), 1e-5);

  // A model that reported the tied weight after its first use too is told so (before any collective is
  // launched: with one bucket for everything, the bucket still waits for the other parameters).
  ToyModel model(kSeed);
  DdpOptions one_bucket = options_of({DdpStrategy::bucketed, 1 << 20, 1});
  DistributedDataParallel ddp(world(), model.ddp_model(), one_bucket);
  ddp.gradient_ready(ToyModel::in, true);
  try {
    ddp.gradient_ready(ToyModel::in, true);
    FAIL() << "a second report of in.weight was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::runtime);
    EXPECT_NE(e.message().find("in.weight was reported ready twice"), std::string::npos) << e.message();
  }
}

TEST(DdpToy, AccumulationCommunicatesOnlyOnTheLastMicroBatch) {
  const std::vector<float> reference = train_reference(all_trainable());
  for (const Case& c : kCases) {
    SCOPED_TRACE(std::string(name_of(c.strategy)) + " cap " + std::to_string(c.bucket_bytes) + " B");
    DdpRun run;
    train_ddp(run, options_of(c), all_trainable(), 2);
    // As many collectives as without accumulation: one per bucket per optimizer step.
    EXPECT_EQ(gradient_all_reduces(run), kSteps * static_cast<std::int64_t>(c.expected_buckets));
    expect_close_to(run.params, reference, 1e-5);
    expect_ranks_agree(run.params);
  }
}

TEST(DdpToy, Bf16CommunicationStaysWithinBf16Precision) {
  const std::vector<float> reference = train_reference(all_trainable());
  for (const Case& c : {Case{DdpStrategy::flat, 0, 1}, Case{DdpStrategy::bucketed, 28, 3}}) {
    SCOPED_TRACE(name_of(c.strategy));
    DdpOptions options = options_of(c);
    options.bf16_communication = true;
    DdpRun run;
    train_ddp(run, options, all_trainable());
    for (const CollectiveRecord& r : run.comm.records)
      if (r.op == "all_reduce") EXPECT_EQ(r.dtype, DType::bf16);
    // Each step's update lr * g carries bf16's relative error (2^-8 after the average's roundings).
    expect_close_to(run.params, reference, 5e-3);
    expect_ranks_agree(run.params);
  }
}

TEST(DdpToy, Bf16RoundingOnTheCommunicatorGivesTheSameSteps) {
  for (const Case& c : {Case{DdpStrategy::flat, 0, 1}, Case{DdpStrategy::bucketed, 28, 3}}) {
    SCOPED_TRACE(name_of(c.strategy));
    DdpOptions options = options_of(c);
    options.bf16_communication = true;
    DdpRun on_model;
    train_ddp(on_model, options, all_trainable());
    options.round_on_comm_stream = true;
    DdpRun on_comm;
    train_ddp(on_comm, options, all_trainable());
    EXPECT_EQ(on_comm.params, on_model.params);
    EXPECT_EQ(gradient_all_reduces(on_comm), gradient_all_reduces(on_model));
  }
}

TEST(DdpToy, NcclBuffersAreRefusedByTheHostCommunicator) {
  for (CommBufferKind kind : {CommBufferKind::registered, CommBufferKind::nccl_mem, CommBufferKind::symmetric}) {
    SCOPED_TRACE(name_of(kind));
    ToyModel model(kSeed);
    DdpOptions options;
    options.buffer = kind;
    try {
      DistributedDataParallel ddp(world(), model.ddp_model(), options);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::unsupported);
      EXPECT_NE(e.message().find("the mpi communicator"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("use plain buffers"), std::string::npos) << e.message();
    }
  }
}

}  // namespace
}  // namespace ft::test
