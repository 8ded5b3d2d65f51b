// test_core.cpp — core: dtypes, devices, tensor views, half conversions, allocator statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/allocator.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor_io.h"

namespace ft {
namespace {

TEST(DType, SizesNamesAndParsing) {
  EXPECT_EQ(size_of(DType::f32), 4u);
  EXPECT_EQ(size_of(DType::bf16), 2u);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_STREQ(name_of(DType::f32), "fp32");
  try {
    parse_dtype("int8");
    FAIL() << "int8 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(e.message().find("int8"), std::string::npos);
    EXPECT_NE(e.message().find("expected one of fp32, fp16, bf16"), std::string::npos);
  }
}

TEST(Device, Parsing) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(1).to_string(), "cuda:1");
  EXPECT_THROW(parse_device("cuda:x"), Error);
  EXPECT_THROW(parse_device("tpu"), Error);
}

TEST(Error, NamesFileAndLine) {
  try {
    FT_CHECK(1 + 1 == 3, "expected 3, given ", 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "expected 3, given 2");
    EXPECT_NE(std::string(e.what()).find("test_core.cpp:"), std::string::npos);
    EXPECT_GT(e.line(), 0);
  }
}

TEST(Tensor, StridesAndViews) {
  float data[2 * 3 * 4];
  Tensor t(data, DType::f32, Device::cpu(), {2, 3, 4});
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 24);
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2, 4}));
  EXPECT_EQ(tt.strides(), (Shape{4, 12, 1}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_THROW(tt.reshape({24}), Error);
  EXPECT_EQ(t.reshape({6, 4}).shape(), (Shape{6, 4}));
  Tensor s = t.select(1, 2);
  EXPECT_EQ(s.shape(), (Shape{2, 4}));
  EXPECT_EQ(s.data(), static_cast<void*>(data + 8));
  Tensor n = t.narrow(2, 1, 2);
  EXPECT_EQ(n.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(n.span_bytes(), static_cast<std::size_t>((12 + 8 + 1 + 1) * 4));
  EXPECT_EQ(t.permute({2, 0, 1}).shape(), (Shape{4, 2, 3}));
  EXPECT_THROW(t.permute({0, 0, 1}), Error);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_THROW(t.size(3), Error);
  EXPECT_EQ(tt.describe(), "fp32[3, 2, 4] strides [4, 12, 1] on cpu");
}

TEST(Half, Bf16RoundTripAndRounding) {
  for (float x : {0.0f, 1.0f, -2.5f, 3.140625f, 1e-30f, 65504.0f, -1e30f}) {
    float y = to_float(to_bf16(x));
    EXPECT_NEAR(y, x, std::fabs(x) * (1.0f / 128));
  }
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(to_float(to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(to_float(to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(to_float(to_bf16(std::numeric_limits<float>::infinity()))));
}

TEST(Half, F16RoundTripAndRounding) {
  for (float x : {0.0f, 1.0f, -2.5f, 0.333251953125f, 65504.0f, 6.103515625e-05f, 5.9604644775390625e-08f}) {
    EXPECT_EQ(to_float(to_f16(x)), x) << x;  // exactly representable values survive
  }
  EXPECT_EQ(to_float(to_f16(1.0f + 1.0f / 2048)), 1.0f);            // tie to even
  EXPECT_EQ(to_float(to_f16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie to even (up)
  EXPECT_TRUE(std::isinf(to_float(to_f16(70000.0f))));
  EXPECT_EQ(to_float(to_f16(1e-9f)), 0.0f);
  EXPECT_EQ(to_float(to_f16(-3e-8f)), -5.9604644775390625e-08f);  // rounds to the smallest subnormal
  EXPECT_TRUE(std::isnan(to_float(to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Allocator, CountsCurrentAndPeakAndRecordsTimeline) {
  Allocator& a = Allocator::instance();
  const auto before = a.stats(Device::cpu());
  a.reset_peak(Device::cpu());
  a.start_recording();
  a.set_phase("forward");
  {
    Buffer x(1000, Device::cpu(), "x");
    {
      Buffer y(500, Device::cpu(), "y");
      EXPECT_EQ(a.stats(Device::cpu()).current_bytes, before.current_bytes + 1500);
    }
    EXPECT_EQ(a.stats(Device::cpu()).current_bytes, before.current_bytes + 1000);
  }
  const auto events = a.stop_recording();
  a.set_phase("init");
  const auto after = a.stats(Device::cpu());
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_EQ(after.peak_bytes, before.current_bytes + 1500);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].tag, "x");
  EXPECT_EQ(events[0].bytes, 1000);
  EXPECT_EQ(events[1].tag, "y");
  EXPECT_EQ(events[2].bytes, -500);
  EXPECT_EQ(events[3].bytes, -1000);
  EXPECT_EQ(events[3].phase, "forward");
  EXPECT_LE(events[0].time_ms, events[3].time_ms);
}

TEST(TensorIo, StridedReadWriteCopyAndFill) {
  OwnedTensor a({2, 3}, DType::bf16, Device::cpu(), "a");
  write_from_double(a, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(read_as_double(a->transpose(0, 1)), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  OwnedTensor b({3, 2}, DType::bf16, Device::cpu(), "b");
  copy(b, a->transpose(0, 1));
  EXPECT_EQ(read_as_double(b), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  OwnedTensor c({3, 2}, DType::f32, Device::cpu(), "c");
  EXPECT_THROW(copy(c, b), Error);
  fill_normal(c, 7);
  OwnedTensor d({3, 2}, DType::f32, Device::cpu(), "d");
  fill_normal(d, 7);
  EXPECT_EQ(read_as_double(c), read_as_double(d));
  fill_constant(d, 2.5);
  EXPECT_EQ(read_as_double(d), std::vector<double>(6, 2.5));
}

TEST(Buffer, CudaWithoutCudaBuildIsAClearError) {
  if (FT_HAS_CUDA) GTEST_SKIP() << "CUDA build";
  try {
    Buffer b(16, Device::cuda(0), "x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(e.message().find("no CUDA"), std::string::npos);
  }
}

}  // namespace
}  // namespace ft
