// expect_close.h — the comparison the attention tests share: element-wise closeness relative to the
// largest reference magnitude (floored at 1), exact agreement of infinities, and no NaN.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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

}  // namespace ft::testing_util
