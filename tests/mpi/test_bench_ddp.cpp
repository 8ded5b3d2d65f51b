// test_bench_ddp.cpp — `flashtrain bench ddp` without the binary, 2 ranks under mpirun on the tiny model on
// the CPU: a row per strategy (bucketed once per bucket size) with the collectives each strategy issues,
// positive step times, communication times within them (zero for single), the same rows on both ranks, a
// well-formed results document, rank 0 alone printing and writing it, backward's own time within the step,
// the rows repeated per communication buffer and NCCL tuning, and bad options (NCCL's on the CPU) refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/kernel_profiler.h"
#include "common/temp_folder.h"
#include "core/error.h"
#include "flashtrain/ddp_bench.h"
#include "model/parameters.h"
#include "mpi/mpi_test_util.h"
#include "mpi/tiny_bench_options.h"

namespace ft::test {
namespace {

using cli::BenchDdpOptions;
using cli::DdpBenchRow;

BenchDdpOptions tiny_options() {
  BenchDdpOptions o;
  o.model = tiny_data_parallel_model(3);
  o.bucket_mbs = "0.001,1";  // about 1 KiB (a bucket per parameter or a few) and more than the whole model
  return o;
}

TEST(BenchDdp, EveryStrategyGivesARowWithTimesWithinTheStep) {
  const cli::DdpBenchConfig config = cli::resolve_bench_ddp_options(tiny_options(), world());
  EXPECT_EQ(config.model.batch, 2);  // the local batch's default
  const std::vector<DdpBenchRow> rows = cli::run_ddp_bench(config, world(), world(), nullptr);
  const std::vector<std::string> strategies{"single", "naive", "flat", "overlapped", "bucketed", "bucketed"};
  ASSERT_EQ(rows.size(), strategies.size());
  ModelConfig model = model_config("tiny");
  model.vocab_size = 97;
  model.context_length = 16;
  const auto tensors = static_cast<std::size_t>(ParameterLayout(model).size());

  std::vector<float> figures;  // every row's step and comm times, compared across ranks
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const DdpBenchRow& r = rows[i];
    SCOPED_TRACE(strategies[i]);
    EXPECT_EQ(r.c.strategy ? name_of(*r.c.strategy) : std::string("single"), strategies[i]);
    EXPECT_EQ(r.c.bucket_mb.has_value(), strategies[i] == "bucketed");
    EXPECT_FALSE(r.oom);
    EXPECT_EQ(r.world, 2);
    EXPECT_EQ(r.backend, "mpi");
    EXPECT_EQ(r.local_batch, 2);
    EXPECT_EQ(r.parameters, ParameterLayout(model).numel());
    EXPECT_EQ(r.step.count, 3);
    EXPECT_GT(r.step.min, 0);
    EXPECT_LE(r.step.min, r.step.median);
    EXPECT_LE(r.step.median, r.step.max);
    EXPECT_GT(r.peak_gib, 0);
    EXPECT_GT(r.backward_ms, 0);  // the host clock on the CPU: backward lies inside the step
    EXPECT_LE(r.backward_ms, r.step.max);
    EXPECT_EQ(r.c.buffer, CommBufferKind::plain);
    EXPECT_TRUE(r.c.tuning.is_default());
    EXPECT_DOUBLE_EQ(r.tokens_per_s, 2.0 * 2 * 16 / (r.step.median / 1e3));
    ASSERT_TRUE(r.comm_ms.has_value());
    // Each step's communication lies inside that step (collectives in flight together count once), so the
    // median of the per-step maxima is bounded by the step's.
    EXPECT_LE(*r.comm_ms, r.step.median);
    if (strategies[i] == "single") {
      EXPECT_EQ(r.collectives, 0u);
      EXPECT_EQ(*r.comm_ms, 0.0);
    } else {
      EXPECT_GT(*r.comm_ms, 0.0);
    }
    figures.push_back(static_cast<float>(r.step.median));
    figures.push_back(static_cast<float>(*r.comm_ms));
  }
  EXPECT_EQ(rows[1].collectives, tensors);  // naive: one all-reduce per parameter
  EXPECT_EQ(rows[2].collectives, 1u);       // flat: the whole buffer
  EXPECT_EQ(rows[3].collectives, tensors);  // overlapped: one per parameter
  EXPECT_GT(rows[4].collectives, 1u);       // 1 KiB buckets: several
  EXPECT_EQ(rows[5].collectives, 1u);       // 1 MiB holds the whole tiny model
  EXPECT_DOUBLE_EQ(*rows[4].c.bucket_mb, 0.001);
  const auto all = gather_all(figures);
  EXPECT_EQ(all[0], all[1]) << "every rank reports the gathered figures";

