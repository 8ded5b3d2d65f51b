// expect_close.h — the comparisons the tests share: element-wise closeness relative to the largest
// reference magnitude, floored at 1 with exact agreement of infinities (the attention tests), or unfloored
// (the GPU op and model tests); no NaN in either.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/tensor_io.h"

namespace ft::testing_util {

// Fails unless max |actual - expected| <= tol * max(max |expected|, 1), infinities match exactly and
// actual holds no NaN. (Inputs are unit normals; the floor of 1 covers outputs that cancel to 0.)
inline void expect_close(const std::vector<double>& actual, const std::vector<double>& expected, double tol,
                         const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double top = 0, worst = 0;
  std::size_t worst_at = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_FALSE(std::isnan(actual[i])) << what << ": NaN at " << i;
    if (std::isinf(expected[i]) || std::isinf(actual[i])) {
      ASSERT_EQ(actual[i], expected[i]) << what << ": infinity mismatch at " << i;
      continue;
    }
    top = std::max(top, std::fabs(expected[i]));
    const double diff = std::fabs(actual[i] - expected[i]);
    if (diff > worst) worst = diff, worst_at = i;
  }
  EXPECT_LE(worst, tol * std::max(top, 1.0))
      << what << ": max |diff| " << worst << " at " << worst_at << " (actual " << actual[worst_at] << ", expected "
      << expected[worst_at] << "), max |expected| " << top << ", relative tolerance " << tol;
}

// Fails unless max |actual - expected| <= tol * max |expected|, the reference is not all zeros and actual
// holds no NaN, naming the worst element. (For outputs of any scale: logits, gradients, normalised rows.)
inline void expect_close_to_largest(const std::vector<double>& actual, const std::vector<double>& expected,
                                    double tol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double top = 0, worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    ASSERT_FALSE(std::isnan(actual[i])) << what << ": NaN at " << i;
    top = std::max(top, std::fabs(expected[i]));
    const double diff = std::fabs(actual[i] - expected[i]);
    if (diff > worst) worst = diff, at = i;
  }
  ASSERT_GT(top, 0.0) << what << ": the reference is all zeros";
  EXPECT_LE(worst, tol * top) << what << ": max |diff| " << worst << " at " << at << " (got " << actual[at]
                              << ", expected " << expected[at] << "), max |expected| " << top << ", tolerance " << tol;
}

inline void expect_close_to_largest(const Tensor& actual, const Tensor& expected, double tol, const std::string& what) {
  expect_close_to_largest(read_as_double(actual), read_as_double(expected), tol, what);
}

}  // namespace ft::testing_util
