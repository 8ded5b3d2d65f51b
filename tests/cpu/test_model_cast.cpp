// test_model_cast.cpp — the cast and fill ops the model's mixed precision uses (ops/cast.h): fp32 -> bf16
// / fp16 rounds to nearest even as half.h does, widening is exact, fill writes every element, and
// malformed calls or CUDA tensors (no CUDA implementation yet) give clear errors.
#include <gtest/gtest.h>

#include "ops/cast.h"
#include "test_ops_util.h"

namespace ft {
namespace {

TEST(Cast, NarrowsWithRoundToNearestEvenAndWidensExactly) {
  auto values = test::normals(1000, 3, 10.0);
  values[0] = 1.0 + 1.0 / 256;  // a bf16 tie: rounds to even (1.0)
  values[1] = 1.0 + 3.0 / 256;  // a bf16 tie: rounds to even (1 + 4/256)
  values[2] = 60000.5;          // large, finite in both
  const auto src = test::tensor_of({10, 100}, DType::f32, values);
  for (DType narrow : {DType::bf16, DType::f16}) {
    auto dst = test::zeros({10, 100}, narrow);
    cast(dst, src);
    const auto got = read_as_double(dst);
    EXPECT_EQ(got, test::rounded(values, narrow)) << name_of(narrow);
    auto back = test::zeros({10, 100}, DType::f32);
    cast(back, dst);
    EXPECT_EQ(read_as_double(back), got) << name_of(narrow);
  }
  auto dst = test::zeros({10, 100}, DType::bf16);
  cast(dst, src);
  EXPECT_EQ(read_as_double(dst)[0], 1.0);
  EXPECT_EQ(read_as_double(dst)[1], 1.0 + 4.0 / 256);
}

TEST(Fill, WritesEveryElement) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    auto t = test::tensor_of({3, 7}, dtype, test::normals(21, 4));
    fill(t, 0.0);
    EXPECT_EQ(read_as_double(t), std::vector<double>(21, 0.0));
    fill(t, 1.5);
    EXPECT_EQ(read_as_double(t), std::vector<double>(21, 1.5));
  }
}

TEST(Cast, MalformedCallsGiveClearErrors) {
  auto src = test::zeros({4, 6});
  auto wrong = test::zeros({4, 5}, DType::bf16);
  test::expect_error([&] { cast(wrong, src); }, ErrorKind::invalid_argument, {"cast", "dst", "[4, 6]", "[4, 5]"});
  auto wide = test::zeros({4, 12}, DType::bf16);
  const Tensor strided = wide->narrow(1, 0, 6);
  test::expect_error([&] { cast(strided, src); }, ErrorKind::invalid_argument, {"cast", "dst", "contiguous"});
  test::expect_error([&] { cast(test::cuda_view({4, 6}, DType::bf16), src); }, ErrorKind::invalid_argument,
                     {"cast", "dst", "wrong device", "expected cpu", "given cuda:0"});
}

}  // namespace
}  // namespace ft
