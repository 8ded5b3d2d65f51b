// test_attention_semantics.cpp — hand-checkable attention cases, run on both CPU implementations
// (naive oracle and tiled): causal bottom-right alignment, exact window bounds, sink tokens, sink
// logits, rows that see nothing, custom scale, GQA as repeated K/V, and bit-identical reruns (also
// with AttentionOptions::deterministic = false, which the CPU ignores).
//
// Most cases use q = 0, so every visible key scores 0 and gets the same weight, and v_j = e_j
// (one-hot, D = Nk), so O_i[j] = 1/count_i exactly where row i sees key j and L_i = log(count_i).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/buffer.h"
#include "core/tensor_io.h"
#include "ops/attention.h"

namespace ft {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One problem in (B, H, N, D) layout, fp32 unless dtype says otherwise.
struct Inputs {
  std::int64_t B = 1, Hq = 1, Hkv = 1, Nq = 1, Nk = 1, D = 1;
  std::vector<double> q, k, v;  // (B, Hq, Nq, D), (B, Hkv, Nk, D), (B, Hkv, Nk, D)
  std::vector<double> sinks;    // (Hq), empty = none
  std::vector<double> d_o;      // (B, Hq, Nq, D), empty = forward only
  DType dtype = DType::f32;
};

struct Outputs {
  std::vector<double> o, lse, dq, dk, dv, dsinks;
};

// The tensors of one call, owned.
struct Owned {
  OwnedTensor q, k, v, sinks, o, lse, d_o, dq, dk, dv, dsinks;
};

Owned allocate(const Inputs& in) {
  const Shape qs{in.B, in.Hq, in.Nq, in.D}, ks{in.B, in.Hkv, in.Nk, in.D};
  auto make = [&](const Shape& s, DType dtype) { return OwnedTensor(s, dtype, Device::cpu(), "test"); };
  Owned t{make(qs, in.dtype), make(ks, in.dtype), make(ks, in.dtype), {}, make(qs, in.dtype),
          make({in.B, in.Hq, in.Nq}, DType::f32), make(qs, in.dtype), make(qs, in.dtype), make(ks, in.dtype),
          make(ks, in.dtype), {}};
  write_from_double(t.q, in.q);
  write_from_double(t.k, in.k);
  write_from_double(t.v, in.v);
  if (!in.sinks.empty()) {
    t.sinks = make({in.Hq}, DType::f32);
    t.dsinks = make({in.Hq}, DType::f32);
    write_from_double(t.sinks, in.sinks);
  }
  if (!in.d_o.empty()) write_from_double(t.d_o, in.d_o);
  return t;
}

AttentionTensors tensors_of(const Owned& t) {
  AttentionTensors a{t.q, t.k, t.v, {}, t.o, t.lse};
  if (t.sinks.defined()) a.sinks = t.sinks;
  return a;
}

AttentionGrads grads_of(const Owned& t) {
  AttentionGrads g{t.d_o, t.dq, t.dk, t.dv, {}};
  if (t.dsinks.defined()) g.dsinks = t.dsinks;
  return g;
}

// Forward, then backward when in.d_o is given; the outputs read back as doubles.
Outputs run(const Inputs& in, const AttentionOptions& opt) {
  const Owned t = allocate(in);
  attention_forward(tensors_of(t), opt);
  Outputs out{read_as_double(t.o), read_as_double(t.lse), {}, {}, {}, {}};
  if (in.d_o.empty()) return out;
  attention_backward(tensors_of(t), grads_of(t), opt);
  out.dq = read_as_double(t.dq);
  out.dk = read_as_double(t.dk);
  out.dv = read_as_double(t.dv);
  if (t.dsinks.defined()) out.dsinks = read_as_double(t.dsinks);
  return out;
}

std::vector<double> normals(std::size_t n, std::uint64_t seed) {
  OwnedTensor t({static_cast<std::int64_t>(n)}, DType::f32, Device::cpu(), "test");
  fill_normal(t, seed);
  return read_as_double(t);
}

// q = 0 and one-hot values v_j = e_j for one head: D = Nk.
Inputs uniform_one_hot(std::int64_t Nq, std::int64_t Nk) {
  Inputs in;
  in.Nq = Nq, in.Nk = Nk, in.D = Nk;
  in.q.assign(Nq * Nk, 0.0);
  in.k = normals(Nk * Nk, 7);
  in.v.assign(Nk * Nk, 0.0);
  for (std::int64_t j = 0; j < Nk; ++j) in.v[j * Nk + j] = 1.0;
  return in;
}

// Checks O and L of a uniform_one_hot problem against rows of 'x' (visible) and '.' (not).
void expect_visibility(const Outputs& out, const std::vector<std::string>& rows) {
  const std::int64_t Nk = static_cast<std::int64_t>(rows[0].size());
  ASSERT_EQ(out.o.size(), rows.size() * Nk);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double count = static_cast<double>(std::count(rows[i].begin(), rows[i].end(), 'x'));
    if (count == 0) {
      EXPECT_EQ(out.lse[i], -kInf) << "row " << i;
    } else {
      EXPECT_NEAR(out.lse[i], std::log(count), 1e-6) << "row " << i;
    }
    for (std::int64_t j = 0; j < Nk; ++j) {
      const double expected = rows[i][j] == 'x' ? 1.0 / count : 0.0;
      EXPECT_NEAR(out.o[i * Nk + j], expected, 1e-6) << "row " << i << " key " << j << " expected " << rows[i];
    }
  }
}

