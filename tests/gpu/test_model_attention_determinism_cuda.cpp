// test_model_attention_determinism_cuda.cpp — ModelOptions::deterministic_attention on CUDA: the default adds
// the attention backward's dQ pieces in a fixed order, so two runs give the same gradients bit for bit; with
// atomic additions (deterministic_attention = false) the loss is the same (the forward does not change) and
// the gradients agree within the rounding of a different summation order. Head dim 128 in bf16 runs the
// Hopper kernels on an H100/H200 (sm80 elsewhere), head dim 16 in fp32 the sm80 ones; 512 tokens give every
// query tile's dQ several key tiles' pieces, so the two orders really differ.
// Run on a GPU machine: ./build/bin/gpu_test_model_attention_determinism_cuda
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/tensor_io.h"
#include "gpu/device_token_batch.h"
#include "model/transformer.h"

namespace ft {
namespace {

constexpr std::int64_t kB = 2, kT = 512;

ModelConfig config_for(Precision precision) {
  ModelConfig c = model_config("tiny");
  c.vocab_size = 1001;
  c.context_length = kT;
  if (precision == Precision::bf16) {  // head dim 128: the Hopper kernels
    c.d_model = 256;
    c.num_heads = 2;
    c.d_ff = 512;
  }
  return c;
}

struct Result {
  double loss = 0;
  std::vector<double> grads;
};

Result run(Precision precision, bool deterministic) {
  ModelOptions o;
  o.precision = precision;
  o.max_batch = kB;
  o.seed = 41;
  o.device = Device::cuda(0);
  o.deterministic_attention = deterministic;
  TransformerLM model(config_for(precision), o);
  const test::DeviceTokenBatch batch(kB, kT, model.config().vocab_size, 42);
  Result r;
  r.loss = model.forward_backward(batch.inputs(o.device), batch.targets(o.device));
  o.stream.synchronize();
  r.grads = read_as_double(model.gradients().flat());
  return r;
}

TEST(AttentionDeterminismCuda, DefaultIsDeterministic) { EXPECT_TRUE(ModelOptions{}.deterministic_attention); }

TEST(AttentionDeterminismCuda, DeterministicRunsAreBitIdentical) {
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(name_of(precision));
    const Result a = run(precision, true), b = run(precision, true);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.grads, b.grads);
  }
}

TEST(AttentionDeterminismCuda, AtomicAdditionsAgreeWithinSummationRounding) {
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(name_of(precision));
    const Result ordered = run(precision, true), atomic = run(precision, false);
    EXPECT_EQ(atomic.loss, ordered.loss);
    ASSERT_EQ(atomic.grads.size(), ordered.grads.size());
    double largest = 0, worst = 0;
    for (std::size_t i = 0; i < ordered.grads.size(); ++i) {
      largest = std::max(largest, std::abs(ordered.grads[i]));
      worst = std::max(worst, std::abs(atomic.grads[i] - ordered.grads[i]));
    }
    // fp32: a different order of fp32 sums; bf16: dQ is rounded to bf16 after the sum, so one bf16 step of
    // a dQ element can reach the weights' gradients.
    const double tolerance = precision == Precision::fp32 ? 1e-5 : 2e-2;
    EXPECT_LE(worst, tolerance * largest) << "largest gradient " << largest;
    EXPECT_GT(largest, 0);
  }
}

}  // namespace
}  // namespace ft
