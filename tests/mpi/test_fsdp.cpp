// test_fsdp.cpp — ZeRO-3 and ZeRO-2 (dist/fsdp.h) under mpirun with 2 and with 3 ranks: training a small
// Transformer with its gradients and AdamW state (ZeRO-3: and parameters) sharded equals one process
// training on the global batch
// (each rank takes its rows of every batch): the same losses (mean over ranks), gradient norms and final
// parameters to fp32 round-off, clipping on, in fp32 and bf16 mode, with gradient accumulation, and to bf16
// round-off with the gradients reduce-scattered in bf16; the memory planned without allocating is what is
// allocated; a sharded checkpoint resumes bit for bit (ZeRO-3 saved, ZeRO-2 and ZeRO-3 resumed), gathers
// into the whole parameters under their names, and refuses another world size or model shape; the plan
// pads units that the world does not divide and refuses a world larger than a unit; activation offloading
// changes no bit of a ZeRO-3 run, for every recompute policy.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor_io.h"
#include "cpu/test_model_util.h"
#include "dist/fsdp.h"
#include "dist/fsdp_checkpoint.h"
#include "model/safetensors.h"
#include "mpi/mpi_test_util.h"

namespace ft::test {
namespace {

constexpr std::int64_t kLocalBatch = 2, kSeq = 8, kSteps = 4;

ModelConfig fsdp_config() {
  ModelConfig c = small_transformer_config(kSeq);
  c.vocab_size = 37;  // not a multiple of 2 or 3: every unit is padded somewhere
  c.validate();
  return c;
}

TrainerConfig trainer_config(std::int64_t accumulation, bool external) {
  TrainerConfig c;
  c.adamw.lr = 3e-3;
  c.adamw.weight_decay = 0.1;
  c.max_grad_norm = 0.5;  // small enough to clip
  c.accumulation_steps = accumulation;
  c.external_optimizer = external;
  return c;
}

// The sharded runs' options: the Trainer's AdamW and clip, the single-process model's seed.
FsdpOptions fsdp_options(int stage, Precision precision, bool bf16_grad_comm = false) {
  FsdpOptions o;
  o.stage = stage;
  o.precision = precision;
  o.adamw = trainer_config(1, true).adamw;
  o.max_grad_norm = trainer_config(1, true).max_grad_norm;
  o.seed = tiny_options().seed;
  o.bf16_grad_comm = bf16_grad_comm;
  return o;
}

struct TrainRun {
  std::vector<double> losses;  // per micro-batch: the global batch's mean loss
  std::vector<double> norms;   // per step
  std::vector<double> parameters;
};

// The global batch of (step, micro-batch): world * kLocalBatch rows.
TokenBatch global_batch(std::int64_t step, std::int64_t micro, int world) {
  return random_batch(world * kLocalBatch, kSeq, fsdp_config().vocab_size, 1000 + 17 * step + micro);
}

TrainRun single_process(Precision precision, std::int64_t accumulation) {
  const int world = test::world().world_size();
  TransformerLM model(fsdp_config(), tiny_options(precision, AttentionImpl::flash, world * kLocalBatch, kSeq));
  Trainer trainer(model, trainer_config(accumulation, false));
  TrainRun run;
  for (std::int64_t s = 0; s < kSteps; ++s) {
    for (std::int64_t m = 0; m < accumulation; ++m) {
      const TokenBatch b = global_batch(s, m, world);
      run.losses.push_back(trainer.forward_backward(b.input_ids(), b.target_ids()));
    }
    run.norms.push_back(trainer.optimizer_step().grad_norm);
    trainer.zero_grads();
  }
  run.parameters = read_as_double(model.parameters().flat());
  return run;
}

// The sharded model's memory options beside fsdp_config().
struct ModelMemory {
  std::int64_t layers = 0;  // 0: fsdp_config()'s
  Recompute recompute = Recompute::none;
  bool offload_activations = false;
};

TrainRun sharded(int stage, Precision precision, std::int64_t accumulation, bool bf16_grad_comm = false,
                 const ModelMemory& memory = {}) {
  Communicator& comm = world();
  const int rank = comm.rank(), W = comm.world_size();
  const TrainerConfig config = trainer_config(accumulation, true);
  ModelConfig shape = fsdp_config();
  if (memory.layers > 0) shape.num_layers = memory.layers;
  Fsdp fsdp(comm, shape, fsdp_options(stage, precision, bf16_grad_comm));
  ModelOptions options = tiny_options(precision, AttentionImpl::flash, kLocalBatch, kSeq);
  options.parameter_source = &fsdp;
  options.recompute = memory.recompute;
  options.offload_activations = memory.offload_activations;
  TransformerLM model(shape, options);
  Trainer trainer(model, config);
  attach(fsdp, trainer);
  TrainRun run;
  for (std::int64_t s = 0; s < kSteps; ++s) {
    for (std::int64_t m = 0; m < accumulation; ++m) {
      const TokenBatch g = global_batch(s, m, W);
      TokenBatch local{kLocalBatch, kSeq, {}, {}};  // this rank's rows
      const auto first = g.inputs.begin() + rank * kLocalBatch * kSeq;
      local.inputs.assign(first, first + kLocalBatch * kSeq);
      const auto target = g.targets.begin() + rank * kLocalBatch * kSeq;
      local.targets.assign(target, target + kLocalBatch * kSeq);
      const double loss = trainer.forward_backward(local.input_ids(), local.target_ids());
      double mean = 0;
      for (const auto& each : gather_all({static_cast<float>(loss)})) mean += each[0];
      run.losses.push_back(mean / W);
    }
    run.norms.push_back(trainer.optimizer_step().grad_norm);
    trainer.zero_grads();
  }
  const OwnedTensor whole({fsdp.layout().numel()}, DType::f32, Device::cpu(), "test parameters");
  fsdp.gather_parameters(whole);
  run.parameters = read_as_double(whole);
  return run;
}

// ||a - b|| / ||b||.
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, ref = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    ref += b[i] * b[i];
  }
  return std::sqrt(diff / ref);
}

