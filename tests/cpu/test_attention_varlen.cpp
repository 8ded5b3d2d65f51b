// test_attention_varlen.cpp — varlen attention over packed sequences on the CPU (ops/attention_varlen.h):
//   * every variant (causal, windows, sink tokens, sink logits, GQA/MQA, scale), dtype and a range of head
//     dims, with zero-length and length-1 sequences: the varlen call equals separate dense calls on each
//     sequence bit for bit (O, L, dQ, dK, dV; dsinks as the sum of the sequences' parts), for the oracle and
//     the tiled implementation; rows of sequences without keys or queries get O = 0, zero gradients and L as
//     a dense row that sees no key (-inf, or the sink logit) (outputs are poisoned with NaN before each call);
//   * the tiled varlen forward and backward against the varlen oracle on fp32 copies of the inputs;
//   * one sequence is the dense call, bit for bit;
//   * every bad input gives an ft::Error naming what was expected and what was given.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "common/expect_close.h"
#include "common/varlen_case.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "ops/attention.h"
#include "ops/attention_varlen.h"

namespace ft {
namespace {

using testing_util::error_of;
using testing_util::cumulative;
using testing_util::expect_close;
using testing_util::longest;
using testing_util::options_of;
using testing_util::VarlenCase;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Every tensor of a packed forward + backward call, with its cumulative lengths.
struct Packed {
  std::vector<std::int32_t> cu_q, cu_k;
  std::int64_t max_q = 0, max_k = 0;
  OwnedTensor q, k, v, o, lse, d_o, dq, dk, dv, sinks, dsinks;

  Packed(const VarlenCase& c, DType dtype)
      : cu_q(cumulative(c.len_q)),
        cu_k(cumulative(c.len_k)),
        max_q(longest(c.len_q)),
        max_k(longest(c.len_k)),
        q({cu_q.back(), c.Hq, c.D}, dtype, Device::cpu(), "test.q"),
        k({cu_k.back(), c.Hkv, c.D}, dtype, Device::cpu(), "test.k"),
        v({cu_k.back(), c.Hkv, c.D}, dtype, Device::cpu(), "test.v"),
        o({cu_q.back(), c.Hq, c.D}, dtype, Device::cpu(), "test.o"),
        lse({c.Hq, cu_q.back()}, DType::f32, Device::cpu(), "test.lse"),
        d_o({cu_q.back(), c.Hq, c.D}, dtype, Device::cpu(), "test.d_o"),
        dq({cu_q.back(), c.Hq, c.D}, dtype, Device::cpu(), "test.dq"),
        dk({cu_k.back(), c.Hkv, c.D}, dtype, Device::cpu(), "test.dk"),
        dv({cu_k.back(), c.Hkv, c.D}, dtype, Device::cpu(), "test.dv") {
    if (c.sinks) {
      sinks = OwnedTensor({c.Hq}, DType::f32, Device::cpu(), "test.sinks");
      dsinks = OwnedTensor({c.Hq}, DType::f32, Device::cpu(), "test.dsinks");
    }
  }

  void fill_inputs(const VarlenCase& c) {
    fill_normal(q, 11);
    fill_normal(k, 12);
    fill_normal(v, 13);
    fill_normal(d_o, 14);
    if (c.sinks) fill_normal(sinks, 15, 0.5, 1.5);
  }

  VarlenAttentionTensors tensors() const {
    VarlenAttentionTensors t;
    t.q = q, t.k = k, t.v = v, t.o = o, t.lse = lse;
    t.cu_seqlens_q = {cu_q.data(), nullptr, static_cast<std::int64_t>(cu_q.size()), Device::cpu()};
    t.cu_seqlens_k = {cu_k.data(), nullptr, static_cast<std::int64_t>(cu_k.size()), Device::cpu()};
    t.max_seqlen_q = max_q;
    t.max_seqlen_k = max_k;
    if (sinks.defined()) t.sinks = sinks;
    return t;
  }
  VarlenAttentionGrads grads() const {
    VarlenAttentionGrads g;
    g.d_o = d_o, g.dq = dq, g.dk = dk, g.dv = dv;
    if (dsinks.defined()) g.dsinks = dsinks;
    return g;
  }

