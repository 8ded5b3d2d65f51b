// test_fused_epilogues_cuda.cpp — the elementwise passes the Transformer block's step folds into its other
// kernels, on CUDA: the residual add in the GEMM's epilogue (linear_forward_residual, r apart from y and r = y)
// and the dx accumulation (LinearGrads::accumulate_dx), each bit for bit the separate GEMM and add on the GPU
// (see Note [GEMM epilogue addend] in ops/linear.cpp) at the model's shapes scaled down, at the 8B width and
// at outputs large enough to be planned without split K, and close to the CPU's fused ops; the 8B block's
// GEMMs with an addend planned without split K; RMSNorm's backward writing dx's 16-bit copy
// (RmsNormGrads::dx_cast), bit for bit dx rounded, with dx unchanged, packed and scalar paths, strided rows.
// Run on a GPU machine: ./build/bin/gpu_test_fused_epilogues_cuda
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/device_pair.h"
#include "common/expect_close.h"
#include "core/buffer.h"
#include "core/half.h"
#include "core/tensor_io.h"
#include "ops/gemm_cuda.h"
#include "ops/linear.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"

namespace ft {
namespace {

const Device kGpu = Device::cuda(0);
using testing_util::device_pair;
using testing_util::expect_close_to_largest;

void expect_bitwise(const Tensor& got, const Tensor& expected, const std::string& what) {
  const auto g = read_as_double(got), e = read_as_double(expected);
  ASSERT_EQ(g.size(), e.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], e[i]) << what << " [" << i << "]";
}

// A copy of t on its device.
OwnedTensor copy_of(const Tensor& t) {
  OwnedTensor c(t.shape(), t.dtype(), t.device(), "test");
  copy(c, t);
  return c;
}

// ---- linear: residual and dx accumulation in the epilogue ----------------------------------------

struct EpilogueCase {
  DType dtype;  // x, w, dy
  std::int64_t rows, d_in, d_out;
  bool with_cpu;  // also against the CPU's fused op (off at the 8B width: a slow host GEMM)
};

class LinearEpilogueCuda : public ::testing::TestWithParam<EpilogueCase> {};

TEST_P(LinearEpilogueCuda, ResidualIsBitwiseTheGemmThenTheAdd) {
  const EpilogueCase c = GetParam();
  const auto x = device_pair({c.rows, c.d_in}, c.dtype, 1);
  const auto w = device_pair({c.d_out, c.d_in}, c.dtype, 2, 0.05);
  const auto r = device_pair({c.rows, c.d_out}, DType::f32, 3, 4.0);

  OwnedTensor unfused({c.rows, c.d_out}, DType::f32, kGpu, "test");
  linear_forward(unfused, x.gpu, w.gpu);
  residual_add(unfused, r.gpu);  // (x w^T) + r, as the model added the residual before
  OwnedTensor fused({c.rows, c.d_out}, DType::f32, kGpu, "test");
  linear_forward_residual(fused, x.gpu, w.gpu, r.gpu);
  expect_bitwise(fused, unfused, "y = x w^T + r");
  OwnedTensor in_place = copy_of(r.gpu);
  linear_forward_residual(in_place, x.gpu, w.gpu, in_place);  // r is y
  expect_bitwise(in_place, unfused, "y += x w^T");

  if (!c.with_cpu) return;
  OwnedTensor on_cpu({c.rows, c.d_out}, DType::f32, Device::cpu(), "test");
  linear_forward_residual(on_cpu, x.cpu, w.cpu, r.cpu);
  expect_close_to_largest(fused, on_cpu, 1e-5, "y against the CPU");
}

TEST_P(LinearEpilogueCuda, AccumulatedDxIsBitwiseTheGemmThenTheAdd) {
  const EpilogueCase c = GetParam();
  const auto x = device_pair({c.rows, c.d_in}, c.dtype, 4);
  const auto w = device_pair({c.d_out, c.d_in}, c.dtype, 5, 0.05);
  const auto dy = device_pair({c.rows, c.d_out}, c.dtype, 6);
  const auto prior = device_pair({c.rows, c.d_in}, DType::f32, 7, 4.0);

  OwnedTensor product({c.rows, c.d_in}, DType::f32, kGpu, "test");
  linear_backward({product, Tensor()}, dy.gpu, x.gpu, w.gpu);
  OwnedTensor unfused = copy_of(prior.gpu);
  residual_add(unfused, product);  // prior + dy w, as the model summed the w3 and w1 input gradients
  OwnedTensor fused = copy_of(prior.gpu);
  linear_backward({.dx = fused, .accumulate_dx = true}, dy.gpu, x.gpu, w.gpu);
  expect_bitwise(fused, unfused, "dx += dy w");

  if (!c.with_cpu) return;
  linear_backward({.dx = prior.cpu, .accumulate_dx = true}, dy.cpu, x.cpu, w.cpu);
  expect_close_to_largest(fused, prior.cpu, 1e-5, "dx against the CPU");
}

// The model's GEMMs with an addend — output projection (d -> d), w2 (d_ff -> d) forward, w1 (d <- d_ff)
// backward — at tiny test-model widths, scaled down, and at the 8B shape's width (d 4096, d_ff 11008); fp32
// operands too (TF32 off).
INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearEpilogueCuda,
    ::testing::Values(EpilogueCase{DType::f32, 32, 64, 64, true}, EpilogueCase{DType::f32, 48, 172, 64, true},
                      EpilogueCase{DType::bf16, 32, 64, 64, true}, EpilogueCase{DType::bf16, 32, 172, 64, true},
                      EpilogueCase{DType::bf16, 32, 64, 172, true}, EpilogueCase{DType::bf16, 512, 256, 256, true},
                      EpilogueCase{DType::bf16, 512, 688, 256, true}, EpilogueCase{DType::bf16, 512, 256, 688, true},
                      EpilogueCase{DType::bf16, 2048, 4096, 4096, false},
                      EpilogueCase{DType::bf16, 2048, 11008, 4096, false},
                      EpilogueCase{DType::bf16, 2048, 4096, 11008, false},
                      EpilogueCase{DType::bf16, 16384, 4096, 4096, false},
                      EpilogueCase{DType::bf16, 16384, 11008, 4096, false},
                      EpilogueCase{DType::bf16, 16384, 4096, 11008, false}));

