// test_ops_linear.cpp — linear forward against a double reference (fp32 and bf16 operands, shapes that
// cross every GEMM block size), backward against central finite differences, dw accumulation, strided
// output rows, determinism across thread counts, the residual and dx additions in the GEMM's epilogue
// bitwise against the separate GEMM and add, and malformed calls.
#include <gtest/gtest.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "ops/linear.h"
#include "ops/residual.h"
#include "test_ops_util.h"

namespace ft {
namespace {

using test::expect_close;
using test::normals;
using test::tensor_of;

// y (rows, n) = x (rows, k) @ w (n, k)^T in double.
std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& w, std::int64_t rows,
                              std::int64_t k, std::int64_t n) {
  std::vector<double> y(static_cast<std::size_t>(rows * n));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < k; ++p) s += x[r * k + p] * w[j * k + p];
      y[r * n + j] = s;
    }
  return y;
}

struct Size {
  std::int64_t B, T, d_in, d_out;
};

class LinearForward : public ::testing::TestWithParam<Size> {};

TEST_P(LinearForward, Fp32MatchesDoubleReference) {
  const auto [B, T, d_in, d_out] = GetParam();
  const auto x = normals(B * T * d_in, 1), w = normals(d_out * d_in, 2);
  auto xt = tensor_of({B, T, d_in}, DType::f32, x), wt = tensor_of({d_out, d_in}, DType::f32, w);
  OwnedTensor y({B, T, d_out}, DType::f32, Device::cpu(), "test");
  linear_forward(y, xt, wt);
  expect_close(read_as_double(y), reference(x, w, B * T, d_in, d_out), 2e-6 * std::sqrt(double(d_in)), "y");
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearForward,
                         ::testing::Values(Size{1, 1, 1, 1}, Size{2, 3, 5, 7}, Size{1, 131, 300, 270},
                                           Size{3, 40, 17, 33}));

TEST(Linear, Bf16OperandsAccumulateInFp32) {
  const std::int64_t rows = 37, d_in = 290, d_out = 45;
  const auto x = test::rounded(normals(rows * d_in, 3), DType::bf16);
  const auto w = test::rounded(normals(d_out * d_in, 4), DType::bf16);
  auto xt = tensor_of({rows, d_in}, DType::bf16, x), wt = tensor_of({d_out, d_in}, DType::bf16, w);
  const auto expected = reference(x, w, rows, d_in, d_out);
  OwnedTensor y32({rows, d_out}, DType::f32, Device::cpu(), "test");
  linear_forward(y32, xt, wt);
  expect_close(read_as_double(y32), expected, 1e-5, "fp32 output");  // fp32 accumulation: no bf16 error
  OwnedTensor y16({rows, d_out}, DType::bf16, Device::cpu(), "test");
  linear_forward(y16, xt, wt);
  const auto got = read_as_double(y16);
  for (std::size_t i = 0; i < got.size(); ++i)  // one bf16 rounding of the fp32 result
    ASSERT_NEAR(got[i], expected[i], std::fabs(expected[i]) * 4e-3 + 1e-4) << i;
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  const std::int64_t B = 2, T = 3, d_in = 5, d_out = 4, rows = B * T;
  const auto x = normals(rows * d_in, 5), w = normals(d_out * d_in, 6);
  const auto g = normals(rows * d_out, 7);  // dy = weights of the loss sum(y * g)
  auto xt = tensor_of({B, T, d_in}, DType::f32, x), wt = tensor_of({d_out, d_in}, DType::f32, w);
  auto dyt = tensor_of({B, T, d_out}, DType::f32, g);
  OwnedTensor dx({B, T, d_in}, DType::f32, Device::cpu(), "test");
  OwnedTensor dw({d_out, d_in}, DType::f32, Device::cpu(), "test");
  linear_backward({dx, dw}, dyt, xt, wt);
  const auto loss_x = [&](const std::vector<double>& xs) { return test::dot(reference(xs, w, rows, d_in, d_out), g); };
  const auto loss_w = [&](const std::vector<double>& ws) { return test::dot(reference(x, ws, rows, d_in, d_out), g); };
  expect_close(read_as_double(dx), test::numeric_gradient(loss_x, x), 1e-5, "dx");
  expect_close(read_as_double(dw), test::numeric_gradient(loss_w, w), 1e-5, "dw");
}

