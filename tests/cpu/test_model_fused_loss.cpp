// test_model_fused_loss.cpp — the fused LM head loss (model/fused_lm_head.h) against the materialised one,
// with a vocabulary (97) and a row count (32) that the chunk (5) divides neither: the op on its own (loss,
// d hidden and d weight, accumulation into d weight) and the whole tiny model (loss and every gradient, with a
// loss scale and gradient accumulation), and in bf16 dlogits tiles of several chunks. fp32: within 1e-6
// relative; bf16: the fused result is as close to the materialised bf16 result as that is to fp32 (the bf16
// error of the materialised path bounds it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/tensor_io.h"
#include "model/fused_lm_head.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/linear.h"
#include "test_model_util.h"
#include "test_ops_util.h"

namespace ft {
namespace {

const ModelConfig kTiny = model_config("tiny");

// max |a - b| / max |b|.
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, top = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(a[i] - b[i]));
  for (double x : b) top = std::max(top, std::fabs(x));
  return diff / top;
}

struct HeadResult {
  double loss = 0;
  std::vector<double> dhidden, dweight;
};

// The LM head loss of hidden (rows, d) and weight (V, d) in `dtype` operands: fused in chunks of `chunk` rows
// (chunk 0: materialised), in bf16 with a dlogits tile of `group` chunks; d weight added to `start`
// (accumulation) with grad_scale 0.5.
HeadResult head_loss(const Tensor& hidden32, const Tensor& weight32, const test::TokenBatch& t, DType dtype,
                     std::int64_t chunk, const std::vector<double>& start, std::int64_t group = 1) {
  const std::int64_t rows = hidden32.size(0), d = hidden32.size(1), V = weight32.size(0);
  const Device cpu = Device::cpu();
  OwnedTensor hidden({rows, d}, dtype, cpu, "hidden"), weight({V, d}, dtype, cpu, "weight");
  cast(hidden, hidden32);
  cast(weight, weight32);
  OwnedTensor dhidden({rows, d}, DType::f32, cpu, "dhidden"), dweight({V, d}, DType::f32, cpu, "dweight");
  write_from_double(dweight, start);
  const TokenIds targets{t.targets.data(), {rows}, cpu};
  HeadResult r;
  if (chunk == 0) {
    OwnedTensor logits({rows, V}, DType::f32, cpu, "logits"), dlogits({rows, V}, dtype, cpu, "dlogits");
    linear_forward(logits, hidden, weight);
    const Tensor dl = dtype == DType::f32 ? logits.tensor() : dlogits.tensor();
    r.loss = cross_entropy(logits, targets, dl, {.grad_scale = 0.5});
    linear_backward({dhidden, dweight, true}, dl, hidden, weight);
  } else {
    OwnedTensor logits({chunk, V}, DType::f32, cpu, "logits tile");
    OwnedTensor dlogits({group * chunk, V}, dtype, cpu, "dlogits tile");
    FusedLmHeadLoss f;
    f.hidden = hidden;
    f.targets = targets;
    f.weight = weight;
    f.logits = logits;
    if (dtype != DType::f32) f.dlogits = dlogits;
    f.dhidden = dhidden;
    f.dweight = dweight;
    f.accumulate_dweight = true;
    f.grad_scale = 0.5;
    fused_lm_head_loss(&r.loss, f);
  }
  r.dhidden = read_as_double(dhidden);
  r.dweight = read_as_double(dweight);
  return r;
}

