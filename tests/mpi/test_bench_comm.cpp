// test_bench_comm.cpp — `flashtrain bench comm` without the binary, 2 ranks under mpirun: size parsing, rows
// whose bandwidths follow from their times and agree on both ranks, and rank 0 alone printing the table and
// writing the results document.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_folder.h"
#include "core/error.h"
#include "flashtrain/comm_bench.h"
#include "mpi/mpi_test_util.h"

namespace ft::test {
namespace {

using cli::CommBenchConfig;
using cli::CommBenchRow;

TEST(BenchCommSizes, ParsesUnits) {
  EXPECT_EQ(cli::parse_byte_sizes("4096, 64KiB,1MB ,1GiB,2 MiB,8KB,1GB,12B"),
            (std::vector<std::int64_t>{4096, 65536, 1000000, 1LL << 30, 2LL << 20, 8000, 1000000000, 12}));
  for (const char* bad : {"3", "0", "-4KiB", "1XB", "", "1MiB,", "MiB", "1.5MB"})
    EXPECT_THROW(cli::parse_byte_sizes(bad), Error) << bad;
  EXPECT_EQ(cli::format_bytes(1LL << 30), "1 GiB");
  EXPECT_EQ(cli::format_bytes(10000000), "10 MB");
  EXPECT_EQ(cli::format_bytes(4100), "4100 B");
}

TEST(BenchComm, RowsAreConsistentAndTheSameOnEveryRank) {
  const CommBenchConfig config{.sizes = {4096, 256 * 1024}, .warmup = 1, .iters = 3};
  const std::vector<CommBenchRow> rows = cli::run_comm_bench(config, world(), world(), nullptr);
  ASSERT_EQ(rows.size(), 2u);
  std::vector<float> times;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const CommBenchRow& r = rows[i];
    EXPECT_EQ(r.world, 2);
    EXPECT_EQ(r.backend, "mpi");
    EXPECT_EQ(r.bytes, config.sizes[i]);
    EXPECT_GT(r.time_ms, 0);
    EXPECT_LE(r.min_rank_ms, r.time_ms);
    ASSERT_TRUE(r.algbw_gbps && r.busbw_gbps);
    EXPECT_DOUBLE_EQ(*r.algbw_gbps, static_cast<double>(r.bytes) / (r.time_ms / 1e3) / 1e9);
    EXPECT_DOUBLE_EQ(*r.busbw_gbps, *r.algbw_gbps * 2.0 * (2 - 1) / 2);  // 2 ranks: busbw = algbw
    times.push_back(static_cast<float>(r.time_ms));
    times.push_back(static_cast<float>(r.min_rank_ms));
  }
  const std::vector<std::vector<float>> all = gather_all(times);
  EXPECT_EQ(all[0], all[1]) << "every rank reports the gathered max/min of the ranks' medians";
}

TEST(BenchComm, RankZeroAlonePrintsAndWritesTheDocument) {
  testing_util::TempFolder folder;  // one per rank (named by process id)
  const std::string path = folder.file("comm.json");
  std::ostringstream out;
  cli::bench_comm({.sizes = {1024, 8192}, .warmup = 0, .iters = 2}, world(), world(), false, path, out);
  if (world().rank() != 0) {
    EXPECT_EQ(out.str(), "");
    EXPECT_FALSE(std::filesystem::exists(path));
    return;
  }
  EXPECT_NE(out.str().find("| world | backend |"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("| 2     | mpi     | 8 KiB"), std::string::npos) << out.str();
  std::ifstream in(path);
  ASSERT_TRUE(in.good());
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["benchmark"], "comm");
  EXPECT_EQ(doc["config"]["world"], 2);
  EXPECT_EQ(doc["config"]["iters"], 2);
  ASSERT_EQ(doc["rows"].size(), 2u);
  for (const auto& row : doc["rows"]) {
    EXPECT_EQ(row["world"], 2);
    EXPECT_EQ(row["backend"], "mpi");
    for (const char* key : {"time_ms", "min_rank_ms", "algbw_gbps", "busbw_gbps"})
      EXPECT_TRUE(row[key].is_number()) << key;
    EXPECT_DOUBLE_EQ(row["busbw_gbps"].get<double>(), row["algbw_gbps"].get<double>());
  }
  EXPECT_EQ(doc["rows"][1]["bytes"], 8192);
}

}  // namespace
}  // namespace ft::test
