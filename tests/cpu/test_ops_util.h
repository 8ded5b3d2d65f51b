// test_ops_util.h — helpers shared by the op tests (test_ops_*.cpp): seeded fp32-representable values,
// tensors filled from host doubles, central finite differences in double, closeness checks, error
// expectations, and CUDA-device views for the device-gate tests (never dereferenced).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor_io.h"

namespace ft::test {

// n normal(0, scale) draws, each rounded to fp32 so a tensor holds them exactly.
inline std::vector<double> normals(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> x(n);
  for (auto& v : x) v = static_cast<float>(normal(gen));
  return x;
}

// The values rounded as a tensor of dtype stores them.
inline std::vector<double> rounded(const std::vector<double>& x, DType dtype) {
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto f = static_cast<float>(x[i]);
    out[i] = dtype == DType::bf16 ? to_float(to_bf16(f)) : dtype == DType::f16 ? to_float(to_f16(f)) : f;
  }
  return out;
}

inline OwnedTensor tensor_of(Shape shape, DType dtype, const std::vector<double>& values) {
  OwnedTensor t(std::move(shape), dtype, Device::cpu(), "test");
  write_from_double(t, values);
  return t;
}

inline OwnedTensor zeros(Shape shape, DType dtype = DType::f32) {
  OwnedTensor t(std::move(shape), dtype, Device::cpu(), "test");
  fill_constant(t, 0.0);
  return t;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of f at x, in double: grad[i] = (f(x + h e_i) - f(x - h e_i)) / (2 h).
inline std::vector<double> numeric_gradient(const std::function<double(const std::vector<double>&)>& f,
                                            std::vector<double> x, double h = 1e-6) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = f(x);
    x[i] = keep - h;
    const double down = f(x);
    x[i] = keep;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

// Fails unless |actual - expected| <= tol * max(1, max |expected|) everywhere.
inline void expect_close(const std::vector<double>& actual, const std::vector<double>& expected, double tol,
                         const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double top = 1;
  for (double e : expected) top = std::max(top, std::fabs(e));
  for (std::size_t i = 0; i < actual.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], tol * top) << what << "[" << i << "]";
}

// Runs fn, expecting ft::Error of kind whose message contains every one of parts.
inline void expect_error(const std::function<void()>& fn, ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& p : parts) EXPECT_NE(e.message().find(p), std::string::npos) << "missing '" << p << "' in: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected ft::Error (" << to_string(kind) << ") was not thrown";
}

// A view that claims to live on cuda:0; the device gate must reject it before touching its data.
inline Tensor cuda_view(Shape shape, DType dtype = DType::f32) {
  static float sentinel[1];
  return Tensor(sentinel, dtype, Device::cuda(0), std::move(shape));
}

}  // namespace ft::test
