// test_ops_decode.cpp — the decode step's ops on the CPU: rope_append equals rope_forward on q and on a copy
// of k written at the position (bit for bit) and leaves the rest of the cache alone; decode_attention equals
// attention_forward (naive) over the cache's first past + Nq keys, GQA and window included; advance_position;
// argmax_rows (ties to the lower index, the id limit, the history by position); greedy_next (argmax, history,
// embedding, position); skinny_linear's composition against the ops it stands
// for; malformed calls (heads, capacity, rows, dtypes, a residual with a norm) are clear errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "core/buffer.h"
#include "core/tensor_io.h"
#include "ops/argmax.h"
#include "ops/attention.h"
#include "ops/decode_attention.h"
#include "ops/linear.h"
#include "ops/rope.h"
#include "ops/skinny_linear.h"

namespace ft {
namespace {

using testing_util::error_of;

OwnedTensor normal_tensor(const Shape& shape, std::uint64_t seed, DType dtype = DType::f32, double std = 1.0) {
  OwnedTensor t(shape, dtype, Device::cpu(), "test");
  fill_normal(t, seed, 0.0, std);
  return t;
}

bool has(const Error& e, const std::string& text) { return e.message().find(text) != std::string::npos; }

TEST(RopeAppend, EqualsRopeForwardAtThePosition) {
  const std::int64_t B = 2, Hq = 4, Hkv = 2, T = 2, Dh = 8, capacity = 10;
  const OwnedTensor q = normal_tensor({B, Hq, T, Dh}, 1), k = normal_tensor({B, Hkv, T, Dh}, 2),
                    v = normal_tensor({B, Hkv, T, Dh}, 3);
  const OwnedTensor kc = normal_tensor({B, Hkv, capacity, Dh}, 4), vc = normal_tensor({B, Hkv, capacity, Dh}, 5);
  const std::vector<double> q0 = read_as_double(q), k0 = read_as_double(k), v0 = read_as_double(v);
  const std::vector<double> kc0 = read_as_double(kc), vc0 = read_as_double(vc);
  const std::int32_t at = 6;
  rope_append(q, k, v, kc, vc, &at, {500.0});

  const OwnedTensor want_q = normal_tensor({B, Hq, T, Dh}, 0), want_k = normal_tensor({B, Hkv, T, Dh}, 0);
  write_from_double(want_q, q0);
  write_from_double(want_k, k0);
  rope_forward(want_q, {500.0, at});
  rope_forward(want_k, {500.0, at});
  EXPECT_EQ(read_as_double(q), read_as_double(want_q));
  const std::vector<double> kc1 = read_as_double(kc), vc1 = read_as_double(vc), wk = read_as_double(want_k);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hkv; ++h)
      for (std::int64_t p = 0; p < capacity; ++p)
        for (std::int64_t i = 0; i < Dh; ++i) {
          const std::int64_t c = ((b * Hkv + h) * capacity + p) * Dh + i;
          const bool fresh = p >= at && p < at + T;
          const std::int64_t n = ((b * Hkv + h) * T + (p - at)) * Dh + i;
          ASSERT_EQ(kc1[c], fresh ? wk[n] : kc0[c]) << "k cache " << b << " " << h << " " << p << " " << i;
          ASSERT_EQ(vc1[c], fresh ? v0[n] : vc0[c]) << "v cache " << b << " " << h << " " << p << " " << i;
        }
  const std::int32_t late = 9;  // positions 9 and 10: past the capacity of 10
  EXPECT_TRUE(has(error_of([&] { rope_append(q, k, v, kc, vc, &late, {}); }), "outside the cache's capacity of 10"));
}

TEST(DecodeAttention, EqualsNaiveAttentionOverTheCachedKeys) {
  const std::int64_t B = 2, Hq = 6, Hkv = 2, Nq = 3, D = 16, capacity = 40;
  const OwnedTensor q = normal_tensor({B, Hq, Nq, D}, 1), k = normal_tensor({B, Hkv, capacity, D}, 2),
                    v = normal_tensor({B, Hkv, capacity, D}, 3);
  for (std::int64_t window : {-1, 5}) {
    SCOPED_TRACE(window);
    const std::int32_t past = 21;
    OwnedTensor o({B, Hq, Nq, D}, DType::f32, Device::cpu(), "test o");
    DecodeAttentionOptions options;
    options.window_left = window;
    options.sink_tokens = 2;
    decode_attention({q, k, v, Tensor(), o, &past}, options);

    const std::int64_t nk = past + Nq;
    OwnedTensor want({B, Hq, Nq, D}, DType::f32, Device::cpu(), "test want"), lse({B, Hq, Nq}, DType::f32,
                                                                                  Device::cpu(), "test lse");
    AttentionTensors t;
    t.q = q;
    t.k = Tensor(k->data(), DType::f32, Device::cpu(), {B, Hkv, nk, D}, k->strides());
    t.v = Tensor(v->data(), DType::f32, Device::cpu(), {B, Hkv, nk, D}, v->strides());
    t.o = want;
    t.lse = lse;
    AttentionOptions ao;
    ao.causal = true;
    ao.window_left = window;
    ao.sink_tokens = 2;
    ao.impl = AttentionImpl::naive;
    attention_forward(t, ao);
    EXPECT_EQ(read_as_double(o), read_as_double(want));
  }
  OwnedTensor o({B, Hq, Nq, D}, DType::f32, Device::cpu(), "test o");
  const std::int32_t full = 38;  // 38 + 3 keys in a cache of 40
  EXPECT_TRUE(has(error_of([&] { decode_attention({q, k, v, Tensor(), o, &full}, {}); }), "capacity of 40"));
  const OwnedTensor k5 = normal_tensor({B, 4, capacity, D}, 2);
  EXPECT_TRUE(has(error_of([&] { decode_attention({q, k5, k5, Tensor(), o, &full}, {}); }),
                  "must be a multiple of the key/value heads"));
  EXPECT_TRUE(has(error_of([&] { decode_attention({q, k, v, Tensor(), o, nullptr}, {}); }), "past"));
}

TEST(DecodeAttention, AdvancePosition) {
  std::int32_t position = 7;
  advance_position(&position, 1, Device::cpu(), {});
  advance_position(&position, 3, Device::cpu(), {});
  EXPECT_EQ(position, 11);
}

TEST(ArgmaxRows, LowestIndexOfTheLargestWithinTheLimit) {
  OwnedTensor logits({3, 5}, DType::f32, Device::cpu(), "test logits");
  write_from_double(logits, {1, 4, 2, 4, 0, /**/ -1, -2, -3, -4, 9, /**/ 0, 0, 0, 0, 0});
  std::vector<std::int32_t> out(3);
  argmax_rows(out.data(), logits, 0, {});
  EXPECT_EQ(out, (std::vector<std::int32_t>{1, 4, 0}));
  argmax_rows(out.data(), logits, 4, {});
  EXPECT_EQ(out, (std::vector<std::int32_t>{1, 0, 0}));
  EXPECT_TRUE(has(error_of([&] { argmax_rows(out.data(), logits, -1, {}); }), "limit must be >= 0"));
  // With a history: the indices also land at row *position of it.
  std::vector<std::int32_t> history(9, -1);
  const std::int32_t position = 2;
  argmax_rows(out.data(), logits, 0, {}, history.data(), &position);
  EXPECT_EQ(history, (std::vector<std::int32_t>{-1, -1, -1, -1, -1, -1, 1, 4, 0}));
  EXPECT_TRUE(has(error_of([&] { argmax_rows(out.data(), logits, 0, {}, history.data(), nullptr); }),
                  "give both or neither"));
}

TEST(GreedyNext, ArgmaxHistoryEmbeddingAndPosition) {
  OwnedTensor logits({2, 4}, DType::f32, Device::cpu(), "test logits");
  write_from_double(logits, {1, 4, 2, 4, /**/ -1, -2, 9, -4});
  OwnedTensor embedding({5, 3}, DType::f32, Device::cpu(), "test embedding");
  write_from_double(embedding, {0, 1, 2, /**/ 10, 11, 12, /**/ 20, 21, 22, /**/ 30, 31, 32, /**/ 40, 41, 42});
  OwnedTensor x({2, 3}, DType::f32, Device::cpu(), "test x");
  std::vector<std::int32_t> ids(2), history(6, -1);
  std::int32_t position = 1;
  GreedyNextArgs a;
  a.logits = logits;
  a.ids = ids.data();
  a.history = history.data();
  a.position = &position;
  a.embedding = embedding;
  a.x = x;
  greedy_next(a);
  EXPECT_EQ(ids, (std::vector<std::int32_t>{1, 2}));
  EXPECT_EQ(history, (std::vector<std::int32_t>{-1, -1, 1, 2, -1, -1}));
  EXPECT_EQ(read_as_double(x), (std::vector<double>{10, 11, 12, 20, 21, 22}));
  EXPECT_EQ(position, 2);
  a.limit = 2;  // row 1's largest among its first two columns: column 0
  greedy_next(a);
  EXPECT_EQ(ids, (std::vector<std::int32_t>{1, 0}));
  EXPECT_EQ(history, (std::vector<std::int32_t>{-1, -1, 1, 2, 1, 0}));
  EXPECT_EQ(read_as_double(x), (std::vector<double>{10, 11, 12, 0, 1, 2}));
  EXPECT_EQ(position, 3);
  GreedyNextArgs bad = a;
  bad.position = nullptr;
  EXPECT_TRUE(has(error_of([&] { greedy_next(bad); }), "the position are required"));
  OwnedTensor x_wide({2, 4}, DType::f32, Device::cpu(), "test x");
  bad = a;
  bad.x = x_wide;
  EXPECT_TRUE(has(error_of([&] { greedy_next(bad); }), "x must be (2, 3)"));
  OwnedTensor small({3, 3}, DType::f32, Device::cpu(), "test embedding");
  bad = a;
  bad.limit = 0;
  bad.embedding = small;
  EXPECT_TRUE(has(error_of([&] { greedy_next(bad); }), "fewer than the 4 columns"));
}

TEST(SkinnyLinear, ComposesTheOpsItFuses) {
  const std::int64_t M = 3, K = 16, N = 24;
  const OwnedTensor x = normal_tensor({M, K}, 1, DType::bf16), w = normal_tensor({N, K}, 2, DType::bf16, 0.1);
  OwnedTensor y({M, N}, DType::f32, Device::cpu(), "test y"), want({M, N}, DType::f32, Device::cpu(), "test want");
  SkinnyLinearArgs a;
  a.y = y;
  a.x = x;
  a.w = w;
  skinny_linear(a);
  linear_forward(want, x, w);
  EXPECT_EQ(read_as_double(y), read_as_double(want));

  const OwnedTensor residual = normal_tensor({M, N}, 3), g = normal_tensor({K}, 4);
  a.epilogue = SkinnyEpilogue::residual;
  a.residual = residual;
  skinny_linear(a);
  const std::vector<double> r = read_as_double(residual), product = read_as_double(want), sum = read_as_double(y);
  for (std::size_t i = 0; i < sum.size(); ++i)
    EXPECT_EQ(sum[i], static_cast<double>(static_cast<float>(product[i]) + static_cast<float>(r[i]))) << i;
  a.norm_weight = g;
  EXPECT_TRUE(has(error_of([&] { skinny_linear(a); }), "without the fused RMSNorm"));

  const OwnedTensor many = normal_tensor({9, K}, 1, DType::bf16);
  const OwnedTensor y9({9, N}, DType::f32, Device::cpu(), "test y");
  SkinnyLinearArgs b;
  b.y = y9;
  b.x = many;
  b.w = w;
  EXPECT_TRUE(has(error_of([&] { skinny_linear(b); }), "expected 1 to 8 rows"));
  SkinnyLinearArgs c = a;
  c.epilogue = SkinnyEpilogue::store;
  c.norm_weight = Tensor();
  const OwnedTensor x32 = normal_tensor({M, K}, 1);
  c.x = x32;  // fp32 without a norm
  EXPECT_TRUE(has(error_of([&] { skinny_linear(c); }), "x"));
}

}  // namespace
}  // namespace ft
