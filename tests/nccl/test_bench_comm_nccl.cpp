// test_bench_comm_nccl.cpp — `flashtrain bench comm --backend nccl` without the binary, 2 ranks under mpirun
// with a GPU each: rows over the NCCL communicator (backend nccl, world 2) whose bandwidths follow from
// their times and agree on both ranks, and rank 0 alone printing the table and writing the results
// document, which names the GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_folder.h"
#include "flashtrain/comm_bench.h"
#include "nccl/nccl_test_util.h"

namespace ft::test {
namespace {

using cli::CommBenchConfig;
using cli::CommBenchRow;

// Every rank's copy of `values` (n each), over MPI: result[r] is rank r's.
std::vector<std::vector<float>> gather_all(std::vector<float> values) {
  const auto n = static_cast<std::int64_t>(values.size());
  std::vector<float> all(static_cast<std::size_t>(2 * n));  // (2, n)
  host().all_gather(Tensor(all.data(), DType::f32, Device::cpu(), {2 * n}),
                    Tensor(values.data(), DType::f32, Device::cpu(), {n}))
      ->wait();
  return {std::vector<float>(all.begin(), all.begin() + n), std::vector<float>(all.begin() + n, all.end())};
}

TEST(BenchCommNccl, RowsAreConsistentAndTheSameOnEveryRank) {
  const CommBenchConfig config{.sizes = {4096, 4 << 20}, .warmup = 2, .iters = 5, .device = gpu()};
  const std::vector<CommBenchRow> rows = cli::run_comm_bench(config, context().device_communicator(),
                                                                context().host_communicator(), nullptr);
  ASSERT_EQ(rows.size(), 2u);
  std::vector<float> times;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const CommBenchRow& r = rows[i];
    EXPECT_EQ(r.world, 2);
    EXPECT_EQ(r.backend, "nccl");
    EXPECT_EQ(r.bytes, config.sizes[i]);
    EXPECT_GT(r.time_ms, 0);
    EXPECT_LE(r.min_rank_ms, r.time_ms);
    ASSERT_TRUE(r.algbw_gbps && r.busbw_gbps);
    EXPECT_DOUBLE_EQ(*r.algbw_gbps, static_cast<double>(r.bytes) / (r.time_ms / 1e3) / 1e9);
    EXPECT_DOUBLE_EQ(*r.busbw_gbps, *r.algbw_gbps);  // 2 ranks: busbw = algbw * 2 (2 - 1) / 2
    times.push_back(static_cast<float>(r.time_ms));
    times.push_back(static_cast<float>(r.min_rank_ms));
  }
  const std::vector<std::vector<float>> all = gather_all(times);
  EXPECT_EQ(all[0], all[1]) << "every rank reports the gathered max/min of the ranks' medians";
}

TEST(BenchCommNccl, RankZeroAlonePrintsAndWritesTheDocument) {
  testing_util::TempFolder folder;  // one per rank (named by process id)
  const std::string path = folder.file("comm.json");
  std::ostringstream out;
  cli::bench_comm({.sizes = {1024, 1 << 20}, .warmup = 1, .iters = 3, .device = gpu()},
                  context().device_communicator(), context().host_communicator(), false, path, out);
  if (context().rank() != 0) {
    EXPECT_EQ(out.str(), "");
    EXPECT_FALSE(std::filesystem::exists(path));
    return;
  }
  EXPECT_NE(out.str().find("backend nccl, a buffer on each rank's GPU"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("| 2     | nccl    | 1 MiB"), std::string::npos) << out.str();
  std::ifstream in(path);
  ASSERT_TRUE(in.good());
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["benchmark"], "comm");
  EXPECT_EQ(doc["device"], describe_device(gpu()));
  EXPECT_EQ(doc["config"]["backend"], "nccl");
  EXPECT_EQ(doc["config"]["world"], 2);
  ASSERT_EQ(doc["rows"].size(), 2u);
  for (const auto& row : doc["rows"]) {
    EXPECT_EQ(row["world"], 2);
    EXPECT_EQ(row["backend"], "nccl");
    for (const char* key : {"time_ms", "min_rank_ms", "algbw_gbps", "busbw_gbps"})
      EXPECT_TRUE(row[key].is_number()) << key;
  }
  EXPECT_EQ(doc["rows"][1]["bytes"], 1 << 20);
}

}  // namespace
}  // namespace ft::test
