// value_compare.h — comparisons of attention outputs read as doubles (read_as_double), shared by the GPU
// attention tests: rounding to a dtype, bitwise equality, the largest difference and the largest magnitude,
// and the run-to-run comparison of two backward calls.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace ft::testing_util {

// x rounded to dtype (the value a tensor of that dtype holds).
inline double round_to(DType dtype, double x) {
  switch (dtype) {
    case DType::bf16: return to_float(to_bf16(static_cast<float>(x)));
    case DType::f16: return to_float(to_f16(static_cast<float>(x)));
    case DType::f32: return static_cast<float>(x);
  }
  return x;
}

inline bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// max |a - b|; equal infinities count as 0, NaN or an unmatched infinity as +inf.
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (a.size() != b.size()) return inf;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    const double diff = std::abs(a[i] - b[i]);
    worst = std::isnan(diff) ? inf : std::max(worst, diff);
  }
  return worst;
}

// max |x| over the finite values.
inline double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a)
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return m;
}

// Every output of a forward + backward call, in logical order.
struct Outputs {
  std::vector<double> o, lse, dq, dk, dv, dsinks;
};

// Whether two backward runs gave bit-identical dQ, and bit-identical dK, dV and dsinks.
struct RunToRun {
  bool dq_identical = false, rest_identical = false;
};

// Compares the gradients of two backward runs into repeat and moves the first run's into out.
inline void keep_first_backward(Outputs (&runs)[2], RunToRun* repeat, Outputs& out) {
  repeat->dq_identical = same_bits(runs[0].dq, runs[1].dq);
  repeat->rest_identical = same_bits(runs[0].dk, runs[1].dk) && same_bits(runs[0].dv, runs[1].dv) &&
                           same_bits(runs[0].dsinks, runs[1].dsinks);
  out.dq = std::move(runs[0].dq);
  out.dk = std::move(runs[0].dk);
  out.dv = std::move(runs[0].dv);
  out.dsinks = std::move(runs[0].dsinks);
}

}  // namespace ft::testing_util
