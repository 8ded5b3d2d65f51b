// test_ops_rmsnorm.cpp — RMSNorm forward against a double reference, backward against central finite
// differences, accumulation flags, bf16 output / gradient, the 16-bit copy of dx written by the backward
// bitwise against a cast after it, and malformed calls.
#include <gtest/gtest.h>

#include "ops/cast.h"
#include "ops/rmsnorm.h"
#include "test_ops_util.h"

namespace ft {
namespace {

using test::expect_close;
using test::normals;
using test::tensor_of;

constexpr std::int64_t B = 2, T = 3, d = 8, rows = B * T;
constexpr double kEps = 1e-5;

// y (rows, d) = x / sqrt(mean(x^2) + eps) * w in double.
std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& w) {
  std::vector<double> y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::int64_t j = 0; j < d; ++j) ss += x[r * d + j] * x[r * d + j];
    const double rstd = 1.0 / std::sqrt(ss / d + kEps);
    for (std::int64_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] * rstd * w[j];
  }
  return y;
}

struct Problem {
  std::vector<double> x = normals(rows * d, 1), w = normals(d, 2, 0.5), g = normals(rows * d, 3);
  OwnedTensor xt = tensor_of({B, T, d}, DType::f32, x), wt = tensor_of({d}, DType::f32, w);
  OwnedTensor rstd{{B, T}, DType::f32, Device::cpu(), "test"};
};

TEST(RmsNorm, ForwardMatchesReference) {
  Problem p;
  OwnedTensor y({B, T, d}, DType::f32, Device::cpu(), "test");
  rmsnorm_forward(y, p.rstd, p.xt, p.wt);
  expect_close(read_as_double(y), reference(p.x, p.w), 1e-6, "y");
  OwnedTensor y16({B, T, d}, DType::bf16, Device::cpu(), "test");
  rmsnorm_forward(y16, p.rstd, p.xt, p.wt);
  expect_close(read_as_double(y16), reference(p.x, p.w), 1e-2, "bf16 y");
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  Problem p;
  OwnedTensor y({B, T, d}, DType::f32, Device::cpu(), "test");
  rmsnorm_forward(y, p.rstd, p.xt, p.wt);
  auto dy = tensor_of({B, T, d}, DType::f32, p.g);
  OwnedTensor dx({B, T, d}, DType::f32, Device::cpu(), "test");
  OwnedTensor dw({d}, DType::f32, Device::cpu(), "test");
  rmsnorm_backward({dx, dw}, dy, p.xt, p.wt, p.rstd);
  const auto loss_x = [&](const std::vector<double>& xs) { return test::dot(reference(xs, p.w), p.g); };
  const auto loss_w = [&](const std::vector<double>& ws) { return test::dot(reference(p.x, ws), p.g); };
  expect_close(read_as_double(dx), test::numeric_gradient(loss_x, p.x), 1e-5, "dx");
  expect_close(read_as_double(dw), test::numeric_gradient(loss_w, p.w), 1e-5, "dw");

  // Accumulating adds to what is there; a bf16 dy gives the same gradients up to its rounding.
  const auto prior_x = normals(rows * d, 4), prior_w = normals(d, 5);
  auto dx_sum = tensor_of({B, T, d}, DType::f32, prior_x), dw_sum = tensor_of({d}, DType::f32, prior_w);
  rmsnorm_backward({dx_sum, dw_sum, true, true}, dy, p.xt, p.wt, p.rstd);
  auto ex = read_as_double(dx), ew = read_as_double(dw);
  for (std::size_t i = 0; i < ex.size(); ++i) ex[i] += prior_x[i];
  for (std::size_t i = 0; i < ew.size(); ++i) ew[i] += prior_w[i];
  expect_close(read_as_double(dx_sum), ex, 1e-6, "dx accumulated");
  expect_close(read_as_double(dw_sum), ew, 1e-6, "dw accumulated");

  auto dy16 = tensor_of({B, T, d}, DType::bf16, p.g);
  OwnedTensor dx16({B, T, d}, DType::f32, Device::cpu(), "test");
  rmsnorm_backward({dx16, Tensor()}, dy16, p.xt, p.wt, p.rstd);
  expect_close(read_as_double(dx16), read_as_double(dx), 1e-2, "dx from bf16 dy");
}

