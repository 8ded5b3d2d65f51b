// test_zero.cpp — the ZeRO-1 sharded optimizer (dist/zero_optimizer.h), 2 ranks under mpirun. Each rank
// computes gradients on its half of every batch; the reference, computed on every rank alone, runs the
// same model over both halves, averages the two gradients as the backend does ((g0 + g1) / 2 in fp32) and
// applies the unsharded optimizer (ops adamw_step / sgd_step over whole parameters, one state buffer of
// the model's size). After 10 steps (AdamW lr 0.1, weight decay 0.1 in the first group; other
// hyperparameters in the second) the sharded run matches it to fp32 round-off — both modes, every DDP
// strategy under owner_broadcast, with the second group added at step 0 or mid-training (step 5), with
// and without global-norm clipping — the ranks hold identical parameters, and each rank's optimizer
// state (the allocator's count and the buffers' sizes) is half of the unsharded state. The toy model and
// a small TransformerLM.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "cpu/test_model_util.h"
#include "dist/ddp_transformer.h"
#include "dist/zero_optimizer.h"
#include "mpi/mpi_test_util.h"
#include "mpi/toy_model.h"
#include "optim/grad_clip.h"

namespace ft::test {
namespace {

constexpr int kSteps = 10;

struct GroupSpec {
  std::vector<std::size_t> parameters;  // indices into the model's parameter list
  AdamWConfig config;
  int added_at = 0;  // the step before which the group joins
};

// The first group: the lr 0.1 / weight decay 0.1; the second: its own hyperparameters.
AdamWConfig first_config(OptimizerKind kind) {
  AdamWConfig c;
  c.lr = 0.1;
  c.weight_decay = kind == OptimizerKind::adamw ? 0.1 : 0.0;
  return c;
}
AdamWConfig second_config(OptimizerKind kind) {
  AdamWConfig c;
  c.lr = 0.03;
  c.weight_decay = 0.0;
  c.beta1 = 0.8;
  c.beta2 = 0.99;
  c.eps = 1e-6;
  if (kind == OptimizerKind::sgd) c.lr = 0.2;
  return c;
}

// The unsharded optimizer: whole parameters, state of the model's size.
class ReferenceOptimizer {
 public:
  ReferenceOptimizer(std::vector<DdpParameter> tensors, std::int64_t numel, OptimizerKind kind, double max_norm)
      : tensors_(std::move(tensors)), kind_(kind), max_norm_(max_norm), m_(numel, 0.0f), v_(numel, 0.0f) {}

  void add_group(const GroupSpec& spec) {
    groups_.push_back(spec);
    steps_.push_back(0);
  }

  // Clips and updates; returns the norm before clipping.
  double step(const Tensor& params, const Tensor& grads) {
    std::vector<Tensor> grouped;  // every grouped parameter's gradient
    for (const GroupSpec& g : groups_)
      for (std::size_t i : g.parameters) grouped.push_back(grads.narrow(0, tensors_[i].offset, tensors_[i].numel));
    const double norm = std::sqrt(grad_sum_squares(grouped));
    if (max_norm_ > 0) scale_tensors(grouped, clip_factor(norm, max_norm_));
    const auto view = [](std::vector<float>& s, const DdpParameter& p) {
      return Tensor(s.data() + p.offset, DType::f32, Device::cpu(), {p.numel});
    };
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      ++steps_[g];
      for (std::size_t i : groups_[g].parameters) {
        const DdpParameter& p = tensors_[i];
        const Tensor pp = params.narrow(0, p.offset, p.numel), gg = grads.narrow(0, p.offset, p.numel);
        if (kind_ == OptimizerKind::sgd)
          sgd_step(pp, gg, groups_[g].config.lr);
        else
          adamw_step(pp, gg, view(m_, p), view(v_, p), groups_[g].config, steps_[g]);
      }
    }
    return norm;
  }

