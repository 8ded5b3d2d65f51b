// lr_schedule.h — the cosine learning-rate schedule with linear warm-up (the reference
// get_lr_cosine_schedule), a host-side function of the iteration:
//   it < warmup_iters                    lr = it / warmup_iters * max_lr
//   warmup_iters <= it <= cycle_iters    lr = min_lr + (1 + cos(pi * (it - warmup) / (cycle - warmup))) / 2
//                                             * (max_lr - min_lr)
//   it > cycle_iters                     lr = min_lr
// With cycle_iters == warmup_iters there is no cosine phase: min_lr from warmup_iters on.
#pragma once

#include <cstdint>

namespace ft {

struct CosineSchedule {
  double max_lr = 1e-3;
  double min_lr = 1e-4;
  std::int64_t warmup_iters = 0;  // >= 0
  std::int64_t cycle_iters = 0;   // >= warmup_iters: the iteration at which the cosine reaches min_lr
};

// The learning rate at iteration it (>= 0). Throws ft::Error for a malformed schedule or it < 0.
double learning_rate(const CosineSchedule& schedule, std::int64_t it);

}  // namespace ft