TEST(RmsNorm, DxCastIsBitwiseTheCastOfDx) {
  Problem p;
  const auto prior = normals(rows * d, 6, 3.0);
  for (const DType dy_dtype : {DType::f32, DType::bf16})
    for (const DType cast_dtype : {DType::bf16, DType::f16})
      for (const bool accumulate : {false, true}) {
        SCOPED_TRACE(std::string(name_of(dy_dtype)) + " dy, " + name_of(cast_dtype) + " copy" +
                     (accumulate ? ", accumulating" : ""));
        auto dy = tensor_of({B, T, d}, dy_dtype, p.g);
        auto dx = tensor_of({B, T, d}, DType::f32, prior), dx_alone = tensor_of({B, T, d}, DType::f32, prior);
        auto dw = test::zeros({d}), dw_alone = test::zeros({d});
        OwnedTensor copy({B, T, d}, cast_dtype, Device::cpu(), "test"), expected({B, T, d}, cast_dtype, Device::cpu(),
                                                                                  "test");
        rmsnorm_backward({.dx = dx, .dw = dw, .accumulate_dx = accumulate, .dx_cast = copy}, dy, p.xt, p.wt, p.rstd);
        rmsnorm_backward({.dx = dx_alone, .dw = dw_alone, .accumulate_dx = accumulate}, dy, p.xt, p.wt, p.rstd);
        cast(expected, dx_alone);
        ASSERT_EQ(read_as_double(dx), read_as_double(dx_alone));
        ASSERT_EQ(read_as_double(dw), read_as_double(dw_alone));
        ASSERT_EQ(read_as_double(copy), read_as_double(expected));
      }
}

TEST(RmsNorm, MalformedDxCastNamesExpectedAndGiven) {
  Problem p;
  auto dy = test::zeros({B, T, d}), dx = test::zeros({B, T, d});
  auto cast32 = test::zeros({B, T, d}), cast_shape = test::zeros({B, T, d + 1}, DType::bf16);
  auto copy = test::zeros({B, T, d}, DType::bf16);
  test::expect_error([&] { rmsnorm_backward({.dx = dx, .dx_cast = cast32}, dy, p.xt, p.wt, p.rstd); },
                     ErrorKind::invalid_argument,
                     {"rmsnorm_backward", "dx_cast", "expected bf16 or fp16", "given fp32"});
  test::expect_error([&] { rmsnorm_backward({.dx = dx, .dx_cast = cast_shape}, dy, p.xt, p.wt, p.rstd); },
                     ErrorKind::invalid_argument, {"dx_cast", "expected [2, 3, 8]", "given [2, 3, 9]"});
  test::expect_error(
      [&] { rmsnorm_backward({.dx = dx, .dx_cast = test::cuda_view({B, T, d}, DType::bf16)}, dy, p.xt, p.wt, p.rstd); },
      ErrorKind::invalid_argument, {"dx_cast", "expected cpu", "given cuda:0"});
  test::expect_error([&] { rmsnorm_backward({.dx_cast = copy}, dy, p.xt, p.wt, p.rstd); }, ErrorKind::invalid_argument,
                     {"rmsnorm_backward", "dx_cast", "needs dx"});
}

TEST(RmsNorm, MalformedCallsNameExpectedAndGiven) {
  Problem p;
  auto y = test::zeros({B, T, d}), w_wrong = test::zeros({d + 1}), rstd_wrong = test::zeros({rows + 1});
  auto x16 = test::zeros({B, T, d}, DType::bf16);
  test::expect_error([&] { rmsnorm_forward(y, p.rstd, p.xt, w_wrong); }, ErrorKind::invalid_argument,
                     {"rmsnorm_forward", "w", "expected [8]", "given [9]"});
  test::expect_error([&] { rmsnorm_forward(y, rstd_wrong, p.xt, p.wt); }, ErrorKind::invalid_argument,
                     {"rstd", "expected 6", "given [7]"});
  test::expect_error([&] { rmsnorm_forward(y, p.rstd, x16, p.wt); }, ErrorKind::invalid_argument,
                     {"x", "expected fp32", "given bf16"});
  test::expect_error([&] { rmsnorm_backward({p.wt, Tensor()}, y, p.xt, p.wt, p.rstd); }, ErrorKind::invalid_argument,
                     {"dx", "expected [2, 3, 8]", "given [8]"});
}

}  // namespace
}  // namespace ft
