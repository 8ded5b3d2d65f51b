// test_trainer_enqueue_step.cpp — the step without host reads on the CPU (what GraphedTrainStep captures on a
// GPU): the ops that keep their scalars in memory (cross_entropy_to, grad_sum_squares_to,
// clip_grad_norm_from, adamw_step_from with adamw_factors) give their read-back forms' results bit for bit;
// Trainer::enqueue_step with StepSlots matches forward_backward + optimizer_step bit for bit over five steps
// of a cosine schedule with clipping (fp32 and bf16); and what stops a step from running without the host,
// or a graph on the CPU, is refused with errors naming the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/tensor_io.h"
#include "model/graphed_step.h"
#include "model/trainer.h"
#include "ops/cross_entropy.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "test_model_util.h"
#include "test_ops_util.h"

namespace ft {
namespace {

const ModelConfig kTiny = model_config("tiny");

// An fp32 host tensor of normal(0, std) values (std 0: zeros).
OwnedTensor random_tensor(Shape shape, std::uint64_t seed, double std = 1.0) {
  OwnedTensor t(std::move(shape), DType::f32, Device::cpu(), "test");
  if (std > 0)
    fill_normal(t, seed, 0.0, std);
  else
    fill_constant(t, 0.0);
  return t;
}

TEST(StepOps, CrossEntropyToLeavesTheReturnedLoss) {
  const OwnedTensor logits_a = random_tensor({6, 10}, 1), logits_b = random_tensor({6, 10}, 1);
  const std::vector<std::int32_t> ids = {0, 9, 3, 3, 7, 1};  // (6)
  const TokenIds targets{ids.data(), {6}, Device::cpu()};
  const double expected = cross_entropy(logits_a, targets, logits_a, {0.5});
  double loss = 0;
  cross_entropy_to(&loss, logits_b, targets, logits_b, {0.5});
  EXPECT_EQ(loss, expected);
  EXPECT_EQ(read_as_double(logits_b), read_as_double(logits_a));  // the same gradient, in place
  test::expect_error([&] { cross_entropy_to(nullptr, logits_b, targets, Tensor()); }, ErrorKind::invalid_argument,
                     {"cross_entropy_to", "loss", "null"});
  const std::vector<std::int32_t> bad = {0, 9, 3, 10, 7, 1};  // (6) 10 is outside the vocabulary
  test::expect_error([&] { cross_entropy_to(&loss, logits_b, {bad.data(), {6}, Device::cpu()}, Tensor()); },
                     ErrorKind::invalid_argument, {"cross_entropy_to", "token id 10", "position [3]"});
}

TEST(StepOps, ClippingBySumOfSquaresInMemoryMatchesClipGradNorm) {
  for (const double max_norm : {0.5, 1e6}) {  // clipping, and a bound the norm stays under
    const OwnedTensor a1 = random_tensor({40000}, 2, 1e-2), b1 = random_tensor({3, 7}, 3);
    const OwnedTensor a2 = random_tensor({40000}, 2, 1e-2), b2 = random_tensor({3, 7}, 3);
    const double norm = clip_grad_norm({a1, b1}, max_norm);
    double total = 0;
    grad_sum_squares_to(&total, {a2, b2});
    EXPECT_EQ(std::sqrt(total), norm);
    clip_grad_norm_from({a2, b2}, &total, max_norm);
    EXPECT_EQ(read_as_double(a2), read_as_double(a1)) << "max_norm " << max_norm;
    EXPECT_EQ(read_as_double(b2), read_as_double(b1)) << "max_norm " << max_norm;
  }
  // A NaN norm cannot raise from a device: the gradients stay as they are.
  const OwnedTensor g = random_tensor({5}, 4);
  const auto before = read_as_double(g);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  clip_grad_norm_from({g}, &nan, 1.0);
  EXPECT_EQ(read_as_double(g), before);
  double total = 0;
  test::expect_error([&] { grad_sum_squares_to(&total, {}); }, ErrorKind::invalid_argument,
                     {"grad_sum_squares_to", "at least one"});
  test::expect_error([&] { clip_grad_norm_from({g}, nullptr, 1.0); }, ErrorKind::invalid_argument,
                     {"clip_grad_norm_from", "sum_squares", "null"});
  test::expect_error([&] { clip_grad_norm_from({g}, &total, 0.0); }, ErrorKind::invalid_argument,
                     {"clip_grad_norm_from", "max_norm must be > 0"});
}

TEST(StepOps, AdamWFromFactorsInMemoryMatchesAdamWStep) {
  AdamWConfig config;
  config.lr = 3e-3;
  config.weight_decay = 0.1;
  const Shape shape{1000};
  const OwnedTensor p1 = random_tensor(shape, 5), m1 = random_tensor(shape, 6, 0.1), v1 = random_tensor(shape, 7, 0.0);
  const OwnedTensor p2 = random_tensor(shape, 5), m2 = random_tensor(shape, 6, 0.1), v2 = random_tensor(shape, 7, 0.0);
  for (std::int64_t t = 1; t <= 4; ++t) {
    const OwnedTensor g = random_tensor(shape, 10 + static_cast<std::uint64_t>(t));
    adamw_step(p1, g, m1, v1, config, t);
    const AdamWFactors factors = adamw_factors(config, t);
    adamw_step_from(p2, g, m2, v2, &factors);
  }
  EXPECT_EQ(read_as_double(p2), read_as_double(p1));
  EXPECT_EQ(read_as_double(m2), read_as_double(m1));
  EXPECT_EQ(read_as_double(v2), read_as_double(v1));
  test::expect_error([&] { adamw_factors(config, 0); }, ErrorKind::invalid_argument, {"step", ">= 1", "given 0"});
  config.lr = -1;
  test::expect_error([&] { adamw_factors(config, 1); }, ErrorKind::invalid_argument, {"lr", "given -1"});
  test::expect_error([&] { adamw_step_from(p2, p2, m2, v2, nullptr); }, ErrorKind::invalid_argument,
                     {"adamw_step_from", "factors", "null"});
}

TrainerConfig scheduled_config(double max_grad_norm) {
  TrainerConfig c;
  c.schedule = CosineSchedule{3e-3, 3e-4, 2, 5};  // warm-up over steps 0, 1; cosine to step 5
  c.max_grad_norm = max_grad_norm;
  return c;
}

struct StepLog {
  std::vector<double> losses, norms, lrs;
};

class EnqueueStep : public ::testing::TestWithParam<std::tuple<Precision, double>> {};

TEST_P(EnqueueStep, MatchesForwardBackwardAndOptimizerStepBitForBit) {
  const auto [precision, max_grad_norm] = GetParam();
  const TrainerConfig config = scheduled_config(max_grad_norm);
  TransformerLM eager_model(kTiny, test::tiny_options(precision));
  TransformerLM enqueued_model(kTiny, test::tiny_options(precision));
  Trainer eager(eager_model, config), enqueued(enqueued_model, config);
  StepLog expected, got;
  StepSlots slots;
  for (int step = 0; step < 5; ++step) {
    const auto batch = test::random_batch(4, 16, kTiny.vocab_size, 300 + static_cast<std::uint64_t>(step));
    eager.zero_grads();
    expected.losses.push_back(eager.forward_backward(batch.input_ids(), batch.target_ids()));
    const StepResult r = eager.optimizer_step();
    expected.norms.push_back(r.grad_norm);
    expected.lrs.push_back(r.lr);

    slots.adamw = enqueued.step_factors();
    got.lrs.push_back(enqueued.learning_rate());
    enqueued.enqueue_step(batch.input_ids(), batch.target_ids(), &slots);
    EXPECT_EQ(enqueued.step(), step) << "enqueue_step leaves the count to count_step";
    enqueued.count_step();
    got.losses.push_back(slots.loss);
    got.norms.push_back(std::sqrt(slots.grad_sum_squares));
  }
  EXPECT_EQ(got.losses, expected.losses);
  EXPECT_EQ(got.norms, expected.norms);
  EXPECT_EQ(got.lrs, expected.lrs);
  EXPECT_EQ(enqueued.step(), eager.step());
  if (max_grad_norm == 0.5) EXPECT_GT(expected.norms.front(), max_grad_norm) << "the steps should clip";
  EXPECT_EQ(read_as_double(enqueued_model.parameters().flat()), read_as_double(eager_model.parameters().flat()));
  EXPECT_EQ(read_as_double(enqueued.exp_avg().flat()), read_as_double(eager.exp_avg().flat()));
  EXPECT_EQ(read_as_double(enqueued.exp_avg_sq().flat()), read_as_double(eager.exp_avg_sq().flat()));
}

INSTANTIATE_TEST_SUITE_P(PrecisionsAndClipping, EnqueueStep,
                         ::testing::Combine(::testing::Values(Precision::fp32, Precision::bf16),
                                            ::testing::Values(0.0, 0.5)),
                         [](const auto& info) {
                           return std::string(name_of(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) > 0 ? "_clipped" : "_unclipped");
                         });

TEST(EnqueueStep, RefusesWhatNeedsTheHostMidStep) {
  TransformerLM model(kTiny, test::tiny_options());
  const auto batch = test::random_batch(4, 16, kTiny.vocab_size, 9);
  StepSlots slots;
  const auto enqueue = [&](Trainer& trainer) {
    return [&batch, &slots, t = &trainer] { t->enqueue_step(batch.input_ids(), batch.target_ids(), &slots); };
  };

  TrainerConfig accumulate;
  accumulate.accumulation_steps = 2;
  Trainer two(model, accumulate);
  test::expect_error(enqueue(two), ErrorKind::unsupported, {"Trainer::enqueue_step", "accumulation_steps is 2"});

  TrainerConfig external;
  external.external_optimizer = true;
  Trainer zero(model, external);
  test::expect_error(enqueue(zero), ErrorKind::unsupported, {"Trainer::enqueue_step", "external optimizer"});

  Trainer trainer(model, {});
  trainer.set_gradient_ready_hook([](const ParameterInfo&, const Tensor&, const MicroBatch&) {});
  test::expect_error(enqueue(trainer), ErrorKind::unsupported, {"gradient-ready hook"});
  trainer.set_gradient_ready_hook({});
  trainer.set_backward_start_hook([] {});
  test::expect_error(enqueue(trainer), ErrorKind::unsupported, {"backward-start hook"});
  trainer.set_backward_start_hook({});

  trainer.forward_backward(batch.input_ids(), batch.target_ids());
  test::expect_error(enqueue(trainer), ErrorKind::invalid_argument, {"1 micro-batch(es)", "zero_grads()"});
  trainer.zero_grads();
  test::expect_error([&] { trainer.enqueue_step(batch.input_ids(), batch.target_ids(), nullptr); },
                     ErrorKind::invalid_argument, {"slots", "null"});
  enqueue(trainer)();
  EXPECT_TRUE(std::isfinite(slots.loss));
}

TEST(GraphedTrainStep, NeedsACudaDevice) {
  TransformerLM model(kTiny, test::tiny_options());
  Trainer trainer(model, {});
  test::expect_error([&] { GraphedTrainStep graphed(trainer); }, ErrorKind::unsupported,
                     {"GraphedTrainStep", "CUDA device", "cpu"});
}

}  // namespace
}  // namespace ft
