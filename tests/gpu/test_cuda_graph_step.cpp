// test_cuda_graph_step.cpp — GraphedTrainStep against the eager Trainer on the GPU: from the same
// initialisation and batches, five graphed steps (warm-up, capture + launch, three replays) give the eager
// steps' losses, gradient norms and learning rates, and after them the same parameters and AdamW state, bit
// for bit — tiny and a small-ish model, fp32 and bf16, global-norm clipping (and a bound the norm stays
// under) and a cosine schedule with warm-up, the loss read after every step or only at the end; flash and
// (tiny fp32) naive attention. Then the refusals: CPU model, legacy default stream, gradient accumulation,
// gradient-ready and backward-start hooks, external optimizer, a batch of another shape, ids on the device or
// out of range.
// Run on a GPU machine: ./build/bin/gpu_test_cuda_graph_step
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "model/graphed_step.h"
#include "model/trainer.h"

namespace ft {
namespace {

const Device kGpu = Device::cuda(0);

ModelConfig small_ish() {
  ModelConfig c;
  c.name = "small-ish";
  c.vocab_size = 1000;
  c.context_length = 128;
  c.d_model = 256;
  c.d_ff = 1024;
  c.num_layers = 4;
  c.num_heads = 4;
  c.validate();
  return c;
}

struct Case {
  std::string name;
  ModelConfig model;
  std::int64_t B = 4, T = 16;
  Precision precision = Precision::fp32;
  AttentionImpl attention = AttentionImpl::flash;
  double clip = 0.5;  // max global gradient norm: under the norms of these runs (about 1-2), so they clip
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ModelOptions options_for(const Case& c, const Stream& stream) {
  ModelOptions o;
  o.precision = c.precision;
  o.attention = c.attention;
  o.max_batch = c.B;
  o.max_seq_len = c.T;
  o.seed = 1234;
  o.device = kGpu;
  o.stream = stream;
  return o;
}

TrainerConfig trainer_config(double clip = 0.5) {
  TrainerConfig t;
  t.max_grad_norm = clip;
  t.schedule = CosineSchedule{3e-3, 3e-4, 2, 5};  // warm-up over steps 0 and 1, cosine to step 5
  return t;
}

// (B, T) random inputs and targets in host memory.
struct HostBatch {
  std::int64_t B, T;
  std::vector<std::int32_t> inputs, targets;  // (B, T) each
  HostBatch(std::int64_t b, std::int64_t t, std::int64_t vocab, std::uint64_t seed)
      : B(b), T(t), inputs(static_cast<std::size_t>(b * t)), targets(static_cast<std::size_t>(b * t)) {
    std::mt19937_64 gen(seed);
    std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(vocab - 1));
    for (auto& x : inputs) x = id(gen);
    for (auto& x : targets) x = id(gen);
  }
  TokenIds input_ids() const { return {inputs.data(), {B, T}, Device::cpu()}; }
  TokenIds target_ids() const { return {targets.data(), {B, T}, Device::cpu()}; }
};

// The batch copied to the GPU, for the eager Trainer (TransformerLM reads ids on its device).
struct DeviceBatch {
  Shape shape;
  Buffer ids;  // (2, B, T) inputs then targets
  explicit DeviceBatch(const HostBatch& b) : shape{b.B, b.T} {
    const auto n = static_cast<std::int64_t>(b.inputs.size());
    ids = Buffer(static_cast<std::size_t>(2 * n) * sizeof(std::int32_t), kGpu, "test batch");
    std::vector<std::int32_t> both(b.inputs);
    both.insert(both.end(), b.targets.begin(), b.targets.end());
    copy(Tensor(ids.data(), DType::f32, kGpu, {2 * n}), Tensor(both.data(), DType::f32, Device::cpu(), {2 * n}));
  }
  TokenIds inputs() const { return {data(), shape, kGpu}; }
  TokenIds targets() const { return {data() + shape_numel(shape), shape, kGpu}; }
  const std::int32_t* data() const { return static_cast<const std::int32_t*>(ids.data()); }
};

struct RunLog {
  std::vector<double> losses, norms, lrs;
  std::vector<double> params, exp_avg, exp_avg_sq;
  std::int64_t steps = 0;
};

void finish(RunLog& run, const TransformerLM& model, const Trainer& trainer) {
  run.params = read_as_double(model.parameters().flat());
  run.exp_avg = read_as_double(trainer.exp_avg().flat());
  run.exp_avg_sq = read_as_double(trainer.exp_avg_sq().flat());
  run.steps = trainer.step();
}

constexpr int kSteps = 5;

RunLog eager_run(const Case& c) {
  TransformerLM model(c.model, options_for(c, Stream()));
  Trainer trainer(model, trainer_config(c.clip));
  RunLog run;
  for (int step = 0; step < kSteps; ++step) {
    const DeviceBatch batch(HostBatch(c.B, c.T, c.model.vocab_size, 100 + static_cast<std::uint64_t>(step)));
    trainer.zero_grads();
    run.losses.push_back(trainer.forward_backward(batch.inputs(), batch.targets()));
    const StepResult r = trainer.optimizer_step();
    run.norms.push_back(r.grad_norm);
    run.lrs.push_back(r.lr);
  }
  finish(run, model, trainer);
  return run;
}

// read_every_step: the loss and norm after each step; otherwise only after the last (the host never waits
// in between).
RunLog graphed_run(const Case& c, bool read_every_step) {
  const Stream stream = Stream::create(kGpu);
  TransformerLM model(c.model, options_for(c, stream));
  Trainer trainer(model, trainer_config(c.clip));
  GraphedTrainStep graphed(trainer);
  RunLog run;
  for (int step = 0; step < kSteps; ++step) {
    const HostBatch batch(c.B, c.T, c.model.vocab_size, 100 + static_cast<std::uint64_t>(step));
    graphed.step(batch.input_ids(), batch.target_ids());
    EXPECT_EQ(graphed.graphed(), step >= 1) << "step " << step + 1;
    if (read_every_step || step == kSteps - 1) {
      const StepResult r = graphed.result();
      EXPECT_EQ(r.step, step + 1);
      run.losses.push_back(graphed.loss());
      run.norms.push_back(r.grad_norm);
      run.lrs.push_back(r.lr);
    }
  }
  finish(run, model, trainer);
  return run;
}

// How many elements differ, and the first that does.
std::string differences(const std::vector<double>& got, const std::vector<double>& expected) {
  if (got.size() != expected.size()) return "sizes differ";
  std::size_t count = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != expected[i] && count++ == 0) first = i;
  if (count == 0) return "";
  return std::to_string(count) + " of " + std::to_string(got.size()) + " differ, first at " + std::to_string(first) +
         ": " + std::to_string(got[first]) + " vs " + std::to_string(expected[first]);
}

class GraphedStep : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(GraphedStep, MatchesTheEagerStepsBitForBit) {
  const auto& [c, read_every_step] = GetParam();
  const RunLog expected = eager_run(c);
  const RunLog got = graphed_run(c, read_every_step);
  if (c.clip < 1)
    EXPECT_GT(expected.norms.front(), c.clip) << "the steps are meant to clip";
  else
    EXPECT_LT(expected.norms.front(), c.clip) << "the steps are meant not to clip";
  if (read_every_step) {
    EXPECT_EQ(got.losses, expected.losses);
    EXPECT_EQ(got.norms, expected.norms);
    EXPECT_EQ(got.lrs, expected.lrs);
  } else {
    ASSERT_EQ(got.losses.size(), 1u);
    EXPECT_EQ(got.losses.back(), expected.losses.back());
    EXPECT_EQ(got.norms.back(), expected.norms.back());
    EXPECT_EQ(got.lrs.back(), expected.lrs.back());
  }
  EXPECT_EQ(got.steps, kSteps);
  EXPECT_EQ(differences(got.params, expected.params), "") << "parameters";
  EXPECT_EQ(differences(got.exp_avg, expected.exp_avg), "") << "exp_avg";
  EXPECT_EQ(differences(got.exp_avg_sq, expected.exp_avg_sq), "") << "exp_avg_sq";
}

std::vector<Case> cases() {
  const ModelConfig tiny = model_config("tiny");
  return {{"tiny_fp32", tiny},
          {"tiny_bf16", tiny, 4, 16, Precision::bf16},
          {"tiny_fp32_naive", tiny, 4, 16, Precision::fp32, AttentionImpl::naive},
          {"tiny_fp32_unclipped", tiny, 4, 16, Precision::fp32, AttentionImpl::flash, 10.0},
          {"small_ish_fp32", small_ish(), 4, 128},
          {"small_ish_bf16", small_ish(), 4, 128, Precision::bf16}};
}

INSTANTIATE_TEST_SUITE_P(ModelsAndPrecisions, GraphedStep,
                         ::testing::Combine(::testing::ValuesIn(cases()), ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param).name +
                                  (std::get<1>(info.param) ? "_read_every_step" : "_read_at_end");
                         });

