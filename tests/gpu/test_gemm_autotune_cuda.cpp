// test_gemm_autotune_cuda.cpp — GEMM plans under autotuning (set_gemm_autotune, for this whole process before
// any GEMM runs; see Note [GEMM autotuning] in ops/gemm_autotune.cu): the linear layer's GEMMs give the
// CPU reference's results, an accumulation in place (beta = 1, C = D) adds its product once, a fused residual
// keeps the bits of the GEMM then the add, each problem is planned once and its plan reused (the same bits
// again), a faster candidate replaces the heuristic's only beyond the margin, a bf16 model's training step
// repeats bit for bit and its recomputation still equals `none`; and the candidates' timing of `flashtrain bench
// gemm` (ops/gemm_candidates.h).
// Run on a GPU machine: ./build/bin/gpu_test_gemm_autotune_cuda
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "common/device_pair.h"
#include "common/expect_close.h"
#include "common/value_compare.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "gpu/device_token_batch.h"
#include "model/transformer.h"
#include "ops/gemm_candidates.h"
#include "ops/gemm_cuda.h"
#include "ops/gemm_plan.h"
#include "ops/gemm_tuning.h"
#include "ops/linear.h"
#include "ops/residual.h"

namespace ft {
namespace {

// Before main, so that every plan of this process is autotuned.
const bool kAutotuneOn = [] {
  set_gemm_autotune(8);
  return true;
}();

const Device kGpu = Device::cuda(0);
using testing_util::device_pair;
using testing_util::expect_close_to_largest;

using testing_util::same_bits;

void expect_bitwise(const Tensor& got, const Tensor& expected, const std::string& what) {
  EXPECT_TRUE(same_bits(read_as_double(got), read_as_double(expected))) << what;
}

// A copy of t (on its device).
OwnedTensor copy_of(const Tensor& t) {
  OwnedTensor c(t.shape(), t.dtype(), t.device(), "test");
  copy(c, t);
  return c;
}

// Shapes large enough for cuBLASLt to offer several algorithms; bf16 operands, fp32 and bf16 outputs.
constexpr std::int64_t kRows = 1024, kIn = 768, kOut = 1280;

TEST(GemmAutotuneCuda, IsOnInThisProcessAndRefusesABadCount) {
  ASSERT_TRUE(kAutotuneOn);
  EXPECT_EQ(gemm_autotune(), 8);
  EXPECT_THROW(set_gemm_autotune(1), Error);
  EXPECT_THROW(set_gemm_autotune(kGemmAutotuneMost + 1), Error);
  EXPECT_EQ(gemm_autotune(), 8);
}

TEST(GemmAutotuneCuda, ForwardMatchesTheCpuAndItsPlanIsReused) {
  const auto x = device_pair({kRows, kIn}, DType::bf16, 11);
  const auto w = device_pair({kOut, kIn}, DType::bf16, 12, 0.05);
  for (const DType out : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(name_of(out));
    OwnedTensor first({kRows, kOut}, out, kGpu, "test"), again({kRows, kOut}, out, kGpu, "test");
    const std::size_t plans = gemm::cached_plans();
    linear_forward(first, x.gpu, w.gpu);  // plans (and times) the problem
    EXPECT_EQ(gemm::cached_plans(), plans + 1);
    linear_forward(again, x.gpu, w.gpu);  // the same plan: no new one, the same bits
    EXPECT_EQ(gemm::cached_plans(), plans + 1);
    expect_bitwise(again, first, "y again");
    OwnedTensor on_cpu({kRows, kOut}, out, Device::cpu(), "test");
    linear_forward(on_cpu, x.cpu, w.cpu);
    expect_close_to_largest(first, on_cpu, out == DType::f32 ? 1e-5 : 1e-2, "y against the CPU");
  }
}

// A first call that accumulates in place is not run repeatedly on its output: dw = dw0 + dy^T x exactly once,
// and dx += dy w likewise.
TEST(GemmAutotuneCuda, InPlaceAccumulationAddsOnce) {
  const std::int64_t rows = 1536, in = 896, out = 640;  // shapes no other test here plans
  const auto x = device_pair({rows, in}, DType::bf16, 21);
  const auto w = device_pair({out, in}, DType::bf16, 22, 0.05);
  const auto dy = device_pair({rows, out}, DType::bf16, 23);
  const auto dw0 = device_pair({out, in}, DType::f32, 24, 3.0);
  const auto dx0 = device_pair({rows, in}, DType::f32, 25, 3.0);
  OwnedTensor dw = copy_of(dw0.gpu), dx = copy_of(dx0.gpu);
  linear_backward({.dx = dx, .dw = dw, .accumulate_dw = true, .accumulate_dx = true}, dy.gpu, x.gpu, w.gpu);
  OwnedTensor dw_cpu = copy_of(dw0.cpu), dx_cpu = copy_of(dx0.cpu);
  linear_backward({.dx = dx_cpu, .dw = dw_cpu, .accumulate_dw = true, .accumulate_dx = true}, dy.cpu, x.cpu, w.cpu);
  expect_close_to_largest(dw, dw_cpu, 1e-5, "dw += dy^T x against the CPU");
  expect_close_to_largest(dx, dx_cpu, 1e-5, "dx += dy w against the CPU");
}

// The residual in the epilogue (C = r apart from D, tuned on the live output) and in place (r = y): bit for bit
// the plain GEMM then the add, which share the plan.
TEST(GemmAutotuneCuda, FusedResidualKeepsTheBitsOfTheGemmThenTheAdd) {
  const std::int64_t rows = 2048, in = 1024, out = 512;
  const auto x = device_pair({rows, in}, DType::bf16, 31);
  const auto w = device_pair({out, in}, DType::bf16, 32, 0.05);
  const auto r = device_pair({rows, out}, DType::f32, 33, 4.0);
  OwnedTensor fused({rows, out}, DType::f32, kGpu, "test");
  linear_forward_residual(fused, x.gpu, w.gpu, r.gpu);
  OwnedTensor unfused({rows, out}, DType::f32, kGpu, "test");
  linear_forward(unfused, x.gpu, w.gpu);
  residual_add(unfused, r.gpu);
  expect_bitwise(fused, unfused, "y = x w^T + r");
  OwnedTensor in_place = copy_of(r.gpu);
  linear_forward_residual(in_place, x.gpu, w.gpu, in_place);
  expect_bitwise(in_place, unfused, "y += x w^T");
  OwnedTensor on_cpu({rows, out}, DType::f32, Device::cpu(), "test");
  linear_forward_residual(on_cpu, x.cpu, w.cpu, r.cpu);
  expect_close_to_largest(fused, on_cpu, 1e-5, "y against the CPU");
}

// A bf16 model (rows, widths and vocabulary off the powers of two) under autotuning: within the process the
// plans are fixed, so a step repeats its loss and gradients bit for bit, and selective-qkv recomputation
// (which runs the output projection, w1 and w3 again) still gives none's.
TEST(GemmAutotuneCuda, ModelStepRepeatsAndRecomputationEqualsNone) {
  ModelShapeOverrides shape;
  shape.d_model = 320, shape.d_ff = 864, shape.num_layers = 2, shape.num_heads = 5, shape.vocab_size = 1001;
  shape.context_length = 96;
  const ModelConfig config = with_overrides(model_config("tiny"), shape);
  const test::DeviceTokenBatch batch(3, 96, config.vocab_size, 41);
  const auto step = [&](Recompute recompute) {
    ModelOptions o;
    o.precision = Precision::bf16;
    o.max_batch = 3;
    o.max_seq_len = 96;
    o.seed = 7;
    o.device = kGpu;
    o.recompute = recompute;
    TransformerLM model(config, o);
    const double loss = model.forward_backward(batch.inputs(kGpu), batch.targets(kGpu), {});
    return std::pair{loss, read_as_double(model.gradients().flat())};
  };
  const auto first = step(Recompute::none);
  const auto again = step(Recompute::none);
  const auto recomputed = step(Recompute::selective_qkv);
  EXPECT_EQ(again.first, first.first);
  EXPECT_TRUE(same_bits(again.second, first.second)) << "gradients of a second step";
  EXPECT_EQ(recomputed.first, first.first);
  EXPECT_TRUE(same_bits(recomputed.second, first.second)) << "gradients with selective-qkv recomputation";
}

// The heuristic's choice stays unless another candidate is faster by more than the margin (2%).
TEST(GemmAutotuneCuda, KeepsTheHeuristicsChoiceWithinTheMargin) {
  using gemm::detail::tuned_choice;
  EXPECT_EQ(tuned_choice({1.0, 0.99, std::nullopt}, 0), 0u);
  EXPECT_EQ(tuned_choice({1.0, 0.99, 0.9}, 0), 2u);
  EXPECT_EQ(tuned_choice({std::nullopt, 1.0, 0.97}, 1), 2u);
  EXPECT_EQ(tuned_choice({std::nullopt, 1.0, 1.5}, 1), 1u);
  EXPECT_EQ(tuned_choice({1.0, 0.5}, 3), 3u);  // the heuristic's choice was not timed: it stays
}

TEST(GemmCandidatesCuda, TimesEachCandidateAndMarksThePlannedOne) {
  GemmProblem p;
  p.m = 2048, p.n = 1024, p.k = 512;
  p.operands = DType::bf16, p.out = DType::f32;
  p.b_transpose = true;
  GemmSweepOptions options;
  options.candidates = 8, options.warmup = 1, options.repeats = 3;
  const auto rows = time_gemm_candidates(p, kGpu, options);
  ASSERT_FALSE(rows.empty());
  EXPECT_LE(rows.size(), 8u);
  int planned = 0, autotuned = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].index, static_cast<int>(i));
    EXPECT_GT(rows[i].median_ms, 0.0);
    EXPECT_LE(rows[i].min_ms, rows[i].median_ms);
    EXPECT_GE(rows[i].algo.split_k, 1);
    planned += rows[i].planned, autotuned += rows[i].autotuned;
    if (rows[i].autotuned) EXPECT_TRUE(rows[i].allowed);
  }
  EXPECT_EQ(planned, 1);
  EXPECT_EQ(autotuned, 1);
}

TEST(GemmCandidatesCuda, RejectsABadProblem) {
  GemmProblem p;
  p.m = 64, p.n = 0, p.k = 64;
  EXPECT_THROW(time_gemm_candidates(p, kGpu, {}), Error);
  p.n = 64;
  p.operands = DType::bf16, p.out = DType::f16;
  EXPECT_THROW(time_gemm_candidates(p, kGpu, {}), Error);
  p.out = DType::f32;
  EXPECT_THROW(time_gemm_candidates(p, Device::cpu(), {}), Error);
}

}  // namespace
}  // namespace ft