  void forward(const AttentionOptions& options) const {
    fill_constant(o, kNaN);
    fill_constant(lse, kNaN);
    attention_varlen_forward(tensors(), options);
  }
  void backward(const AttentionOptions& options) const {
    for (const OwnedTensor* t : {&dq, &dk, &dv}) fill_constant(*t, kNaN);
    if (dsinks.defined()) fill_constant(dsinks, kNaN);
    attention_varlen_backward(tensors(), grads(), options);
  }
};

// Rows [start, start + length) of packed (total, H, D) values, as dense (1, H, length, D) values.
std::vector<double> to_dense(const std::vector<double>& packed, std::int64_t H, std::int64_t D, std::int64_t start,
                             std::int64_t length) {
  std::vector<double> dense(static_cast<std::size_t>(H * length * D));
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t i = 0; i < length; ++i)
      for (std::int64_t d = 0; d < D; ++d) dense[(h * length + i) * D + d] = packed[((start + i) * H + h) * D + d];
  return dense;
}

// Columns [start, start + length) of (Hq, total) lse values, as (1, Hq, length).
std::vector<double> lse_to_dense(const std::vector<double>& packed, std::int64_t Hq, std::int64_t total,
                                 std::int64_t start, std::int64_t length) {
  std::vector<double> dense(static_cast<std::size_t>(Hq * length));
  for (std::int64_t h = 0; h < Hq; ++h)
    for (std::int64_t i = 0; i < length; ++i) dense[h * length + i] = packed[h * total + start + i];
  return dense;
}

// A dense tensor holding values.
OwnedTensor dense_tensor(const Shape& shape, DType dtype, const std::vector<double>& values) {
  OwnedTensor t(shape, dtype, Device::cpu(), "test.dense");
  write_from_double(t, values);
  return t;
}

// The varlen call against separate dense calls on each sequence with the same implementation: equal bit
// for bit; sequences without keys or queries give O = 0, zero gradients and L as a blind dense row.
void expect_equals_dense_calls(const VarlenCase& c, AttentionImpl impl) {
  SCOPED_TRACE(str(c.name, " impl ", name_of(impl)));
  Packed p(c, c.dtype);
  p.fill_inputs(c);
  const AttentionOptions options = options_of(c, impl);
  p.forward(options);
  p.backward(options);

  const std::int64_t Hq = c.Hq, Hkv = c.Hkv, D = c.D, total_q = p.cu_q.back();
  const std::vector<double> q = read_as_double(p.q), k = read_as_double(p.k), v = read_as_double(p.v);
  const std::vector<double> d_o = read_as_double(p.d_o), o = read_as_double(p.o), lse = read_as_double(p.lse);
  const std::vector<double> dq = read_as_double(p.dq), dk = read_as_double(p.dk), dv = read_as_double(p.dv);
  std::vector<double> dsinks_sum(static_cast<std::size_t>(Hq), 0.0);
  for (std::size_t b = 0; b + 1 < p.cu_q.size(); ++b) {
    SCOPED_TRACE(str("sequence ", b));
    const std::int64_t q0 = p.cu_q[b], lq = p.cu_q[b + 1] - q0, k0 = p.cu_k[b], lk = p.cu_k[b + 1] - k0;
    if (lq == 0 && lk == 0) continue;
    if (lq == 0 || lk == 0) {
      for (double x : to_dense(o, Hq, D, q0, lq)) ASSERT_EQ(x, 0.0) << "O of a sequence without keys";
      const std::vector<double> sinks = c.sinks ? read_as_double(p.sinks) : std::vector<double>();
      const std::vector<double> blind_lse = lse_to_dense(lse, Hq, total_q, q0, lq);  // (Hq, lq)
      for (std::size_t i = 0; i < blind_lse.size(); ++i)
        ASSERT_EQ(blind_lse[i], c.sinks ? sinks[i / lq] : -kInf) << "L of a sequence without keys";
      for (double x : to_dense(dq, Hq, D, q0, lq)) ASSERT_EQ(x, 0.0) << "dQ of a sequence without keys";
      for (double x : to_dense(dk, Hkv, D, k0, lk)) ASSERT_EQ(x, 0.0) << "dK of a sequence without queries";
      for (double x : to_dense(dv, Hkv, D, k0, lk)) ASSERT_EQ(x, 0.0) << "dV of a sequence without queries";
      continue;
    }
    const Shape q_shape{1, Hq, lq, D}, kv_shape{1, Hkv, lk, D};
    OwnedTensor dense_q = dense_tensor(q_shape, c.dtype, to_dense(q, Hq, D, q0, lq));
    OwnedTensor dense_k = dense_tensor(kv_shape, c.dtype, to_dense(k, Hkv, D, k0, lk));
    OwnedTensor dense_v = dense_tensor(kv_shape, c.dtype, to_dense(v, Hkv, D, k0, lk));
    OwnedTensor dense_do = dense_tensor(q_shape, c.dtype, to_dense(d_o, Hq, D, q0, lq));
    OwnedTensor dense_o(q_shape, c.dtype, Device::cpu(), "test"), dense_lse({1, Hq, lq}, DType::f32, Device::cpu(), "test");
    OwnedTensor dense_dq(q_shape, c.dtype, Device::cpu(), "test"), dense_dk(kv_shape, c.dtype, Device::cpu(), "test"),
        dense_dv(kv_shape, c.dtype, Device::cpu(), "test"), dense_dsinks;
    AttentionTensors t{dense_q, dense_k, dense_v, Tensor(), dense_o, dense_lse};
    AttentionGrads g{dense_do, dense_dq, dense_dk, dense_dv, Tensor()};
    if (c.sinks) {
      dense_dsinks = OwnedTensor({Hq}, DType::f32, Device::cpu(), "test");
      t.sinks = p.sinks;
      g.dsinks = dense_dsinks;
    }
    attention_forward(t, options);
    attention_backward(t, g, options);
    EXPECT_EQ(to_dense(o, Hq, D, q0, lq), read_as_double(dense_o)) << "O";
    EXPECT_EQ(lse_to_dense(lse, Hq, total_q, q0, lq), read_as_double(dense_lse)) << "L";
    EXPECT_EQ(to_dense(dq, Hq, D, q0, lq), read_as_double(dense_dq)) << "dQ";
    EXPECT_EQ(to_dense(dk, Hkv, D, k0, lk), read_as_double(dense_dk)) << "dK";
    EXPECT_EQ(to_dense(dv, Hkv, D, k0, lk), read_as_double(dense_dv)) << "dV";
    if (c.sinks) {
      const std::vector<double> part = read_as_double(dense_dsinks);
      for (std::int64_t h = 0; h < Hq; ++h) dsinks_sum[h] += part[h];
    }
  }
  if (c.sinks) {
    std::vector<double> expected;
    for (double x : dsinks_sum) expected.push_back(static_cast<float>(x));
    EXPECT_EQ(read_as_double(p.dsinks), expected) << "dsinks: the sum of the sequences' parts";
  }
}

// Lengths with empty and length-1 sequences. Right-bounded masks need len_k >= len_q per sequence
// (Note [Varlen causal alignment]); the others also get sequences with fewer keys than queries, and
// queries without keys.
const std::vector<std::int32_t> kLenQ = {5, 0, 1, 40, 0, 17, 1};
const std::vector<std::int32_t> kLenKAligned = {5, 0, 1, 40, 3, 30, 2};
const std::vector<std::int32_t> kLenKFree = {9, 4, 0, 23, 0, 17, 1};

std::vector<VarlenCase> grid() {
  struct Mask {
    const char* name;
    bool causal;
    std::int64_t left, right, sink_tokens;
  };
  const Mask masks[] = {{"full", false, -1, -1, 0},       {"causal", true, -1, -1, 0},
                        {"window_5_0", false, 5, 0, 0},   {"window_3_2", false, 3, 2, 0},
                        {"window_4_u", false, 4, -1, 0},  {"causal_window_6_sink2", true, 6, -1, 2},
                        {"window_u_3", false, -1, 3, 0}};
  struct Heads {
    std::int64_t q, kv;
  };
  const Heads heads[] = {{2, 2}, {4, 2}, {3, 1}};
  const std::int64_t head_dims[] = {16, 64, 24};
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
  std::vector<VarlenCase> cases;
  int i = 0;
  for (const Mask& m : masks)
    for (bool sinks : {false, true}) {
      VarlenCase c;
      c.causal = m.causal, c.left = m.left, c.right = m.right, c.sink_tokens = m.sink_tokens, c.sinks = sinks;
      c.dtype = dtypes[i % 3];
      c.Hq = heads[i % 3].q, c.Hkv = heads[i % 3].kv;
      c.D = head_dims[(i / 3) % 3];
      c.scale = i % 4 == 3 ? 0.3 : 0;
      c.len_q = kLenQ;
      c.len_k = m.causal || m.right >= 0 ? kLenKAligned : kLenKFree;
      c.name = str(m.name, sinks ? "_sinks" : "", "_", name_of(c.dtype), "_H", c.Hq, "x", c.Hkv, "_D", c.D,
                   c.scale != 0 ? "_scaled" : "");
      cases.push_back(c);
      ++i;
    }
  VarlenCase one;  // one sequence: the dense call itself
  one.name = "single_sequence_causal_sinks_bf16";
  one.dtype = DType::bf16, one.Hq = 4, one.Hkv = 2, one.D = 32, one.causal = true, one.sinks = true;
  one.len_q = {37}, one.len_k = {37};
  cases.push_back(one);
  VarlenCase mqa;  // MQA, head dim 128, all sequences of length 1
  mqa.name = "mqa_length1_fp32_D128";
  mqa.Hq = 4, mqa.Hkv = 1, mqa.D = 128, mqa.causal = true;
  mqa.len_q = {1, 1, 1}, mqa.len_k = {1, 1, 1};
  cases.push_back(mqa);
  return cases;
}

class VarlenVsDense : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(VarlenVsDense, OracleEqualsDenseCallsPerSequence) { expect_equals_dense_calls(GetParam(), AttentionImpl::naive); }
TEST_P(VarlenVsDense, TiledEqualsDenseCallsPerSequence) { expect_equals_dense_calls(GetParam(), AttentionImpl::flash); }

// The tiled varlen implementation against the varlen oracle on fp32 copies of the same values (the oracle's
// backward starting from the tiled O and L), with the tolerances of the dense tiled-vs-naive test.
TEST_P(VarlenVsDense, TiledMatchesTheOracle) {
  const VarlenCase& c = GetParam();
  Packed tiled(c, c.dtype);
  tiled.fill_inputs(c);
  tiled.forward(options_of(c, AttentionImpl::flash));
  tiled.backward(options_of(c, AttentionImpl::flash));

  Packed oracle(c, DType::f32);
  for (auto [dst, src] : {std::pair{&oracle.q, &tiled.q}, {&oracle.k, &tiled.k}, {&oracle.v, &tiled.v},
                          {&oracle.d_o, &tiled.d_o}})
    write_from_double(*dst, read_as_double(*src));
  if (c.sinks) copy(oracle.sinks, tiled.sinks);
  oracle.forward(options_of(c, AttentionImpl::naive));
  const double tol_o = c.dtype == DType::f32 ? 2e-6 : c.dtype == DType::f16 ? 1e-3 : 6e-3;
  const double tol_grad = c.dtype == DType::f32 ? 1e-5 : c.dtype == DType::f16 ? 1.6e-3 : 1.2e-2;
  expect_close(read_as_double(tiled.o), read_as_double(oracle.o), tol_o, "O");
  expect_close(read_as_double(tiled.lse), read_as_double(oracle.lse), 5e-7, "L");

  write_from_double(oracle.o, read_as_double(tiled.o));
  copy(oracle.lse, tiled.lse);
  oracle.backward(options_of(c, AttentionImpl::naive));
  expect_close(read_as_double(tiled.dq), read_as_double(oracle.dq), tol_grad, "dQ");
  expect_close(read_as_double(tiled.dk), read_as_double(oracle.dk), tol_grad, "dK");
  expect_close(read_as_double(tiled.dv), read_as_double(oracle.dv), tol_grad, "dV");
  if (c.sinks) expect_close(read_as_double(tiled.dsinks), read_as_double(oracle.dsinks), tol_grad, "dsinks");
}

INSTANTIATE_TEST_SUITE_P(Variants, VarlenVsDense, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<VarlenCase>& info) { return info.param.name; });