 private:
  std::vector<DdpParameter> tensors_;
  OptimizerKind kind_;
  double max_norm_;
  std::vector<GroupSpec> groups_;
  std::vector<std::int64_t> steps_;  // (groups)
  std::vector<float> m_, v_;         // (numel) each
};

// How one sharded run is set up.
struct RunSetup {
  ZeroMode mode = ZeroMode::reduce_scatter;
  DdpStrategy strategy = DdpStrategy::bucketed;  // owner_broadcast: the DDP that averages gradients
  OptimizerKind optimizer = OptimizerKind::adamw;
  double max_norm = 0;
  int second_at = 0;  // step at which the second group joins
  std::string describe() const {
    return std::string(name_of(mode)) + (mode == ZeroMode::owner_broadcast ? std::string(" ddp ") + name_of(strategy) : "") +
           " " + name_of(optimizer) + " clip " + std::to_string(max_norm) + " second group at step " +
           std::to_string(second_at);
  }
};

struct Outcome {
  std::vector<float> params;        // (numel) after kSteps
  std::vector<double> norms;        // (kSteps) reported gradient norms
  std::int64_t allocated = 0;       // allocator bytes the groups' state took on this rank
  std::size_t state_bytes = 0;      // ZeroOptimizer::state_bytes()
  std::int64_t reduce_scatters = 0, all_reduces = 0, broadcasts = 0;
  std::vector<double> buffer_norms;  // (kSteps) owner_broadcast: norm of the grouped gradients left in the buffer
};

// Drives a model through kSteps: `backward(step, half, ready)` writes the gradients of one half of the
// step's batch into the model's gradient buffer, telling `ready(index)` as each becomes final.
using Backward = std::function<void(int step, int half, const std::function<void(std::size_t)>& ready)>;

// The sharded run on this rank (its own half of each batch).
Outcome run_sharded(const RunSetup& s, const DdpModel& view, const std::vector<GroupSpec>& groups,
                    const Backward& backward) {
  CountingCommunicator comm(world());
  std::optional<DistributedDataParallel> ddp;
  ZeroOptions options;
  options.mode = s.mode;
  options.optimizer = s.optimizer;
  options.max_grad_norm = s.max_norm;
  if (s.mode == ZeroMode::owner_broadcast) {
    DdpOptions d;
    d.strategy = s.strategy;
    d.bucket_size_mb = 256.0 / (1024 * 1024);  // 256 B buckets: several per model
    ddp.emplace(comm, view, d);
    options.broadcast_parameters = false;  // DDP did
  }
  ZeroOptimizer zero(comm, view, options);
  Outcome out;
  const Device cpu = Device::cpu();
  for (int step = 0; step < kSteps; ++step) {
    for (const GroupSpec& g : groups)
      if (g.added_at == step) {
        const std::int64_t before = Allocator::instance().stats(cpu).current_bytes;
        const std::size_t index = zero.add_parameter_group(g.parameters, g.config);
        out.allocated += Allocator::instance().stats(cpu).current_bytes - before;
        EXPECT_EQ(zero.group_step(index), 0);
      }
    backward(step, world().rank(), [&](std::size_t index) {
      if (ddp) ddp->gradient_ready(index, true);
    });
    if (ddp) ddp->synchronize();
    out.norms.push_back(zero.step().grad_norm);
    if (ddp) {
      std::vector<Tensor> grouped;  // every grouped parameter's gradient, as step() left the buffer
      for (const GroupSpec& g : groups)
        if (g.added_at <= step)
          for (std::size_t i : g.parameters)
            grouped.push_back(view.gradients.narrow(0, view.tensors[i].offset, view.tensors[i].numel));
      out.buffer_norms.push_back(std::sqrt(grad_sum_squares(grouped)));
    }
  }
  out.params.resize(static_cast<std::size_t>(view.parameters.numel()));
  copy(Tensor(out.params.data(), DType::f32, cpu, {view.parameters.numel()}), view.parameters);
  out.state_bytes = zero.state_bytes();
  out.reduce_scatters = comm.count("reduce_scatter");
  out.all_reduces = comm.count("all_reduce");
  out.broadcasts = comm.count("broadcast");
  return out;
}

// The reference on this rank alone: both halves, averaged, unsharded optimizer.
Outcome run_reference(const RunSetup& s, const DdpModel& view, const std::vector<GroupSpec>& groups,
                      const Backward& backward) {
  const std::int64_t n = view.parameters.numel();
  ReferenceOptimizer reference(view.tensors, n, s.optimizer, s.max_norm);
  float* grads = view.gradients.data_as<float>();  // (n)
  Outcome out;
  for (int step = 0; step < kSteps; ++step) {
    for (const GroupSpec& g : groups)
      if (g.added_at == step) reference.add_group(g);
    backward(step, 0, [](std::size_t) {});
    const std::vector<float> first(grads, grads + n);  // (n) half 0's gradients
    backward(step, 1, [](std::size_t) {});
    for (std::int64_t i = 0; i < n; ++i) grads[i] = (first[i] + grads[i]) / 2.0f;
    out.norms.push_back(reference.step(view.parameters, view.gradients));
  }
  out.params.resize(static_cast<std::size_t>(n));
  copy(Tensor(out.params.data(), DType::f32, Device::cpu(), {n}), view.parameters);
  return out;
}

// Compares a sharded run with the reference; both ranks must hold the same parameters.
void expect_matches(const Outcome& run, const Outcome& ref, double max_norm) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < ref.params.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(run.params[i] - ref.params[i])));
    scale = std::max(scale, static_cast<double>(std::abs(ref.params[i])));
  }
  EXPECT_LE(worst, 4e-7 * std::max(scale, 1.0)) << "largest parameter difference from the unsharded optimizer";
  for (int step = 0; step < kSteps; ++step) EXPECT_NEAR(run.norms[step], ref.norms[step], 1e-9 * ref.norms[step]);
  if (max_norm > 0)  // the clipping must have acted
    EXPECT_GT(*std::max_element(ref.norms.begin(), ref.norms.end()), max_norm);
  const auto all = gather_all(run.params);
  EXPECT_EQ(all[0], all[1]) << "the ranks disagree on the parameters";
}

