// test_model_forward_only.cpp — the inference model (ModelOptions::training = false) on the tiny model:
// bit-identical loss and logits to the training model of the same seed, the same after the shared arena
// served other batches, no gradients and a smaller arena that does not grow with depth, a memory report
// equal to what the allocator holds, and clear errors for backward, gradients() and a Trainer.
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/tensor_io.h"
#include "model/trainer.h"
#include "test_model_util.h"
#include "test_ops_util.h"

namespace ft {
namespace {

const ModelConfig kTiny = model_config("tiny");

ModelOptions inference_options(Precision precision, AttentionImpl impl) {
  ModelOptions o = test::tiny_options(precision, impl);
  o.training = false;
  return o;
}

TEST(ForwardOnly, LossAndLogitsAreBitIdenticalToTheTrainingModel) {
  const auto full = test::random_batch(4, 16, kTiny.vocab_size, 31);
  const auto part = test::random_batch(3, 11, kTiny.vocab_size, 32);
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (AttentionImpl impl : {AttentionImpl::naive, AttentionImpl::flash}) {
      SCOPED_TRACE(str(name_of(precision), " ", name_of(impl)));
      TransformerLM train(kTiny, test::materialised(test::tiny_options(precision, impl)));
      TransformerLM infer(kTiny, test::materialised(inference_options(precision, impl)));
      for (const test::TokenBatch* b : {&full, &part, &full}) {  // the shared slots serve each batch afresh
        const double want = train.forward(b->input_ids(), b->target_ids());
        const double got = infer.forward(b->input_ids(), b->target_ids());
        EXPECT_EQ(got, want);
        EXPECT_EQ(infer.logits().shape(), train.logits().shape());
        EXPECT_EQ(read_as_double(infer.logits()), read_as_double(train.logits()));
      }
    }
}

TEST(ForwardOnly, AllocatesNoGradientsAndNoBackwardBuffers) {
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(name_of(precision));
    Allocator& allocator = Allocator::instance();
    const std::int64_t before = allocator.stats(Device::cpu()).current_bytes;
    const TransformerLM infer(kTiny, inference_options(precision, AttentionImpl::flash));
    const MemoryReport m = infer.memory();
    EXPECT_EQ(static_cast<std::int64_t>(m.total()), allocator.stats(Device::cpu()).current_bytes - before);
    EXPECT_EQ(m.activations, infer.activation_layout().bytes());
    EXPECT_EQ(m.workspace, infer.workspace_layout().bytes());

    const TransformerLM train(kTiny, test::tiny_options(precision, AttentionImpl::flash));
    const MemoryReport t = train.memory();
    EXPECT_EQ(m.gradients, 0u);
    EXPECT_GT(t.gradients, 0u);
    EXPECT_EQ(m.parameters, t.parameters);
    EXPECT_LT(m.activations, t.activations);
    EXPECT_LT(m.workspace, t.workspace);
  }
}

TEST(ForwardOnly, ActivationsDoNotGrowWithDepth) {
  ModelConfig shallow = kTiny, deep = kTiny;
  shallow.num_layers = 1;
  deep.num_layers = 3;
  const auto bytes = [](const ModelConfig& config, bool training) {
    ModelOptions o = test::tiny_options();
    o.training = training;
    return TransformerLM(config, o).memory().activations;
  };
  EXPECT_EQ(bytes(shallow, false), bytes(deep, false));
  EXPECT_GT(bytes(deep, true), bytes(shallow, true));
}

TEST(ForwardOnly, BackwardGradientsAndTrainerAreRefused) {
  TransformerLM infer(kTiny, inference_options(Precision::fp32, AttentionImpl::flash));
  const auto b = test::random_batch(2, 8, kTiny.vocab_size, 33);
  test::expect_error([&] { infer.forward_backward(b.input_ids(), b.target_ids()); }, ErrorKind::invalid_argument,
                     {"forward_backward", "built for inference", "training = true"});
  test::expect_error([&] { infer.gradients(); }, ErrorKind::invalid_argument, {"gradients", "built for inference"});
  test::expect_error([&] { Trainer trainer(infer, {}); }, ErrorKind::invalid_argument,
                     {"Trainer", "built for inference", "training = true"});
  EXPECT_NO_THROW(infer.forward(b.input_ids(), b.target_ids()));  // forward still works after the refusals
}

}  // namespace
}  // namespace ft
