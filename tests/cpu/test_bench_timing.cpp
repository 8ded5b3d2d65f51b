// test_bench_timing.cpp — bench statistics, the CPU timing loop and report tables.
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

#include "bench/report_table.h"

namespace ft {
namespace {

TEST(ReportTable, MarkdownAndCsv) {
  ReportTable table({"impl", "N", "fwd_ms"});
  table.add_row({"flash", "1024", fixed(0.12345, 2)});
  table.add_row({"naive, fp32", "16384", "OOM"});
  EXPECT_EQ(table.markdown(),
            "| impl        | N     | fwd_ms |\n"
            "|-------------|-------|--------|\n"
            "| flash       | 1024  | 0.12   |\n"
            "| naive, fp32 | 16384 | OOM    |\n");
  EXPECT_EQ(table.csv(), "impl,N,fwd_ms\nflash,1024,0.12\n\"naive, fp32\",16384,OOM\n");
  EXPECT_THROW(table.add_row({"x"}), Error);
}

}  // namespace
}  // namespace ft
