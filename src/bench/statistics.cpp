// statistics.cpp — summarize(): order statistics and moments of timing samples.
#include "bench/statistics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace ft {

Summary summarize(const std::vector<double>& samples) {
  FT_CHECK(!samples.empty(), "summarize: expected at least one sample, given none");
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  Summary s;
  s.count = static_cast<int>(sorted.size());
  s.min = sorted.front();
  s.max = sorted.back();
  const std::size_t mid = sorted.size() / 2;
  s.median = sorted.size() % 2 ? sorted[mid] : 0.5 * (sorted[mid - 1] + sorted[mid]);
  s.mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / s.count;
  if (s.count > 1) {
    double squares = 0;
    for (double x : sorted) squares += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(squares / (s.count - 1));
  }
  return s;
}

}  // namespace ft
