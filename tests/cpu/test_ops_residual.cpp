// test_ops_residual.cpp — the residual add with fp32 and bf16 branch outputs, a strided stream, and
// malformed calls.
#include <gtest/gtest.h>

#include "ops/residual.h"
#include "test_ops_util.h"

namespace ft {
namespace {

TEST(Residual, AddsFp32AndBf16Branches) {
  const auto x = test::normals(24, 1), y = test::rounded(test::normals(24, 2), DType::bf16);
  for (DType dtype : {DType::f32, DType::bf16}) {
    auto xt = test::tensor_of({2, 3, 4}, DType::f32, x), yt = test::tensor_of({2, 3, 4}, dtype, y);
    residual_add(xt, yt);
    std::vector<double> expected(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) expected[i] = static_cast<float>(x[i] + y[i]);
    EXPECT_EQ(read_as_double(xt), expected) << name_of(dtype);
  }
}

TEST(Residual, StridedRowsAndMalformedCalls) {
  OwnedTensor wide({3, 8}, DType::f32, Device::cpu(), "test");
  fill_constant(wide, 1.0);
  auto y = test::tensor_of({3, 4}, DType::f32, std::vector<double>(12, 2.0));
  residual_add(wide->narrow(1, 4, 4), y);
  const auto all = read_as_double(wide);
  for (std::int64_t i = 0; i < 24; ++i) EXPECT_EQ(all[i], i % 8 < 4 ? 1.0 : 3.0) << i;
  auto short_y = test::zeros({3, 3});
  test::expect_error([&] { residual_add(y, short_y); }, ErrorKind::invalid_argument,
                     {"residual_add", "expected [3, 4]", "given [3, 3]"});
  auto x16 = test::zeros({3, 4}, DType::bf16);
  test::expect_error([&] { residual_add(x16, y); }, ErrorKind::invalid_argument, {"x", "expected fp32", "given bf16"});
}

}  // namespace
}  // namespace ft
