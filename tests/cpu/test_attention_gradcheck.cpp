// test_attention_gradcheck.cpp — the double-precision reference backward against central finite
// differences of the loss sum(O * W) with respect to q, k, v and the sink logits, on small problems
// covering every variant; and the CPU tiled backward against the reference on the same problems.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/expect_close.h"
#include "core/buffer.h"
#include "core/tensor_io.h"
#include "ops/attention.h"
#include "ops/attention/naive_reference.h"

namespace ft {
namespace {

using testing_util::expect_close;

using attention_ref::ReferenceProblem;

struct Variant {
  std::string name;
  std::int64_t B, Hq, Hkv, Nq, Nk, D;
  bool causal = false;
  std::int64_t left = -1, right = -1, sink_tokens = 0;
  bool sinks = false;
  double scale = 0;  // 0 = default 1/sqrt(D)
};

void PrintTo(const Variant& v, std::ostream* out) { *out << v.name; }

std::vector<Variant> variants() {
  std::vector<Variant> list;
  auto add = [&](Variant v) { list.push_back(std::move(v)); };
  add({"plain", 2, 2, 2, 5, 5, 4});
  add({"causal_nq_lt_nk_gqa", 1, 4, 2, 4, 7, 3, true});
  add({"causal_nq_gt_nk_blind_rows_mqa", 2, 2, 1, 7, 4, 4, true});
  add({"window_1_2", 1, 3, 1, 6, 6, 4, false, 1, 2});
  add({"window_2_0_sink_tokens", 1, 2, 2, 8, 8, 3, false, 2, 0, 2});
  add({"causal_left_sink_token_nq_lt_nk", 1, 2, 1, 5, 9, 4, true, 1, -1, 1});
  add({"right_only_custom_scale", 1, 2, 2, 5, 6, 4, false, -1, 1, 0, false, 1.3});
  add({"sink_logits", 2, 2, 1, 5, 6, 4, false, -1, -1, 0, true});
  add({"sink_logits_blind_rows", 1, 2, 2, 6, 3, 4, true, -1, -1, 0, true});
  add({"everything", 2, 4, 2, 6, 9, 4, true, 2, -1, 2, true, 0.7});
  return list;
}

std::vector<double> normals(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<double> x(n);
  for (auto& v : x) v = static_cast<float>(normal(gen));  // representable in fp32, so tensors hold them exactly
  return x;
}

ReferenceProblem problem_of(const Variant& v) {
  ReferenceProblem p;
  p.batch = v.B, p.heads_q = v.Hq, p.heads_kv = v.Hkv, p.len_q = v.Nq, p.len_k = v.Nk, p.head_dim = v.D;
  p.scale = v.scale != 0 ? v.scale : 1.0 / std::sqrt(static_cast<double>(v.D));
  p.window_left = v.left;
  p.window_right = v.causal ? 0 : v.right;
  p.sink_tokens = v.sink_tokens;
  p.q = normals(static_cast<std::size_t>(v.B * v.Hq * v.Nq * v.D), 1);
  p.k = normals(static_cast<std::size_t>(v.B * v.Hkv * v.Nk * v.D), 2);
  p.v = normals(static_cast<std::size_t>(v.B * v.Hkv * v.Nk * v.D), 3);
  if (v.sinks) p.sinks = normals(static_cast<std::size_t>(v.Hq), 4);
  return p;
}

double loss(const ReferenceProblem& p, const std::vector<double>& w) {
  const std::vector<double> o = attention_ref::reference_forward(p).o;
  double sum = 0;
  for (std::size_t i = 0; i < o.size(); ++i) sum += o[i] * w[i];
  return sum;
}

// Central differences of loss with respect to every entry of *x (a member of p), against grad.
void expect_matches_finite_differences(ReferenceProblem& p, std::vector<double>* x, const std::vector<double>& grad,
                                       const std::vector<double>& w, const char* what) {
  ASSERT_EQ(x->size(), grad.size()) << what;
  constexpr double eps = 1e-6;
  double top = 1;
  for (double g : grad) top = std::max(top, std::fabs(g));
  for (std::size_t i = 0; i < x->size(); ++i) {
    const double keep = (*x)[i];
    (*x)[i] = keep + eps;
    const double up = loss(p, w);
    (*x)[i] = keep - eps;
    const double down = loss(p, w);
    (*x)[i] = keep;
    const double numeric = (up - down) / (2 * eps);
    ASSERT_NEAR(grad[i], numeric, 1e-7 * top) << what << "[" << i << "]";
  }
}

class Gradcheck : public ::testing::TestWithParam<Variant> {};

TEST_P(Gradcheck, ReferenceBackwardMatchesFiniteDifferences) {
  const Variant& v = GetParam();
  ReferenceProblem p = problem_of(v);
  const std::vector<double> w = normals(p.q.size(), 5);  // (B, Hq, Nq, D) loss weights = dO
  const attention_ref::ReferenceOutput out = attention_ref::reference_forward(p);
  const attention_ref::ReferenceGrads g = attention_ref::reference_backward(p, out.o, out.lse, w);
  expect_matches_finite_differences(p, &p.q, g.dq, w, "dq");
  expect_matches_finite_differences(p, &p.k, g.dk, w, "dk");
  expect_matches_finite_differences(p, &p.v, g.dv, w, "dv");
  if (v.sinks) {
    expect_matches_finite_differences(p, &p.sinks, g.dsinks, w, "dsinks");
  } else {
    EXPECT_TRUE(g.dsinks.empty());
  }
}

OwnedTensor tensor_of(const std::vector<double>& values, Shape shape) {
  OwnedTensor t(std::move(shape), DType::f32, Device::cpu(), "test");
  write_from_double(t, values);
  return t;
}

TEST_P(Gradcheck, TiledBackwardMatchesReference) {
  const Variant& v = GetParam();
  const ReferenceProblem p = problem_of(v);
  const std::vector<double> w = normals(p.q.size(), 5);  // (B, Hq, Nq, D)
  const Shape q_shape{v.B, v.Hq, v.Nq, v.D}, kv_shape{v.B, v.Hkv, v.Nk, v.D};
  OwnedTensor q = tensor_of(p.q, q_shape), k = tensor_of(p.k, kv_shape), vv = tensor_of(p.v, kv_shape);
  OwnedTensor d_o = tensor_of(w, q_shape);
  OwnedTensor o(q_shape, DType::f32, Device::cpu(), "test"), lse({v.B, v.Hq, v.Nq}, DType::f32, Device::cpu(), "test");
  OwnedTensor dq(q_shape, DType::f32, Device::cpu(), "test"), dk(kv_shape, DType::f32, Device::cpu(), "test"),
      dv(kv_shape, DType::f32, Device::cpu(), "test");
  OwnedTensor sinks, dsinks;
  AttentionTensors t{q, k, vv, {}, o, lse};
  AttentionGrads g{d_o, dq, dk, dv, {}};
  if (v.sinks) {
    sinks = tensor_of(p.sinks, {v.Hq});
    dsinks = OwnedTensor({v.Hq}, DType::f32, Device::cpu(), "test");
    t.sinks = sinks, g.dsinks = dsinks;
  }
  AttentionOptions opt;
  opt.causal = v.causal, opt.window_left = v.left, opt.window_right = v.right, opt.sink_tokens = v.sink_tokens;
  if (v.scale != 0) opt.scale = v.scale;
  opt.block_q = opt.block_k = 16;
  attention_forward(t, opt);
  attention_backward(t, g, opt);

  const attention_ref::ReferenceOutput out = attention_ref::reference_forward(p);
  expect_close(read_as_double(o), out.o, 1e-6, "o");
  expect_close(read_as_double(lse), out.lse, 1e-6, "lse");
  const attention_ref::ReferenceGrads ref = attention_ref::reference_backward(p, out.o, out.lse, w);
  expect_close(read_as_double(dq), ref.dq, 1e-5, "dq");
  expect_close(read_as_double(dk), ref.dk, 1e-5, "dk");
  expect_close(read_as_double(dv), ref.dv, 1e-5, "dv");
  if (v.sinks) expect_close(read_as_double(dsinks), ref.dsinks, 1e-5, "dsinks");
}

INSTANTIATE_TEST_SUITE_P(Variants, Gradcheck, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<Variant>& info) { return info.param.name; });

}  // namespace
}  // namespace ft