// Fails unless fn throws ft::Error of `kind` whose message holds every part.
void expect_error(const std::function<void()>& fn, ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& p : parts) EXPECT_NE(e.message().find(p), std::string::npos) << "missing '" << p << "' in: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected ft::Error (" << to_string(kind) << ") was not thrown";
}

TEST(GraphedStepErrors, RefusesWhatItCannotGraph) {
  const Case c{"tiny", model_config("tiny")};
  {
    ModelOptions o = options_for(c, Stream());
    o.device = Device::cpu();
    TransformerLM cpu(c.model, o);
    Trainer trainer(cpu, trainer_config());
    expect_error([&] { GraphedTrainStep g(trainer); }, ErrorKind::unsupported, {"CUDA device", "cpu"});
  }
  {
    TransformerLM legacy(c.model, options_for(c, Stream()));
    Trainer trainer(legacy, trainer_config());
    expect_error([&] { GraphedTrainStep g(trainer); }, ErrorKind::unsupported, {"legacy default stream"});
  }
  const Stream stream = Stream::create(kGpu);
  TransformerLM model(c.model, options_for(c, stream));
  TrainerConfig accumulate = trainer_config();
  accumulate.accumulation_steps = 2;
  Trainer two(model, accumulate);
  expect_error([&] { GraphedTrainStep g(two); }, ErrorKind::unsupported, {"GraphedTrainStep", "accumulation_steps is 2"});
  TrainerConfig external = trainer_config();
  external.external_optimizer = true;
  Trainer zero(model, external);
  expect_error([&] { GraphedTrainStep g(zero); }, ErrorKind::unsupported, {"GraphedTrainStep", "external optimizer"});
  Trainer ddp(model, trainer_config());
  ddp.set_gradient_ready_hook([](const ParameterInfo&, const Tensor&, const MicroBatch&) {});
  expect_error([&] { GraphedTrainStep g(ddp); }, ErrorKind::unsupported, {"GraphedTrainStep", "gradient-ready hook"});
}