// Every rank's state bytes: the allocator saw what state_bytes() reports, and each rank holds half of the
// unsharded state (m and v of `grouped` elements), up to the tail of one element.
void expect_half_state(const Outcome& run, std::int64_t grouped) {
  EXPECT_EQ(run.allocated, static_cast<std::int64_t>(run.state_bytes));
  const std::int64_t unsharded = 2 * grouped * static_cast<std::int64_t>(sizeof(float));
  const auto all = gather_all({static_cast<float>(run.state_bytes)});
  EXPECT_EQ(static_cast<std::int64_t>(all[0][0] + all[1][0]), unsharded);
  for (int r = 0; r < 2; ++r) EXPECT_NEAR(all[r][0], unsharded / 2.0, 8.0) << "rank " << r;
}

// ---- the toy model ----

const ToyData& toy_batches() {
  static const ToyData data = toy_data(kSteps * 20, 77);
  return data;
}

// The toy's backward on one half (10 rows) of step's 20 rows.
Backward toy_backward(ToyModel& model) {
  return [&model](int step, int half, const std::function<void(std::size_t)>& ready) {
    model.forward_backward(toy_batches().slice(step * 20 + half * 10, 10), 1.0, false, ready);
  };
}

std::vector<GroupSpec> toy_groups(OptimizerKind kind, int second_at) {
  return {{{ToyModel::mid, ToyModel::bias}, first_config(kind), 0},
          {{ToyModel::out, ToyModel::in}, second_config(kind), second_at}};
}

Outcome toy_sharded(const RunSetup& s) {
  ToyModel model(31 + static_cast<std::uint64_t>(world().rank()));  // ranks start apart
  return run_sharded(s, model.ddp_model(), toy_groups(s.optimizer, s.second_at), toy_backward(model));
}

Outcome toy_reference(const RunSetup& s) {
  ToyModel model(31);  // rank 0's start, which the sharded run broadcasts
  return run_reference(s, model.ddp_model(), toy_groups(s.optimizer, s.second_at), toy_backward(model));
}

TEST(ZeroToy, ReduceScatterModeMatchesTheUnshardedOptimizer) {
  for (double max_norm : {0.0, 0.3})
    for (int second_at : {0, 5}) {
      RunSetup s;
      s.max_norm = max_norm;
      s.second_at = second_at;
      SCOPED_TRACE(s.describe());
      const Outcome run = toy_sharded(s);
      expect_matches(run, toy_reference(s), max_norm);
      expect_half_state(run, ToyModel::kNumel);
      // Per step: one reduce_scatter of the prefix, the 1-element tail all-reduced and broadcast; no
      // all-reduce of the whole gradient; one broadcast at construction.
      EXPECT_EQ(run.reduce_scatters, kSteps);
      EXPECT_EQ(run.all_reduces, kSteps);
      EXPECT_EQ(run.broadcasts, kSteps + 1);
    }
}

TEST(ZeroToy, OwnerBroadcastModeMatchesUnderEveryDdpStrategy) {
  for (DdpStrategy strategy : {DdpStrategy::naive, DdpStrategy::flat, DdpStrategy::overlapped, DdpStrategy::bucketed})
    for (double max_norm : {0.0, 0.3})
      for (int second_at : {0, 5}) {
        RunSetup s;
        s.mode = ZeroMode::owner_broadcast;
        s.strategy = strategy;
        s.max_norm = max_norm;
        s.second_at = second_at;
        SCOPED_TRACE(s.describe());
        const Outcome run = toy_sharded(s);
        expect_matches(run, toy_reference(s), max_norm);
        expect_half_state(run, ToyModel::kNumel);
        EXPECT_EQ(run.reduce_scatters, 0);
        EXPECT_EQ(run.broadcasts, 1 + 2 * kSteps);  // DDP's at start, then each owner's range per step
      }
}

TEST(ZeroToy, SgdAveragesGradientsAndHoldsNoState) {
  for (ZeroMode mode : {ZeroMode::reduce_scatter, ZeroMode::owner_broadcast}) {
    RunSetup s;
    s.mode = mode;
    s.optimizer = OptimizerKind::sgd;
    s.second_at = 5;
    SCOPED_TRACE(s.describe());
    const Outcome run = toy_sharded(s);
    expect_matches(run, toy_reference(s), 0);
    EXPECT_EQ(run.state_bytes, 0u);
    EXPECT_EQ(run.allocated, 0);
  }
}

