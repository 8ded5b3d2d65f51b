// test_model_recompute.cpp — activation recomputation (see Note [Recomputation], model/transformer.h): for
// fp32 and bf16, both attention implementations, the fused and the materialised loss, selective,
// selective-qkv and full recomputation give the loss and every gradient of `none` bit for bit (over two accumulated micro-batches of
// different lengths, the gradient-ready hook in the same order), and shrink the activation arena: full below
// selective below none, by the per-block tensors each no longer keeps.
#include <gtest/gtest.h>

#include <string>

#include "test_model_util.h"
#include "test_ops_util.h"

namespace ft {
namespace {

ModelConfig three_layers() {
  ModelConfig c = model_config("tiny");
  c.num_layers = 3;  // a first, a middle and a last block
  return c;
}

test::TrainRun train(Precision precision, AttentionImpl impl, std::int64_t loss_chunk, Recompute recompute) {
  ModelOptions o = test::tiny_options(precision, impl);
  o.loss_chunk = loss_chunk;
  o.recompute = recompute;
  TransformerLM model(three_layers(), o);
  return test::train_two_micro_batches(model, 80);
}

TEST(Recompute, GradientsAreBitIdenticalToNone) {
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (AttentionImpl impl : {AttentionImpl::flash, AttentionImpl::naive})
      for (std::int64_t loss_chunk : {0, 7}) {
        const test::TrainRun none = train(precision, impl, loss_chunk, Recompute::none);
        for (Recompute recompute : {Recompute::selective, Recompute::selective_qkv, Recompute::full}) {
          SCOPED_TRACE(str(name_of(precision), " ", name_of(impl), " chunk ", loss_chunk, " ", name_of(recompute)));
          test::expect_bit_identical(train(precision, impl, loss_chunk, recompute), none);
        }
      }
}

TEST(Recompute, ActivationArenaShrinks) {
  const ModelConfig c = three_layers();
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(name_of(precision));
    std::size_t bytes[3] = {};
    for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
      ModelOptions o = test::tiny_options(precision);
      o.recompute = recompute;
      bytes[static_cast<int>(recompute)] = TransformerLM(c, o).memory().activations;
    }
    const std::size_t rows = 4 * 16, d = 64, f = 172, H = 4, cs = precision == Precision::bf16 ? 2 : 4;
    // Per block, none keeps ln1.y, ln1.rstd, qkv, o, lse, x_mid, ln2.y, ln2.rstd, a, b; selective keeps o and
    // lse; full nothing (x_l is kept by all three); the recomputing ones add one shared set.
    const std::size_t kept_by_selective = rows * d * cs + rows * H * 4;
    const std::size_t block = rows * (d * cs + 4 + 3 * d * cs + d * 4 + d * cs + 4 + 2 * f * cs) + kept_by_selective;
    EXPECT_GE(bytes[0] - bytes[1], (c.num_layers - 1) * (block - kept_by_selective) - kept_by_selective);
    EXPECT_GE(bytes[1] - bytes[2], (c.num_layers - 1) * kept_by_selective);
    EXPECT_LT(bytes[2], bytes[1]);
  }
  // Inference keeps nothing for backward: the policy does not apply.
  ModelOptions o = test::tiny_options();
  o.training = false;
  const std::size_t inference = TransformerLM(c, o).memory().activations;
  o.recompute = Recompute::full;
  EXPECT_EQ(TransformerLM(c, o).memory().activations, inference);
}

TEST(Recompute, ParsesPolicyNames) {
  EXPECT_EQ(parse_recompute("selective"), Recompute::selective);
  EXPECT_STREQ(name_of(Recompute::full), "full");
  test::expect_error([] { parse_recompute("some"); }, ErrorKind::invalid_argument,
                     {"'some'", "none, selective, selective-qkv or full"});
  EXPECT_EQ(parse_recompute("selective-qkv"), Recompute::selective_qkv);
  EXPECT_STREQ(name_of(Recompute::selective_qkv), "selective-qkv");
}

}  // namespace
}  // namespace ft
