// test_bench_fsdp.cpp — `flashtrain bench fsdp` without the binary, 2 ranks under mpirun on the tiny model on
// the CPU: a row per ZeRO stage with positive step times; the memory at the peak is exact arithmetic and is
// checked exactly — DDP holds 4 bytes per parameter of parameters and of gradients and 8 of AdamW state,
// ZeRO-3 the same per element of its shard (the units padded to the world), ZeRO-2 its shard plus the fp32
// replica; the memory plan predicts those categories and the activations exactly; MFU is null on the CPU; a well-formed results document; unknown stages, bucket sizes and gradient
// dtypes refused, and bf16 gradients with ZeRO-1; --profile timeline's checks and file names.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/kernel_profiler.h"
#include "core/error.h"
#include "dist/fsdp_plan.h"
#include "flashtrain/fsdp_bench.h"
#include "model/parameters.h"
#include "train/memory_plan.h"
#include "mpi/mpi_test_util.h"
#include "mpi/tiny_bench_options.h"

namespace ft::test {
namespace {

using cli::BenchFsdpOptions;
using cli::FsdpBenchRow;

BenchFsdpOptions tiny_options() {
  BenchFsdpOptions o;
  o.model = tiny_data_parallel_model(2);
  return o;
}

std::int64_t category(const FsdpBenchRow& r, MemoryCategory c) { return r.at_peak[static_cast<std::size_t>(c)]; }

TEST(BenchFsdp, ShardsParametersGradientsAndStateExactly) {
  const cli::FsdpBenchConfig config = cli::resolve_bench_fsdp_options(tiny_options(), world());
  const std::vector<FsdpBenchRow> rows = cli::run_fsdp_bench(config, world(), world(), nullptr);
  ASSERT_EQ(rows.size(), 4u);
  ModelConfig model = model_config("tiny");
  model.vocab_size = 97;
  model.context_length = 16;
  const ParameterLayout layout(model);
  const std::int64_t P = layout.numel(), S = FsdpPlan(layout, world().world_size()).shard_numel();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const FsdpBenchRow& r = rows[i];
    SCOPED_TRACE("zero " + std::to_string(r.c.stage));
    EXPECT_EQ(r.c.stage, static_cast<int>(i));
    ASSERT_FALSE(r.oom) << r.oom_message;
    EXPECT_GT(r.step.median, 0);
    EXPECT_GT(r.tokens_per_s, 0);
    EXPECT_FALSE(r.mfu.has_value());
    EXPECT_EQ(r.parameters, P);
    std::int64_t sum = 0;
    for (std::int64_t bytes : r.at_peak) sum += bytes;
    EXPECT_EQ(sum, r.peak_bytes);
  }
  EXPECT_EQ(category(rows[0], MemoryCategory::parameters), 4 * P);
  EXPECT_EQ(category(rows[0], MemoryCategory::optimizer_state), 8 * P);
  EXPECT_EQ(category(rows[3], MemoryCategory::parameters), 4 * S);
  EXPECT_EQ(category(rows[3], MemoryCategory::gradients), 4 * S);
  EXPECT_EQ(category(rows[3], MemoryCategory::optimizer_state), 8 * S);
  EXPECT_GE(category(rows[2], MemoryCategory::parameters), 4 * S + 4 * P);  // shard + fp32 replica (padded)
  EXPECT_EQ(category(rows[2], MemoryCategory::gradients), 4 * S);
  EXPECT_LT(rows[3].peak_bytes, rows[0].peak_bytes);