TEST(FusedLmHeadLoss, EqualsTheMaterialisedLossAndGradients) {
  const std::int64_t rows = 32, d = 64, V = 97;
  OwnedTensor hidden({rows, d}, DType::f32, Device::cpu(), "hidden"), weight({V, d}, DType::f32, Device::cpu(), "w");
  fill_normal(hidden, 1);
  fill_normal(weight, 2, 0.0, 0.2);
  const auto t = test::random_batch(1, rows, V, 3);
  std::vector<double> start(static_cast<std::size_t>(V * d));
  for (std::size_t i = 0; i < start.size(); ++i) start[i] = 1e-3 * static_cast<double>(i % 7);
  const HeadResult ref = head_loss(hidden, weight, t, DType::f32, 0, start);
  for (std::int64_t chunk : {5, 32, 1000}) {
    SCOPED_TRACE(str("chunk ", chunk));
    const HeadResult fused = head_loss(hidden, weight, t, DType::f32, chunk, start);
    EXPECT_NEAR(fused.loss, ref.loss, 1e-6 * ref.loss);
    EXPECT_LE(relative_error(fused.dhidden, ref.dhidden), 1e-6);
    EXPECT_LE(relative_error(fused.dweight, ref.dweight), 1e-6);

    const HeadResult bf16 = head_loss(hidden, weight, t, DType::bf16, 0, start);
    const HeadResult fused16 = head_loss(hidden, weight, t, DType::bf16, chunk, start);
    EXPECT_LE(std::fabs(fused16.loss - bf16.loss), std::max(1e-6 * ref.loss, std::fabs(bf16.loss - ref.loss)));
    EXPECT_LE(relative_error(fused16.dhidden, bf16.dhidden), relative_error(bf16.dhidden, ref.dhidden));
    EXPECT_LE(relative_error(fused16.dweight, bf16.dweight), relative_error(bf16.dweight, ref.dweight));
    // Groups of 2 and 3 chunks (32 rows: a last group of whole chunks and one of a partial chunk at chunk 5).
    for (std::int64_t group : {2, 3}) {
      SCOPED_TRACE(str("group ", group));
      const HeadResult grouped = head_loss(hidden, weight, t, DType::bf16, chunk, start, group);
      EXPECT_EQ(grouped.loss, fused16.loss);  // the same row losses summed in the same order
      EXPECT_LE(relative_error(grouped.dhidden, bf16.dhidden), relative_error(bf16.dhidden, ref.dhidden));
      EXPECT_LE(relative_error(grouped.dweight, bf16.dweight), relative_error(bf16.dweight, ref.dweight));
    }
  }
}

TEST(FusedLmHeadLoss, BadArgumentsGiveClearErrors) {
  OwnedTensor hidden({4, 8}, DType::bf16, Device::cpu(), "hidden"), weight({10, 8}, DType::bf16, Device::cpu(), "w");
  OwnedTensor logits({3, 10}, DType::f32, Device::cpu(), "tile"), dhidden({4, 8}, DType::f32, Device::cpu(), "dh");
  OwnedTensor dweight({10, 8}, DType::f32, Device::cpu(), "dw");
  const std::vector<std::int32_t> ids = {1, 2, 3, 4};
  FusedLmHeadLoss f;
  f.hidden = hidden;
  f.targets = {ids.data(), {4}, Device::cpu()};
  f.weight = weight;
  f.logits = logits;
  f.dhidden = dhidden;
  f.dweight = dweight;
  double loss = 0;
  test::expect_error([&] { fused_lm_head_loss(&loss, f); }, ErrorKind::invalid_argument,
                     {"bf16 backward needs a dlogits tile", "[3, 10]"});
  f.targets = {ids.data(), {3}, Device::cpu()};
  test::expect_error([&] { fused_lm_head_loss(&loss, f); }, ErrorKind::invalid_argument,
                     {"one target per row", "4"});
  // A dlogits tile whose rows are not a whole number of chunks.
  f.targets = {ids.data(), {4}, Device::cpu()};
  OwnedTensor ragged({5, 10}, DType::bf16, Device::cpu(), "ragged tile");
  f.dlogits = ragged;
  test::expect_error([&] { fused_lm_head_loss(&loss, f); }, ErrorKind::invalid_argument,
                     {"dlogits tile", "[3, 10]", "whole number", "[5, 10]"});
  // A target out of range in the last chunk is found before any chunk runs.
  OwnedTensor dlogits({3, 10}, DType::bf16, Device::cpu(), "dtile");
  f.dlogits = dlogits;
  const std::vector<std::int32_t> bad = {1, 2, 3, 10};
  f.targets = {bad.data(), {4}, Device::cpu()};
  test::expect_error([&] { fused_lm_head_loss(&loss, f); }, ErrorKind::invalid_argument, {"10", "targets"});
}

struct ModelResult {
  double loss = 0;
  std::vector<double> grads;
};