class Semantics : public ::testing::TestWithParam<AttentionImpl> {
 protected:
  AttentionOptions options() const {
    AttentionOptions opt;
    opt.impl = GetParam();
    opt.block_q = opt.block_k = 16;
    return opt;
  }
};

TEST_P(Semantics, CausalIsBottomRightAligned) {
  AttentionOptions opt = options();
  opt.causal = true;
  expect_visibility(run(uniform_one_hot(3, 5), opt), {"xxx..", "xxxx.", "xxxxx"});
  expect_visibility(run(uniform_one_hot(3, 3), opt), {"x..", "xx.", "xxx"});
  expect_visibility(run(uniform_one_hot(1, 4), opt), {"xxxx"});  // a decode step sees the whole cache
}

TEST_P(Semantics, WindowBoundsAreExact) {
  AttentionOptions opt = options();
  opt.window_left = 2, opt.window_right = 1;
  expect_visibility(run(uniform_one_hot(7, 7), opt),
                    {"xx.....", "xxx....", "xxxx...", ".xxxx..", "..xxxx.", "...xxxx", "....xxx"});
  opt.window_left = 1, opt.window_right = 0;
  expect_visibility(run(uniform_one_hot(3, 6), opt), {"..xx..", "...xx.", "....xx"});
  opt.window_left = 0, opt.window_right = 0;
  expect_visibility(run(uniform_one_hot(4, 4), opt), {"x...", ".x..", "..x.", "...x"});
  opt.window_left = -1, opt.window_right = 2;
  expect_visibility(run(uniform_one_hot(4, 6), opt), {"xxxxx.", "xxxxxx", "xxxxxx", "xxxxxx"});
  opt.window_left = 3, opt.window_right = -1;
  expect_visibility(run(uniform_one_hot(4, 6), opt), {"xxxxxx", "xxxxxx", ".xxxxx", "..xxxx"});
  opt.window_left = 0, opt.window_right = -1;
  opt.causal = true;  // same as window (0, 0)
  expect_visibility(run(uniform_one_hot(3, 3), opt), {"x..", ".x.", "..x"});
}

TEST_P(Semantics, SinkTokensBypassOnlyTheLeftBound) {
  AttentionOptions opt = options();
  opt.causal = true, opt.window_left = 1, opt.sink_tokens = 2;
  expect_visibility(run(uniform_one_hot(7, 7), opt),
                    {"x......", "xx.....", "xxx....", "xxxx...", "xx.xx..", "xx..xx.", "xx...xx"});
  // The right bound still applies: a sink token after the row's last key stays hidden.
  opt.causal = false, opt.window_left = 0, opt.window_right = 1, opt.sink_tokens = 3;
  expect_visibility(run(uniform_one_hot(5, 5), opt), {"xx...", "xxx..", "xxxx.", "xxxxx", "xxx.x"});
  // More sink tokens than keys.
  opt.window_left = 0, opt.window_right = 0, opt.sink_tokens = 9;
  expect_visibility(run(uniform_one_hot(3, 3), opt), {"x..", "xx.", "xxx"});
}