// Clipping that acts: AdamW folds the factor into its update, so the averaged gradients stay in the
// buffer as DDP left them (their norm is the reported one); SGD scales this rank's range in place first.
// Both still match the unsharded clip-then-step.
TEST(ZeroToy, ClippingLeavesAdamWGradientsUnscaledAndScalesSgdsOwnRange) {
  for (OptimizerKind optimizer : {OptimizerKind::adamw, OptimizerKind::sgd}) {
    RunSetup s;
    s.mode = ZeroMode::owner_broadcast;
    s.optimizer = optimizer;
    s.max_norm = 0.3;
    SCOPED_TRACE(s.describe());
    const Outcome run = toy_sharded(s);
    expect_matches(run, toy_reference(s), s.max_norm);
    ASSERT_EQ(run.buffer_norms.size(), run.norms.size());
    for (std::size_t step = 0; step < run.norms.size(); ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      if (optimizer == OptimizerKind::adamw || run.norms[step] <= s.max_norm)
        EXPECT_NEAR(run.buffer_norms[step], run.norms[step], 1e-9 * run.norms[step]);
      else
        EXPECT_LT(run.buffer_norms[step], run.norms[step] * (1 - 1e-3));
    }
  }
}

TEST(ZeroToy, RejectsSgdWeightDecayAndUnknownModes) {
  ToyModel model(31);
  ZeroOptions options;
  options.optimizer = OptimizerKind::sgd;
  ZeroOptimizer zero(world(), model.ddp_model(), options);
  EXPECT_THROW(zero.add_parameter_group({ToyModel::mid}, AdamWConfig{}), Error);  // default weight decay 0.01
  EXPECT_THROW(parse_zero_mode("zero2"), Error);
  EXPECT_EQ(parse_zero_mode("owner_broadcast"), ZeroMode::owner_broadcast);
}

// ---- a small TransformerLM ----

constexpr std::int64_t kBatch = 4, kSeq = 16;


TokenBatch half_batch(int step, int half) {
  const TokenBatch b = cycle_batch(kBatch, kSeq, small_transformer_config(kSeq).vocab_size, 11, 900 + step);
  const std::int64_t rows = kBatch / 2, T = b.T;
  return {rows, T, std::vector<std::int32_t>(b.inputs.begin() + half * rows * T, b.inputs.begin() + (half + 1) * rows * T),
          std::vector<std::int32_t>(b.targets.begin() + half * rows * T, b.targets.begin() + (half + 1) * rows * T)};
}

Backward transformer_backward(TransformerLM& model) {
  return [&model](int step, int half, const std::function<void(std::size_t)>& ready) {
    const TokenBatch b = half_batch(step, half);
    BackwardOptions options;
    options.on_gradient_ready = [&](const ParameterInfo& info, const Tensor&) { ready(info.index); };
    model.forward_backward(b.input_ids(), b.target_ids(), options);
  };
}

// Matrices (decay) from the start; the RMSNorm weights (no decay, their own lr) join at step 5.
std::vector<GroupSpec> transformer_groups(const ParameterLayout& layout) {
  GroupSpec matrices{{}, first_config(OptimizerKind::adamw), 0};
  GroupSpec norms{{}, second_config(OptimizerKind::adamw), 5};
  for (const ParameterInfo& info : layout.tensors())
    (info.kind == ParameterKind::norm ? norms : matrices).parameters.push_back(info.index);
  return {matrices, norms};
}

Outcome transformer_run(const RunSetup& s, bool sharded) {
  ModelOptions options = tiny_options(Precision::fp32, AttentionImpl::flash, kBatch, kSeq);
  if (sharded) options.seed += static_cast<std::uint64_t>(world().rank());  // ranks start apart
  TransformerLM model(small_transformer_config(kSeq), options);
  const std::vector<GroupSpec> groups = transformer_groups(model.layout());
  return sharded ? run_sharded(s, ddp_model(model), groups, transformer_backward(model))
                 : run_reference(s, ddp_model(model), groups, transformer_backward(model));
}

TEST(ZeroTransformer, BothModesMatchTheUnshardedOptimizerWithAGroupAddedMidTraining) {
  RunSetup s;
  s.max_norm = 1.0;
  s.second_at = 5;
  const Outcome reference = transformer_run(s, false);
  const std::int64_t numel = ParameterLayout(small_transformer_config(kSeq)).numel();
  for (ZeroMode mode : {ZeroMode::reduce_scatter, ZeroMode::owner_broadcast}) {
    s.mode = mode;
    SCOPED_TRACE(s.describe());
    const Outcome run = transformer_run(s, true);
    expect_matches(run, reference, s.max_norm);
    expect_half_state(run, numel);
  }
}

}  // namespace
}  // namespace ft::test