void expect_run_matches(const TrainRun& got, const TrainRun& expected, double tolerance) {
  ASSERT_EQ(got.losses.size(), expected.losses.size());
  // The losses are averaged over ranks in fp32 (gather_all), so compare them to fp32 round-off at best.
  for (std::size_t i = 0; i < expected.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], expected.losses[i], std::max(tolerance, 1e-6) * expected.losses[i]) << "micro " << i;
  bool clipped = false;
  for (std::size_t i = 0; i < expected.norms.size(); ++i) {
    EXPECT_NEAR(got.norms[i], expected.norms[i], tolerance * expected.norms[i]) << "step " << i + 1;
    clipped = clipped || expected.norms[i] > 0.5;
  }
  EXPECT_TRUE(clipped) << "no step clipped: the test would not see the clipping across shards";
  ASSERT_EQ(got.parameters.size(), expected.parameters.size());
  EXPECT_LE(relative_error(got.parameters, expected.parameters), tolerance);
}

void expect_matches_single_process(Precision precision, std::int64_t accumulation, double tolerance) {
  const TrainRun expected = single_process(precision, accumulation);
  for (int stage : {2, 3}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(stage));
    expect_run_matches(sharded(stage, precision, accumulation), expected, tolerance);
  }
}

TEST(Fsdp, Fp32MatchesSingleProcess) { expect_matches_single_process(Precision::fp32, 1, 1e-6); }

TEST(Fsdp, Fp32WithAccumulationMatchesSingleProcess) { expect_matches_single_process(Precision::fp32, 2, 1e-6); }

// Gradients reduce-scattered in bf16 (with accumulation: the widening before the second micro-batch adds):
// the single-process run to bf16's rounding of the gradients, and not the fp32 communication's result.
TEST(Fsdp, Bf16GradientCommunicationMatchesToBf16Rounding) {
  const TrainRun expected = single_process(Precision::fp32, 2);
  for (int stage : {2, 3}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(stage));
    const TrainRun got = sharded(stage, Precision::fp32, 2, true);
    expect_run_matches(got, expected, 1e-2);
    EXPECT_GT(relative_error(got.parameters, expected.parameters), 1e-7) << "the gradients were not rounded";
  }
}

// bf16 mode rounds the loss gradient to bf16 after scaling it by 1 / (rows x T): the same rounding on one
// process and on each rank only when the world is a power of two (the scales then differ by a power of two);
// otherwise the runs differ by bf16 roundings (2^-9 relative) of the loss gradient.
TEST(Fsdp, Bf16MatchesSingleProcess) {
  const int W = world().world_size();
  expect_matches_single_process(Precision::bf16, 1, (W & (W - 1)) == 0 ? 1e-6 : 1e-2);
}

