// test_model_cuda.cpp — the tiny Transformer LM on CUDA against the same model on the CPU (same seed, same
// batch): forward loss and logits, every parameter's gradient, and one full Trainer step (global-norm
// clipping + AdamW) — the optimizer state, the updated parameters and the next loss — for fp32 (TF32 off)
// and bf16 mixed precision, with the flash and the naive attention. Tolerances are relative to each
// tensor's largest magnitude: fp32 + naive attention 1e-4 (true fp32 everywhere); fp32 + flash looser,
// since the flash kernels run fp32 attention on TF32 tensor cores (docs/design.md); bf16 looser still
// (activations rounded to bf16 at slightly different fp32 sums flip some roundings).
// Run on a GPU machine: ./build/bin/gpu_test_model_cuda
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/expect_close.h"
#include "core/buffer.h"
#include "core/tensor_io.h"
#include "model/trainer.h"

namespace ft {
namespace {

using testing_util::expect_close_to_largest;

const ModelConfig kTiny = model_config("tiny");

ModelOptions options_for(Precision precision, AttentionImpl impl, Device device) {
  ModelOptions o;
  o.precision = precision;
  o.attention = impl;
  o.max_batch = 4;
  o.max_seq_len = 16;
  o.seed = 1234;
  o.device = device;
  o.loss_chunk = 0;  // the materialised logits, compared below (test_model_fused_loss_cuda covers the fused loss)
  return o;
}

// (B, T) random inputs and targets on the host and on the GPU.
struct Batch {
  std::int64_t B = 4, T = 16;
  std::vector<std::int32_t> host;  // inputs then targets, (2, B, T)
  Buffer device;
  explicit Batch(std::uint64_t seed) : host(static_cast<std::size_t>(2 * B * T)) {
    std::mt19937_64 gen(seed);
    std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(kTiny.vocab_size - 1));
    for (auto& x : host) x = id(gen);
    device = Buffer(host.size() * sizeof(std::int32_t), Device::cuda(0), "test batch");
    EXPECT_EQ(cudaMemcpy(device.data(), host.data(), host.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  TokenIds inputs(Device d) const { return {base(d), {B, T}, d}; }
  TokenIds targets(Device d) const { return {base(d) + B * T, {B, T}, d}; }
  const std::int32_t* base(Device d) const {
    return d.is_cpu() ? host.data() : static_cast<const std::int32_t*>(device.data());
  }
};

void expect_all_close(const ParameterBuffer& got, const ParameterBuffer& expected, const ParameterLayout& layout,
                      double tol, const std::string& what) {
  for (std::size_t i = 0; i < layout.size(); ++i)
    expect_close_to_largest(got[i], expected[i], tol, what + " " + layout[i].name);
}

struct Tolerances {
  double loss, logits, grads, state, params;
};

class ModelCuda : public ::testing::TestWithParam<std::tuple<Precision, AttentionImpl>> {
 protected:
  Tolerances tolerances() const {
    const auto [precision, impl] = GetParam();
    if (precision == Precision::bf16) return {1e-2, 5e-2, 5e-2, 5e-2, 5e-3};
    if (impl == AttentionImpl::flash) return {1e-3, 1e-2, 2e-2, 2e-2, 5e-3};
    return {1e-6, 1e-4, 1e-4, 1e-4, 1e-5};
  }
};

TEST_P(ModelCuda, ForwardGradientsAndTrainerStepMatchCpu) {
  const auto [precision, impl] = GetParam();
  const Tolerances tol = tolerances();
  TransformerLM cpu(kTiny, options_for(precision, impl, Device::cpu()));
  TransformerLM gpu(kTiny, options_for(precision, impl, Device::cuda(0)));
  expect_all_close(gpu.parameters(), cpu.parameters(), cpu.layout(), 0.0, "initial");
  const Batch batch(7);
  const Device host = Device::cpu(), device = Device::cuda(0);

  const double loss_cpu = cpu.forward(batch.inputs(host), batch.targets(host));
  const double loss_gpu = gpu.forward(batch.inputs(device), batch.targets(device));
  EXPECT_NEAR(loss_gpu, loss_cpu, tol.loss * loss_cpu) << "forward loss";
  expect_close_to_largest(gpu.logits(), cpu.logits(), tol.logits, "logits");

  // A Trainer step on each: forward + backward, clipping, AdamW (eps 1e-3 keeps near-zero gradients from
  // turning round-off into full-size updates, so parameters can be compared closely).
  TrainerConfig config;
  config.adamw.eps = 1e-3;
  config.max_grad_norm = 0.5;
  Trainer train_cpu(cpu, config), train_gpu(gpu, config);
  const double step_loss_cpu = train_cpu.forward_backward(batch.inputs(host), batch.targets(host));
  const double step_loss_gpu = train_gpu.forward_backward(batch.inputs(device), batch.targets(device));
  EXPECT_NEAR(step_loss_gpu, step_loss_cpu, tol.loss * step_loss_cpu) << "forward_backward loss";
  expect_all_close(gpu.gradients(), cpu.gradients(), cpu.layout(), tol.grads, "gradient of");

  const StepResult result_cpu = train_cpu.optimizer_step(), result_gpu = train_gpu.optimizer_step();
  EXPECT_GT(result_cpu.grad_norm, config.max_grad_norm) << "the step is meant to exercise clipping";
  EXPECT_NEAR(result_gpu.grad_norm, result_cpu.grad_norm, tol.grads * result_cpu.grad_norm) << "gradient norm";
  expect_all_close(train_gpu.exp_avg(), train_cpu.exp_avg(), cpu.layout(), tol.state, "exp_avg of");
  expect_all_close(train_gpu.exp_avg_sq(), train_cpu.exp_avg_sq(), cpu.layout(), 2 * tol.state, "exp_avg_sq of");
  expect_all_close(gpu.parameters(), cpu.parameters(), cpu.layout(), tol.params, "updated");

  const double next_cpu = cpu.forward(batch.inputs(host), batch.targets(host));
  const double next_gpu = gpu.forward(batch.inputs(device), batch.targets(device));
  EXPECT_LT(next_cpu, loss_cpu) << "the step should lower the loss on its own batch";
  EXPECT_NEAR(next_gpu, next_cpu, tol.loss * next_cpu) << "loss after the step";
}

TEST_P(ModelCuda, TwoRunsAreBitIdentical) {
  const auto [precision, impl] = GetParam();
  const Batch batch(8);
  const Device device = Device::cuda(0);
  std::vector<std::vector<double>> grads;
  std::vector<double> losses;
  for (int run = 0; run < 2; ++run) {
    TransformerLM gpu(kTiny, options_for(precision, impl, device));
    losses.push_back(gpu.forward_backward(batch.inputs(device), batch.targets(device)));
    grads.push_back(read_as_double(gpu.gradients().flat()));
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_TRUE(grads[0] == grads[1]) << "gradients differ between two identical runs";
}

INSTANTIATE_TEST_SUITE_P(PrecisionsAndAttention, ModelCuda,
                         ::testing::Combine(::testing::Values(Precision::fp32, Precision::bf16),
                                            ::testing::Values(AttentionImpl::naive, AttentionImpl::flash)),
                         [](const auto& info) {
                           return std::string(name_of(std::get<0>(info.param))) + "_" +
                                  name_of(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace ft
