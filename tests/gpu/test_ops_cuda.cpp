// test_ops_cuda.cpp — every model op's CUDA implementation against its CPU implementation on the same
// inputs: linear (fp32 with TF32 off, bf16 operands with fp32 / bf16 outputs, strided rows, accumulation),
// embedding (bit-identical forward and backward, repeated ids), RMSNorm (dx accumulated, its 16-bit copy), RoPE
// (both memory layouts, offset), SwiGLU (in place; the backward recomputing h bitwise the forward then the
// backward), linear's dx and dw alone bitwise both at once, cross-entropy (vocab 97 to 151936, in-place / bf16 / no
// dlogits), residual add, AdamW (clipping folded in too), SGD, casts and fills, gradient clipping; vectorised and
// scalar paths (aligned and unaligned shapes); determinism (two runs bit-identical); ids out of range raise before
// anything is written.
// Run on a GPU machine: ./build/bin/gpu_test_ops_cuda
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/expect_close.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor_io.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"

namespace ft {
namespace {

using testing_util::expect_close_to_largest;

const Device kGpu = Device::cuda(0);

// n normal(0, scale) draws rounded to dtype, so host and device tensors hold them exactly.
std::vector<double> normals(std::size_t n, std::uint64_t seed, DType dtype = DType::f32, double scale = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> x(n);
  for (auto& v : x) {
    const auto f = static_cast<float>(normal(gen));
    v = dtype == DType::bf16 ? to_float(to_bf16(f)) : dtype == DType::f16 ? to_float(to_f16(f)) : f;
  }
  return x;
}

// One tensor on the host and its copy on the GPU, (shape) of dtype, holding seeded normals.
struct Pair {
  OwnedTensor cpu, gpu;
};

Pair pair(const Shape& shape, DType dtype, std::uint64_t seed, double scale = 1.0) {
  Pair p{OwnedTensor(shape, dtype, Device::cpu(), "test"), OwnedTensor(shape, dtype, kGpu, "test")};
  write_from_double(p.cpu, normals(static_cast<std::size_t>(shape_numel(shape)), seed, dtype, scale));
  copy(p.gpu, p.cpu);
  return p;
}

// The first `cols` columns of the last dim (strided rows when cols < the stored width).
Tensor first_cols(const Tensor& t, std::int64_t cols) { return t.narrow(t.dim() - 1, 0, cols); }

void expect_equal(const Tensor& got, const Tensor& expected, const std::string& what) {
  const auto g = read_as_double(got), e = read_as_double(expected);
  ASSERT_EQ(g.size(), e.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], e[i]) << what << " [" << i << "]";
}

// Token ids on the host and the GPU.
struct Ids {
  std::vector<std::int32_t> host;
  Buffer device;
  Shape shape;
  Ids(std::vector<std::int32_t> values, Shape s)
      : host(std::move(values)), device(host.size() * sizeof(std::int32_t), kGpu, "test ids"), shape(std::move(s)) {
    EXPECT_EQ(cudaMemcpy(device.data(), host.data(), host.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  TokenIds cpu() const { return {host.data(), shape, Device::cpu()}; }
  TokenIds gpu() const { return {static_cast<const std::int32_t*>(device.data()), shape, kGpu}; }
};

Ids random_ids(Shape shape, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> v(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& x : v) x = id(gen);
  return Ids(std::move(v), std::move(shape));
}

// ---- linear --------------------------------------------------------------------------------------

struct LinearCase {
  DType dtype;
  DType out;  // y and dx dtype
  std::int64_t d_in, d_out, pad;  // pad > 0: x is a column slice of a wider matrix
};

class LinearCuda : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearCuda, MatchesCpu) {
  const LinearCase c = GetParam();
  const Shape lead = {3, 13};
  const Pair x_store = pair({3, 13, c.d_in + c.pad}, c.dtype, 1);
  const Pair w = pair({c.d_out, c.d_in}, c.dtype, 2, 0.1);
  const Pair dy = pair({3, 13, c.d_out}, c.dtype, 3);
  const Tensor x_cpu = first_cols(x_store.cpu, c.d_in), x_gpu = first_cols(x_store.gpu, c.d_in);
  const Pair y = pair({3, 13, c.d_out}, c.out, 4), dx = pair({3, 13, c.d_in}, c.out, 5);
  const Pair dw = pair({c.d_out, c.d_in}, DType::f32, 6);  // accumulated into

  linear_forward(y.cpu, x_cpu, w.cpu);
  linear_forward(y.gpu, x_gpu, w.gpu);
  const bool exact_out = c.out == DType::f32;
  expect_close_to_largest(y.gpu, y.cpu, exact_out ? 1e-5 : 1e-2, "y");

  linear_backward({dx.cpu, dw.cpu, true}, dy.cpu, x_cpu, w.cpu);
  linear_backward({dx.gpu, dw.gpu, true}, dy.gpu, x_gpu, w.gpu);
  expect_close_to_largest(dx.gpu, dx.cpu, exact_out ? 1e-5 : 1e-2, "dx");
  expect_close_to_largest(dw.gpu, dw.cpu, 1e-5, "dw (accumulated)");

  // Overwriting dw, twice: bit-identical runs.
  linear_backward({Tensor(), dw.cpu, false}, dy.cpu, x_cpu, w.cpu);
  linear_backward({Tensor(), dw.gpu, false}, dy.gpu, x_gpu, w.gpu);
  expect_close_to_largest(dw.gpu, dw.cpu, 1e-5, "dw");
  const auto first = read_as_double(dw.gpu);
  linear_backward({Tensor(), dw.gpu, false}, dy.gpu, x_gpu, w.gpu);
  EXPECT_EQ(read_as_double(dw.gpu), first) << "dw differs between two runs";

  // dx alone, then dw alone: the bits of both in one call (the model's w2 backward runs them apart).
  linear_backward({dx.gpu, dw.gpu, false}, dy.gpu, x_gpu, w.gpu);
  const auto both_dx = read_as_double(dx.gpu), both_dw = read_as_double(dw.gpu);
  linear_backward({dx.gpu, Tensor()}, dy.gpu, x_gpu, w.gpu);
  linear_backward({Tensor(), dw.gpu}, dy.gpu, x_gpu, w.gpu);
  EXPECT_EQ(read_as_double(dx.gpu), both_dx) << "dx alone differs from dx beside dw";
  EXPECT_EQ(read_as_double(dw.gpu), both_dw) << "dw alone differs from dw beside dx";
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearCuda,
                         ::testing::Values(LinearCase{DType::f32, DType::f32, 64, 48, 0},
                                           LinearCase{DType::f32, DType::f32, 72, 40, 24},
                                           LinearCase{DType::f32, DType::f32, 37, 21, 3},
                                           LinearCase{DType::bf16, DType::f32, 64, 48, 64},
                                           LinearCase{DType::bf16, DType::bf16, 96, 40, 0}));

// ---- embedding ----------------------------------------------------------------------------------

class EmbeddingCuda : public ::testing::TestWithParam<std::tuple<std::int64_t, std::int64_t>> {};

TEST_P(EmbeddingCuda, ForwardAndBackwardAreBitIdenticalToCpu) {
  const auto [vocab, d] = GetParam();
  const Ids ids = random_ids({4, 37}, vocab, 7);  // many repeats when vocab is small
  const Pair weight = pair({vocab, d}, DType::f32, 8);
  const Pair out = pair({4, 37, d}, DType::f32, 9);
  embedding_forward(out.cpu, ids.cpu(), weight.cpu);
  embedding_forward(out.gpu, ids.gpu(), weight.gpu);
  expect_equal(out.gpu, out.cpu, "out");

  const Pair dout = pair({4, 37, d}, DType::f32, 10);
  const Pair dw = pair({vocab, d}, DType::f32, 11);
  embedding_backward(dw.cpu, ids.cpu(), dout.cpu, true);
  embedding_backward(dw.gpu, ids.gpu(), dout.gpu, true);
  expect_equal(dw.gpu, dw.cpu, "dweight (accumulated)");
  embedding_backward(dw.cpu, ids.cpu(), dout.cpu, false);
  embedding_backward(dw.gpu, ids.gpu(), dout.gpu, false);
  expect_equal(dw.gpu, dw.cpu, "dweight");
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingCuda,
                         ::testing::Values(std::make_tuple(std::int64_t{5}, std::int64_t{64}),
                                           std::make_tuple(std::int64_t{97}, std::int64_t{36}),
                                           std::make_tuple(std::int64_t{50}, std::int64_t{1030}),
                                           std::make_tuple(std::int64_t{3000}, std::int64_t{33})));

TEST(EmbeddingCuda, IdsOutOfRangeRaiseBeforeAnythingIsWritten) {
  const Ids ids({0, 3, 9, 2, 10, 1}, {2, 3});
  const Pair weight = pair({10, 8}, DType::f32, 12);
  const Pair out = pair({2, 3, 8}, DType::f32, 13);
  const auto before = read_as_double(out.gpu);
  try {
    embedding_forward(out.gpu, ids.gpu(), weight.gpu);
    ADD_FAILURE() << "no error for id 10 with vocab 10";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    for (const char* part : {"embedding_forward", "token id 10", "[1, 1]", "vocab size 10"})
      EXPECT_NE(e.message().find(part), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_as_double(out.gpu), before);
}

// ---- RMSNorm -----------------------------------------------------------------------------------

// rows, d, pad (x is a column slice of wider rows: the scalar path when d + pad is not a multiple of 4), y / dy
// dtype. Enough rows for row groups of several rows, one shorter, and d past the columns a block holds in
// registers (8192 in 4-element packs, 2048 in single elements; see Note [RMSNorm rows in registers]) on both
// paths; d below a warp's columns, odd, and one not filling the last warp.
class RmsNormCuda : public ::testing::TestWithParam<std::tuple<std::int64_t, std::int64_t, std::int64_t, DType>> {};

TEST_P(RmsNormCuda, MatchesCpu) {
  const auto [rows, d, pad, ydtype] = GetParam();
  const Pair x_store = pair({rows, d + pad}, DType::f32, 20);
  const Tensor x_cpu = first_cols(x_store.cpu, d), x_gpu = first_cols(x_store.gpu, d);
  const Pair w = pair({d}, DType::f32, 21);
  const Pair y = pair({rows, d}, ydtype, 22), rstd = pair({rows}, DType::f32, 23);
  rmsnorm_forward(y.cpu, rstd.cpu, x_cpu, w.cpu);
  rmsnorm_forward(y.gpu, rstd.gpu, x_gpu, w.gpu);
  expect_close_to_largest(rstd.gpu, rstd.cpu, 1e-6, "rstd");
  expect_close_to_largest(y.gpu, y.cpu, ydtype == DType::f32 ? 1e-6 : 1e-2, "y");

  const Pair dy = pair({rows, d}, ydtype, 24);
  const Pair dx = pair({rows, d}, DType::f32, 25), dw = pair({d}, DType::f32, 26);
  for (bool accumulate : {true, false}) {
    for (DType cast : {DType::f32, DType::bf16, DType::f16}) {  // f32: no dx_cast
      const std::string tag =
          str(accumulate ? " (accumulated)" : "", cast == DType::f32 ? "" : str(" with a ", name_of(cast), " copy"));
      const OwnedTensor dx_cast({rows, d}, cast, kGpu, "test");
      const Tensor cast_view = cast == DType::f32 ? Tensor() : Tensor(dx_cast);
      rmsnorm_backward({dx.cpu, dw.cpu, accumulate, accumulate}, dy.cpu, x_cpu, w.cpu, rstd.cpu);
      rmsnorm_backward({dx.gpu, dw.gpu, accumulate, accumulate, cast_view}, dy.gpu, x_gpu, w.gpu, rstd.gpu);
      expect_close_to_largest(dx.gpu, dx.cpu, 1e-5, "dx" + tag);
      expect_close_to_largest(dw.gpu, dw.cpu, 1e-5, "dw" + tag);
      if (cast == DType::f32) continue;
      // The copy: dx's final value rounded, bit for bit.
      const auto got = read_as_double(dx_cast), dx_values = read_as_double(dx.gpu);
      for (std::size_t i = 0; i < got.size(); ++i) {
        const auto f = static_cast<float>(dx_values[i]);
        const double rounded = cast == DType::bf16 ? to_float(to_bf16(f)) : to_float(to_f16(f));
        ASSERT_EQ(got[i], rounded) << "dx copy [" << i << "]" << tag;
      }
    }
  }
  // dx alone and dw alone: the same bits as together (one pass computes both).
  const auto first_dx = read_as_double(dx.gpu), first_dw = read_as_double(dw.gpu);
  rmsnorm_backward({Tensor(), dw.gpu, false, false}, dy.gpu, x_gpu, w.gpu, rstd.gpu);
  EXPECT_EQ(read_as_double(dw.gpu), first_dw) << "dw differs between two runs";
  rmsnorm_backward({dx.gpu, Tensor(), false, false}, dy.gpu, x_gpu, w.gpu, rstd.gpu);
  EXPECT_EQ(read_as_double(dx.gpu), first_dx) << "dx alone differs from dx beside dw";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RmsNormCuda,
    ::testing::Values(std::make_tuple(std::int64_t{21}, std::int64_t{64}, std::int64_t{0}, DType::f32),
                      std::make_tuple(std::int64_t{21}, std::int64_t{768}, std::int64_t{256}, DType::bf16),
                      std::make_tuple(std::int64_t{21}, std::int64_t{50}, std::int64_t{3}, DType::f32),
                      std::make_tuple(std::int64_t{21}, std::int64_t{2600}, std::int64_t{0}, DType::f32),
                      std::make_tuple(std::int64_t{9}, std::int64_t{2052}, std::int64_t{1}, DType::bf16),
                      std::make_tuple(std::int64_t{3}, std::int64_t{4}, std::int64_t{0}, DType::bf16),
                      std::make_tuple(std::int64_t{1030}, std::int64_t{4096}, std::int64_t{0}, DType::f32),
                      std::make_tuple(std::int64_t{1030}, std::int64_t{4096}, std::int64_t{0}, DType::bf16),
                      std::make_tuple(std::int64_t{600}, std::int64_t{10000}, std::int64_t{0}, DType::bf16),
                      std::make_tuple(std::int64_t{37}, std::int64_t{8195}, std::int64_t{1}, DType::f32)));

// ---- RoPE ----------------------------------------------------------------------------------------

// dtype, layout, Dh, H, T: pairs a thread takes 4 (Dh = 16, 64, 128), 2 (Dh = 12) and 1 (Dh = 6, 10); heads past
// a thread's (8) and a last group not full; positions past a block's rows (see Note [RoPE rotation threads]).
class RopeCuda
    : public ::testing::TestWithParam<std::tuple<DType, bool, std::int64_t, std::int64_t, std::int64_t>> {};

TEST_P(RopeCuda, ForwardAndBackwardMatchCpu) {
  const auto [dtype, bthd, Dh, H, T] = GetParam();
  const std::int64_t B = 2;
  // (B, H, T, Dh), or a (B, T, 3, H, Dh) buffer like the model's fused QKV seen as (B, H, T, Dh).
  const Pair store = bthd ? pair({B, T, 3, H, Dh}, dtype, 30) : pair({B, H, T, Dh}, dtype, 30);
  auto view = [&](const Tensor& t) {
    if (!bthd) return t;
    return Tensor(static_cast<char*>(t.data()) + H * Dh * size_of(dtype), dtype, t.device(), {B, H, T, Dh},
                  {T * 3 * H * Dh, Dh, 3 * H * Dh, 1});  // the k part
  };
  RopeOptions options;
  options.position_offset = 5;
  rope_forward(view(store.cpu), options);
  rope_forward(view(store.gpu), options);
  const double tol = dtype == DType::f32 ? 1e-6 : 1e-2;
  expect_close_to_largest(store.gpu, store.cpu, tol, "rope forward");
  rope_backward(view(store.cpu), options);
  rope_backward(view(store.gpu), options);
  expect_close_to_largest(store.gpu, store.cpu, tol, "rope backward");
}

INSTANTIATE_TEST_SUITE_P(Layouts, RopeCuda,
                         ::testing::Values(std::make_tuple(DType::f32, false, std::int64_t{16}, std::int64_t{3},
                                                           std::int64_t{9}),
                                           std::make_tuple(DType::f32, true, std::int64_t{64}, std::int64_t{3},
                                                           std::int64_t{9}),
                                           std::make_tuple(DType::bf16, true, std::int64_t{64}, std::int64_t{3},
                                                           std::int64_t{9}),
                                           std::make_tuple(DType::f16, false, std::int64_t{6}, std::int64_t{3},
                                                           std::int64_t{9}),
                                           std::make_tuple(DType::f32, true, std::int64_t{10}, std::int64_t{3},
                                                           std::int64_t{9}),
                                           std::make_tuple(DType::bf16, true, std::int64_t{128}, std::int64_t{11},
                                                           std::int64_t{37}),
                                           std::make_tuple(DType::f32, false, std::int64_t{12}, std::int64_t{17},
                                                           std::int64_t{45}),
                                           std::make_tuple(DType::f16, true, std::int64_t{6}, std::int64_t{9},
                                                           std::int64_t{300})));

// Per-token positions (packed documents): the CPU's rotation value for value, and a position outside [0, T)
// turns its row into NaN (the CPU would refuse it; the device cannot check without a sync).
TEST(RopeCuda, PerTokenPositionsMatchCpu) {
  const std::int64_t B = 2, H = 3, T = 9, Dh = 64;
  const Pair store = pair({B, T, H, Dh}, DType::bf16, 31);  // seen as (B, H, T, Dh)
  std::vector<std::int32_t> positions = {0, 1, 2, 0, 1, 0, 1, 2, 3, 0, 0, 1, 2, 3, 4, 5, 0, 1};  // (B, T)
  Buffer on_device(positions.size() * sizeof(std::int32_t), kGpu, "test.positions");
  auto upload = [&] {
    ASSERT_EQ(cudaMemcpy(on_device.data(), positions.data(), on_device.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  };
  upload();
  RopeOptions cpu_options, gpu_options;
  cpu_options.positions = {positions.data(), {B, T}, Device::cpu()};
  gpu_options.positions = {static_cast<const std::int32_t*>(on_device.data()), {B, T}, kGpu};
  const Tensor cpu = store.cpu->permute({0, 2, 1, 3}), gpu = store.gpu->permute({0, 2, 1, 3});
  rope_forward(cpu, cpu_options);
  rope_forward(gpu, gpu_options);
  expect_close_to_largest(store.gpu, store.cpu, 1e-2, "rope forward with positions");
  rope_backward(cpu, cpu_options);
  rope_backward(gpu, gpu_options);
  expect_close_to_largest(store.gpu, store.cpu, 1e-2, "rope backward with positions");

  positions[3] = static_cast<std::int32_t>(T);  // row (0, t = 3)
  upload();
  rope_forward(gpu, gpu_options);
  const std::vector<double> values = read_as_double(store.gpu);  // (B, T, H, Dh)
  for (std::int64_t t = 0; t < T; ++t)
    EXPECT_EQ(std::isnan(values[(t * H) * Dh]), t == 3) << "t = " << t;
}

// ---- SwiGLU --------------------------------------------------------------------------------------

// dtype, d_ff, and whether a and b are the two halves of one (rows, 2 d_ff) buffer, as a fused GEMM would write
// them (strided rows), or two contiguous tensors (walked as one row). Packs of 8 (16-bit, d_ff = 64), 4 and 1.
class SwigluCuda : public ::testing::TestWithParam<std::tuple<DType, std::int64_t, bool>> {};

// (2, 5, 7, d_ff) storage of a and b, or (5, 7, 2 d_ff) for halves; a and b seen in it.
struct SwigluInputs {
  std::int64_t f;
  bool halves;
  Shape storage() const { return halves ? Shape{5, 7, 2 * f} : Shape{2, 5, 7, f}; }
  Tensor a(const Tensor& t) const { return halves ? first_cols(t, f) : t.select(0, 0); }
  Tensor b(const Tensor& t) const { return halves ? t.narrow(2, f, f) : t.select(0, 1); }
};

TEST_P(SwigluCuda, ForwardAndInPlaceBackwardMatchCpu) {
  const auto [dtype, f, halves] = GetParam();
  const SwigluInputs in{f, halves};
  const Pair ab = pair(in.storage(), dtype, 40);
  const Pair h = pair({5, 7, f}, dtype, 41), dh = pair({5, 7, f}, dtype, 42);
  const double tol = dtype == DType::f32 ? 1e-5 : 1e-2;
  swiglu_forward(h.cpu, in.a(ab.cpu), in.b(ab.cpu));
  swiglu_forward(h.gpu, in.a(ab.gpu), in.b(ab.gpu));
  expect_close_to_largest(h.gpu, h.cpu, tol, "h");
  swiglu_backward(in.a(ab.cpu), in.b(ab.cpu), dh.cpu, in.a(ab.cpu), in.b(ab.cpu));
  swiglu_backward(in.a(ab.gpu), in.b(ab.gpu), dh.gpu, in.a(ab.gpu), in.b(ab.gpu));
  expect_close_to_largest(in.a(ab.gpu), in.a(ab.cpu), tol, "da (over a)");
  expect_close_to_largest(in.b(ab.gpu), in.b(ab.cpu), tol, "db (over b)");
}

// The backward that recomputes h (the model's FFN backward): bitwise the forward then the backward on the GPU,
// with the gradients over their inputs, and close to the CPU's.
TEST_P(SwigluCuda, RecomputeBackwardIsForwardThenBackwardBitwise) {
  const auto [dtype, f, halves] = GetParam();
  const SwigluInputs in{f, halves};
  const Pair ab = pair(in.storage(), dtype, 43), dh = pair({5, 7, f}, dtype, 44);
  const OwnedTensor ab2(in.storage(), dtype, kGpu, "test");
  copy(ab2, ab.gpu);
  const Pair h = pair({5, 7, f}, dtype, 45);
  const OwnedTensor h2({5, 7, f}, dtype, kGpu, "test");
  swiglu_forward(h.gpu, in.a(ab.gpu), in.b(ab.gpu));
  swiglu_backward(in.a(ab.gpu), in.b(ab.gpu), dh.gpu, in.a(ab.gpu), in.b(ab.gpu));
  swiglu_recompute_backward(h2, in.a(ab2), in.b(ab2), dh.gpu, in.a(ab2), in.b(ab2));
  expect_equal(h2, h.gpu, "h");
  expect_equal(ab2, ab.gpu, "da and db (over a and b)");
  swiglu_recompute_backward(h.cpu, in.a(ab.cpu), in.b(ab.cpu), dh.cpu, in.a(ab.cpu), in.b(ab.cpu));
  const double tol = dtype == DType::f32 ? 1e-5 : 1e-2;
  expect_close_to_largest(h2, h.cpu, tol, "h against the CPU");
  expect_close_to_largest(ab2, ab.cpu, tol, "da and db against the CPU");
}

INSTANTIATE_TEST_SUITE_P(Shapes, SwigluCuda,
                         ::testing::Values(std::make_tuple(DType::f32, std::int64_t{36}, true),
                                           std::make_tuple(DType::f32, std::int64_t{35}, true),
                                           std::make_tuple(DType::bf16, std::int64_t{172}, true),
                                           std::make_tuple(DType::f16, std::int64_t{64}, true),
                                           std::make_tuple(DType::f32, std::int64_t{35}, false),
                                           std::make_tuple(DType::bf16, std::int64_t{172}, false),
                                           std::make_tuple(DType::bf16, std::int64_t{64}, false),
                                           std::make_tuple(DType::f16, std::int64_t{6}, false)));

// ---- cross-entropy -------------------------------------------------------------------------------

enum class Dlogits { none, separate, in_place, bf16 };

class CrossEntropyCuda : public ::testing::TestWithParam<std::tuple<std::int64_t, Dlogits>> {};

TEST_P(CrossEntropyCuda, LossAndDlogitsMatchCpu) {
  const auto [V, mode] = GetParam();
  const Pair logits = pair({3, 4, V}, DType::f32, 50, 3.0);
  const Ids targets = random_ids({3, 4}, V, 51);
  const Pair dl = pair({3, 4, V}, mode == Dlogits::bf16 ? DType::bf16 : DType::f32, 52);
  // The dlogits argument: none, a separate fp32 / bf16 buffer, or the logits themselves.
  auto target = [&](const OwnedTensor& in_place, const OwnedTensor& separate) {
    return mode == Dlogits::none ? Tensor() : mode == Dlogits::in_place ? in_place.tensor() : separate.tensor();
  };
  const Tensor dl_cpu = target(logits.cpu, dl.cpu), dl_gpu = target(logits.gpu, dl.gpu);
  CrossEntropyOptions options;
  options.grad_scale = 0.5;
  const double loss_cpu = cross_entropy(logits.cpu, targets.cpu(), dl_cpu, options);
  const double loss_gpu = cross_entropy(logits.gpu, targets.gpu(), dl_gpu, options);
  EXPECT_NEAR(loss_gpu, loss_cpu, 1e-6 * loss_cpu);
  if (mode != Dlogits::none) expect_close_to_largest(dl_gpu, dl_cpu, mode == Dlogits::bf16 ? 1e-2 : 1e-5, "dlogits");
  if (mode != Dlogits::in_place) {
    EXPECT_EQ(cross_entropy(logits.gpu, targets.gpu(), dl_gpu, options), loss_gpu) << "loss differs between runs";
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, CrossEntropyCuda,
                         ::testing::Combine(::testing::Values(std::int64_t{97}, std::int64_t{1024},
                                                              std::int64_t{50257}, std::int64_t{151936}),
                                            ::testing::Values(Dlogits::none, Dlogits::separate, Dlogits::in_place,
                                                              Dlogits::bf16)));

// Logits of -inf (masked columns) add nothing to a row's sum, also where all of a thread's columns are -inf
// (columns [0, 2500) of 3000: most of a row's 512 threads of 4-element packs hold only those).
TEST(CrossEntropyCuda, NegativeInfinityLogitsAddNothing) {
  const std::int64_t V = 3000;
  std::vector<double> values = normals(2 * V, 54, DType::f32, 3.0);
  for (std::int64_t r = 0; r < 2; ++r)
    for (std::int64_t j = 0; j < 2500; ++j) values[static_cast<std::size_t>(r * V + j)] = -INFINITY;
  Pair logits = pair({2, V}, DType::f32, 54);
  write_from_double(logits.cpu, values);
  copy(logits.gpu, logits.cpu);
  const Ids targets({2999, 2600}, {2});
  const Pair dl = pair({2, V}, DType::f32, 55);
  const double loss_cpu = cross_entropy(logits.cpu, targets.cpu(), dl.cpu);
  const double loss_gpu = cross_entropy(logits.gpu, targets.gpu(), dl.gpu);
  ASSERT_TRUE(std::isfinite(loss_gpu)) << loss_gpu;
  EXPECT_NEAR(loss_gpu, loss_cpu, 1e-6 * loss_cpu);
  expect_close_to_largest(dl.gpu, dl.cpu, 1e-5, "dlogits");
}

TEST(CrossEntropyCuda, TargetsOutOfRangeRaise) {
  const Pair logits = pair({2, 10}, DType::f32, 53);
  const Ids targets({3, -1}, {2});
  try {
    cross_entropy(logits.gpu, targets.gpu(), Tensor());
    ADD_FAILURE() << "no error for target -1";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    for (const char* part : {"cross_entropy", "token id -1", "[1]", "targets", "vocab size 10"})
      EXPECT_NE(e.message().find(part), std::string::npos) << e.what();
  }
}

// ---- residual add --------------------------------------------------------------------------------

TEST(ResidualCuda, MatchesCpu) {
  for (auto [dtype, d, pad] : {std::make_tuple(DType::f32, std::int64_t{64}, std::int64_t{0}),
                               std::make_tuple(DType::bf16, std::int64_t{64}, std::int64_t{4}),
                               std::make_tuple(DType::f32, std::int64_t{35}, std::int64_t{1})}) {
    const Pair x_store = pair({6, 5, d + pad}, DType::f32, 60);
    const Pair y = pair({6, 5, d}, dtype, 61);
    residual_add(first_cols(x_store.cpu, d), y.cpu);
    residual_add(first_cols(x_store.gpu, d), y.gpu);
    expect_equal(x_store.gpu, x_store.cpu, "x + y (" + std::string(name_of(dtype)) + ", d " + std::to_string(d) + ")");
  }
}

// ---- optimisers and clipping -----------------------------------------------------------------------

TEST(AdamWCuda, ThreeStepsMatchCpu) {
  for (std::int64_t offset : {0, 1}) {  // offset 1: unaligned views (the single-element path)
    const std::int64_t n = 4099;
    const Pair p = pair({n + offset}, DType::f32, 70), m = pair({n + offset}, DType::f32, 71, 0.01);
    const Pair v = pair({n + offset}, DType::f32, 72, 0.01);
    auto view = [&](const OwnedTensor& t) { return t->narrow(0, offset, n); };
    // exp_avg_sq must be >= 0: square it once on the host, copy.
    auto sq = read_as_double(v.cpu);
    for (auto& e : sq) e = static_cast<float>(e * e);
    write_from_double(v.cpu, sq);
    copy(v.gpu, v.cpu);
    AdamWConfig config;
    config.lr = 1e-2;
    for (std::int64_t step = 1; step <= 3; ++step) {
      const Pair g = pair({n + offset}, DType::f32, 80 + static_cast<std::uint64_t>(step));
      adamw_step(view(p.cpu), view(g.cpu), view(m.cpu), view(v.cpu), config, step);
      adamw_step(view(p.gpu), view(g.gpu), view(m.gpu), view(v.gpu), config, step);
    }
    const std::string tag = " (offset " + std::to_string(offset) + ")";
    expect_close_to_largest(p.gpu, p.cpu, 1e-6, "params" + tag);
    expect_close_to_largest(m.gpu, m.cpu, 1e-6, "exp_avg" + tag);
    expect_close_to_largest(v.gpu, v.cpu, 1e-6, "exp_avg_sq" + tag);
  }
}

// Clipping folded into the GPU update (GradScale by factor, and by a sum of squares in device memory read
// when the kernel runs) against the GPU's clip-then-step, bit for bit, the gradients left unscaled; and
// against the CPU's folded step. Aligned and unaligned views; a clipping and a non-clipping bound.
TEST(AdamWCuda, FoldedClippingMatchesClipThenStep) {
  for (std::int64_t offset : {0, 1}) {
    const std::int64_t n = 4099;
    auto view = [&](const OwnedTensor& t) { return t->narrow(0, offset, n); };
    const Pair g = pair({n + offset}, DType::f32, 120);
    const double ss = grad_sum_squares({view(g.cpu)}), norm = std::sqrt(ss);
    Buffer ss_gpu(sizeof(double), kGpu, "test sum of squares");
    ASSERT_EQ(cudaMemcpy(ss_gpu.data(), &ss, sizeof(double), cudaMemcpyHostToDevice), cudaSuccess);
    const auto* ss_device = static_cast<const double*>(ss_gpu.data());
    AdamWConfig config;
    config.lr = 1e-2;
    for (const double max_norm : {0.25 * norm, 4 * norm}) {
      for (const bool by_sum : {false, true}) {
        const std::string tag = std::string(by_sum ? "sum of squares" : "factor") + ", max_norm " +
                                (max_norm < norm ? "below" : "above") + " the norm, offset " + std::to_string(offset);
        const Pair p = pair({n + offset}, DType::f32, 121), m = pair({n + offset}, DType::f32, 122, 0.01);
        const Pair p_ref = pair({n + offset}, DType::f32, 121), m_ref = pair({n + offset}, DType::f32, 122, 0.01);
        const Pair v = pair({n + offset}, DType::f32, 123), v_ref = pair({n + offset}, DType::f32, 123);
        for (const Pair* zeroed : {&v, &v_ref}) fill(zeroed->cpu, 0.0), fill(zeroed->gpu, 0.0);  // exp_avg_sq >= 0
        for (std::int64_t step = 1; step <= 2; ++step) {
          const Pair clipped = pair({n + offset}, DType::f32, 120);
          clip_grad_norm({view(clipped.gpu)}, max_norm);
          adamw_step(view(p_ref.gpu), view(clipped.gpu), view(m_ref.gpu), view(v_ref.gpu), config, step);
          const GradScale gpu_scale =
              by_sum ? clip_grad_scale(ss_device, max_norm) : GradScale{clip_factor(norm, max_norm)};
          const GradScale cpu_scale = by_sum ? clip_grad_scale(&ss, max_norm) : gpu_scale;
          adamw_step(view(p.gpu), view(g.gpu), view(m.gpu), view(v.gpu), config, step, {}, gpu_scale);
          adamw_step(view(p.cpu), view(g.cpu), view(m.cpu), view(v.cpu), config, step, {}, cpu_scale);
        }
        expect_equal(p.gpu, p_ref.gpu, "params, " + tag);
        expect_equal(m.gpu, m_ref.gpu, "exp_avg, " + tag);
        expect_equal(v.gpu, v_ref.gpu, "exp_avg_sq, " + tag);
        expect_equal(g.gpu, g.cpu, "gradients (unscaled), " + tag);
        expect_close_to_largest(p.gpu, p.cpu, 1e-6, "params against the CPU, " + tag);
      }
    }
  }
}

TEST(SgdCuda, MatchesCpu) {
  const Pair p = pair({1001}, DType::f32, 90), g = pair({1001}, DType::f32, 91);
  sgd_step(p.cpu, g.cpu, 0.1);
  sgd_step(p.gpu, g.gpu, 0.1);
  expect_close_to_largest(p.gpu, p.cpu, 1e-7, "params");
}

TEST(GradClipCuda, SumOfSquaresAndClippingMatchCpuAndAreDeterministic) {
  const Pair a = pair({40000}, DType::f32, 100), b = pair({1001}, DType::f32, 101), c = pair({16384}, DType::f32, 102);
  const Pair d_store = pair({130}, DType::f32, 103);
  const Tensor d_cpu = d_store.cpu->narrow(0, 1, 129), d_gpu = d_store.gpu->narrow(0, 1, 129);  // unaligned
  const std::vector<Tensor> cpu = {a.cpu, b.cpu, c.cpu, d_cpu}, gpu = {a.gpu, b.gpu, c.gpu, d_gpu};
  const double expected = grad_sum_squares(cpu), got = grad_sum_squares(gpu);
  EXPECT_NEAR(got, expected, 1e-12 * expected);
  EXPECT_EQ(grad_sum_squares(gpu), got) << "sum of squares differs between runs";
  const double norm_cpu = clip_grad_norm(cpu, 10.0), norm_gpu = clip_grad_norm(gpu, 10.0);
  EXPECT_NEAR(norm_gpu, norm_cpu, 1e-12 * norm_cpu);
  for (std::size_t i = 0; i < cpu.size(); ++i)
    expect_close_to_largest(gpu[i], cpu[i], 1e-7, "clipped tensor " + std::to_string(i));
  EXPECT_NEAR(std::sqrt(grad_sum_squares(gpu)), 10.0, 1e-5);
}

// ---- casts and fills -----------------------------------------------------------------------------

TEST(CastCuda, CastsAndFillsMatchCpuExactly) {
  const std::vector<std::pair<DType, DType>> pairs = {{DType::f32, DType::bf16}, {DType::bf16, DType::f32},
                                                      {DType::f32, DType::f16},  {DType::f16, DType::bf16},
                                                      {DType::bf16, DType::bf16}};
  for (auto [from, to] : pairs) {
    for (std::int64_t offset : {0, 1}) {
      const std::int64_t n = 1027;
      const Pair src = pair({n + offset}, from, 110, 3.0), dst = pair({n + offset}, to, 111);
      cast(dst.cpu->narrow(0, offset, n), src.cpu->narrow(0, offset, n));
      cast(dst.gpu->narrow(0, offset, n), src.gpu->narrow(0, offset, n));
      expect_equal(dst.gpu, dst.cpu, std::string("cast ") + name_of(from) + " -> " + name_of(to));
    }
  }
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const Pair t = pair({1030}, dtype, 112);
    fill(t.cpu->narrow(0, 1, 1029), 0.1);
    fill(t.gpu->narrow(0, 1, 1029), 0.1);
    expect_equal(t.gpu, t.cpu, std::string("fill ") + name_of(dtype));
  }
}

}  // namespace
}  // namespace ft
