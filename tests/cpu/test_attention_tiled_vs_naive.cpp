// test_attention_tiled_vs_naive.cpp — the CPU tiled FlashAttention-2 against the double-precision
// oracle over a grid of every variant (causal, windows, sink tokens, sink logits, GQA/MQA, Nq != Nk,
// tails, head dims, tile shapes, dtypes, memory layouts): O, L, dQ, dK, dV and dsinks.
// bf16/fp16 runs are compared with the oracle run on the same rounded inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/attention_problem.h"
#include "common/expect_close.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "ops/attention.h"

namespace ft {
namespace {

using testing_util::expect_close;

struct Case {
  DType dtype = DType::f32;
  bool bnhd = false;  // memory layout (B, N, H, D) instead of (B, H, N, D)
  std::int64_t B = 1, Hq = 1, Hkv = 1, Nq = 1, Nk = 1, D = 16;
  bool causal = false;
  std::int64_t left = -1, right = -1, sink_tokens = 0;
  bool sinks = false;
  int block_q = 64, block_k = 64;
};

std::string case_name(const Case& c) {
  auto window = [](std::int64_t w) { return w < 0 ? std::string("u") : std::to_string(w); };
  return str(name_of(c.dtype), c.bnhd ? "_bnhd" : "_bhnd", "_B", c.B, "_H", c.Hq, "x", c.Hkv, "_N", c.Nq, "x", c.Nk,
             "_D", c.D, c.causal ? "_causal" : "", "_w", window(c.left), "_", window(c.right), "_st", c.sink_tokens,
             c.sinks ? "_sinks" : "", "_t", c.block_q, "x", c.block_k);
}

void PrintTo(const Case& c, std::ostream* out) { *out << case_name(c); }

using Problem = testing_util::AttentionProblem;

AttentionOptions options_of(const Case& c, AttentionImpl impl) {
  AttentionOptions opt;
  opt.causal = c.causal;
  opt.window_left = c.left;
  opt.window_right = c.right;
  opt.sink_tokens = c.sink_tokens;
  opt.impl = impl;
  opt.block_q = c.block_q;
  opt.block_k = c.block_k;
  return opt;
}

struct Tolerance {
  double o, lse, grad;
};
Tolerance tolerance_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return {2e-6, 5e-7, 1e-5};
    case DType::f16: return {1e-3, 5e-7, 1.6e-3};
    case DType::bf16: return {6e-3, 5e-7, 1.2e-2};
  }
  return {};
}

// The tiled forward and backward on c, and the oracle on fp32 copies of the same (rounded) values
// in (B, H, N, D) layout; the oracle's backward starts from the tiled O and L.
void run_case(const Case& c) {
  SCOPED_TRACE(case_name(c));
  Problem flash(c, c.dtype, c.bnhd);
  fill_normal(flash.q.view, 1);
  fill_normal(flash.k.view, 2);
  fill_normal(flash.v.view, 3);
  fill_normal(flash.d_o.view, 4);
  if (c.sinks) fill_normal(flash.sinks, 5, 0.5, 1.5);
  attention_forward(flash.tensors(), options_of(c, AttentionImpl::flash));
  attention_backward(flash.tensors(), flash.grads(), options_of(c, AttentionImpl::flash));

  Problem naive(c, DType::f32, false);
  for (auto [dst, src] : {std::pair{&naive.q, &flash.q}, {&naive.k, &flash.k}, {&naive.v, &flash.v},
                          {&naive.d_o, &flash.d_o}})
    write_from_double(dst->view, read_as_double(src->view));
  if (c.sinks) copy(naive.sinks, flash.sinks);
  attention_forward(naive.tensors(), options_of(c, AttentionImpl::naive));

  const Tolerance tol = tolerance_of(c.dtype);
  expect_close(read_as_double(flash.o.view), read_as_double(naive.o.view), tol.o, "O");
  expect_close(read_as_double(flash.lse), read_as_double(naive.lse), tol.lse, "L");

  write_from_double(naive.o.view, read_as_double(flash.o.view));
  copy(naive.lse, flash.lse);
  attention_backward(naive.tensors(), naive.grads(), options_of(c, AttentionImpl::naive));
  expect_close(read_as_double(flash.dq.view), read_as_double(naive.dq.view), tol.grad, "dQ");
  expect_close(read_as_double(flash.dk.view), read_as_double(naive.dk.view), tol.grad, "dK");
  expect_close(read_as_double(flash.dv.view), read_as_double(naive.dv.view), tol.grad, "dV");
  if (c.sinks) expect_close(read_as_double(flash.dsinks), read_as_double(naive.dsinks), tol.grad, "dsinks");
}

