// test_ops_optimizer.cpp — AdamW against a 3-step trajectory of torch.optim.AdamW's formulas written
// here in double, SGD, global-norm clipping (sum of squares across chunks and tensors, clipping and not
// clipping), clipping folded into AdamW against clip-then-step, the cosine schedule at its key iterations,
// and malformed calls.
#include <gtest/gtest.h>

#include <limits>
#include <numbers>

#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "test_ops_util.h"

namespace ft {
namespace {

using test::expect_close;
using test::normals;
using test::tensor_of;

// torch.optim.AdamW (_single_tensor_adamw), one parameter tensor, in double.
struct ReferenceAdamW {
  std::vector<double> p, m, v;
  void step(const std::vector<double>& g, const AdamWConfig& c, int t) {
    const double bias1 = 1 - std::pow(c.beta1, t), bias2 = 1 - std::pow(c.beta2, t);
    for (std::size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - c.lr * c.weight_decay;
      m[i] += (1 - c.beta1) * (g[i] - m[i]);
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * g[i] * g[i];
      const double denom = std::sqrt(v[i]) / std::sqrt(bias2) + c.eps;
      p[i] -= c.lr / bias1 * m[i] / denom;
    }
  }
};

TEST(AdamW, ThreeStepsFollowTorchFormulas) {
  AdamWConfig tuned;
  tuned.lr = 0.05, tuned.beta1 = 0.8, tuned.beta2 = 0.95, tuned.eps = 1e-3, tuned.weight_decay = 0.1;
  for (const AdamWConfig& config : {AdamWConfig{}, tuned}) {
    const std::int64_t n = 3000;
    ReferenceAdamW ref{normals(n, 1), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
    auto p = tensor_of({n}, DType::f32, ref.p), m = test::zeros({n}), v = test::zeros({n});
    for (int t = 1; t <= 3; ++t) {
      auto g = normals(n, 10 + t, 1e-3 * t);  // small gradients: eps and the bias corrections matter
      g[0] = 0.0;                            // a parameter with no gradient only decays
      auto gt = tensor_of({n}, DType::f32, g);
      adamw_step(p, gt, m, v, config, t);
      ref.step(g, config, t);
      expect_close(read_as_double(p), ref.p, 1e-6, "params after step " + std::to_string(t));
      expect_close(read_as_double(m), ref.m, 1e-6, "exp_avg after step " + std::to_string(t));
      expect_close(read_as_double(v), ref.v, 1e-6, "exp_avg_sq after step " + std::to_string(t));
    }
  }
}

TEST(AdamW, SgdAndMalformedCalls) {
  const auto p0 = normals(5, 2), g = normals(5, 3);
  auto p = tensor_of({5}, DType::f32, p0), gt = tensor_of({5}, DType::f32, g);
  sgd_step(p, gt, 0.5);
  std::vector<double> expected(5);
  for (int i = 0; i < 5; ++i) expected[i] = p0[i] - 0.5 * g[i];
  expect_close(read_as_double(p), expected, 1e-7, "sgd");

  auto m = test::zeros({5}), v = test::zeros({5}), short_v = test::zeros({4}), g16 = test::zeros({5}, DType::bf16);
  test::expect_error([&] { adamw_step(p, gt, m, short_v, {}, 1); }, ErrorKind::invalid_argument,
                     {"adamw_step", "exp_avg_sq", "expected [5]", "given [4]"});
  test::expect_error([&] { adamw_step(p, gt, m, v, {}, 0); }, ErrorKind::invalid_argument, {"step", ">= 1", "given 0"});
  test::expect_error([&] { sgd_step(p, g16, 0.1); }, ErrorKind::invalid_argument, {"grads", "expected fp32", "given bf16"});
}

TEST(GradClip, NormAcrossTensorsAndClipping) {
  const auto a = normals(40000, 4), b = normals(12, 5);  // a spans several summation chunks
  double ss = 0;
  for (double x : a) ss += x * x;
  for (double x : b) ss += x * x;
  const double norm = std::sqrt(ss);

  auto at = tensor_of({200, 200}, DType::f32, a), bt = tensor_of({3, 4}, DType::f32, b);
  EXPECT_NEAR(grad_sum_squares({at, bt}), ss, 1e-12 * ss);
  EXPECT_NEAR(clip_grad_norm({at, bt}, norm * 2), norm, 1e-12 * norm);  // below max_norm: untouched
  EXPECT_EQ(read_as_double(at), a);
  EXPECT_EQ(read_as_double(bt), b);

  const double max_norm = 1.5;
  EXPECT_NEAR(clip_grad_norm({at, bt}, max_norm), norm, 1e-12 * norm);
  const double factor = max_norm / (norm + 1e-6);
  auto sa = a, sb = b;
  for (auto& x : sa) x *= factor;
  for (auto& x : sb) x *= factor;
  expect_close(read_as_double(at), sa, 1e-7, "clipped a");
  expect_close(read_as_double(bt), sb, 1e-7, "clipped b");
  EXPECT_NEAR(std::sqrt(grad_sum_squares({at, bt})), max_norm, 1e-5);

  auto strided = test::zeros({4, 4});
  test::expect_error([&] { grad_sum_squares({at, strided->transpose(0, 1)}); }, ErrorKind::invalid_argument,
                     {"tensor 1", "contiguous"});
  test::expect_error([&] { clip_grad_norm({at}, 0.0); }, ErrorKind::invalid_argument, {"max_norm", "given 0"});
}

// Two AdamW steps with the clipping folded in (GradScale by factor, or by a sum of squares read when the
// update runs) against clip_grad_norm then adamw_step: parameters and state bit for bit, the gradients
// left as they were. max_norm below the norm clips; above it, or a NaN sum of squares, scales nothing.
TEST(AdamW, FoldedClippingMatchesClipThenStep) {
  const std::int64_t n = 3001;
  const auto p0 = normals(n, 20), g0 = normals(n, 21, 0.5);
  AdamWConfig config;
  config.lr = 0.01, config.weight_decay = 0.1;
  const auto g_ref = tensor_of({n}, DType::f32, g0);
  const double ss = grad_sum_squares({g_ref}), norm = std::sqrt(ss);
  auto p_plain = tensor_of({n}, DType::f32, p0), m_plain = test::zeros({n}), v_plain = test::zeros({n});
  for (int t = 1; t <= 2; ++t) adamw_step(p_plain, g_ref, m_plain, v_plain, config, t);  // unclipped
  for (const double max_norm : {0.5 * norm, 2 * norm}) {
    for (const bool by_sum : {false, true}) {
      const std::string tag = std::string(by_sum ? "sum of squares" : "factor") + ", max_norm " +
                              (max_norm < norm ? "below" : "above") + " the norm";
      auto p_ref = tensor_of({n}, DType::f32, p0), m_ref = test::zeros({n}), v_ref = test::zeros({n});
      auto p = tensor_of({n}, DType::f32, p0), m = test::zeros({n}), v = test::zeros({n});
      const auto g = tensor_of({n}, DType::f32, g0);
      for (int t = 1; t <= 2; ++t) {
        auto clipped = tensor_of({n}, DType::f32, g0);
        clip_grad_norm({clipped}, max_norm);
        adamw_step(p_ref, clipped, m_ref, v_ref, config, t);
        const GradScale scale = by_sum ? clip_grad_scale(&ss, max_norm) : GradScale{clip_factor(norm, max_norm)};
        adamw_step(p, g, m, v, config, t, {}, scale);
      }
      EXPECT_EQ(read_as_double(p), read_as_double(p_ref)) << tag;
      EXPECT_EQ(read_as_double(m), read_as_double(m_ref)) << tag;
      EXPECT_EQ(read_as_double(v), read_as_double(v_ref)) << tag;
      EXPECT_EQ(read_as_double(g), read_as_double(g_ref)) << tag << ": the gradients must stay unscaled";
      if (max_norm < norm)
        EXPECT_NE(read_as_double(p), read_as_double(p_plain)) << tag << ": the clipping must have acted";
      else
        EXPECT_EQ(read_as_double(p), read_as_double(p_plain)) << tag;
    }
  }
  // A NaN norm scales nothing (as clip_grad_norm_from leaves the gradients): the plain step.
  const double nan = std::nan("");
  auto p = tensor_of({n}, DType::f32, p0), m = test::zeros({n}), v = test::zeros({n});
  for (int t = 1; t <= 2; ++t) adamw_step(p, g_ref, m, v, config, t, {}, clip_grad_scale(&nan, 1.0));
  EXPECT_EQ(read_as_double(p), read_as_double(p_plain));
  // An infinite norm clips by 0 (clip_factor's max_norm / inf), as scaling the gradients by 0 would: the
  // step of zero gradients, by a sum of squares or by the factor itself.
  const double inf = std::numeric_limits<double>::infinity();
  const auto zero_g = test::zeros({n});
  auto p_zero = tensor_of({n}, DType::f32, p0), m_zero = test::zeros({n}), v_zero = test::zeros({n});
  adamw_step(p_zero, zero_g, m_zero, v_zero, config, 1);
  for (const GradScale& scale : {clip_grad_scale(&inf, 1.0), GradScale{clip_factor(inf, 1.0)}}) {
    auto pz = tensor_of({n}, DType::f32, p0), mz = test::zeros({n}), vz = test::zeros({n});
    adamw_step(pz, g_ref, mz, vz, config, 1, {}, scale);
    EXPECT_EQ(read_as_double(pz), read_as_double(p_zero));
    EXPECT_EQ(read_as_double(mz), read_as_double(m_zero));
  }

  test::expect_error([&] { adamw_step(p, g_ref, m, v, config, 1, {}, GradScale{-0.5}); },
                     ErrorKind::invalid_argument, {"adamw_step", "gradient scale factor", ">= 0", "given -0.5"});
  test::expect_error([&] { adamw_step(p, g_ref, m, v, config, 1, {}, GradScale{inf}); },
                     ErrorKind::invalid_argument, {"adamw_step", "finite", "given inf"});
  GradScale both = clip_grad_scale(&ss, 1.0);
  both.factor = 0.5;
  test::expect_error([&] { adamw_step(p, g_ref, m, v, config, 1, {}, both); }, ErrorKind::invalid_argument,
                     {"adamw_step", "given both"});
  GradScale no_max = clip_grad_scale(&ss, 1.0);
  no_max.max_norm = 0;
  test::expect_error([&] { adamw_step_from(p, g_ref, m, v, nullptr, {}, no_max); }, ErrorKind::invalid_argument,
                     {"adamw_step_from", "factors", "null"});
  const AdamWFactors factors = adamw_factors(config, 1);
  test::expect_error([&] { adamw_step_from(p, g_ref, m, v, &factors, {}, no_max); }, ErrorKind::invalid_argument,
                     {"adamw_step_from", "max_norm > 0", "given 0"});
  test::expect_error([&] { clip_grad_scale(nullptr, 1.0); }, ErrorKind::invalid_argument,
                     {"clip_grad_scale", "sum_squares", "null"});
  test::expect_error([&] { clip_grad_scale(&ss, 0.0); }, ErrorKind::invalid_argument,
                     {"clip_grad_scale", "max_norm must be > 0", "given 0"});
}

TEST(LrSchedule, KeyIterations) {
  const CosineSchedule s{1.0, 0.1, 7, 21};
  EXPECT_EQ(learning_rate(s, 0), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 3), 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 7), 1.0);                                // warm-up ends at max_lr
  EXPECT_DOUBLE_EQ(learning_rate(s, 14), 0.55);                              // cosine midpoint: (max + min) / 2
  EXPECT_DOUBLE_EQ(learning_rate(s, 10), 0.1 + 0.45 * (1 + std::cos(std::numbers::pi * 3 / 14)));
  EXPECT_DOUBLE_EQ(learning_rate(s, 21), 0.1);                               // cycle ends at min_lr
  EXPECT_EQ(learning_rate(s, 22), 0.1);
  EXPECT_EQ(learning_rate(s, 1000), 0.1);
  EXPECT_EQ(learning_rate({2.0, 0.5, 0, 10}, 0), 2.0);                      // no warm-up
  EXPECT_EQ(learning_rate({2.0, 0.5, 4, 4}, 4), 0.5);                       // no cosine phase
  test::expect_error([] { learning_rate({1.0, 0.1, 7, 5}, 1); }, ErrorKind::invalid_argument,
                     {"cycle_iters", ">= warmup_iters = 7", "given 5"});
  test::expect_error([&] { learning_rate(s, -1); }, ErrorKind::invalid_argument, {"given -1"});
}

}  // namespace
}  // namespace ft