TEST(Linear, DwAccumulatesAndDxIsOptional) {
  const std::int64_t rows = 9, d_in = 6, d_out = 5;
  const auto x = normals(rows * d_in, 8), w = normals(d_out * d_in, 9), g = normals(rows * d_out, 10);
  const auto prior = normals(d_out * d_in, 11);
  auto xt = tensor_of({rows, d_in}, DType::f32, x), wt = tensor_of({d_out, d_in}, DType::f32, w);
  auto dyt = tensor_of({rows, d_out}, DType::f32, g);
  auto fresh = test::zeros({d_out, d_in});
  linear_backward({Tensor(), fresh}, dyt, xt, wt);
  auto summed = tensor_of({d_out, d_in}, DType::f32, prior);
  linear_backward({Tensor(), summed, true}, dyt, xt, wt);
  auto once = read_as_double(fresh);
  for (std::size_t i = 0; i < once.size(); ++i) once[i] += prior[i];
  expect_close(read_as_double(summed), once, 1e-6, "dw accumulated");
}

TEST(Linear, BackwardInBf16WithFp32MasterGradient) {
  const std::int64_t rows = 11, d_in = 20, d_out = 13;
  const auto x = test::rounded(normals(rows * d_in, 12), DType::bf16);
  const auto w = test::rounded(normals(d_out * d_in, 13), DType::bf16);
  const auto g = test::rounded(normals(rows * d_out, 14), DType::bf16);
  auto xt = tensor_of({rows, d_in}, DType::bf16, x), wt = tensor_of({d_out, d_in}, DType::bf16, w);
  auto dyt = tensor_of({rows, d_out}, DType::bf16, g);
  OwnedTensor dx({rows, d_in}, DType::f32, Device::cpu(), "test");
  OwnedTensor dw({d_out, d_in}, DType::f32, Device::cpu(), "test");
  linear_backward({dx, dw}, dyt, xt, wt);
  const auto loss_x = [&](const std::vector<double>& xs) { return test::dot(reference(xs, w, rows, d_in, d_out), g); };
  const auto loss_w = [&](const std::vector<double>& ws) { return test::dot(reference(x, ws, rows, d_in, d_out), g); };
  expect_close(read_as_double(dx), test::numeric_gradient(loss_x, x), 1e-5, "dx");
  expect_close(read_as_double(dw), test::numeric_gradient(loss_w, w), 1e-5, "dw");
}

TEST(Linear, WritesIntoAColumnSliceOfAWiderOutput) {
  const std::int64_t rows = 7, d_in = 9, d_out = 4;
  const auto x = normals(rows * d_in, 15), w = normals(d_out * d_in, 16);
  auto xt = tensor_of({rows, d_in}, DType::f32, x), wt = tensor_of({d_out, d_in}, DType::f32, w);
  OwnedTensor fused({rows, 3 * d_out}, DType::f32, Device::cpu(), "test");  // (rows, [q | k | v])
  fill_constant(fused, -7.0);
  linear_forward(fused->narrow(1, d_out, d_out), xt, wt);
  const auto all = read_as_double(fused);
  const auto expected = reference(x, w, rows, d_in, d_out);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < 3 * d_out; ++j) {
      const double got = all[r * 3 * d_out + j];
      if (j >= d_out && j < 2 * d_out)
        ASSERT_NEAR(got, expected[r * d_out + j - d_out], 1e-5) << r << "," << j;
      else
        ASSERT_EQ(got, -7.0) << "outside the slice: " << r << "," << j;
    }
}

#if defined(_OPENMP)
TEST(Linear, BitwiseIdenticalForAnyThreadCount) {
  const std::int64_t rows = 200, d_in = 300, d_out = 280;
  const auto x = normals(rows * d_in, 17), w = normals(d_out * d_in, 18), g = normals(rows * d_out, 19);
  auto xt = tensor_of({rows, d_in}, DType::f32, x), wt = tensor_of({d_out, d_in}, DType::f32, w);
  auto dyt = tensor_of({rows, d_out}, DType::f32, g);
  std::vector<std::vector<double>> results;
  const int threads_before = omp_get_max_threads();
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    OwnedTensor y({rows, d_out}, DType::f32, Device::cpu(), "test");
    OwnedTensor dw({d_out, d_in}, DType::f32, Device::cpu(), "test");
    linear_forward(y, xt, wt);
    linear_backward({Tensor(), dw}, dyt, xt, wt);
    auto values = read_as_double(y);
    const auto dwv = read_as_double(dw);
    values.insert(values.end(), dwv.begin(), dwv.end());
    results.push_back(values);
  }
  omp_set_num_threads(threads_before);
  ASSERT_EQ(results[0], results[1]);
}
#endif

