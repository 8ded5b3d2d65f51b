// test_bench_timing.cpp — bench statistics and the CPU timing loop.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "bench/statistics.h"
#include "bench/timer.h"
#include "core/error.h"

namespace ft {
namespace {

TEST(Statistics, OddAndEvenCounts) {
  Summary s = summarize({3, 1, 2});
  EXPECT_EQ(s.count, 3);
  EXPECT_DOUBLE_EQ(s.median, 2);
  EXPECT_DOUBLE_EQ(s.mean, 2);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 3);
  EXPECT_DOUBLE_EQ(s.stddev, 1);  // sample standard deviation
  Summary e = summarize({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(e.median, 2.5);
  EXPECT_DOUBLE_EQ(summarize({5}).stddev, 0);
  EXPECT_THROW(summarize({}), Error);
}

TEST(Timer, CpuRunsWarmupThenTimedRepeats) {
  int calls = 0;
  auto samples = time_repeats(Device::cpu(), Stream(), [&] {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }, {.warmup = 2, .repeats = 3});
  EXPECT_EQ(calls, 5);
  ASSERT_EQ(samples.size(), 3u);
  for (double ms : samples) EXPECT_GE(ms, 1.9);
  EXPECT_THROW(time_repeats(Device::cpu(), Stream(), [] {}, {.warmup = 0, .repeats = 0}), Error);
}

}  // namespace
}  // namespace ft
