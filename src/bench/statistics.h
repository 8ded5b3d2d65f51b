// statistics.h — summary statistics of repeated timings: mean, sample standard deviation, min,
// median, max.
#pragma once

#include <vector>

namespace ft {

struct Summary {
  int count = 0;
  double mean = 0, stddev = 0, min = 0, median = 0, max = 0;
};

// Throws ft::Error when samples is empty.
Summary summarize(const std::vector<double>& samples);

}  // namespace ft
