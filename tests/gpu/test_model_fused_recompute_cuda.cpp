// test_model_fused_recompute_cuda.cpp — the fused LM head loss and activation recomputation on CUDA: with a
// vocabulary (1001) and rows (4 x 16) the chunk (24) divides neither, the fused loss equals the materialised
// one (fp32 without TF32: loss within 1e-6 relative, gradients within 1e-5 of their largest magnitude; bf16:
// as close as the materialised bf16 result is to fp32) and the CPU's fused result; selective, selective-qkv
// and full recomputation give the loss and every gradient of `none` bit for bit (deterministic attention
// backward), for fp32 and bf16, also inside the CUDA-graphed train step.
// Run on a GPU machine: ./build/bin/gpu_test_model_fused_recompute_cuda
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "gpu/device_token_batch.h"
#include "model/graphed_step.h"
#include "model/trainer.h"

namespace ft {
namespace {

ModelConfig config() {
  ModelConfig c = model_config("tiny");
  c.vocab_size = 1001;
  c.num_layers = 3;
  return c;
}

ModelOptions options_for(Precision precision, Device device, std::int64_t loss_chunk, Recompute recompute) {
  ModelOptions o;
  o.precision = precision;
  o.max_batch = 4;
  o.max_seq_len = 16;
  o.seed = 77;
  o.device = device;
  o.loss_chunk = loss_chunk;
  o.recompute = recompute;
  return o;
}

// (4, 16) random ids of the config's vocabulary.
struct Batch : test::DeviceTokenBatch {
  explicit Batch(std::uint64_t seed) : DeviceTokenBatch(4, 16, config().vocab_size, seed) {}
};

struct Result {
  double loss = 0;
  std::vector<double> grads;
};

Result run(Precision precision, Device device, std::int64_t loss_chunk, Recompute recompute) {
  TransformerLM model(config(), options_for(precision, device, loss_chunk, recompute));
  const Batch batch(5);
  Result r;
  r.loss = model.forward_backward(batch.inputs(device), batch.targets(device), {.loss_scale = 0.5});
  r.grads = read_as_double(model.gradients().flat());
  return r;
}

// max |a - b| / max |b|.
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, top = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(a[i] - b[i]));
  for (double x : b) top = std::max(top, std::fabs(x));
  return diff / top;
}

TEST(FusedLossCuda, EqualsTheMaterialisedLossAndTheCpu) {
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  const Result ref = run(Precision::fp32, gpu, 0, Recompute::none);
  const Result fused = run(Precision::fp32, gpu, 24, Recompute::none);
  EXPECT_NEAR(fused.loss, ref.loss, 1e-6 * ref.loss);
  EXPECT_LE(relative_error(fused.grads, ref.grads), 1e-5);
  const Result host = run(Precision::fp32, cpu, 24, Recompute::none);
  EXPECT_NEAR(fused.loss, host.loss, 1e-5 * host.loss);
  EXPECT_LE(relative_error(fused.grads, host.grads), 1e-3);  // the flash attention's fp32 runs on TF32

  const Result bf16 = run(Precision::bf16, gpu, 0, Recompute::none);
  const Result fused16 = run(Precision::bf16, gpu, 24, Recompute::none);
  EXPECT_LE(std::fabs(fused16.loss - bf16.loss), std::max(1e-6 * ref.loss, std::fabs(bf16.loss - ref.loss)));
  EXPECT_LE(relative_error(fused16.grads, bf16.grads), relative_error(bf16.grads, ref.grads));
}

// forward_backward reads the fused loss back after enqueuing the backward (no read-back between them): the
// loss forward() gives, bit for bit, and the gradients of forward_backward_to.
TEST(FusedLossCuda, ForwardBackwardReturnsTheForwardsLoss) {
  const Device gpu = Device::cuda(0);
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(name_of(precision));
    TransformerLM model(config(), options_for(precision, gpu, 24, Recompute::none));
    const Batch batch(9);
    const double forward = model.forward(batch.inputs(gpu), batch.targets(gpu));
    const double returned = model.forward_backward(batch.inputs(gpu), batch.targets(gpu), {.loss_scale = 0.5});
    const std::vector<double> grads = read_as_double(model.gradients().flat());
    EXPECT_EQ(returned, forward);
    OwnedTensor written({2}, DType::f32, gpu, "test.loss");  // one double
    model.forward_backward_to(static_cast<double*>(written->data()), batch.inputs(gpu), batch.targets(gpu),
                              {.loss_scale = 0.5});
    EXPECT_EQ(read_as_double(model.gradients().flat()), grads);
    double to = 0;
    copy(Tensor(&to, DType::f32, Device::cpu(), {2}), written);
    EXPECT_EQ(to, forward);
  }
}

TEST(RecomputeCuda, GradientsAreBitIdenticalToNone) {
  const Device gpu = Device::cuda(0);
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (std::int64_t loss_chunk : {0, 24}) {
      const Result none = run(precision, gpu, loss_chunk, Recompute::none);
      for (Recompute recompute : {Recompute::selective, Recompute::selective_qkv, Recompute::full}) {
        SCOPED_TRACE(str(name_of(precision), " chunk ", loss_chunk, " ", name_of(recompute)));
        const Result r = run(precision, gpu, loss_chunk, recompute);
        EXPECT_EQ(r.loss, none.loss);
        EXPECT_EQ(r.grads, none.grads);
      }
    }
}

TEST(RecomputeCuda, GraphedStepEqualsTheEagerStepOfNone) {
  const Device gpu = Device::cuda(0);
  const Batch batch(6);
  std::vector<std::vector<double>> params;
  for (Recompute recompute : {Recompute::none, Recompute::full}) {
    ModelOptions o = options_for(Precision::bf16, gpu, 24, recompute);
    o.stream = Stream::create(gpu);
    TransformerLM model(config(), o);
    Trainer trainer(model, TrainerConfig{});
    if (recompute == Recompute::none) {
      for (int step = 0; step < 3; ++step) {
        trainer.zero_grads();
        trainer.forward_backward(batch.inputs(gpu), batch.targets(gpu));
        trainer.optimizer_step();
      }
    } else {
      GraphedTrainStep graphed(trainer);
      const Device host = Device::cpu();  // the graphed step stages host ids
      for (int step = 0; step < 3; ++step) graphed.step(batch.inputs(host), batch.targets(host));
    }
    o.stream.synchronize();
    params.push_back(read_as_double(model.parameters().flat()));
  }
  EXPECT_EQ(params[1], params[0]);
}

}  // namespace
}  // namespace ft