// One sequence through the varlen call is the dense call on the same memory, bit for bit, for both
// CPU implementations.
TEST(AttentionVarlen, OneSequenceIsTheDenseCallOnTheSameMemory) {
  VarlenCase c;
  c.dtype = DType::f16, c.Hq = 4, c.Hkv = 1, c.D = 64, c.left = 7, c.right = 0, c.sink_tokens = 1, c.sinks = true;
  c.len_q = {50}, c.len_k = {50};
  for (AttentionImpl impl : {AttentionImpl::naive, AttentionImpl::flash}) {
    SCOPED_TRACE(name_of(impl));
    Packed p(c, c.dtype);
    p.fill_inputs(c);
    const AttentionOptions options = options_of(c, impl);
    p.forward(options);
    p.backward(options);
    // The packed (N, H, D) tensors seen as dense (1, H, N, D) ones: no copies.
    auto dense = [](const Tensor& t) {
      return Tensor(t.data(), t.dtype(), t.device(), {1, t.size(1), t.size(0), t.size(2)},
                    {t.numel(), t.stride(1), t.stride(0), 1});
    };
    OwnedTensor o(p.o->shape(), c.dtype, Device::cpu(), "test"), lse({1, c.Hq, 50}, DType::f32, Device::cpu(), "test");
    OwnedTensor dq(p.q->shape(), c.dtype, Device::cpu(), "test"), dk(p.k->shape(), c.dtype, Device::cpu(), "test"),
        dv(p.k->shape(), c.dtype, Device::cpu(), "test"), dsinks({c.Hq}, DType::f32, Device::cpu(), "test");
    const AttentionTensors t{dense(p.q), dense(p.k), dense(p.v), p.sinks, dense(o), lse};
    attention_forward(t, options);
    attention_backward(t, {dense(p.d_o), dense(dq), dense(dk), dense(dv), dsinks}, options);
    EXPECT_EQ(read_as_double(p.o), read_as_double(o));
    EXPECT_EQ(read_as_double(p.lse), read_as_double(lse));
    EXPECT_EQ(read_as_double(p.dq), read_as_double(dq));
    EXPECT_EQ(read_as_double(p.dk), read_as_double(dk));
    EXPECT_EQ(read_as_double(p.dv), read_as_double(dv));
    EXPECT_EQ(read_as_double(p.dsinks), read_as_double(dsinks));
  }
}