// Two accumulated micro-batches (loss scale 1/2) of the tiny model with the given loss chunk (0: materialised).
ModelResult train_model(Precision precision, std::int64_t loss_chunk) {
  ModelOptions o = test::tiny_options(precision);
  o.loss_chunk = loss_chunk;
  TransformerLM model(kTiny, o);
  ModelResult r;
  for (int micro = 0; micro < 2; ++micro) {
    const auto b = test::random_batch(2, 16, kTiny.vocab_size, 40 + micro);
    r.loss += model.forward_backward(b.input_ids(), b.target_ids(), {.loss_scale = 0.5, .accumulate = micro > 0});
  }
  r.grads = read_as_double(model.gradients().flat());
  return r;
}

TEST(FusedLmHeadLoss, ModelLossAndGradientsEqualTheMaterialisedPath) {
  const ModelResult ref = train_model(Precision::fp32, 0);
  const ModelResult fused = train_model(Precision::fp32, 5);
  EXPECT_NEAR(fused.loss, ref.loss, 1e-6 * ref.loss);
  EXPECT_LE(relative_error(fused.grads, ref.grads), 1e-6);

  const ModelResult bf16 = train_model(Precision::bf16, 0);
  const ModelResult fused16 = train_model(Precision::bf16, 5);
  EXPECT_LE(std::fabs(fused16.loss - bf16.loss), std::fabs(bf16.loss - ref.loss));
  EXPECT_LE(relative_error(fused16.grads, bf16.grads), relative_error(bf16.grads, ref.grads));
}

// forward_backward reads the fused loss back after enqueuing the backward: it returns what forward() gives and
// forward_backward_to leaves in memory, bit for bit (the backward does not touch the loss's slot), micro-batch
// after micro-batch.
TEST(FusedLmHeadLoss, ForwardBackwardReturnsTheForwardsLoss) {
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(name_of(precision));
    ModelOptions o = test::tiny_options(precision);
    o.loss_chunk = 5;
    TransformerLM model(kTiny, o);
    for (int micro = 0; micro < 2; ++micro) {
      const auto b = test::random_batch(2, 16, kTiny.vocab_size, 60 + micro);
      const double forward = model.forward(b.input_ids(), b.target_ids());
      const BackwardOptions options{.loss_scale = 0.5, .accumulate = micro > 0};
      const double returned = model.forward_backward(b.input_ids(), b.target_ids(), options);
      double written = 0;
      model.forward_backward_to(&written, b.input_ids(), b.target_ids(), options);
      EXPECT_EQ(returned, forward);
      EXPECT_EQ(written, forward);
    }
  }
}

TEST(FusedLmHeadLoss, KeepsNoLogitsInTheArena) {
  ModelOptions o = test::tiny_options(Precision::bf16);
  const TransformerLM materialised(kTiny, test::materialised(o));
  o.loss_chunk = 5;
  const TransformerLM fused(kTiny, o);
  const std::size_t rows = 4 * 16, V = 97;
  // (B T, V) fp32 logits and bf16 dlogits leave the arena; (5, V) fp32 and bf16 tiles join the workspace.
  EXPECT_GE(materialised.memory().activations - fused.memory().activations, rows * V * 6);
  for (const ArenaEntry& e : fused.activation_layout().entries()) EXPECT_EQ(e.name.find("logits"), std::string::npos);
  bool tile = false;
  std::size_t group_bytes = 0;
  for (const ArenaEntry& e : fused.workspace_layout().entries()) {
    if (e.name == "lm_head.logits tile") tile = e.bytes == 5 * V * 4;
    if (e.name == "lm_head.dlogits tile") group_bytes = e.bytes;
  }
  EXPECT_TRUE(tile);
  // The room the FFN temporaries (2 x 64 x 172 bf16) leave after the logits tile holds the dlogits of all 13
  // chunks of the 64 rows: one group, and the workspace no larger than with one chunk's dlogits.
  EXPECT_EQ(group_bytes, 13 * 5 * V * 2);
  EXPECT_LE(fused.workspace_layout().bytes(), materialised.workspace_layout().bytes() + 5 * V * 6 + 2 * 256);
}

}  // namespace
}  // namespace ft
