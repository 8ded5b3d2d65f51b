// test_bench_zero.cpp — `flashtrain bench zero` without the binary, 2 ranks under mpirun on the tiny model on
// the CPU: a row per mode with positive step times, the same on both ranks; the memory accounting is exact
// arithmetic and is checked exactly — the optimizer state is 8 bytes per parameter unsharded and half of
// that per rank sharded (the tiny model's parameter count is even), the allocator's categories at every
// point hold the fp32 parameters (4 P), the gradients (4 P, plus the reduce-scatter shard of 4 P / 2) and
// that state, and add up to the point's peak; a well-formed results document; bad options refused.
#include <gtest/gtest.h>

#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "flashtrain/ddp_bench.h"
#include "flashtrain/zero_bench.h"
#include "model/parameters.h"
#include "mpi/mpi_test_util.h"
#include "mpi/tiny_bench_options.h"

namespace ft::test {
namespace {

using cli::BenchZeroOptions;
using cli::ZeroBenchRow;

BenchZeroOptions tiny_options() {
  BenchZeroOptions o;
  o.model = tiny_data_parallel_model(2);
  return o;
}

std::int64_t category(const cli::MemoryPoint& p, MemoryCategory c) { return p.at_peak[static_cast<std::size_t>(c)]; }

TEST(BenchZero, ShardingHalvesTheOptimizerStateExactly) {
  const cli::ZeroBenchConfig config = cli::resolve_bench_zero_options(tiny_options(), world());
  const std::vector<ZeroBenchRow> rows = cli::run_zero_bench(config, world(), world(), nullptr);
  const std::vector<std::string> modes{"off", "owner_broadcast", "reduce_scatter"};
  ASSERT_EQ(rows.size(), modes.size());
  ModelConfig model = model_config("tiny");
  model.vocab_size = 97;
  model.context_length = 16;
  const std::int64_t P = ParameterLayout(model).numel();
  ASSERT_EQ(P % 2, 0) << "the exact halves below assume an even parameter count";

  std::vector<float> times;  // every row's step time, compared across ranks
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const ZeroBenchRow& r = rows[i];
    SCOPED_TRACE(modes[i]);
    EXPECT_EQ(r.c.mode ? name_of(*r.c.mode) : std::string("off"), modes[i]);
    EXPECT_FALSE(r.oom);
    EXPECT_EQ(r.world, 2);
    EXPECT_EQ(r.backend, "mpi");
    EXPECT_EQ(r.parameters, P);
    EXPECT_EQ(r.step.count, 2);
    EXPECT_GT(r.step.min, 0);
    EXPECT_GT(r.tokens_per_s, 0);
    EXPECT_EQ(r.memory_rank, 0);  // equal shards: the first rank with the highest peak
    const std::int64_t state = i == 0 ? 8 * P : 8 * P / 2;  // AdamW m and v, fp32: whole or this rank's half
    EXPECT_EQ(r.optimizer_state_bytes, state);
    const std::int64_t gradients = i == 2 ? 4 * P + 4 * P / 2 : 4 * P;  // reduce_scatter adds its shard
    for (std::size_t k = 0; k < 3; ++k) {
      const cli::MemoryPoint& p = r.points[k];
      SCOPED_TRACE(cli::kZeroMemoryPoints[k]);
      EXPECT_EQ(std::accumulate(p.at_peak.begin(), p.at_peak.end(), std::int64_t{0}), p.peak_bytes);
      EXPECT_LE(p.peak_bytes, r.peak_bytes);
      EXPECT_EQ(category(p, MemoryCategory::parameters), 4 * P);  // fp32: the masters, no bf16 copies
      EXPECT_EQ(category(p, MemoryCategory::gradients), gradients);
      EXPECT_EQ(category(p, MemoryCategory::optimizer_state), state);
      EXPECT_GT(category(p, MemoryCategory::activations), 0);
    }
    times.push_back(static_cast<float>(r.step.median));
  }
  EXPECT_EQ(rows[1].optimizer_state_bytes * 2, rows[0].optimizer_state_bytes);
  EXPECT_EQ(rows[2].optimizer_state_bytes * 2, rows[0].optimizer_state_bytes);
  const auto all = gather_all(times);
  EXPECT_EQ(all[0], all[1]) << "every rank reports the gathered figures";

  const nlohmann::json doc = cli::zero_bench_document(config, rows);
  EXPECT_EQ(doc["benchmark"], "zero");
  EXPECT_EQ(doc["config"]["world"], 2);
  ASSERT_EQ(doc["rows"].size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& row = doc["rows"][i];
    SCOPED_TRACE(modes[i]);
    EXPECT_EQ(row["zero"], modes[i]);
    EXPECT_EQ(row["sharded"], i > 0);
    EXPECT_EQ(row["strategy"].is_null(), modes[i] == "reduce_scatter");
    EXPECT_EQ(row["bucket_mb"].is_null(), modes[i] == "reduce_scatter");
    EXPECT_EQ(row["optimizer_state_bytes"], rows[i].optimizer_state_bytes);
    for (const char* key : {"step_ms", "peak_gib", "optimizer_state_gib", "tokens_per_s"}) {
      ASSERT_TRUE(row[key].is_number()) << key;
      EXPECT_GT(row[key].get<double>(), 0) << key;
    }
    for (const char* point : cli::kZeroMemoryPoints)
      for (const char* key : {"peak_gib", "parameters_gib", "gradients_gib", "optimizer_state_gib", "activations_gib",
                              "workspace_gib", "other_gib", "end_gib"})
        EXPECT_TRUE(row["memory"][point][key].is_number()) << point << " " << key;
  }
}

TEST(BenchZero, RankZeroAlonePrints) {
  BenchZeroOptions o = tiny_options();
  o.modes = "reduce_scatter";
  o.model.warmup = 0;
  o.model.steps = 1;
  std::ostringstream out;
  cli::bench_zero(cli::resolve_bench_zero_options(o, world()), world(), world(), false, "", out);
  if (world().rank() != 0) {
    EXPECT_EQ(out.str(), "");
    return;
  }
  EXPECT_NE(out.str().find("| reduce_scatter | tiny"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("before_optimizer_step"), std::string::npos) << out.str();
}

TEST(BenchZero, RefusesUnknownModesAndBucketSizes) {
  for (const char* modes : {"sharded", "off,", "zero2"}) {
    BenchZeroOptions o = tiny_options();
    o.modes = modes;
    EXPECT_THROW(cli::resolve_bench_zero_options(o, world()), Error) << modes;
  }
  BenchZeroOptions o = tiny_options();
  o.bucket_mb = 0;
  EXPECT_THROW(cli::resolve_bench_zero_options(o, world()), Error);
}

}  // namespace
}  // namespace ft::test