TEST_P(Semantics, SinkLogitsJoinTheSoftmaxWithoutValue) {
  // Two heads over three visible keys: sinks ln 2 and 0 add 2 and 1 to the denominators.
  Inputs in = uniform_one_hot(1, 3);
  in.Hq = in.Hkv = 2;
  in.q.assign(2 * 3, 0.0);
  in.k = normals(2 * 3 * 3, 3);
  std::vector<double> v = in.v;
  in.v.insert(in.v.end(), v.begin(), v.end());
  in.sinks = {std::log(2.0), 0.0};
  in.d_o = {1, 0, 0, 0, 0, 2};  // (B, Hq, Nq, D)
  const Outputs out = run(in, options());
  const double denominators[] = {5, 4};
  for (int h = 0; h < 2; ++h) {
    EXPECT_NEAR(out.lse[h], std::log(denominators[h]), 1e-6);
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(out.o[h * 3 + j], 1 / denominators[h], 1e-6);
  }
  // dsink_h = -exp(s_h - L) D with D = dO . O: head 0: -(2/5)(1/5); head 1: -(1/4)(2/4).
  EXPECT_NEAR(out.dsinks[0], -2.0 / 25, 1e-6);
  EXPECT_NEAR(out.dsinks[1], -2.0 / 16, 1e-6);
  // dV_j = P_j dO: head 0 has P = 1/5 on each key.
  EXPECT_NEAR(out.dv[0], 0.2, 1e-6);
  EXPECT_NEAR(out.dv[3], 0.2, 1e-6);
  EXPECT_NEAR(out.dv[1], 0.0, 1e-6);
}

TEST_P(Semantics, RowsThatSeeNothingGiveZerosNotNaN) {
  for (bool with_sinks : {false, true}) {
    SCOPED_TRACE(with_sinks ? "with sink logits" : "without sink logits");
    // Nq = 5 > Nk = 2 with causal: rows 0..2 see nothing.
    Inputs in;
    in.B = 2, in.Hq = 2, in.Hkv = 1, in.Nq = 5, in.Nk = 2, in.D = 4;
    in.q = normals(2 * 2 * 5 * 4, 1);
    in.k = normals(2 * 1 * 2 * 4, 2);
    in.v = normals(2 * 1 * 2 * 4, 3);
    in.d_o = normals(2 * 2 * 5 * 4, 4);
    if (with_sinks) in.sinks = {0.3, -1.2};
    AttentionOptions opt = options();
    opt.causal = true;
    const Outputs out = run(in, opt);
    for (const std::vector<double>* x : {&out.o, &out.dq, &out.dk, &out.dv, &out.dsinks})
      for (double value : *x) ASSERT_TRUE(std::isfinite(value));
    for (std::int64_t bh = 0; bh < 4; ++bh)
      for (std::int64_t i = 0; i < 5; ++i) {
        const double L = out.lse[bh * 5 + i];
        const bool blind = i < 3;
        ASSERT_FALSE(std::isnan(L));
        if (blind) {
          EXPECT_EQ(L, with_sinks ? static_cast<double>(static_cast<float>(in.sinks[bh % 2])) : -kInf);
        } else {
          EXPECT_TRUE(std::isfinite(L));
        }
        for (std::int64_t d = 0; d < 4; ++d) {
          const std::size_t at = (bh * 5 + i) * 4 + d;
          if (blind) {
            EXPECT_EQ(out.o[at], 0.0);
            EXPECT_EQ(out.dq[at], 0.0);
          } else {
            EXPECT_NE(out.o[at], 0.0);
          }
        }
      }
    if (with_sinks) {
      EXPECT_NE(out.dsinks[0], 0.0);
    }
  }
}

TEST_P(Semantics, CustomScale) {
  // One query, two keys: q . k = (2, 0); with scale 0.5 the scores are (1, 0).
  Inputs in;
  in.Nq = 1, in.Nk = 2, in.D = 2;
  in.q = {2, 0};
  in.k = {1, 0, 0, 0};
  in.v = {1, 0, 0, 1};
  AttentionOptions opt = options();
  opt.scale = 0.5;
  Outputs out = run(in, opt);
  const double e = std::exp(1.0);
  EXPECT_NEAR(out.lse[0], std::log(e + 1), 1e-6);
  EXPECT_NEAR(out.o[0], e / (e + 1), 1e-6);
  EXPECT_NEAR(out.o[1], 1 / (e + 1), 1e-6);
  opt.scale = 0.0;  // every score 0: uniform
  out = run(in, opt);
  EXPECT_NEAR(out.lse[0], std::log(2.0), 1e-6);
  EXPECT_NEAR(out.o[0], 0.5, 1e-6);
  opt.scale.reset();  // default 1/sqrt(2): scores (sqrt 2, 0)
  out = run(in, opt);
  EXPECT_NEAR(out.lse[0], std::log(std::exp(std::sqrt(2.0)) + 1), 1e-6);
}

