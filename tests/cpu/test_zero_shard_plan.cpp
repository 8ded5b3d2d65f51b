// test_zero_shard_plan.cpp — the ZeRO-1 shard assignment (dist/zero_shard_plan.h): contiguous equal ranges
// that cover the flat buffer, every grouped element owned exactly once, state balanced across ranks, groups
// added later leaving earlier runs in place, and the errors for malformed groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/zero_shard_plan.h"

namespace ft {
namespace {

// Slices of the given sizes packed back to back from offset 0 (a gap of `gap` elements after each).
std::vector<DdpParameter> packed(const std::vector<std::int64_t>& sizes, std::int64_t gap = 0) {
  std::vector<DdpParameter> ps;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    ps.push_back({"p" + std::to_string(i), offset, sizes[i], true});
    offset += sizes[i] + gap;
  }
  return ps;
}

std::int64_t total(const std::vector<DdpParameter>& ps) { return ps.back().offset + ps.back().numel; }

// (numel) how many (rank, group) runs hold each element; checks each run lies in its rank's range, runs
// of one rank and group ascend without touching (maximal) and their state offsets follow one another.
std::vector<int> coverage(const ShardPlan& plan) {
  std::vector<int> count(static_cast<std::size_t>(plan.numel()), 0);
  for (int r = 0; r < plan.world_size(); ++r) {
    const ShardRange owned = plan.range(r);
    for (std::size_t g = 0; g < plan.num_groups(); ++g) {
      std::int64_t state = 0, end = -1;
      for (const ShardRun& run : plan.runs(r, g)) {
        EXPECT_GT(run.numel, 0);
        EXPECT_GE(run.offset, owned.offset);
        EXPECT_LE(run.offset + run.numel, owned.offset + owned.numel);
        EXPECT_GT(run.offset, end) << "rank " << r << " group " << g << ": runs must ascend and not touch";
        EXPECT_EQ(run.state_offset, state);
        for (std::int64_t e = run.offset; e < run.offset + run.numel; ++e) ++count[e];
        state += run.numel;
        end = run.offset + run.numel;
      }
      EXPECT_EQ(plan.state_numel(r, g), state);
    }
  }
  return count;
}

TEST(ZeroShardPlan, RangesAreContiguousEqualAndCoverTheBuffer) {
  for (std::int64_t numel : {0, 1, 5, 79, 100, 1001}) {
    for (int world : {1, 2, 3, 4, 7}) {
      SCOPED_TRACE("numel " + std::to_string(numel) + ", world " + std::to_string(world));
      const ShardPlan plan({}, numel, world);
      EXPECT_EQ(plan.block_numel(), numel / world);
      EXPECT_EQ(plan.prefix().offset, 0);
      EXPECT_EQ(plan.prefix().numel, numel / world * world);
      EXPECT_EQ(plan.tail().offset, plan.prefix().numel);
      EXPECT_EQ(plan.tail().numel, numel % world);
      std::int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const ShardRange range = plan.range(r);
        EXPECT_EQ(range.offset, next);
        EXPECT_EQ(range.numel, plan.block_numel() + (r == world - 1 ? numel % world : 0));
        for (std::int64_t e = range.offset; e < range.offset + range.numel; ++e) ASSERT_EQ(plan.owner(e), r);
        next += range.numel;
      }
      EXPECT_EQ(next, numel);
    }
  }
}

TEST(ZeroShardPlan, EveryGroupedElementIsOwnedOnceAndStateIsBalanced) {
  // Uneven sizes, one larger than a whole range, so parameters straddle range boundaries.
  const std::vector<DdpParameter> ps = packed({36, 36, 6, 1, 250, 3, 17});
  for (int world : {1, 2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    ShardPlan plan(ps, total(ps), world);
    plan.add_group({0, 2, 4, 6});  // weights
    plan.add_group({5, 3, 1});     // the rest, listed out of order
    const std::vector<int> count = coverage(plan);
    EXPECT_TRUE(std::all_of(count.begin(), count.end(), [](int c) { return c == 1; }));
    std::int64_t least = plan.numel(), most = 0;
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(plan.state_numel(r), plan.range(r).numel);  // everything grouped: state = range
      least = std::min(least, plan.state_numel(r));
      most = std::max(most, plan.state_numel(r));
    }
    EXPECT_LE(most - least, world - 1);
  }
}