// ---- bad inputs ------------------------------------------------------------------------------------

class VarlenBadInput : public ::testing::Test {
 protected:
  VarlenBadInput() : p(base(), DType::f32) { p.fill_inputs(base()); }
  static VarlenCase base() {
    VarlenCase c;
    c.Hq = 4, c.Hkv = 2, c.D = 16, c.causal = true;
    c.len_q = {3, 5, 2}, c.len_k = {3, 5, 2};
    return c;
  }
  // The error of a forward call with t, and the error of a backward call with t and g.
  static Error forward_error(const VarlenAttentionTensors& t, const AttentionOptions& options = options_of(base(), AttentionImpl::flash)) {
    return error_of([&] { attention_varlen_forward(t, options); });
  }
  static Error backward_error(const VarlenAttentionTensors& t, const VarlenAttentionGrads& g) {
    return error_of([&] { attention_varlen_backward(t, g, options_of(base(), AttentionImpl::flash)); });
  }
  Packed p;
};

void expect_message(const Error& e, ErrorKind kind, const std::vector<std::string>& parts) {
  EXPECT_EQ(e.kind(), kind) << e.what();
  for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
      << "message lacks '" << part << "': " << e.what();
}

TEST_F(VarlenBadInput, ValidCallRuns) { EXPECT_NO_THROW(attention_varlen_forward(p.tensors(), options_of(base(), AttentionImpl::flash))); }