TEST_P(Semantics, GqaEqualsExplicitlyRepeatedKeysAndValues) {
  Inputs gqa;
  gqa.B = 2, gqa.Hq = 6, gqa.Hkv = 2, gqa.Nq = 19, gqa.Nk = 23, gqa.D = 8;
  gqa.q = normals(2 * 6 * 19 * 8, 1);
  gqa.k = normals(2 * 2 * 23 * 8, 2);
  gqa.v = normals(2 * 2 * 23 * 8, 3);
  gqa.d_o = normals(2 * 6 * 19 * 8, 4);
  gqa.sinks = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
  Inputs mha = gqa;
  mha.Hkv = 6;
  mha.k.clear(), mha.v.clear();
  const std::int64_t slice = 23 * 8;  // one (batch, kv head) of K or V
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 6; ++h) {
      const std::int64_t from = (b * 2 + h / 3) * slice;
      mha.k.insert(mha.k.end(), gqa.k.begin() + from, gqa.k.begin() + from + slice);
      mha.v.insert(mha.v.end(), gqa.v.begin() + from, gqa.v.begin() + from + slice);
    }
  AttentionOptions opt = options();
  opt.causal = true, opt.window_left = 6, opt.sink_tokens = 1;
  const Outputs a = run(gqa, opt), b = run(mha, opt);
  EXPECT_EQ(a.o, b.o);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dsinks, b.dsinks);
  // dK, dV of a kv head = the sum over its query-head group.
  for (std::int64_t bb = 0; bb < 2; ++bb)
    for (std::int64_t hk = 0; hk < 2; ++hk)
      for (std::int64_t x = 0; x < slice; ++x) {
        double dk = 0, dv = 0;
        for (std::int64_t g = 0; g < 3; ++g) {
          dk += b.dk[(bb * 6 + hk * 3 + g) * slice + x];
          dv += b.dv[(bb * 6 + hk * 3 + g) * slice + x];
        }
        ASSERT_NEAR(a.dk[(bb * 2 + hk) * slice + x], dk, 1e-5);
        ASSERT_NEAR(a.dv[(bb * 2 + hk) * slice + x], dv, 1e-5);
      }
}

TEST_P(Semantics, RunsAreBitIdentical) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    Inputs in;
    in.dtype = dtype;
    // Large enough for the tiled implementation to use its OpenMP threads.
    in.B = 2, in.Hq = 4, in.Hkv = 2, in.Nq = 130, in.Nk = 150, in.D = 64;
    in.q = normals(2 * 4 * 130 * 64, 1);
    in.k = normals(2 * 2 * 150 * 64, 2);
    in.v = normals(2 * 2 * 150 * 64, 3);
    in.d_o = normals(2 * 4 * 130 * 64, 4);
    in.sinks = {0.5, -0.5, 1.0, 0.0};
    AttentionOptions opt = options();
    opt.causal = true, opt.window_left = 40, opt.sink_tokens = 4;
    const Outputs first = run(in, opt), second = run(in, opt);
    for (auto [a, b] : {std::pair{&first.o, &second.o}, {&first.lse, &second.lse}, {&first.dq, &second.dq},
                        {&first.dk, &second.dk}, {&first.dv, &second.dv}, {&first.dsinks, &second.dsinks}})
      ASSERT_EQ(0, std::memcmp(a->data(), b->data(), a->size() * sizeof(double)));
    // deterministic = false only changes the CUDA flash backward: the CPU gives the same bits.
    AttentionOptions relaxed = opt;
    relaxed.deterministic = false;
    const Outputs third = run(in, relaxed);
    EXPECT_EQ(third.dq, first.dq);
    EXPECT_EQ(third.dk, first.dk);
    EXPECT_EQ(third.dv, first.dv);
    EXPECT_EQ(third.dsinks, first.dsinks);
#ifdef _OPENMP
    // The same bits with one thread as with many.
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const Outputs single = run(in, opt);
    omp_set_num_threads(threads);
    EXPECT_EQ(single.o, first.o);
    EXPECT_EQ(single.dq, first.dq);
    EXPECT_EQ(single.dk, first.dk);
    EXPECT_EQ(single.dsinks, first.dsinks);
#endif
  }
}

INSTANTIATE_TEST_SUITE_P(Impls, Semantics, ::testing::Values(AttentionImpl::naive, AttentionImpl::flash),
                         [](const ::testing::TestParamInfo<AttentionImpl>& info) {
                           return std::string(name_of(info.param));
                         });

}  // namespace
}  // namespace ft
