// test_ops_rmsnorm.cpp — RMSNorm forward against a double reference, backward against central finite
// differences, accumulation flags, bf16 output / gradient, and malformed calls.
#include <gtest/gtest.h>

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