// Large fp32 outputs are planned without split K (see Note [Split K on large outputs] in ops/gemm_plan.cu), so
// their epilogue takes the addend: the 8B block's output projection and w2 forward and w1 input gradient at
// 32768 rows, in bf16 with fp32 outputs.
TEST(GemmPlanCuda, LargeFp32OutputsDoNotSplitK) {
  const std::int64_t rows = 32768, d = 4096, f = 11008;
  OwnedTensor a({rows, f}, DType::bf16, kGpu, "test"), w({d, f}, DType::bf16, kGpu, "test");
  OwnedTensor out({rows, d}, DType::f32, kGpu, "test");
  for (const std::int64_t k : {d, f}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    gemm::Args forward;  // out (rows, d) = a (rows, k) w^T, w (d, k)
    forward.m = rows, forward.n = d, forward.k = k;
    forward.a = {a->data(), DType::bf16, k, 0, false};
    forward.b = {w->data(), DType::bf16, k, 0, true};
    forward.d = {out->data(), DType::f32, d, 0, false};
    forward.c = forward.d;
    forward.beta = 1.0f;
    EXPECT_FALSE(gemm::splits_k(forward, kGpu, nullptr));
  }
  gemm::Args backward;  // out (rows, d) += dy (rows, f) w1, w1 (f, d)
  backward.m = rows, backward.n = d, backward.k = f;
  backward.a = {a->data(), DType::bf16, f, 0, false};
  backward.b = {w->data(), DType::bf16, d, 0, false};
  backward.d = {out->data(), DType::f32, d, 0, false};
  backward.c = backward.d;
  backward.beta = 1.0f;
  EXPECT_FALSE(gemm::splits_k(backward, kGpu, nullptr));
}

