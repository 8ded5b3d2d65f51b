// test_model_training.cpp — the training-step API on the tiny model: gradient accumulation over two
// micro-batches equals one batch of both, the loss falls on a learnable task under AdamW, bf16 mixed
// precision stays close to fp32, runs are bit-identical, the schedule and clipping drive the step (the
// clipping folded into AdamW: clip-then-step bit for bit, the gradients left unclipped), the
// trainer's hook sees micro-batch positions, and misuse gives clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/tensor_io.h"
#include "model/trainer.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "test_model_util.h"
#include "test_ops_util.h"

namespace ft {
namespace {

const ModelConfig kTiny = model_config("tiny");

// The first `rows` sequences of a batch, or the rest.
test::TokenBatch rows_of(const test::TokenBatch& b, std::int64_t first, std::int64_t count) {
  test::TokenBatch out{count, b.T, {}, {}};
  out.inputs.assign(b.inputs.begin() + first * b.T, b.inputs.begin() + (first + count) * b.T);
  out.targets.assign(b.targets.begin() + first * b.T, b.targets.begin() + (first + count) * b.T);
  return out;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

TEST(Training, AccumulatingTwoMicroBatchesEqualsOneBatchOfBoth) {
  const auto batch = test::random_batch(4, 16, kTiny.vocab_size, 21);
  TransformerLM whole(kTiny, test::tiny_options(Precision::fp32, AttentionImpl::flash, 4));
  Trainer one(whole, {});
  const double loss = one.forward_backward(batch.input_ids(), batch.target_ids());

  TransformerLM split(kTiny, test::tiny_options(Precision::fp32, AttentionImpl::flash, 2));
  TrainerConfig config;
  config.accumulation_steps = 2;
  Trainer two(split, config);
  const auto first = rows_of(batch, 0, 2), second = rows_of(batch, 2, 2);
  const double l1 = two.forward_backward(first.input_ids(), first.target_ids());
  const double l2 = two.forward_backward(second.input_ids(), second.target_ids());

  EXPECT_NEAR((l1 + l2) / 2, loss, 1e-6);
  const auto expected = read_as_double(whole.gradients().flat()), got = read_as_double(split.gradients().flat());
  ASSERT_GT(max_abs(expected), 1e-2);
  test::expect_close(got, expected, 1e-6, "gradients");  // fp32 round-off of differently ordered sums

  // A third micro-batch before the step is refused; after zero_grads the first micro-batch overwrites.
  test::expect_error([&] { two.forward_backward(first.input_ids(), first.target_ids()); }, ErrorKind::invalid_argument,
                     {"accumulation_steps is 2", "zero_grads"});
  two.zero_grads();
  two.forward_backward(first.input_ids(), first.target_ids());
  two.forward_backward(second.input_ids(), second.target_ids());
  EXPECT_EQ(read_as_double(split.gradients().flat()), got);
}

TEST(Training, LossFallsOnALearnableTask) {
  TransformerLM model(kTiny, test::tiny_options());
  TrainerConfig config;
  config.adamw.lr = 1e-2;
  config.schedule = CosineSchedule{1e-2, 1e-3, 5, 50};
  config.max_grad_norm = 1.0;
  Trainer trainer(model, config);
  std::vector<double> losses;
  for (int step = 0; step < 50; ++step) {
    const auto batch = test::cycle_batch(4, 16, kTiny.vocab_size, 12, 1000 + step);
    trainer.zero_grads();
    losses.push_back(trainer.forward_backward(batch.input_ids(), batch.target_ids()));
    trainer.optimizer_step();
  }
  EXPECT_GT(losses.front(), 0.8 * std::log(static_cast<double>(kTiny.vocab_size)));  // untrained: near uniform
  const double last = (losses[47] + losses[48] + losses[49]) / 3;
  EXPECT_LT(last, 0.05 * losses.front()) << "first " << losses.front() << ", last " << last;
  const auto held_out = test::cycle_batch(4, 16, kTiny.vocab_size, 12, 99);
  EXPECT_LT(model.forward(held_out.input_ids(), held_out.target_ids()), 0.05 * losses.front());
}

TEST(Training, Bf16MixedPrecisionStaysCloseToFp32) {
  const auto batch = test::random_batch(4, 16, kTiny.vocab_size, 22);
  TransformerLM fp32(kTiny, test::materialised(test::tiny_options(Precision::fp32)));
  TransformerLM bf16(kTiny, test::materialised(test::tiny_options(Precision::bf16)));
  EXPECT_EQ(read_as_double(fp32.parameters().flat()), read_as_double(bf16.parameters().flat()));
  const double l32 = fp32.forward(batch.input_ids(), batch.target_ids());
  const double l16 = bf16.forward(batch.input_ids(), batch.target_ids());
  EXPECT_NEAR(l16, l32, 2e-3 * l32);
  EXPECT_NE(l16, l32);  // bf16 operands really are used
  const auto logits32 = read_as_double(fp32.logits()), logits16 = read_as_double(bf16.logits());
  test::expect_close(logits16, logits32, 3e-2, "logits");

  fp32.forward_backward(batch.input_ids(), batch.target_ids());
  bf16.forward_backward(batch.input_ids(), batch.target_ids());
  for (const ParameterInfo& info : fp32.layout().tensors()) {
    const auto g32 = read_as_double(fp32.gradients()[info.index]), g16 = read_as_double(bf16.gradients()[info.index]);
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < g32.size(); ++i) diff += (g16[i] - g32[i]) * (g16[i] - g32[i]), norm += g32[i] * g32[i];
    EXPECT_LT(std::sqrt(diff / norm), 5e-2) << info.name;  // relative error of the whole tensor
  }

  // A few training steps track each other.
  Trainer t32(fp32, {}), t16(bf16, {});
  for (int step = 0; step < 5; ++step) {
    const auto b = test::cycle_batch(4, 16, kTiny.vocab_size, 12, 500 + step);
    t32.zero_grads(), t16.zero_grads();
    const double a = t32.forward_backward(b.input_ids(), b.target_ids());
    const double c = t16.forward_backward(b.input_ids(), b.target_ids());
    EXPECT_NEAR(c, a, 2e-2 * a) << "step " << step;
    t32.optimizer_step(), t16.optimizer_step();
  }
}

// Three accumulated AdamW steps with clipping and a schedule; returns the parameters' bytes.
std::vector<char> train_three_steps(Precision precision) {
  TransformerLM model(kTiny, test::tiny_options(precision, AttentionImpl::flash, 2));
  TrainerConfig config;
  config.accumulation_steps = 2;
  config.max_grad_norm = 0.5;
  config.schedule = CosineSchedule{3e-3, 3e-4, 1, 3};
  Trainer trainer(model, config);
  for (int step = 0; step < 3; ++step) {
    trainer.zero_grads();
    for (int micro = 0; micro < 2; ++micro) {
      const auto b = test::random_batch(2, 16, kTiny.vocab_size, 40 + 2 * step + micro);
      trainer.forward_backward(b.input_ids(), b.target_ids());
    }
    trainer.optimizer_step();
  }
  const Tensor& p = model.parameters().flat();
  const char* bytes = static_cast<const char*>(p.data());
  return std::vector<char>(bytes, bytes + p.numel() * 4);
}

TEST(Training, RunsAreBitIdentical) {
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    const auto a = train_three_steps(precision), b = train_three_steps(precision);
    EXPECT_TRUE(a == b) << name_of(precision);
  }
}

TEST(Trainer, ScheduleClippingAndStepCount) {
  TransformerLM model(kTiny, test::tiny_options());
  TrainerConfig config;
  config.schedule = CosineSchedule{1e-3, 1e-4, 2, 10};
  config.max_grad_norm = 1e-3;  // small: every step clips
  Trainer trainer(model, config);
  const auto batch = test::random_batch(2, 8, kTiny.vocab_size, 31);
  test::expect_error([&] { trainer.optimizer_step(); }, ErrorKind::invalid_argument, {"no micro-batch"});
  for (std::int64_t step = 0; step < 3; ++step) {
    EXPECT_DOUBLE_EQ(trainer.learning_rate(), learning_rate(*config.schedule, step));
    trainer.zero_grads();
    trainer.forward_backward(batch.input_ids(), batch.target_ids());
    const auto g = read_as_double(model.gradients().flat());
    const double norm = std::sqrt(test::dot(g, g));
    const Shape shape = model.parameters().flat().shape();
    // The step by hand: clip a copy of the gradients in place, then AdamW on copies of the state.
    auto p = test::tensor_of(shape, DType::f32, read_as_double(model.parameters().flat()));
    auto m = test::tensor_of(shape, DType::f32, read_as_double(trainer.exp_avg().flat()));
    auto v = test::tensor_of(shape, DType::f32, read_as_double(trainer.exp_avg_sq().flat()));
    auto clipped = test::tensor_of(shape, DType::f32, g);
    EXPECT_NEAR(clip_grad_norm({clipped}, config.max_grad_norm), norm, 1e-6 * norm);
    EXPECT_NEAR(std::sqrt(grad_sum_squares({clipped})), 1e-3, 1e-8);
    AdamWConfig adamw = config.adamw;
    adamw.lr = learning_rate(*config.schedule, step);
    adamw_step(p, clipped, m, v, adamw, step + 1);

    const StepResult r = trainer.optimizer_step();
    EXPECT_EQ(r.step, step + 1);
    EXPECT_DOUBLE_EQ(r.lr, learning_rate(*config.schedule, step));
    EXPECT_NEAR(r.grad_norm, norm, 1e-6 * norm);
    // The clipping is folded into the update: clip-then-step's parameters and state, gradients unclipped.
    EXPECT_EQ(read_as_double(model.parameters().flat()), read_as_double(p));
    EXPECT_EQ(read_as_double(trainer.exp_avg().flat()), read_as_double(m));
    EXPECT_EQ(read_as_double(trainer.exp_avg_sq().flat()), read_as_double(v));
    EXPECT_EQ(read_as_double(model.gradients().flat()), g);
  }
  EXPECT_EQ(trainer.step(), 3);
  const MemoryReport m = trainer.memory();
  EXPECT_EQ(m.optimizer_state, 2 * m.parameters);
  EXPECT_EQ(m.total(), model.memory().total() + m.optimizer_state);
}

TEST(Trainer, AdamWStepMatchesTheOpOnTheFlatBuffers) {
  TransformerLM model(kTiny, test::tiny_options());
  TrainerConfig config;
  config.adamw.lr = 2e-3;
  config.adamw.weight_decay = 0.1;
  Trainer trainer(model, config);
  const auto batch = test::random_batch(2, 8, kTiny.vocab_size, 32);
  trainer.forward_backward(batch.input_ids(), batch.target_ids());
  const auto p0 = read_as_double(model.parameters().flat()), g = read_as_double(model.gradients().flat());
  trainer.optimizer_step();
  // First step from zero state: m = 0.1 g, v = 0.001 g^2, update = lr * g / (|g| + eps) after decay.
  const auto p1 = read_as_double(model.parameters().flat());
  for (std::size_t i = 0; i < p0.size(); i += 97) {
    const double decayed = p0[i] * (1 - 2e-3 * 0.1);
    const double expected = decayed - 2e-3 * g[i] / (std::fabs(g[i]) + 1e-8);
    ASSERT_NEAR(p1[i], expected, 1e-6) << i;
  }
}

TEST(Trainer, HookSeesMicroBatchPositions) {
  TransformerLM model(kTiny, test::tiny_options(Precision::fp32, AttentionImpl::flash, 2));
  TrainerConfig config;
  config.accumulation_steps = 3;
  Trainer trainer(model, config);
  std::vector<std::pair<std::int64_t, bool>> seen;  // (micro index, last) per call
  trainer.set_gradient_ready_hook([&](const ParameterInfo& info, const Tensor&, const MicroBatch& micro) {
    if (info.index == ParameterLayout::embedding_index()) seen.emplace_back(micro.index, micro.last);
  });
  for (int micro = 0; micro < 3; ++micro) {
    const auto b = test::random_batch(2, 8, kTiny.vocab_size, 50 + micro);
    trainer.forward_backward(b.input_ids(), b.target_ids());
  }
  EXPECT_EQ(seen, (std::vector<std::pair<std::int64_t, bool>>{{0, false}, {1, false}, {2, true}}));
}

TEST(TransformerLM, LogitsAreCausal) {
  TransformerLM model(kTiny, test::materialised(test::tiny_options(Precision::fp32, AttentionImpl::flash, 1, 12)));
  auto batch = test::random_batch(1, 12, kTiny.vocab_size, 70);
  model.forward(batch.input_ids(), batch.target_ids());
  const auto before = read_as_double(model.logits());
  batch.inputs[7] = (batch.inputs[7] + 1) % 97;  // change token 7: positions 0..6 must not see it
  model.forward(batch.input_ids(), batch.target_ids());
  const auto after = read_as_double(model.logits());
  const std::size_t V = 97;
  for (std::size_t i = 0; i < 7 * V; ++i) ASSERT_EQ(after[i], before[i]) << "position " << i / V;
  double changed = 0;
  for (std::size_t i = 7 * V; i < 8 * V; ++i) changed = std::max(changed, std::fabs(after[i] - before[i]));
  EXPECT_GT(changed, 1e-3);
}

TEST(TransformerLM, MalformedBatchesGiveClearErrors) {
  TransformerLM model(kTiny, test::materialised(test::tiny_options(Precision::fp32, AttentionImpl::flash, 2, 8)));
  const auto ok = test::random_batch(2, 8, kTiny.vocab_size, 60);
  const auto long_batch = test::random_batch(1, 9, kTiny.vocab_size, 61);
  test::expect_error([&] { model.forward(long_batch.input_ids(), long_batch.target_ids()); },
                     ErrorKind::invalid_argument, {"max_seq_len = 8", "9"});
  const auto wide = test::random_batch(3, 4, kTiny.vocab_size, 62);
  test::expect_error([&] { model.forward(wide.input_ids(), wide.target_ids()); }, ErrorKind::invalid_argument,
                     {"max_batch = 2", "3"});
  const TokenIds short_targets{ok.targets.data(), {2, 7}, Device::cpu()};
  test::expect_error([&] { model.forward(ok.input_ids(), short_targets); }, ErrorKind::invalid_argument,
                     {"targets", "[2, 8]", "[2, 7]"});
  auto bad = ok;
  bad.inputs[5] = 97;
  test::expect_error([&] { model.forward(bad.input_ids(), bad.target_ids()); }, ErrorKind::invalid_argument, {"97"});
  test::expect_error([&] { model.logits(); }, ErrorKind::invalid_argument, {"forward()"});
  model.forward(ok.input_ids(), ok.target_ids());
  EXPECT_EQ(model.logits().shape(), (Shape{2, 8, 97}));
  TransformerLM fused(kTiny, test::tiny_options(Precision::fp32, AttentionImpl::flash, 2, 8));
  fused.forward(ok.input_ids(), ok.target_ids());
  test::expect_error([&] { fused.logits(); }, ErrorKind::invalid_argument, {"fused LM head", "loss_chunk = 0"});
  ModelOptions too_long = test::tiny_options();
  too_long.max_seq_len = 33;
  test::expect_error([&] { TransformerLM m(kTiny, too_long); }, ErrorKind::invalid_argument, {"context_length = 32"});
}

}  // namespace
}  // namespace ft