TEST(ZeroShardPlan, SplitsAParameterAtRangeBoundariesAndMergesAdjacentParameters) {
  const std::vector<DdpParameter> ps = packed({4, 6});  // one run of 10 elements
  ShardPlan plan(ps, 10, 3);                              // ranges [0,3) [3,6) [6,10)
  plan.add_group({0, 1});
  ASSERT_EQ(plan.runs(0, 0).size(), 1u);
  ASSERT_EQ(plan.runs(1, 0).size(), 1u);  // [3,4) of p0 and [4,6) of p1 merged
  ASSERT_EQ(plan.runs(2, 0).size(), 1u);
  EXPECT_EQ(plan.runs(1, 0)[0].offset, 3);
  EXPECT_EQ(plan.runs(1, 0)[0].numel, 3);
  EXPECT_EQ(plan.runs(2, 0)[0].offset, 6);
  EXPECT_EQ(plan.runs(2, 0)[0].numel, 4);
}

TEST(ZeroShardPlan, GapsAndUngroupedParametersHoldNoState) {
  const std::vector<DdpParameter> ps = packed({10, 10, 10, 10}, 3);  // gaps of 3 between parameters
  ShardPlan plan(ps, total(ps), 2);
  plan.add_group({0, 2});
  const std::vector<int> count = coverage(plan);
  for (std::int64_t e = 0; e < plan.numel(); ++e) {
    const bool grouped = (e >= ps[0].offset && e < ps[0].offset + 10) || (e >= ps[2].offset && e < ps[2].offset + 10);
    EXPECT_EQ(count[e], grouped ? 1 : 0) << "element " << e;
  }
  EXPECT_EQ(plan.state_numel(0) + plan.state_numel(1), 20);
}

TEST(ZeroShardPlan, AGroupAddedLaterKeepsEarlierRunsAndFillsTheRest) {
  const std::vector<DdpParameter> ps = packed({36, 36, 6, 1});
  ShardPlan plan(ps, total(ps), 2);
  plan.add_group({1, 3});
  std::vector<std::vector<ShardRun>> before;  // (world) group 0's runs
  for (int r = 0; r < 2; ++r) before.push_back(plan.runs(r, 0));
  const std::vector<int> partial = coverage(plan);
  EXPECT_EQ(std::count(partial.begin(), partial.end(), 1), 37);
  EXPECT_EQ(plan.add_group({0, 2}), 1u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(plan.runs(r, 0).size(), before[r].size());
    for (std::size_t i = 0; i < before[r].size(); ++i) {
      EXPECT_EQ(plan.runs(r, 0)[i].offset, before[r][i].offset);
      EXPECT_EQ(plan.runs(r, 0)[i].numel, before[r][i].numel);
      EXPECT_EQ(plan.runs(r, 0)[i].state_offset, before[r][i].state_offset);
    }
  }
  const std::vector<int> count = coverage(plan);
  EXPECT_TRUE(std::all_of(count.begin(), count.end(), [](int c) { return c == 1; }));
  EXPECT_EQ(plan.state_numel(0), plan.range(0).numel);
  EXPECT_EQ(plan.state_numel(1), plan.range(1).numel);
}

TEST(ZeroShardPlan, RejectsMalformedGroupsAndParameters) {
  std::vector<DdpParameter> ps = packed({4, 4, 4});
  ps[2].requires_grad = false;
  ShardPlan plan(ps, 12, 2);
  EXPECT_THROW(plan.add_group({}), Error);
  EXPECT_THROW(plan.add_group({3}), Error);     // no such parameter
  EXPECT_THROW(plan.add_group({2}), Error);     // frozen
  EXPECT_THROW(plan.add_group({0, 0}), Error);  // listed twice
  plan.add_group({0});
  EXPECT_THROW(plan.add_group({1, 0}), Error);  // already in group 0
  EXPECT_EQ(plan.num_groups(), 1u);
  EXPECT_EQ(plan.add_group({1}), 1u);  // the failed calls left nothing behind
  EXPECT_THROW(plan.range(2), Error);
  EXPECT_THROW(plan.owner(12), Error);
  EXPECT_THROW(ShardPlan(packed({4, 4}), 7, 2), Error);                                     // outside the buffer
  EXPECT_THROW(ShardPlan({{"a", 0, 4, true}, {"b", 3, 4, true}}, 8, 2), Error);            // overlap
  EXPECT_THROW(ShardPlan(packed({4}), 4, 0), Error);                                        // no ranks
}

}  // namespace
}  // namespace ft