  const nlohmann::json doc = cli::ddp_bench_document(config, rows);
  EXPECT_EQ(doc["benchmark"], "ddp");
  for (const char* key : {"commit", "date", "device"}) EXPECT_TRUE(doc[key].is_string()) << key;
  EXPECT_EQ(doc["config"]["world"], 2);
  EXPECT_EQ(doc["config"]["local_batch"], 2);
  ASSERT_EQ(doc["rows"].size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& row = doc["rows"][i];
    SCOPED_TRACE(strategies[i]);
    EXPECT_EQ(row["strategy"], strategies[i]);
    EXPECT_EQ(row["bucket_mb"].is_null(), strategies[i] != "bucketed");
    EXPECT_EQ(row["world"], 2);
    EXPECT_EQ(row["size"], "tiny");
    EXPECT_EQ(row["ctx"], 16);
    EXPECT_EQ(row["precision"], "fp32");
    EXPECT_EQ(row["local_batch"], 2);
    EXPECT_FALSE(row.contains("oom"));
    EXPECT_EQ(row["buffer"], "plain");
    EXPECT_EQ(row["max_ctas"], 0);
    EXPECT_EQ(row["cta_policy"], "default");
    for (const char* key : {"step_ms", "mean_ms", "min_ms", "max_ms", "bwd_ms", "peak_gib", "tokens_per_s"}) {
      ASSERT_TRUE(row[key].is_number()) << key;
      EXPECT_GT(row[key].get<double>(), 0) << key;
    }
    ASSERT_TRUE(row["comm_ms"].is_number());
    EXPECT_DOUBLE_EQ(row["step_ms"].get<double>(), rows[i].step.median);
  }
}

TEST(BenchDdp, ZeroRowsRunAfterTheDdpRowsOnModelsOfTheirOwn) {
  BenchDdpOptions o = tiny_options();
  o.strategies = "zero2,single,bucketed,zero3";
  o.bucket_mbs = "1";
  const cli::DdpBenchConfig config = cli::resolve_bench_ddp_options(o, world());
  EXPECT_EQ(config.zero_stages, (std::vector<int>{2, 3}));
  const std::vector<DdpBenchRow> rows = cli::run_ddp_bench(config, world(), world(), nullptr);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_FALSE(rows[0].c.strategy.has_value());  // single
  EXPECT_EQ(rows[0].c.zero_stage, 0);
  EXPECT_EQ(rows[1].c.strategy, DdpStrategy::bucketed);
  EXPECT_EQ(rows[2].c.zero_stage, 2);
  EXPECT_EQ(rows[3].c.zero_stage, 3);
  for (std::size_t i = 2; i < 4; ++i) {
    EXPECT_FALSE(rows[i].oom);
    EXPECT_GT(rows[i].step.median, 0);
    EXPECT_GT(rows[i].backward_ms, 0);
    EXPECT_FALSE(rows[i].comm_ms.has_value());  // not measured
  }
  const nlohmann::json doc = cli::ddp_bench_document(config, rows);
  EXPECT_EQ(doc["rows"][2]["strategy"], "zero2");
  EXPECT_EQ(doc["rows"][3]["strategy"], "zero3");
  EXPECT_TRUE(doc["rows"][3]["comm_ms"].is_null());
  cli::DdpBenchCase c = rows[2].c;
  c.tuning.max_ctas = 2;
  EXPECT_EQ(cli::timeline_path("t", c), "t-zero2-ctas2.json");
}

TEST(BenchDdp, Bf16RoundingPlacesGiveARowEach) {
  BenchDdpOptions o = tiny_options();
  o.strategies = "single,bucketed";
  o.bucket_mbs = "1";
  o.bf16_comm = true;
  o.bf16_rounding = "model,comm";
  const cli::DdpBenchConfig config = cli::resolve_bench_ddp_options(o, world());
  const std::vector<DdpBenchRow> rows = cli::run_ddp_bench(config, world(), world(), nullptr);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_FALSE(rows[1].c.round_on_comm);
  EXPECT_TRUE(rows[2].c.round_on_comm);
  EXPECT_GT(rows[2].step.median, 0);
  const nlohmann::json doc = cli::ddp_bench_document(config, rows);
  EXPECT_EQ(doc["rows"][1]["bf16_round"], "model");
  EXPECT_EQ(doc["rows"][2]["bf16_round"], "comm");
  EXPECT_EQ(cli::timeline_path("t", rows[2].c), "t-bucketed-1mb-round_comm.json");
}

TEST(BenchDdp, RowsThisMachineCannotRunAreReportedAndTheSweepGoesOn) {
  BenchDdpOptions o = tiny_options();
  o.strategies = "bucketed";
  o.bucket_mbs = "1";
  cli::DdpBenchConfig config = cli::resolve_bench_ddp_options(o, world());
  config.buffers = {CommBufferKind::registered, CommBufferKind::plain};  // MPI registers nothing
  const std::vector<DdpBenchRow> rows = cli::run_ddp_bench(config, world(), world(), nullptr);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_NE(rows[0].unsupported.find("the mpi communicator registers no buffers"), std::string::npos)
      << rows[0].unsupported;
  EXPECT_FALSE(rows[0].oom);
  EXPECT_TRUE(rows[1].unsupported.empty());
  EXPECT_GT(rows[1].step.median, 0);
  const nlohmann::json doc = cli::ddp_bench_document(config, rows);
  EXPECT_EQ(doc["rows"][0]["unsupported"], true);
  EXPECT_FALSE(doc["rows"][0].contains("step_ms"));
  EXPECT_TRUE(doc["rows"][1]["step_ms"].is_number());
  EXPECT_NE(cli::format_ddp_bench(rows, false).find("| unsupported |"), std::string::npos);
}

TEST(BenchDdp, RankZeroAlonePrintsAndWritesTheDocument) {
  testing_util::TempFolder folder;  // one per rank (named by process id)
  const std::string path = folder.file("ddp.json");
  BenchDdpOptions o = tiny_options();
  o.strategies = "single,bucketed";
  o.bucket_mbs = "1";
  o.model.warmup = 0;
  o.model.steps = 1;
  std::ostringstream out;
  cli::bench_ddp(cli::resolve_bench_ddp_options(o, world()), world(), world(), false, path, out);
  if (world().rank() != 0) {
    EXPECT_EQ(out.str(), "");
    EXPECT_FALSE(std::filesystem::exists(path));
    return;
  }
  EXPECT_NE(out.str().find("| strategy | bucket_mb |"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("| bucketed | 1 "), std::string::npos) << out.str();
  std::ifstream in(path);
  ASSERT_TRUE(in.good());
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["benchmark"], "ddp");
  ASSERT_EQ(doc["rows"].size(), 2u);
  EXPECT_EQ(doc["rows"][1]["bucket_mb"], 1.0);
}

TEST(BenchDdp, RefusesUnknownStrategiesAndBucketSizes) {
  for (const char* strategies : {"zero", "zero1", "flat,", "single,fsdp"}) {
    BenchDdpOptions o = tiny_options();
    o.strategies = strategies;
    EXPECT_THROW(cli::resolve_bench_ddp_options(o, world()), Error) << strategies;
  }
  for (const char* sizes : {"0", "-1", "1MiB", "", "1,,2"}) {
    BenchDdpOptions o = tiny_options();
    o.bucket_mbs = sizes;
    EXPECT_THROW(cli::resolve_bench_ddp_options(o, world()), Error) << sizes;
  }
  BenchDdpOptions o = tiny_options();
  o.model.device = "cuda:1";  // with several ranks, each uses GPU local_rank: an explicit index is refused
  EXPECT_THROW(cli::resolve_bench_ddp_options(o, world()), Error);
}

// o is refused with a message that contains `expected`.
void expect_refused(const BenchDdpOptions& o, const std::string& expected) {
  std::string message = "accepted";
  try {
    cli::resolve_bench_ddp_options(o, world());
  } catch (const Error& e) {
    message = e.message();
  }
  EXPECT_NE(message.find(expected), std::string::npos) << message;
}

TEST(BenchDdp, NcclBuffersAndLimitsNeedGpusAndValidValues) {
  BenchDdpOptions o = tiny_options();  // on the CPU
  o.buffers = "plain,symmetric";
  expect_refused(o, "need GPUs (NCCL), given --device cpu");
  o = tiny_options();
  o.max_ctas = "0,4";
  expect_refused(o, "need GPUs (NCCL)");
  o = tiny_options();
  o.priorities = "high,low";
  expect_refused(o, "need GPUs (NCCL)");
  o.priorities = "urgent";
  expect_refused(o, "expected high or low, given 'urgent'");
  o = tiny_options();
  o.cta_policies = "efficiency";
  expect_refused(o, "need GPUs (NCCL)");
  o = tiny_options();
  o.buffers = "pinned";
  expect_refused(o, "expected plain, registered, nccl_mem or symmetric");
  o = tiny_options();
  o.max_ctas = "65";
  expect_refused(o, "--nccl-max-ctas");
  o = tiny_options();
  o.max_ctas = "2";
  o.min_ctas = 4;
  expect_refused(o, "min_ctas (4) must not exceed max_ctas (2)");
  o = tiny_options();
  o.transports = "nccl,copy_engine";
  expect_refused(o, "--transport copy_engine moves GPU buffers by peer copies: it needs 2 GPUs");
  o = tiny_options();
  o.bf16_rounding = "comm";
  expect_refused(o, "give --bf16-comm too");
  o.bf16_comm = true;
  o.bf16_rounding = "model,gpu";
  expect_refused(o, "expected model or comm, given 'gpu'");
  o = tiny_options();
  o.transports = "nvlink";
  expect_refused(o, "expected nccl or copy_engine, given 'nvlink'");
  o = tiny_options();
  o.cta_policies = "greedy";
  expect_refused(o, "expected default, efficiency or zero");
}

TEST(BenchDdp, EveryDdpRowRepeatsPerBufferAndTuning) {
  BenchDdpOptions o = tiny_options();
  o.strategies = "single,flat,bucketed";
  o.bucket_mbs = "1,25";
  cli::DdpBenchConfig config = cli::resolve_bench_ddp_options(o, world());
  config.buffers = {CommBufferKind::plain, CommBufferKind::symmetric};
  config.tunings = {NcclTuning{}, NcclTuning{.max_ctas = 4}};
  const std::vector<cli::DdpBenchCase> cases = cli::expand_ddp_cases(config);
  ASSERT_EQ(cases.size(), 1u + 4u + 2u * 4u);  // single once; flat and each bucket size x 2 buffers x 2 tunings
  EXPECT_FALSE(cases[0].strategy.has_value());
  EXPECT_EQ(cases[1].buffer, CommBufferKind::plain);
  EXPECT_TRUE(cases[1].tuning.is_default());
  EXPECT_EQ(cases[2].tuning.max_ctas, 4);
  EXPECT_EQ(cases[3].buffer, CommBufferKind::symmetric);
  EXPECT_EQ(*cases[5].bucket_mb, 1.0);
  EXPECT_EQ(*cases[12].bucket_mb, 25.0);
  EXPECT_EQ(cases[12].buffer, CommBufferKind::symmetric);
  EXPECT_EQ(cases[12].tuning.max_ctas, 4);

  config.nccl = false;  // the copy-engine rows alone: one per DDP row, plain buffers, no NCCL tuning
  config.copy_engine = true;
  config.zero_stages = {2};
  const std::vector<cli::DdpBenchCase> copies = cli::expand_ddp_cases(config);
  ASSERT_EQ(copies.size(), 1u + 1u + 2u + 1u);
  EXPECT_EQ(copies.back().zero_stage, 2);
  for (std::size_t i = 1; i < copies.size(); ++i) {
    EXPECT_TRUE(copies[i].copy_engine);
    EXPECT_EQ(copies[i].buffer, CommBufferKind::plain);
    EXPECT_TRUE(copies[i].tuning.is_default());
  }
}

TEST(BenchDdp, TimelineNeedsItsPathAndAGpu) {
  auto message = [](const BenchDdpOptions& o) {
    try {
      cli::resolve_bench_ddp_options(o, world());
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("accepted");
  };
  BenchDdpOptions o = tiny_options();  // on the CPU
  o.profile = "timeline";
  EXPECT_NE(message(o).find("needs --timeline-json"), std::string::npos) << message(o);
  o.timeline_prefix = "/tmp/ft-timeline";
  EXPECT_NE(message(o).find(kernel_profiler_available() ? "expected a CUDA device, given cpu" : "timeline"),
            std::string::npos)
      << message(o);
  o.profile.clear();
  EXPECT_NE(message(o).find("only used with --profile timeline"), std::string::npos) << message(o);
}

TEST(BenchDdp, TimelinePathsNameTheRow) {
  cli::DdpBenchCase c;
  EXPECT_EQ(cli::timeline_path("out/t", c), "out/t-single.json");
  c.strategy = DdpStrategy::overlapped;
  EXPECT_EQ(cli::timeline_path("out/t", c), "out/t-overlapped.json");
  c.strategy = DdpStrategy::bucketed;
  c.bucket_mb = 25;
  EXPECT_EQ(cli::timeline_path("out/t", c), "out/t-bucketed-25mb.json");
  c.buffer = CommBufferKind::symmetric;
  c.tuning = {.max_ctas = 4, .cta_policy = CtaPolicy::efficiency};
  EXPECT_EQ(cli::timeline_path("out/t", c), "out/t-bucketed-25mb-symmetric-ctas4-efficiency.json");
  c.tuning.low_priority = true;
  EXPECT_EQ(cli::timeline_path("out/t", c), "out/t-bucketed-25mb-symmetric-ctas4-efficiency-low_priority.json");
  c.buffer = CommBufferKind::plain;
  c.tuning = {};
  c.copy_engine = true;
  EXPECT_EQ(cli::timeline_path("out/t", c), "out/t-bucketed-25mb-copy_engine.json");
}

}  // namespace
}  // namespace ft::test
