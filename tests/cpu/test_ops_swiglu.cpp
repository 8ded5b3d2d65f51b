// test_ops_swiglu.cpp — SwiGLU elementwise forward against a double reference, backward against central
// finite differences, halves of a fused (rows, 2 d_ff) buffer, in-place gradients, bf16, the backward that
// recomputes h (bitwise the forward then the backward), bad calls.
#include <gtest/gtest.h>

#include "ops/swiglu.h"
#include "test_ops_util.h"

namespace ft {
namespace {

using test::expect_close;
using test::normals;
using test::tensor_of;

constexpr std::int64_t rows = 6, d_ff = 10;

double silu(double a) { return a / (1.0 + std::exp(-a)); }

std::vector<double> reference(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> h(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) h[i] = silu(a[i]) * b[i];
  return h;
}

TEST(SwiGlu, ForwardAndBackwardMatchReferenceAndFiniteDifferences) {
  const auto a = normals(rows * d_ff, 1, 2.0), b = normals(rows * d_ff, 2), g = normals(rows * d_ff, 3);
  auto at = tensor_of({2, 3, d_ff}, DType::f32, a), bt = tensor_of({2, 3, d_ff}, DType::f32, b);
  auto dh = tensor_of({2, 3, d_ff}, DType::f32, g);
  OwnedTensor h({2, 3, d_ff}, DType::f32, Device::cpu(), "test");
  swiglu_forward(h, at, bt);
  expect_close(read_as_double(h), reference(a, b), 1e-6, "h");
  OwnedTensor da({2, 3, d_ff}, DType::f32, Device::cpu(), "test"), db({2, 3, d_ff}, DType::f32, Device::cpu(), "test");
  swiglu_backward(da, db, dh, at, bt);
  expect_close(read_as_double(da),
               test::numeric_gradient([&](const std::vector<double>& as) { return test::dot(reference(as, b), g); }, a),
               1e-6, "da");
  expect_close(read_as_double(db),
               test::numeric_gradient([&](const std::vector<double>& bs) { return test::dot(reference(a, bs), g); }, b),
               1e-6, "db");

  // Gradients written over their inputs give the same values.
  swiglu_backward(at, bt, dh, at, bt);
  EXPECT_EQ(read_as_double(at), read_as_double(da));
  EXPECT_EQ(read_as_double(bt), read_as_double(db));
}

TEST(SwiGlu, HalvesOfAFusedBufferAndBf16) {
  const auto a = test::rounded(normals(rows * d_ff, 4), DType::bf16), b = test::rounded(normals(rows * d_ff, 5), DType::bf16);
  OwnedTensor fused({rows, 2 * d_ff}, DType::bf16, Device::cpu(), "test");  // (rows, [w1 x | w3 x])
  const Tensor av = fused->narrow(1, 0, d_ff), bv = fused->narrow(1, d_ff, d_ff);
  write_from_double(av, a);
  write_from_double(bv, b);
  OwnedTensor h({rows, d_ff}, DType::bf16, Device::cpu(), "test");
  swiglu_forward(h, av, bv);
  const auto expected = reference(a, b);
  const auto got = read_as_double(h);
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], expected[i], std::fabs(expected[i]) * 4e-3 + 1e-6) << i;
}

// The backward that recomputes h: bitwise the forward then the backward, gradients over their inputs, fp32 and bf16.
TEST(SwiGlu, RecomputeBackwardIsForwardThenBackwardBitwise) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(name_of(dtype));
    const auto a = test::rounded(normals(rows * d_ff, 6, 2.0), dtype);
    const auto b = test::rounded(normals(rows * d_ff, 7), dtype), g = test::rounded(normals(rows * d_ff, 8), dtype);
    auto a1 = tensor_of({rows, d_ff}, dtype, a), b1 = tensor_of({rows, d_ff}, dtype, b);
    auto a2 = tensor_of({rows, d_ff}, dtype, a), b2 = tensor_of({rows, d_ff}, dtype, b);
    auto dh = tensor_of({rows, d_ff}, dtype, g);
    OwnedTensor h1({rows, d_ff}, dtype, Device::cpu(), "test"), h2({rows, d_ff}, dtype, Device::cpu(), "test");
    swiglu_forward(h1, a1, b1);
    swiglu_backward(a1, b1, dh, a1, b1);
    swiglu_recompute_backward(h2, a2, b2, dh, a2, b2);
    EXPECT_EQ(read_as_double(h2), read_as_double(h1));
    EXPECT_EQ(read_as_double(a2), read_as_double(a1));
    EXPECT_EQ(read_as_double(b2), read_as_double(b1));
  }
}

TEST(SwiGlu, MalformedCallsNameExpectedAndGiven) {
  auto a = test::zeros({rows, d_ff}), b_short = test::zeros({rows, d_ff - 1}), h16 = test::zeros({rows, d_ff}, DType::bf16);
  test::expect_error([&] { swiglu_forward(a, a, b_short); }, ErrorKind::invalid_argument,
                     {"swiglu_forward", "b", "expected [6, 10]", "given [6, 9]"});
  test::expect_error([&] { swiglu_forward(h16, a, a); }, ErrorKind::invalid_argument, {"h", "expected fp32", "given bf16"});
  test::expect_error([&] { swiglu_backward(a, b_short, a, a, a); }, ErrorKind::invalid_argument,
                     {"swiglu_backward", "db", "given [6, 9]"});
  test::expect_error([&] { swiglu_recompute_backward(b_short, a, a, a, a, a); }, ErrorKind::invalid_argument,
                     {"swiglu_recompute_backward", "h", "expected [6, 10]", "given [6, 9]"});
}

}  // namespace
}  // namespace ft
