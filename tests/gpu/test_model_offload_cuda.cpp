// test_model_offload_cuda.cpp — activation offloading on CUDA (see Note [Activation offloading],
// model/transformer.h): six blocks through the ring of two, the units copied to pinned host memory and back
// on the copy stream while the model's own stream computes. For every recompute policy, fp32 and bf16, the
// fused and the materialised loss, the losses (two accumulated micro-batches of different lengths) and every
// gradient equal those without offloading bit for bit; for every policy the CUDA-graphed train step with
// offloading equals the eager step without; the device arena shrinks; a pinned allocation that fails names
// its bytes.
// Run on a GPU machine: ./build/bin/gpu_test_model_offload_cuda
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/pinned_memory.h"
#include "core/tensor_io.h"
#include "gpu/device_token_batch.h"
#include "model/graphed_step.h"
#include "model/trainer.h"

namespace ft {
namespace {

ModelConfig config() {
  ModelConfig c = model_config("tiny");
  c.vocab_size = 1001;
  c.num_layers = 6;
  return c;
}

ModelOptions options_for(Precision precision, std::int64_t loss_chunk, Recompute recompute, bool offload) {
  ModelOptions o;
  o.precision = precision;
  o.max_batch = 4;
  o.max_seq_len = 16;
  o.seed = 78;
  o.device = Device::cuda(0);
  o.loss_chunk = loss_chunk;
  o.recompute = recompute;
  o.offload_activations = offload;
  return o;
}

// (B, T) random ids of the config's vocabulary.
test::DeviceTokenBatch batch_of(std::int64_t B, std::int64_t T, std::uint64_t seed) {
  return test::DeviceTokenBatch(B, T, config().vocab_size, seed);
}

struct Result {
  std::vector<double> losses;
  std::vector<double> grads;
};

Result run(Precision precision, std::int64_t loss_chunk, Recompute recompute, bool offload) {
  ModelOptions o = options_for(precision, loss_chunk, recompute, offload);
  o.stream = Stream::create(o.device);  // the copy stream overlaps a stream of the model's own
  TransformerLM model(config(), o);
  const Device gpu = o.device;
  const test::DeviceTokenBatch batches[] = {batch_of(4, 16, 15), batch_of(3, 11, 16)};
  Result r;
  BackwardOptions options{.loss_scale = 0.5};
  for (const test::DeviceTokenBatch& b : batches) {
    r.losses.push_back(model.forward_backward(b.inputs(gpu), b.targets(gpu), options));
    options.accumulate = true;
  }
  o.stream.synchronize();
  r.grads = read_as_double(model.gradients().flat());
  return r;
}

TEST(OffloadCuda, LossesAndGradientsAreBitIdentical) {
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (std::int64_t loss_chunk : {0, 24})
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::selective_qkv, Recompute::full}) {
        SCOPED_TRACE(str(name_of(precision), " chunk ", loss_chunk, " ", name_of(recompute)));
        const Result kept = run(precision, loss_chunk, recompute, false);
        const Result offloaded = run(precision, loss_chunk, recompute, true);
        EXPECT_EQ(offloaded.losses, kept.losses);
        EXPECT_EQ(offloaded.grads, kept.grads);
      }
}

// Three steps of the CUDA-graphed train step with offloading and of the eager step without: the same
// parameters.
void expect_graphed_step_equals_the_eager_step_without(Recompute recompute) {
  const Device gpu = Device::cuda(0);
  const test::DeviceTokenBatch batch = batch_of(4, 16, 17);
  std::vector<std::vector<double>> params;
  for (bool offload : {false, true}) {
    ModelOptions o = options_for(Precision::bf16, 24, recompute, offload);
    o.stream = Stream::create(gpu);
    TransformerLM model(config(), o);
    Trainer trainer(model, TrainerConfig{});
    if (!offload) {
      for (int step = 0; step < 3; ++step) {
        trainer.zero_grads();
        trainer.forward_backward(batch.inputs(gpu), batch.targets(gpu));
        trainer.optimizer_step();
      }
    } else {
      GraphedTrainStep graphed(trainer);
      for (int step = 0; step < 3; ++step) graphed.step(batch.inputs(Device::cpu()), batch.targets(Device::cpu()));
    }
    o.stream.synchronize();
    params.push_back(read_as_double(model.parameters().flat()));
  }
  EXPECT_EQ(params[1], params[0]);
}

// Every policy: the unit's parts (none: four; selective_qkv: three; selective: two; full: one) copied on the
// copy stream inside the captured graph.
TEST(OffloadCuda, GraphedStepEqualsTheEagerStepWithout) {
  for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::selective_qkv, Recompute::full}) {
    SCOPED_TRACE(name_of(recompute));
    expect_graphed_step_equals_the_eager_step_without(recompute);
  }
}

TEST(OffloadCuda, DeviceArenaShrinksByWhatTheHostHolds) {
  for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::selective_qkv, Recompute::full}) {
    SCOPED_TRACE(name_of(recompute));
    const MemoryReport kept = TransformerLM(config(), options_for(Precision::bf16, 24, recompute, false)).memory();
    const MemoryReport offloaded = TransformerLM(config(), options_for(Precision::bf16, 24, recompute, true)).memory();
    EXPECT_GT(offloaded.offloaded, 0u);
    EXPECT_LT(offloaded.activations, kept.activations);
  }
}

TEST(OffloadCuda, PinnedAllocationFailureNamesTheBytes) {
  const std::size_t huge = std::size_t{1} << 60;
  try {
    PinnedBuffer buffer(huge, Device::cuda(0), "offloaded activations");
    FAIL() << "a pinned allocation of 2^60 bytes succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_memory);
    EXPECT_NE(std::string(e.what()).find(std::to_string(huge)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("offloaded activations"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the failure leaves no sticky error behind
}

}  // namespace
}  // namespace ft