// The epilogue additions at fp32 and bf16 operands, over shapes that cross the GEMM's tile sizes.
struct EpilogueCase {
  DType dtype;
  std::int64_t rows, d_in, d_out;
};

class LinearEpilogue : public ::testing::TestWithParam<EpilogueCase> {};

TEST_P(LinearEpilogue, ResidualIsBitwiseTheGemmThenTheResidualAdd) {
  const auto [dtype, rows, d_in, d_out] = GetParam();
  auto x = tensor_of({rows, d_in}, dtype, normals(rows * d_in, 20));
  auto w = tensor_of({d_out, d_in}, dtype, normals(d_out * d_in, 21));
  const auto r = normals(rows * d_out, 22, 4.0);
  auto unfused = tensor_of({rows, d_out}, DType::f32, r);
  OwnedTensor product({rows, d_out}, DType::f32, Device::cpu(), "test");
  linear_forward(product, x, w);
  residual_add(product, unfused);  // (x w^T) + r, the order the model's residual add used
  auto rt = tensor_of({rows, d_out}, DType::f32, r);
  OwnedTensor fused({rows, d_out}, DType::f32, Device::cpu(), "test");
  linear_forward_residual(fused, x, w, rt);
  ASSERT_EQ(read_as_double(fused), read_as_double(product));
  linear_forward_residual(rt, x, w, rt);  // r is y: the projection added in place
  ASSERT_EQ(read_as_double(rt), read_as_double(product));
}

TEST_P(LinearEpilogue, AccumulatedDxIsBitwiseTheGemmThenTheAdd) {
  const auto [dtype, rows, d_in, d_out] = GetParam();
  auto x = tensor_of({rows, d_in}, dtype, normals(rows * d_in, 23));
  auto w = tensor_of({d_out, d_in}, dtype, normals(d_out * d_in, 24));
  auto dy = tensor_of({rows, d_out}, dtype, normals(rows * d_out, 25));
  const auto prior = normals(rows * d_in, 26, 4.0);
  auto unfused = tensor_of({rows, d_in}, DType::f32, prior);
  OwnedTensor dx({rows, d_in}, DType::f32, Device::cpu(), "test");
  linear_backward({dx, Tensor()}, dy, x, w);
  residual_add(unfused, dx);  // prior + dy w, as the model summed the w3 and w1 input gradients
  auto fused = tensor_of({rows, d_in}, DType::f32, prior);
  auto dw = test::zeros({d_out, d_in});
  linear_backward({.dx = fused, .dw = dw, .accumulate_dx = true}, dy, x, w);
  ASSERT_EQ(read_as_double(fused), read_as_double(unfused));
  OwnedTensor dw_alone({d_out, d_in}, DType::f32, Device::cpu(), "test");
  linear_backward({Tensor(), dw_alone}, dy, x, w);
  ASSERT_EQ(read_as_double(dw), read_as_double(dw_alone));  // dw is unaffected
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearEpilogue,
                         ::testing::Values(EpilogueCase{DType::f32, 1, 1, 1}, EpilogueCase{DType::f32, 131, 300, 270},
                                           EpilogueCase{DType::bf16, 64, 96, 32},
                                           EpilogueCase{DType::bf16, 97, 264, 517}));