// Every mask variant x sink tokens x sink logits x length pair, each with a dtype, layout, head
// layout, head dim and tile shape drawn from a fixed-seed generator so that all of them recur.
std::vector<Case> grid() {
  struct Mask {
    bool causal;
    std::int64_t left, right;
  };
  const Mask masks[] = {{false, -1, -1}, {true, -1, -1}, {false, 0, 0},  {false, 5, 0},  {false, 0, 7},
                        {false, 3, 11},  {false, 20, -1}, {false, -1, 4}, {true, 9, -1}, {true, 0, -1}};
  const std::pair<std::int64_t, std::int64_t> lengths[] = {{1, 1},   {17, 17}, {127, 127}, {128, 128},
                                                            {17, 127}, {127, 17}, {1, 127},   {100, 64}};
  const std::pair<std::int64_t, std::int64_t> heads[] = {{2, 2}, {4, 2}, {4, 1}, {8, 2}, {1, 1}, {3, 1}};
  const std::int64_t head_dims[] = {16, 24, 32, 64, 80, 128, 256};
  const std::pair<int, int> tiles[] = {{16, 16}, {64, 64}, {16, 64}, {64, 16}, {32, 48}};
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};

  std::mt19937 pick(2024);
  auto any = [&](std::size_t n) { return static_cast<std::size_t>(pick() % n); };
  std::vector<Case> cases;
  for (const Mask& m : masks)
    for (std::int64_t sink_tokens : {0, 3})
      for (bool sinks : {false, true})
        for (auto [nq, nk] : lengths) {
          Case c;
          c.causal = m.causal, c.left = m.left, c.right = m.right;
          c.sink_tokens = sink_tokens, c.sinks = sinks;
          c.Nq = nq, c.Nk = nk;
          c.dtype = dtypes[cases.size() % 3];
          c.bnhd = (cases.size() / 3) % 2 == 1;
          std::tie(c.Hq, c.Hkv) = heads[any(std::size(heads))];
          c.D = head_dims[any(std::size(head_dims))];
          std::tie(c.block_q, c.block_k) = tiles[any(std::size(tiles))];
          // Keep the long, wide cases narrow so the grid stays fast.
          const bool big = nq * nk >= 100 * 64 && c.D >= 128;
          c.B = big || c.Hq >= 4 ? 1 : 2;
          if (big && c.Hq > 2) c.Hq /= c.Hkv, c.Hkv = 1;
          cases.push_back(c);
        }
  return cases;
}

class TiledVsNaive : public ::testing::TestWithParam<Case> {};

TEST_P(TiledVsNaive, ForwardAndBackwardAgree) { run_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Grid, TiledVsNaive, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return str("i", info.index, "_", case_name(info.param));
                         });

// Every dimension of the grid reaches every value at least once (guards the grid itself).
TEST(TiledVsNaiveGrid, CoversEveryValue) {
  const std::vector<Case> cases = grid();
  auto count = [&](auto pred) { return std::count_if(cases.begin(), cases.end(), pred); };
  for (DType d : {DType::f32, DType::bf16, DType::f16})
    for (bool bnhd : {false, true})
      EXPECT_GT(count([&](const Case& c) { return c.dtype == d && c.bnhd == bnhd; }), 0);
  for (std::int64_t ratio : {1, 2, 3, 4}) EXPECT_GT(count([&](const Case& c) { return c.Hq / c.Hkv == ratio; }), 0);
  EXPECT_GT(count([](const Case& c) { return c.Hkv == 1 && c.Hq > 1; }), 0);
  for (std::int64_t D : {16, 24, 32, 64, 80, 128, 256})
    EXPECT_GT(count([&](const Case& c) { return c.D == D; }), 0);
  for (auto [bq, bk] : {std::pair{16, 16}, {64, 64}, {16, 64}, {64, 16}, {32, 48}})
    EXPECT_GT(count([&](const Case& c) { return c.block_q == bq && c.block_k == bk; }), 0);
}

