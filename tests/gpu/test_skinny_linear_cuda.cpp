// test_skinny_linear_cuda.cpp — the fused few-row bf16 GEMM (ops/skinny_linear.h) on CUDA against its CPU
// composition of the unfused ops: every epilogue (store to bf16 and fp32, residual, SwiGLU, RoPE + cache
// append at a device position), with and without the fused RMSNorm, rows 1, 3 and 8 (padded to 1, 4, 8),
// inputs K = 64 and 1600 (a partial last chunk) and 6400 (more shared memory than the default 48 KB), an odd
// output width, more units than warps, xl's decode shapes at one row; a second run, launched to overlap the
// first, bit-identical, and so are RoPE angles read from a rope_table (or computed past its positions); the
// fused RMSNorm bit-identical to rmsnorm_forward followed by the GEMM; K split among warps bit-identical to one
// warp a unit; rows that do not fit and a misshapen table are clear errors.
// Run on a GPU machine: ./build/bin/gpu_test_skinny_linear_cuda
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/device_pair.h"
#include "common/expect_close.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/skinny_linear.h"

namespace ft {
namespace {

const Device kGpu = Device::cuda(0);
using testing_util::expect_close;

using Pair = testing_util::DevicePair;
using testing_util::device_pair;

// The args of one call on one device (cpu = true: the host copies).
struct Call {
  SkinnyEpilogue epilogue;
  std::int64_t M, K, N;
  bool norm;
  DType y_dtype = DType::bf16;
};

std::string describe(const Call& c) {
  return str("epilogue ", static_cast<int>(c.epilogue), " M ", c.M, " K ", c.K, " N ", c.N, c.norm ? " norm" : "",
             " y ", name_of(c.y_dtype));
}

void check(const Call& c) {
  SCOPED_TRACE(describe(c));
  const bool rope = c.epilogue == SkinnyEpilogue::rope_append;
  const std::int64_t width = rope ? c.N / 3 : c.N, H = 2, capacity = 12;
  const Pair x = device_pair({c.M, c.K}, c.norm ? DType::f32 : DType::bf16, 1);
  const Pair w = device_pair({c.N, c.K}, DType::bf16, 2, 0.05);
  const Pair w3 = device_pair({c.N, c.K}, DType::bf16, 3, 0.05);
  const Pair g = device_pair({c.K}, DType::f32, 4);
  const Pair residual = device_pair({c.M, c.N}, DType::f32, 5);
  const Pair y = device_pair({c.M, width}, c.y_dtype, 6);
  const Pair kc = device_pair({c.M, H, capacity, width / H}, DType::bf16, 7);
  const Pair vc = device_pair({c.M, H, capacity, width / H}, DType::bf16, 8);
  const std::int32_t at = 9;
  Buffer position(sizeof(at), kGpu, "test position");
  ASSERT_EQ(cudaMemcpy(position.data(), &at, sizeof(at), cudaMemcpyHostToDevice), cudaSuccess);

  const auto args = [&](bool cpu) {
    const auto pick = [cpu](const Pair& p) -> Tensor { return cpu ? p.cpu.tensor() : p.gpu.tensor(); };
    SkinnyLinearArgs a;
    a.epilogue = c.epilogue;
    a.y = pick(y);
    a.x = pick(x);
    a.w = pick(w);
    if (c.epilogue == SkinnyEpilogue::swiglu) a.w3 = pick(w3);
    if (c.norm) a.norm_weight = pick(g);
    if (c.epilogue == SkinnyEpilogue::residual) a.residual = pick(residual);
    if (rope) {
      a.k_cache = pick(kc);
      a.v_cache = pick(vc);
      a.position = cpu ? &at : static_cast<const std::int32_t*>(position.data());
      a.rope_theta = 10000.0;
    }
    return a;
  };
  skinny_linear(args(true));
  skinny_linear(args(false));
  const std::vector<double> first = read_as_double(y.gpu);
  // bf16 outputs: one rounding apart; fp32: the accumulation order (and, with the norm, x' one bf16 step apart).
  const double tol = c.y_dtype == DType::bf16 || c.norm ? 2e-2 : 1e-4;
  expect_close(first, read_as_double(y.cpu), tol, "y");
  if (rope) {
    expect_close(read_as_double(kc.gpu), read_as_double(kc.cpu), 2e-2, "k cache");
    expect_close(read_as_double(vc.gpu), read_as_double(vc.cpu), 2e-2, "v cache");
  }
  SkinnyLinearArgs overlapping = args(false);
  overlapping.overlap_launch = true;
  skinny_linear(overlapping);
  EXPECT_EQ(read_as_double(y.gpu), first) << "a second run, launched to overlap the first";
  if (!rope) return;
  // The angles from a table holding the position, and from one too short for it: the same bits.
  const std::vector<double> k_first = read_as_double(kc.gpu), v_first = read_as_double(vc.gpu);
  for (std::int64_t rows : {capacity, std::int64_t{at}}) {
    SCOPED_TRACE(str("rope table of ", rows, " positions"));
    OwnedTensor table({rows, width / H / 2, 2}, DType::f32, kGpu, "test rope table");
    rope_table(table, {10000.0});
    SkinnyLinearArgs tabled = args(false);
    tabled.rope_table = table;
    tabled.overlap_launch = true;
    skinny_linear(tabled);
    EXPECT_EQ(read_as_double(y.gpu), first) << "q";
    EXPECT_EQ(read_as_double(kc.gpu), k_first) << "k cache";
    EXPECT_EQ(read_as_double(vc.gpu), v_first) << "v cache";
  }
}

TEST(SkinnyLinearCuda, MatchesTheCpuComposition) {
  for (std::int64_t M : {1, 3, 8})
    for (std::int64_t K : {64, 1600}) {
      check({SkinnyEpilogue::store, M, K, 97, false, DType::f32});
      check({SkinnyEpilogue::store, M, K, 96, true, DType::f32});
      check({SkinnyEpilogue::store, M, K, 200, false, DType::bf16});
      check({SkinnyEpilogue::residual, M, K, 130, false, DType::f32});
      check({SkinnyEpilogue::swiglu, M, K, 75, true});
      check({SkinnyEpilogue::swiglu, M, K, 64, false});
      check({SkinnyEpilogue::rope_append, M, K, 3 * 2 * 32, true});
      check({SkinnyEpilogue::rope_append, M, K, 3 * 2 * 8, false});
    }
  check({SkinnyEpilogue::residual, 8, 6400, 160, false, DType::f32});  // 100 KB of staged rows
  check({SkinnyEpilogue::store, 1, 64, 9001, false, DType::f32});      // several units a warp, all prefetched
  check({SkinnyEpilogue::swiglu, 5, 6400, 48, true});
  // xl's decode shapes at one row, where a warp takes several units in turn: w1/w3 (about 3 a warp), the fused
  // QKV + RoPE (1 or 2) and an LM head of GPT-2's vocabulary (about 12).
  check({SkinnyEpilogue::swiglu, 1, 1600, 6400, true});
  check({SkinnyEpilogue::rope_append, 1, 1600, 3 * 1600, true});
  check({SkinnyEpilogue::store, 1, 1600, 50257, true, DType::f32});
}

// The fused RMSNorm stages x' as rmsnorm_forward writes it: the same bits as that op followed by the GEMM.
TEST(SkinnyLinearCuda, FusedNormIsRmsnormForwardThenTheGemm) {
  const std::int64_t N = 96;
  for (std::int64_t M : {1, 3, 8})
    for (std::int64_t K : {1600, 6400}) {  // x read once, and (past 4096 columns) in two passes
      SCOPED_TRACE(str("M ", M, " K ", K));
      const Pair x = device_pair({M, K}, DType::f32, 11), g = device_pair({K}, DType::f32, 12);
      const Pair w = device_pair({N, K}, DType::bf16, 13, 0.05);
      OwnedTensor ln({M, K}, DType::bf16, kGpu, "test ln"), rstd({M}, DType::f32, kGpu, "test rstd");
      OwnedTensor unfused({M, N}, DType::f32, kGpu, "test y"), fused({M, N}, DType::f32, kGpu, "test y");
      rmsnorm_forward(ln, rstd, x.gpu, g.gpu, {1e-5f});
      SkinnyLinearArgs a;
      a.y = unfused;
      a.x = ln;
      a.w = w.gpu;
      skinny_linear(a);
      a.y = fused;
      a.x = x.gpu;
      a.norm_weight = g.gpu;
      a.norm_eps = 1e-5f;
      skinny_linear(a);
      EXPECT_EQ(read_as_double(fused), read_as_double(unfused));
    }
}

// A row's result depends on neither the other rows nor the split of K among warps (Note [Skinny split K]): at
// K = 6400 an 8-row residual call takes too much shared memory to split, a 1-row call splits in 2 (1600 outputs)
// or 4 (160 outputs); each row alone gives the 8-row call's bits.
TEST(SkinnyLinearCuda, SplitKIsBitIdenticalToOneWarpAUnit) {
  const std::int64_t M = 8, K = 6400;
  for (std::int64_t N : {1600, 160}) {
    SCOPED_TRACE(str("N ", N));
    const Pair x = device_pair({M, K}, DType::bf16, 21), w = device_pair({N, K}, DType::bf16, 22, 0.05);
    const Pair residual = device_pair({M, N}, DType::f32, 23);
    OwnedTensor all({M, N}, DType::f32, kGpu, "test y"), one({1, N}, DType::f32, kGpu, "test y");
    SkinnyLinearArgs a;
    a.epilogue = SkinnyEpilogue::residual;
    a.y = all;
    a.x = x.gpu;
    a.w = w.gpu;
    a.residual = residual.gpu;
    skinny_linear(a);
    const std::vector<double> rows = read_as_double(all);
    for (std::int64_t m : {0, 5}) {
      a.y = one;
      a.x = Tensor(static_cast<char*>(x.gpu->data()) + m * K * 2, DType::bf16, kGpu, {1, K});
      a.residual = Tensor(residual.gpu->data_as<float>() + m * N, DType::f32, kGpu, {1, N});
      a.overlap_launch = m == 5;
      skinny_linear(a);
      const std::vector<double> got = read_as_double(one);
      EXPECT_EQ(got, std::vector<double>(rows.begin() + m * N, rows.begin() + (m + 1) * N)) << "row " << m;
    }
  }
}

TEST(SkinnyLinearCuda, AMisshapenRopeTableIsAnError) {
  const Pair x = device_pair({1, 64}, DType::bf16, 1), w = device_pair({3 * 64, 64}, DType::bf16, 2);
  OwnedTensor y({1, 64}, DType::bf16, kGpu, "test y"), table({12, 16, 2}, DType::f32, kGpu, "test table");
  OwnedTensor kc({1, 1, 12, 64}, DType::bf16, kGpu, "test k"), vc({1, 1, 12, 64}, DType::bf16, kGpu, "test v");
  Buffer position(sizeof(std::int32_t), kGpu, "test position");
  SkinnyLinearArgs a;
  a.epilogue = SkinnyEpilogue::rope_append;
  a.y = y;
  a.x = x.gpu;
  a.w = w.gpu;
  a.k_cache = kc;
  a.v_cache = vc;
  a.position = static_cast<const std::int32_t*>(position.data());
  a.rope_table = table;  // the pairs of a head dim of 32, not 64
  try {
    skinny_linear(a);
    ADD_FAILURE() << "a table of 16 pairs for a head dim of 64 ran";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("rope_table must be (T, Dh/2 = 32, 2)"), std::string::npos) << e.message();
  }
}

TEST(SkinnyLinearCuda, RowsThatDoNotFitAreAnError) {
  EXPECT_TRUE(skinny_linear_fits(8, 1600));
  EXPECT_FALSE(skinny_linear_fits(9, 1600));
  EXPECT_FALSE(skinny_linear_fits(1, 1601));
  const Pair x = device_pair({9, 64}, DType::bf16, 1), w = device_pair({16, 64}, DType::bf16, 2);
  OwnedTensor y({9, 16}, DType::f32, kGpu, "test y");
  SkinnyLinearArgs a;
  a.y = y;
  a.x = x.gpu;
  a.w = w.gpu;
  try {
    skinny_linear(a);
    ADD_FAILURE() << "9 rows ran";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("expected 1 to 8 rows"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace ft