// Activation offloading under ZeRO-3 (five blocks: four go through the host): for every recompute policy, the
// losses, gradient norms and parameters of the run without it, bit for bit.
TEST(Fsdp, OffloadedActivationsGiveTheSameRunBitForBit) {
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::selective_qkv, Recompute::full}) {
      SCOPED_TRACE(str(name_of(precision), " ", name_of(recompute)));
      const TrainRun kept = sharded(3, precision, 2, false, {.layers = 5, .recompute = recompute});
      const TrainRun offloaded =
          sharded(3, precision, 2, false, {.layers = 5, .recompute = recompute, .offload_activations = true});
      EXPECT_EQ(offloaded.losses, kept.losses);
      EXPECT_EQ(offloaded.norms, kept.norms);
      EXPECT_EQ(offloaded.parameters, kept.parameters);
    }
}

TEST(Fsdp, PlannedMemoryIsWhatIsAllocated) {
  for (int stage : {2, 3})
    for (Precision precision : {Precision::fp32, Precision::bf16})
      for (bool bf16_grad_comm : {false, true}) {
        SCOPED_TRACE(str("ZeRO-", stage, " ", name_of(precision), bf16_grad_comm ? ", bf16 gradients" : ""));
        const FsdpOptions options = fsdp_options(stage, precision, bf16_grad_comm);
        Fsdp fsdp(world(), fsdp_config(), options);
        const FsdpMemory got = fsdp.memory();
        const FsdpMemory planned = Fsdp::planned_memory(fsdp_config(), options, world().world_size());
        EXPECT_EQ(got.parameters, planned.parameters);
        EXPECT_EQ(got.gradients, planned.gradients);
        EXPECT_EQ(got.optimizer_state, planned.optimizer_state);
        EXPECT_EQ(got.communication, planned.communication);
        EXPECT_EQ(got.replica, planned.replica);
        EXPECT_EQ(got.optimizer_state, 8 * static_cast<std::size_t>(fsdp.plan().shard_numel()));
        ModelOptions model_options = tiny_options(precision, AttentionImpl::flash, kLocalBatch, kSeq);
        model_options.parameter_source = &fsdp;
        const TransformerLM model(fsdp_config(), model_options);
        const MemoryReport m = model.memory(), p = TransformerLM::planned_memory(fsdp_config(), model_options);
        EXPECT_EQ(m.parameters, 0u);
        EXPECT_EQ(m.gradients, 0u);
        EXPECT_EQ(m.activations, p.activations);
        EXPECT_EQ(m.workspace, p.workspace);
      }
}

TEST(Fsdp, PlanPadsUnevenUnitsAndRefusesOversizedWorlds) {
  const ParameterLayout layout(fsdp_config());
  const FsdpPlan plan(layout, 3);
  std::int64_t covered = 0, shard = 0;
  for (std::size_t u = 0; u < plan.units().size(); ++u) {
    const FsdpUnit& unit = plan.units()[u];
    EXPECT_EQ(unit.piece, (unit.numel + 2) / 3);
    EXPECT_EQ(unit.shard_offset, shard);
    shard += unit.piece;
    std::int64_t held = 0;
    for (int r = 0; r < 3; ++r) {
      const ShardRange owned = plan.owned(u, r);
      EXPECT_EQ(owned.offset, unit.offset + std::min(unit.numel, r * unit.piece));
      held += owned.numel;
    }
    EXPECT_EQ(held, unit.numel);
    covered += unit.numel;
  }
  EXPECT_EQ(covered, layout.numel());
  EXPECT_EQ(plan.shard_numel(), shard);
  EXPECT_EQ(plan.units().size(), static_cast<std::size_t>(fsdp_config().num_layers + 2));
  const std::int64_t smallest = layout[ParameterLayout::embedding_index()].numel;  // 37 x 32
  EXPECT_THROW(FsdpPlan(layout, static_cast<int>(smallest) * 2), Error);
}

// A sharded run that can stop after any step: its Fsdp, model and Trainer, on this rank's rows.
struct ShardedRun {
  Fsdp fsdp;
  TransformerLM model;
  Trainer trainer;
  ShardedRun(int stage, const ModelConfig& config)
      : fsdp(world(), config, fsdp_options(stage, Precision::fp32)),
        model(config, source_options(&fsdp)),
        trainer(model, trainer_config(1, true)) {
    attach(fsdp, trainer);
  }
  static ModelOptions source_options(Fsdp* fsdp) {
    ModelOptions o = tiny_options(Precision::fp32, AttentionImpl::flash, kLocalBatch, kSeq);
    o.parameter_source = fsdp;
    return o;
  }
  void steps(std::int64_t first, std::int64_t count) {
    const int rank = world().rank(), W = world().world_size();
    for (std::int64_t s = first; s < first + count; ++s) {
      const TokenBatch g = global_batch(s, 0, W);
      TokenBatch local{kLocalBatch, kSeq, {}, {}};
      const std::int64_t begin = rank * kLocalBatch * kSeq, end = begin + kLocalBatch * kSeq;
      local.inputs.assign(g.inputs.begin() + begin, g.inputs.begin() + end);
      local.targets.assign(g.targets.begin() + begin, g.targets.begin() + end);
      trainer.forward_backward(local.input_ids(), local.target_ids());
      trainer.optimizer_step();
      trainer.zero_grads();
    }
  }
  std::vector<double> parameters() {
    const OwnedTensor whole({fsdp.layout().numel()}, DType::f32, Device::cpu(), "test parameters");
    fsdp.gather_parameters(whole);
    return read_as_double(whole);
  }
};