// ---- RMSNorm backward writing dx's 16-bit copy ---------------------------------------------------

struct CastCase {
  std::int64_t d, pad;  // pad > 0: x and dx are column slices of wider rows (the scalar path)
  DType dy, copy;
};

class RmsNormCastCuda : public ::testing::TestWithParam<CastCase> {};

TEST_P(RmsNormCastCuda, CopyIsBitwiseDxRounded) {
  const CastCase c = GetParam();
  const Shape rows = {3, 37};
  const auto x_store = device_pair({3, 37, c.d + c.pad}, DType::f32, 10);
  const Tensor x = x_store.gpu->narrow(2, 0, c.d), x_cpu = x_store.cpu->narrow(2, 0, c.d);
  const auto w = device_pair({c.d}, DType::f32, 11);
  const auto dy = device_pair({3, 37, c.d}, c.dy, 12);
  const auto prior = device_pair({3, 37, c.d + c.pad}, DType::f32, 13);
  OwnedTensor y({3, 37, c.d}, DType::f32, kGpu, "test"), rstd(rows, DType::f32, kGpu, "test");
  rmsnorm_forward(y, rstd, x, w.gpu);
  OwnedTensor rstd_cpu(rows, DType::f32, Device::cpu(), "test");
  copy(rstd_cpu, rstd);

  for (const bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulating" : "overwriting");
    OwnedTensor dx_store = copy_of(prior.gpu), alone_store = copy_of(prior.gpu);
    const Tensor dx = dx_store->narrow(2, 0, c.d), alone = alone_store->narrow(2, 0, c.d);
    OwnedTensor dw({c.d}, DType::f32, kGpu, "test"), dw_alone({c.d}, DType::f32, kGpu, "test");
    OwnedTensor copy16({3, 37, c.d}, c.copy, kGpu, "test");
    rmsnorm_backward({.dx = dx, .dw = dw, .accumulate_dx = accumulate, .dx_cast = copy16}, dy.gpu, x, w.gpu, rstd);
    rmsnorm_backward({.dx = alone, .dw = dw_alone, .accumulate_dx = accumulate}, dy.gpu, x, w.gpu, rstd);
    expect_bitwise(dx, alone, "dx beside its copy");
    expect_bitwise(dw, dw_alone, "dw beside the copy");
    std::vector<double> rounded = read_as_double(dx);
    for (double& v : rounded) {
      const auto f = static_cast<float>(v);
      v = c.copy == DType::bf16 ? to_float(to_bf16(f)) : to_float(to_f16(f));
    }
    ASSERT_EQ(read_as_double(copy16), rounded) << "the copy is dx rounded to " << name_of(c.copy);

    OwnedTensor cpu_store = copy_of(prior.cpu);
    const Tensor dx_cpu = cpu_store->narrow(2, 0, c.d);
    OwnedTensor copy_cpu({3, 37, c.d}, c.copy, Device::cpu(), "test");
    rmsnorm_backward({.dx = dx_cpu, .accumulate_dx = accumulate, .dx_cast = copy_cpu}, dy.cpu, x_cpu, w.cpu,
                     rstd_cpu);
    expect_close_to_largest(dx, dx_cpu, 1e-5, "dx against the CPU");
    expect_close_to_largest(copy16, copy_cpu, 1e-2, "the copy against the CPU");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormCastCuda,
                         ::testing::Values(CastCase{64, 0, DType::bf16, DType::bf16},
                                           CastCase{64, 0, DType::f32, DType::f16},
                                           CastCase{50, 3, DType::bf16, DType::bf16},
                                           CastCase{4096, 0, DType::bf16, DType::bf16}));

}  // namespace
}  // namespace ft