  // The prediction (train/memory_plan.h) is the allocation, exactly, for every category it names alone.
  for (const FsdpBenchRow& r : rows) {
    SCOPED_TRACE("planned, zero " + std::to_string(r.c.stage));
    const MemoryPlan plan = plan_training_memory({.model = r.c.model.model,
                                                  .options = cli::model_bench_options(r.c.model, config.model, {}),
                                                  .world = world().world_size(),
                                                  .stage = r.c.stage});
    EXPECT_EQ(static_cast<std::int64_t>(plan.parameters), category(r, MemoryCategory::parameters));
    EXPECT_EQ(static_cast<std::int64_t>(plan.gradients), category(r, MemoryCategory::gradients));
    EXPECT_EQ(static_cast<std::int64_t>(plan.optimizer_state), category(r, MemoryCategory::optimizer_state));
    EXPECT_EQ(static_cast<std::int64_t>(plan.activations), category(r, MemoryCategory::activations));
  }

  const nlohmann::json doc = cli::fsdp_bench_document(config, rows);
  EXPECT_EQ(doc["benchmark"], "fsdp");
  ASSERT_EQ(doc["rows"].size(), 4u);
  for (const nlohmann::json& row : doc["rows"])
    for (const char* key : {"zero", "world", "size", "ctx", "recompute", "step_ms", "tokens_per_s", "mfu", "peak_gib",
                            "memory"})
      EXPECT_TRUE(row.contains(key)) << key;
}

TEST(BenchFsdp, RefusesBadOptions) {
  BenchFsdpOptions o = tiny_options();
  o.stages = "0,4";
  EXPECT_THROW(cli::resolve_bench_fsdp_options(o, world()), Error);
  o.stages = "3";
  o.bucket_mb = 0;
  EXPECT_THROW(cli::resolve_bench_fsdp_options(o, world()), Error);
  o.bucket_mb = 25;
  o.grad_comm_dtype = "fp16";
  EXPECT_THROW(cli::resolve_bench_fsdp_options(o, world()), Error);
  o.grad_comm_dtype = "bf16";
  EXPECT_TRUE(cli::resolve_bench_fsdp_options(o, world()).bf16_grad_comm);
  o.stages = "1,3";
  EXPECT_THROW(cli::resolve_bench_fsdp_options(o, world()), Error);  // ZeRO-1 reduces in fp32 only
  o.stages = "2,3";
  o.transport = "nvlink";
  EXPECT_THROW(cli::resolve_bench_fsdp_options(o, world()), Error);
  o.transport = "copy_engine";  // peer copies between 2 GPUs: refused on the CPU
  try {
    cli::resolve_bench_fsdp_options(o, world());
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("needs 2 ranks on GPUs, given 2 rank(s) on cpu"), std::string::npos) << e.message();
  }
}

TEST(BenchFsdp, TimelineOptionsAndPaths) {
  const auto message = [](const std::string& profile, const std::string& prefix) {
    BenchFsdpOptions o = tiny_options();  // on the CPU
    o.profile = profile;
    o.timeline_prefix = prefix;
    try {
      return cli::resolve_bench_fsdp_options(o, world()).timeline_prefix;
    } catch (const Error& e) {
      return e.message();
    }
  };
  EXPECT_EQ(message("", ""), "");
  EXPECT_NE(message("timeline", "").find("needs --timeline-json PREFIX"), std::string::npos);
  EXPECT_NE(message("", "out/tl").find("only used with --profile timeline"), std::string::npos);
  EXPECT_NE(message("kernels", "out/tl").find("--profile: expected timeline, given 'kernels'"), std::string::npos);
  // A CPU device: refused for want of the profiler (a build without CUPTI) or of a GPU.
  EXPECT_NE(message("timeline", "out/tl")
                .find(kernel_profiler_available() ? "expected a CUDA device, given cpu" : kernel_profiler_missing()),
            std::string::npos)
      << message("timeline", "out/tl");

  cli::FsdpBenchCase c;
  c.model.model = model_config("8b");
  c.model.model.context_length = 32768;
  c.model.precision = Precision::bf16;
  c.stage = 3;
  EXPECT_EQ(cli::fsdp_timeline_path("out/tl", c), "out/tl-8b-ctx32768-bf16-zero3.json");
}

}  // namespace
}  // namespace ft::test
