// test_bench_fsdp_nccl.cpp — `flashtrain bench fsdp --zero 3 --profile timeline` without the binary, 2 ranks
// under mpirun with a GPU each, on the tiny model: both ranks finish the row (rank 1 steps along while rank 0
// profiles), rank 0 alone writes the kernel-timeline document, whose two profiled steps each have a compute
// stream with busy time within its span, the ZeRO-3 collectives on a communication stream and a summary
// whose gap sum is the compute stream's span minus its busy time; rank 0 prints step 2's summary.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_folder.h"
#include "flashtrain/fsdp_bench.h"
#include "mpi/tiny_bench_options.h"
#include "nccl/nccl_test_util.h"

namespace ft::test {
namespace {

TEST(BenchFsdpNccl, TimelineOfZero3OnRankZero) {
  testing_util::TempFolder folder;  // one per rank (named by process id)
  cli::BenchFsdpOptions o;
  o.model = tiny_data_parallel_model(2);
  o.model.device = "cuda";
  o.stages = "3";
  o.profile = "timeline";
  o.timeline_prefix = folder.file("tl");
  cli::FsdpBenchConfig config = cli::resolve_bench_fsdp_options(o, host());
  config.model.stream = context().model_stream(config.model.device);
  const bool root = host().rank() == 0;
  std::ostringstream progress;
  const std::vector<cli::FsdpBenchRow> rows = cli::run_fsdp_bench(
      config, context().data_parallel_communicator(config.model.device), host(), root ? &progress : nullptr);
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_FALSE(rows[0].oom) << rows[0].oom_message;

  const std::string path = cli::fsdp_timeline_path(o.timeline_prefix, cli::expand_fsdp_cases(config).front());
  ASSERT_EQ(std::filesystem::exists(path), root) << path;
  if (!root) return;
  EXPECT_NE(progress.str().find("Streams of the profiled step 2: "), std::string::npos) << progress.str();
  EXPECT_NE(progress.str().find("wrote " + path), std::string::npos) << progress.str();
  std::ifstream file(path);
  const nlohmann::json doc = nlohmann::json::parse(file);
  EXPECT_EQ(doc["benchmark"], "kernel-timeline");
  EXPECT_EQ(doc["config"]["zero"], 3);
  EXPECT_EQ(doc["dropped"], 0);
  ASSERT_EQ(doc["step_streams"].size(), 2u);
  for (const nlohmann::json& step : doc["step_streams"]) {
    SCOPED_TRACE(step["range"].get<std::string>());
    std::vector<std::string> lanes;
    for (const nlohmann::json& s : step["streams"]) {
      lanes.push_back(s["lane"]);
      EXPECT_LE(s["busy_ms"].get<double>(), s["span_ms"].get<double>() + 1e-9);
      EXPECT_LE(s["span_ms"].get<double>(), step["span_ms"].get<double>() + 1e-9);
      if (s["lane"] == "compute")
        EXPECT_NEAR(step["gap_ms"].get<double>(), s["span_ms"].get<double>() - s["busy_ms"].get<double>(), 1e-6);
    }
    EXPECT_EQ(std::count(lanes.begin(), lanes.end(), "compute"), 1);
    EXPECT_GE(std::count(lanes.begin(), lanes.end(), "communication"), 1);  // the all-gathers, reduce-scatters
    EXPECT_LE(step["largest_gaps"].size(), 10u);
    EXPECT_LE(step["gap_communication_ms"].get<double>() + step["gap_idle_ms"].get<double>(),
              step["gap_ms"].get<double>() + 1e-6);
  }
}

}  // namespace
}  // namespace ft::test