TEST(Linear, ResidualIntoAStridedOutputFromAStridedAddend) {
  const std::int64_t rows = 7, d_in = 9, d_out = 4;
  auto x = tensor_of({rows, d_in}, DType::f32, normals(rows * d_in, 27));
  auto w = tensor_of({d_out, d_in}, DType::f32, normals(d_out * d_in, 28));
  auto wide_r = tensor_of({rows, 2 * d_out}, DType::f32, normals(rows * 2 * d_out, 29));
  OwnedTensor wide_y({rows, 3 * d_out}, DType::f32, Device::cpu(), "test");
  fill_constant(wide_y, -7.0);
  const Tensor y = wide_y->narrow(1, d_out, d_out), r = wide_r->narrow(1, d_out, d_out);
  linear_forward_residual(y, x, w, r);
  OwnedTensor expected({rows, d_out}, DType::f32, Device::cpu(), "test");
  linear_forward(expected, x, w);
  residual_add(expected, r);
  const auto all = read_as_double(wide_y), want = read_as_double(expected);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < 3 * d_out; ++j) {
      const double got = all[i * 3 * d_out + j];
      if (j >= d_out && j < 2 * d_out)
        ASSERT_EQ(got, want[i * d_out + j - d_out]) << i << "," << j;
      else
        ASSERT_EQ(got, -7.0) << "outside the slice: " << i << "," << j;
    }
}

TEST(Linear, MalformedResidualCallsNameExpectedAndGiven) {
  auto x = test::zeros({2, 3, 5}), w = test::zeros({4, 5}), y = test::zeros({2, 3, 4});
  auto r_shape = test::zeros({2, 3, 5}), r16 = test::zeros({2, 3, 4}, DType::bf16);
  auto x16 = test::zeros({2, 3, 5}, DType::bf16), w16 = test::zeros({4, 5}, DType::bf16);
  auto y16 = test::zeros({2, 3, 4}, DType::bf16);
  test::expect_error([&] { linear_forward_residual(y, x, w, r_shape); }, ErrorKind::invalid_argument,
                     {"linear_forward_residual", "r", "expected [2, 3, 4]", "given [2, 3, 5]"});
  test::expect_error([&] { linear_forward_residual(y, x, w, r16); }, ErrorKind::invalid_argument,
                     {"linear_forward_residual", "r", "expected fp32", "given bf16"});
  test::expect_error([&] { linear_forward_residual(y16, x16, w16, y); }, ErrorKind::invalid_argument,
                     {"linear_forward_residual", "y", "expected fp32", "given bf16"});
  test::expect_error([&] { linear_forward_residual(y, x, w, test::cuda_view({2, 3, 4})); },
                     ErrorKind::invalid_argument, {"linear_forward_residual", "r", "expected cpu", "given cuda:0"});
  test::expect_error([&] { linear_forward_residual(y, x, w, Tensor()); }, ErrorKind::invalid_argument,
                     {"linear_forward_residual", "r is required"});
  test::expect_error([&] { linear_backward({.dw = w, .accumulate_dx = true}, y, x, w); },
                     ErrorKind::invalid_argument, {"linear_backward", "accumulate_dx", "needs dx"});
  test::expect_error([&] { linear_backward({.dx = y, .accumulate_dx = true}, y, x, w); },
                     ErrorKind::invalid_argument, {"dx", "expected [2, 3, 5]", "given [2, 3, 4]"});
}

TEST(Linear, MalformedCallsNameExpectedAndGiven) {
  auto x = test::zeros({2, 3, 5}), w = test::zeros({4, 5}), y = test::zeros({2, 3, 4});
  auto wrong_in = test::zeros({2, 3, 6}), wrong_out = test::zeros({2, 3, 5}), w3 = test::zeros({1, 4, 5});
  auto w16 = test::zeros({4, 5}, DType::bf16);
  test::expect_error([&] { linear_forward(y, wrong_in, w); }, ErrorKind::invalid_argument,
                     {"linear_forward", "d_in = 5", "given [2, 3, 6]"});
  test::expect_error([&] { linear_forward(wrong_out, x, w); }, ErrorKind::invalid_argument,
                     {"y", "expected [2, 3, 4]", "given [2, 3, 5]"});
  test::expect_error([&] { linear_forward(y, x, w3); }, ErrorKind::invalid_argument, {"w", "expected 2 dims", "given 3"});
  test::expect_error([&] { linear_forward(y, x, w16); }, ErrorKind::invalid_argument, {"fp32", "given bf16"});
  test::expect_error([&] { linear_backward({y, w}, y, x, w); }, ErrorKind::invalid_argument,
                     {"dx", "expected [2, 3, 5]", "given [2, 3, 4]"});
  test::expect_error([&] { linear_backward({x, w}, wrong_out, x, w); }, ErrorKind::invalid_argument,
                     {"dy", "expected [2, 3, 4]", "given [2, 3, 5]"});
}

}  // namespace
}  // namespace ft