TEST(GraphedStepErrors, RefusesBadBatchesAndLateHooksAndKeepsWorking) {
  const Case c{"tiny", model_config("tiny")};
  const Stream stream = Stream::create(kGpu);
  TransformerLM model(c.model, options_for(c, stream));
  Trainer trainer(model, trainer_config());
  GraphedTrainStep graphed(trainer);
  expect_error([&] { graphed.loss(); }, ErrorKind::invalid_argument, {"no step has run"});
  const HostBatch batch(4, 16, c.model.vocab_size, 7);
  const HostBatch shorter(4, 8, c.model.vocab_size, 8);

  graphed.step(batch.input_ids(), batch.target_ids());  // fixes (B, T) = (4, 16)
  expect_error([&] { graphed.step(shorter.input_ids(), shorter.target_ids()); }, ErrorKind::invalid_argument,
               {"(B, T) = [4, 16]", "given [4, 8]"});
  graphed.step(batch.input_ids(), batch.target_ids());  // captures
  ASSERT_TRUE(graphed.graphed());
  expect_error([&] { graphed.step(shorter.input_ids(), shorter.target_ids()); }, ErrorKind::invalid_argument,
               {"(B, T) = [4, 16]", "given [4, 8]"});

  HostBatch bad = batch;
  bad.targets[5] = static_cast<std::int32_t>(c.model.vocab_size);
  expect_error([&] { graphed.step(bad.input_ids(), bad.target_ids()); }, ErrorKind::invalid_argument,
               {"token id 97", "targets"});
  const DeviceBatch on_device(batch);
  expect_error([&] { graphed.step(on_device.inputs(), on_device.targets()); }, ErrorKind::invalid_argument,
               {"host memory", "cuda:0"});
  trainer.set_backward_start_hook([] {});
  expect_error([&] { graphed.step(batch.input_ids(), batch.target_ids()); }, ErrorKind::unsupported,
               {"backward-start hook"});
  trainer.set_backward_start_hook({});

  EXPECT_EQ(trainer.step(), 2) << "refused steps are not counted";
  graphed.step(batch.input_ids(), batch.target_ids());  // a replay after the refusals
  EXPECT_EQ(graphed.result().step, 3);
  EXPECT_TRUE(std::isfinite(graphed.loss()));
}

}  // namespace
}  // namespace ft
