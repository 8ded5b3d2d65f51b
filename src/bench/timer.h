// timer.h — timing of repeated work: CUDA events on the GPU (optionally flushing L2 between
// repeats) and the steady wall clock on the CPU. Returns one sample per repeat in milliseconds.
#pragma once

#include <functional>
#include <vector>

#include "core/device.h"
#include "core/stream.h"

namespace ft {

struct TimingOptions {
  int warmup = 3;         // untimed runs first
  int repeats = 10;       // timed runs
  bool flush_l2 = false;  // GPU: overwrite a buffer larger than L2 before each timed run
};

// Runs `work` warmup + repeats times on `device`, timing each repeat: on a CUDA device with events
// recorded on `stream` around the work (the work must enqueue onto that stream), on the CPU with the
// wall clock. Synchronizes after each repeat.
std::vector<double> time_repeats(Device device, const Stream& stream, const std::function<void()>& work,
                                 const TimingOptions& options);

}  // namespace ft