TEST_F(VarlenBadInput, CumulativeLengthsNotNonDecreasing) {
  std::vector<std::int32_t> cu = {0, 5, 3, 10};
  VarlenAttentionTensors t = p.tensors();
  t.cu_seqlens_q.data = cu.data();
  t.cu_seqlens_k.data = cu.data();
  expect_message(forward_error(t), ErrorKind::invalid_argument,
                 {"cu_seqlens_q must be non-decreasing", "cu_seqlens_q[1] = 5 > cu_seqlens_q[2] = 3"});
}

TEST_F(VarlenBadInput, FirstEntryNotZero) {
  std::vector<std::int32_t> cu = {1, 3, 8, 10};
  VarlenAttentionTensors t = p.tensors();
  t.cu_seqlens_k.data = cu.data();
  expect_message(forward_error(t), ErrorKind::invalid_argument,
                 {"cu_seqlens_k must start at 0", "given 1"});
}

TEST_F(VarlenBadInput, LastEntryNotTheTotal) {
  std::vector<std::int32_t> cu = {0, 3, 8, 9};
  VarlenAttentionTensors t = p.tensors();
  t.cu_seqlens_q.data = cu.data();
  expect_message(forward_error(t), ErrorKind::invalid_argument,
                 {"last entry of cu_seqlens_q must be the total token count", "expected 10", "= 9"});
}

TEST_F(VarlenBadInput, SequenceLongerThanMaxSeqlen) {
  VarlenAttentionTensors t = p.tensors();
  t.max_seqlen_k = 4;
  expect_message(forward_error(t), ErrorKind::invalid_argument,
                 {"sequence 1 is longer than max_seqlen_k", "at most 4 tokens, given 5"});
  t = p.tensors();
  t.max_seqlen_q = -1;
  expect_message(forward_error(t), ErrorKind::invalid_argument, {"max_seqlen_q and max_seqlen_k must be >= 0"});
}

