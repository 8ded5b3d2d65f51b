// lr_schedule.cpp — the cosine schedule with linear warm-up.
#include "optim/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace ft {

double learning_rate(const CosineSchedule& s, std::int64_t it) {
  FT_CHECK(s.warmup_iters >= 0, "learning_rate: warmup_iters must be >= 0, given ", s.warmup_iters);
  FT_CHECK(s.cycle_iters >= s.warmup_iters, "learning_rate: cycle_iters must be >= warmup_iters = ", s.warmup_iters,
           ", given ", s.cycle_iters);
  FT_CHECK(it >= 0, "learning_rate: the iteration must be >= 0, given ", it);
  if (it < s.warmup_iters) return static_cast<double>(it) / static_cast<double>(s.warmup_iters) * s.max_lr;
  if (it <= s.cycle_iters && s.cycle_iters > s.warmup_iters) {
    const double progress =
        static_cast<double>(it - s.warmup_iters) / static_cast<double>(s.cycle_iters - s.warmup_iters);
    return s.min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (s.max_lr - s.min_lr);
  }
  return s.min_lr;
}

}  // namespace ft