// The bf16 tolerance on O is tight enough to tell masks apart that differ by one key per row: a
// left window one wider, or one more sink token.
TEST(TiledVsNaiveGrid, Bf16ToleranceCatchesAnOffByOneMask) {
  Case c;
  c.dtype = DType::bf16, c.Hq = 2, c.Hkv = 1, c.Nq = 127, c.Nk = 127, c.D = 64;
  c.left = 20, c.right = 0, c.sink_tokens = 3;
  Case wider = c, more_sinks = c;
  wider.left = 21;
  more_sinks.sink_tokens = 4;
  for (auto [a, b] : {std::pair{c, wider}, {c, more_sinks}}) {
    Problem x(a, DType::bf16, false), y(b, DType::f32, false);
    fill_normal(x.q.view, 1);
    fill_normal(x.k.view, 2);
    fill_normal(x.v.view, 3);
    for (auto [dst, src] : {std::pair{&y.q, &x.q}, {&y.k, &x.k}, {&y.v, &x.v}})
      write_from_double(dst->view, read_as_double(src->view));
    attention_forward(x.tensors(), options_of(a, AttentionImpl::flash));
    attention_forward(y.tensors(), options_of(b, AttentionImpl::naive));
    const std::vector<double> got = read_as_double(x.o.view), other = read_as_double(y.o.view);
    double top = 0, worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      top = std::max(top, std::fabs(other[i]));
      worst = std::max(worst, std::fabs(got[i] - other[i]));
    }
    EXPECT_GT(worst, 2 * tolerance_of(DType::bf16).o * std::max(top, 1.0)) << case_name(a) << " vs " << case_name(b);
  }
}

// The oracle reads any dtype and layout: bf16/fp16 (B, N, H, D) inputs give the fp32 results on the
// same values, up to the rounding of the outputs.
TEST(NaiveOracle, ReadsAnyDtypeAndLayout) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    Case c;
    c.dtype = dtype, c.bnhd = true, c.B = 2, c.Hq = 4, c.Hkv = 2, c.Nq = 9, c.Nk = 13, c.D = 8;
    c.causal = true, c.left = 4, c.sink_tokens = 2, c.sinks = true;
    SCOPED_TRACE(case_name(c));
    Problem low(c, dtype, true), wide(c, DType::f32, false);
    fill_normal(low.q.view, 11);
    fill_normal(low.k.view, 12);
    fill_normal(low.v.view, 13);
    fill_normal(low.d_o.view, 14);
    fill_normal(low.sinks, 15);
    for (auto [dst, src] : {std::pair{&wide.q, &low.q}, {&wide.k, &low.k}, {&wide.v, &low.v}, {&wide.d_o, &low.d_o}})
      write_from_double(dst->view, read_as_double(src->view));
    copy(wide.sinks, low.sinks);
    attention_forward(low.tensors(), options_of(c, AttentionImpl::naive));
    attention_forward(wide.tensors(), options_of(c, AttentionImpl::naive));
    EXPECT_EQ(read_as_double(low.lse), read_as_double(wide.lse));
    const double ulp = dtype == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;  // one unit in the last place, relative
    auto expect_rounded = [&](const Tensor& a, const Tensor& e, const char* what) {
      const std::vector<double> av = read_as_double(a), ev = read_as_double(e);
      for (std::size_t i = 0; i < av.size(); ++i)
        ASSERT_NEAR(av[i], ev[i], ulp * std::fabs(ev[i]) + 1e-6) << what << " at " << i;
    };
    expect_rounded(low.o.view, wide.o.view, "O");
    write_from_double(wide.o.view, read_as_double(low.o.view));
    attention_backward(low.tensors(), low.grads(), options_of(c, AttentionImpl::naive));
    attention_backward(wide.tensors(), wide.grads(), options_of(c, AttentionImpl::naive));
    expect_rounded(low.dq.view, wide.dq.view, "dQ");
    expect_rounded(low.dk.view, wide.dk.view, "dK");
    expect_rounded(low.dv.view, wide.dv.view, "dV");
    EXPECT_EQ(read_as_double(low.dsinks), read_as_double(wide.dsinks));
  }
}

}  // namespace
}  // namespace ft