// A folder every rank agrees on (rank 0 names it), removed by rank 0 at the end.
std::string shared_folder(const char* name) {
  return (std::filesystem::temp_directory_path() / str("ft_fsdp_", name, "_w", world().world_size())).string();
}

TEST(Fsdp, ShardedCheckpointResumesBitForBitAndGathers) {
  const std::string folder = shared_folder("ckpt"), gathered = folder + ".safetensors";
  std::vector<double> straight, saved;
  {
    ShardedRun run(3, fsdp_config());
    run.steps(0, 2);
    saved = run.parameters();
    save_fsdp_checkpoint(folder, run.fsdp, {.step = 2, .optimizer_step = 2, .data_rng = {7, 9}});
    run.steps(2, 2);
    straight = run.parameters();
  }
  for (int stage : {2, 3}) {
    SCOPED_TRACE("resumed as ZeRO-" + std::to_string(stage));
    ShardedRun resumed(stage, fsdp_config());
    const TrainingCounters counters = load_fsdp_checkpoint(folder, resumed.fsdp);
    EXPECT_EQ(counters.step, 2);
    EXPECT_EQ(counters.data_rng, (RngState{7, 9}));
    EXPECT_EQ(resumed.fsdp.steps(), 2);
    resumed.trainer.restore_step(counters.step);
    EXPECT_EQ(resumed.parameters(), saved);
    resumed.steps(2, 2);
    EXPECT_EQ(resumed.parameters(), straight);  // bit for bit
  }
  if (world().rank() == 0) {
    gather_fsdp_checkpoint(folder, gathered);
    const SafetensorsFile file(gathered);
    const ParameterLayout layout(fsdp_config());
    std::vector<double> got;
    for (const ParameterInfo& info : layout.tensors()) {
      const std::vector<double> values = read_as_double(file.load(info.name));
      got.insert(got.end(), values.begin(), values.end());
    }
    EXPECT_EQ(got, saved);
  }
  world().barrier()->wait();
  if (world().rank() == 0) {
    std::filesystem::remove_all(folder);
    std::filesystem::remove(gathered);
  }
}

TEST(Fsdp, ShardedCheckpointRefusesAnotherWorldOrShape) {
  const std::string folder = shared_folder("mismatch");
  {
    ShardedRun run(3, fsdp_config());
    save_fsdp_checkpoint(folder, run.fsdp, {});
  }
  ModelConfig other = fsdp_config();
  other.d_ff = 96;
  other.validate();
  ShardedRun wrong_shape(3, other);
  try {
    load_fsdp_checkpoint(folder, wrong_shape.fsdp);
    ADD_FAILURE() << "a checkpoint of another shape was loaded";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("is of the model"), std::string::npos) << e.message();
  }
  // Another world: rewrite the index as if the checkpoint had one more rank.
  world().barrier()->wait();
  if (world().rank() == 0) {
    const std::string index = folder + "/index.json";
    std::string text;
    {
      std::ifstream in(index);
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    const std::string from = str("\"world\": ", world().world_size());
    const std::string to = str("\"world\": ", world().world_size() + 1);
    ASSERT_NE(text.find(from), std::string::npos) << text;
    text.replace(text.find(from), from.size(), to);
    std::ofstream(index) << text;
  }
  world().barrier()->wait();
  ShardedRun run(3, fsdp_config());
  try {
    load_fsdp_checkpoint(folder, run.fsdp);
    ADD_FAILURE() << "a checkpoint of another world size was loaded";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(str("holds the shards of ", world().world_size() + 1, " ranks")), std::string::npos)
        << e.message();
  }
  EXPECT_THROW(load_fsdp_checkpoint(folder + "_missing", run.fsdp), Error);
  world().barrier()->wait();
  if (world().rank() == 0) std::filesystem::remove_all(folder);
}

}  // namespace
}  // namespace ft::test