TEST_F(VarlenBadInput, SequenceCountsDiffer) {
  std::vector<std::int32_t> cu = {0, 3, 10};
  VarlenAttentionTensors t = p.tensors();
  t.cu_seqlens_k.data = cu.data();
  t.cu_seqlens_k.count = 3;
  expect_message(forward_error(t), ErrorKind::invalid_argument,
                 {"the same number of sequences", "given 4 and 3 entries"});
  t.cu_seqlens_q.count = t.cu_seqlens_k.count = 1;
  expect_message(forward_error(t), ErrorKind::invalid_argument, {"cu_seqlens_q must hold B + 1 >= 2 entries"});
  t = p.tensors();
  t.cu_seqlens_q.data = nullptr;
  expect_message(forward_error(t), ErrorKind::invalid_argument, {"cu_seqlens_q has no data"});
}

TEST_F(VarlenBadInput, CausalNeedsAsManyKeysAsQueries) {
  // Same totals, but sequence 0 has 3 queries and 2 keys: bottom-right alignment would blind a query.
  std::vector<std::int32_t> cu_k = {0, 2, 7, 10};
  VarlenAttentionTensors t = p.tensors();
  t.cu_seqlens_k.data = cu_k.data();
  expect_message(forward_error(t), ErrorKind::invalid_argument,
                 {"causal attention aligns", "sequence 0 has 3 queries and 2 keys"});
  AttentionOptions window = options_of(base(), AttentionImpl::flash);
  window.causal = false;
  window.window_left = 2, window.window_right = 1;
  expect_message(forward_error(t, window), ErrorKind::invalid_argument, {"a right window aligns"});
  window.window_right = -1;  // no right bound: any lengths
  EXPECT_NO_THROW(attention_varlen_forward(t, window));
}

TEST_F(VarlenBadInput, WrongDtypeOrDevice) {
  OwnedTensor k16({10, 2, 16}, DType::f16, Device::cpu(), "test");
  VarlenAttentionTensors t = p.tensors();
  t.k = k16;
  expect_message(forward_error(t), ErrorKind::invalid_argument, {"k must have the dtype of q", "expected fp32, given fp16"});
  t = p.tensors();
  t.cu_seqlens_q.device = Device::cuda(0);
  expect_message(forward_error(t), ErrorKind::invalid_argument,
                 {"cu_seqlens_q must be on the device of q", "expected cpu", "given cuda:0"});
  OwnedTensor lse16({4, 10}, DType::f16, Device::cpu(), "test");
  t = p.tensors();
  t.lse = lse16;
  expect_message(forward_error(t), ErrorKind::invalid_argument, {"lse must be fp32"});
}

TEST_F(VarlenBadInput, WrongShapes) {
  VarlenAttentionTensors t = p.tensors();
  t.q = p.q->reshape({10, 4, 2, 8});
  expect_message(forward_error(t), ErrorKind::invalid_argument, {"q must be (total_q, Hq, D)", "given 4"});
  OwnedTensor lse_t({10, 4}, DType::f32, Device::cpu(), "test");
  t = p.tensors();
  t.lse = lse_t;
  expect_message(forward_error(t), ErrorKind::invalid_argument, {"lse has the wrong shape", "expected [4, 10]"});
  OwnedTensor k3({10, 3, 16}, DType::f32, Device::cpu(), "test");
  t = p.tensors();
  t.k = k3;
  t.v = k3;
  expect_message(forward_error(t), ErrorKind::invalid_argument, {"multiple of key/value heads", "Hkv = 3"});
  OwnedTensor dk_small({9, 2, 16}, DType::f32, Device::cpu(), "test");
  VarlenAttentionGrads g = p.grads();
  g.dk = dk_small;
  expect_message(backward_error(p.tensors(), g), ErrorKind::invalid_argument,
                 {"dk has the wrong shape", "expected [10, 2, 16]"});
  g = p.grads();
  g.dsinks = p.lse->select(1, 0);
  expect_message(backward_error(p.tensors(), g), ErrorKind::invalid_argument, {"dsinks was given but sinks were not"});
}

TEST_F(VarlenBadInput, OutputsMustNotAliasInputs) {
  VarlenAttentionTensors t = p.tensors();
  t.o = p.q;
  expect_message(forward_error(t), ErrorKind::invalid_argument, {"output o shares memory with input q"});
}

}  // namespace
}  // namespace ft
