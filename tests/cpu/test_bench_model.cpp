// test_bench_model.cpp — `flashtrain bench model` without the binary: option parsing and bad values, a
// tiny-model sweep on the CPU (every mode and precision, warm-up timed apart, peak memory, the results
// document), OOM rows, and the memory timeline: tag classification, the per-phase summary of synthetic and
// recorded timelines, and the profile of a tiny training step with exact parameter, gradient and
// optimizer-state bytes.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "bench/memory_timeline.h"
#include "bench/results_json.h"
#include "common/temp_folder.h"
#include "core/buffer.h"
#include "core/error.h"
#include "flashtrain/commands.h"
#include "flashtrain/model_bench.h"
#include "model/transformer.h"

namespace ft::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

BenchModelOptions parse_options(const std::string& command_line) {
  CLI::App app{"test"};
  BenchModelOptions options;
  add_bench_model_options(app, options);
  app.parse(command_line, false);
  return options;
}

ModelBenchConfig resolve(const std::string& command_line) {
  return resolve_bench_model_options(parse_options(command_line));
}

// The message CLI11 or the validation gives for a command line ("" when it is accepted).
std::string error_of(const std::string& command_line) {
  try {
    resolve(command_line);
  } catch (const CLI::ParseError& e) {
    return e.what();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(BenchModelOptions, Defaults) {
  const ModelBenchConfig c = resolve("--device cpu");
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].name, "small");
  EXPECT_EQ(c.models[0].vocab_size, 10000);
  EXPECT_EQ(c.contexts, std::vector<std::int64_t>{512});
  EXPECT_EQ(c.batch, 4);
  EXPECT_EQ(c.warmup, 5);
  EXPECT_EQ(c.steps, 10);
  EXPECT_EQ(c.precisions, std::vector<Precision>{Precision::fp32});
  EXPECT_EQ(c.modes, (std::vector<BenchMode>{BenchMode::fwd, BenchMode::fwd_bwd}));
  EXPECT_EQ(c.attention, AttentionImpl::flash);
  EXPECT_EQ(c.device, Device::cpu());
  EXPECT_FALSE(c.profile_memory);
  EXPECT_EQ(expand_model_cases(c).size(), 2u);
}

TEST(BenchModelOptions, ListsAndSweepOrder) {
  const ModelBenchConfig c = resolve(
      "--size small,2.7b --context 128,256,512,1024 --precision fp32,bf16 --mode fwd,train --vocab 500 --batch 2 "
      "--warmup 0 --steps 3 --attention naive --tf32 --device cpu --seed 9");
  ASSERT_EQ(c.models.size(), 2u);
  EXPECT_EQ(c.models[1].name, "2.7b");
  EXPECT_EQ(c.models[1].d_model, 2560);
  EXPECT_EQ(c.models[1].vocab_size, 500);
  EXPECT_EQ(c.contexts, (std::vector<std::int64_t>{128, 256, 512, 1024}));
  EXPECT_EQ(c.attention, AttentionImpl::naive);
  EXPECT_TRUE(c.tf32);
  EXPECT_EQ(c.warmup, 0);
  EXPECT_EQ(c.steps, 3);
  EXPECT_EQ(c.batch, 2);
  EXPECT_EQ(c.seed, 9u);
  const std::vector<ModelBenchCase> cases = expand_model_cases(c);
  ASSERT_EQ(cases.size(), 2u * 4 * 2 * 2);
  // model, then context, then precision, then mode
  EXPECT_EQ(cases[0].model.name, "small");
  EXPECT_EQ(cases[0].model.context_length, 128);
  EXPECT_EQ(cases[1].mode, BenchMode::train);
  EXPECT_EQ(cases[2].precision, Precision::bf16);
  EXPECT_EQ(cases[4].model.context_length, 256);
  EXPECT_EQ(cases[16].model.name, "2.7b");
  EXPECT_EQ(cases[16].model.context_length, 128);
}

TEST(BenchModelOptions, ExplicitHyperparameters) {
  const ModelBenchConfig c = resolve("--d-model 96 --d-ff 256 --layers 3 --heads 6 --context 64 --device cpu");
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].name, "custom");
  EXPECT_EQ(c.models[0].d_model, 96);
  EXPECT_EQ(c.models[0].d_ff, 256);
  EXPECT_EQ(c.models[0].num_layers, 3);
  EXPECT_EQ(c.models[0].num_heads, 6);
  EXPECT_EQ(c.models[0].context_length, 64);
}

TEST(BenchModelOptions, FlagsReplaceANamedSizesFields) {
  const ModelBenchConfig c = resolve("--size 8b,small --layers 2 --rope-theta 500000 --context 4096 --device cpu");
  ASSERT_EQ(c.models.size(), 2u);
  EXPECT_EQ(c.models[0].name, "8b-custom");
  EXPECT_EQ(c.models[0].d_model, 4096);
  EXPECT_EQ(c.models[0].d_ff, 11008);
  EXPECT_EQ(c.models[0].num_layers, 2);
  EXPECT_EQ(c.models[0].num_heads, 32);
  EXPECT_EQ(c.models[0].vocab_size, 151936);
  EXPECT_EQ(c.models[0].rope_theta, 500000.0);
  EXPECT_EQ(c.models[0].context_length, 4096);
  EXPECT_EQ(c.models[1].name, "small-custom");
  EXPECT_EQ(c.models[1].num_layers, 2);
  EXPECT_EQ(c.models[1].vocab_size, 10000);
  EXPECT_EQ(c.model_training.recompute, Recompute::none);
  EXPECT_EQ(c.model_training.loss_chunk, 1024);
  const ModelBenchConfig memory = resolve("--size tiny --recompute full --loss-chunk 0 --device cpu");
  EXPECT_EQ(memory.model_training.recompute, Recompute::full);
  EXPECT_EQ(memory.model_training.loss_chunk, 0);
  const ModelBenchConfig vocab_only = resolve("--size 8b --vocab 1000 --device cpu");
  EXPECT_EQ(vocab_only.models[0].name, "8b");  // the blocks keep the named shape
  EXPECT_EQ(vocab_only.models[0].vocab_size, 1000);
}

TEST(BenchModelOptions, MemoryProfileNeedsOneCase) {
  const ModelBenchConfig c =
      resolve("--size tiny --context 32 --mode train --profile memory --memory-json m.json --device cpu");
  EXPECT_TRUE(c.profile_memory);
  EXPECT_EQ(c.memory_json, "m.json");
}

TEST(BenchModelOptions, BadValuesGiveClearErrors) {
  struct Case {
    const char* command_line;
    const char* message_part;
  };
  const Case cases[] = {
      {"--size huge", "unknown model size 'huge': expected one of tiny, small"},
      {"--size small,", "--size: expected a comma-separated list without empty items, given 'small,'"},
      {"--mode bwd", "--mode: unknown mode 'bwd': expected fwd, fwd_bwd or train"},
      {"--precision fp16", "--precision: unknown precision 'fp16': expected fp32 or bf16"},
      {"--attention cudnn", "--attention"},
      {"--context 0", "--context: expected context lengths >= 1, given 0"},
      {"--context 12x", "--context: expected an integer, given '12x'"},
      {"--batch 0", "expected an integer >= 1, given '0'"},
      {"--steps 0", "expected an integer >= 1, given '0'"},
      {"--warmup -1", "expected an integer >= 0, given '-1'"},
      {"--device tpu", "expected auto, cpu, cuda or cuda:N, given 'tpu'"},
      {"--d-model 768", "an explicit model needs --d-model, --d-ff, --layers and --heads; missing --d-ff, --layers, "
                        "--heads"},
      {"--size small --heads 1", "the head dim d_model / num_heads must be at most 256"},
      {"--d-model 100 --d-ff 64 --layers 1 --heads 3", "num_heads must divide d_model"},
      {"--profile kernels", "kernels"},
      {"--recompute half",
       "--recompute: unknown recompute policy 'half': expected none, selective, selective-qkv or full"},
      {"--loss-chunk -1", "expected an integer >= 0, given '-1'"},
      {"--memory-json m.json", "--memory-json m.json needs --profile memory"},
      {"--profile memory --mode fwd,train", "--profile memory records one step of one case"},
      {"--profile memory --context 128,256", "given 1 size(s), 2 context(s)"},
      {"--profile memory --mode train --json r.json", "use --memory-json for the timeline"},
  };
  for (const Case& c : cases) {
    const std::string message = error_of(std::string(c.command_line) + " --device cpu");
    EXPECT_NE(message.find(c.message_part), std::string::npos)
        << "for '" << c.command_line << "' the error was '" << message << "'";
  }
}

// A tiny model on the CPU: vocabulary 97, batch 2.
ModelBenchConfig tiny(const std::string& extra) {
  return resolve("--size tiny --vocab 97 --batch 2 --device cpu " + extra);
}

std::int64_t tiny_numel() {
  ModelConfig m = model_config("tiny");
  return ParameterLayout(m).numel();
}

TEST(BenchModelRun, TinySweepEveryModeAndPrecision) {
  const ModelBenchConfig config =
      tiny("--context 16,32 --warmup 1 --steps 2 --mode fwd,fwd_bwd,train --precision fp32,bf16");
  std::vector<ModelBenchRow> rows;
  for (const ModelBenchCase& c : expand_model_cases(config)) rows.push_back(run_model_bench_case(c, config));
  ASSERT_EQ(rows.size(), 12u);
  for (const ModelBenchRow& r : rows) {
    SCOPED_TRACE(str(r.c.model.context_length, " ", name_of(r.c.precision), " ", name_of(r.c.mode)));
    EXPECT_FALSE(r.oom);
    EXPECT_EQ(r.parameters, tiny_numel());
    ASSERT_EQ(r.warmup_ms.size(), 1u);
    ASSERT_EQ(r.step_ms.size(), 2u);
    EXPECT_EQ(r.timed.count, 2);
    EXPECT_EQ(r.first_step_ms, r.warmup_ms[0]);
    EXPECT_GT(r.timed.min, 0.0);
    EXPECT_LE(r.timed.min, r.timed.median);
    EXPECT_DOUBLE_EQ(r.timed.median, 0.5 * (r.step_ms[0] + r.step_ms[1]));
    EXPECT_NEAR(r.tokens_per_s, 2.0 * r.c.model.context_length / (r.timed.median / 1e3), 1e-6 * r.tokens_per_s);
    EXPECT_GT(r.peak_gib, 0.0);
  }
  // rows: ctx 16 fp32 fwd, fwd_bwd, train, bf16 fwd, fwd_bwd, train, then ctx 32. Over the timed steps the CPU
  // allocates nothing, so the peak is what the case holds: train adds exactly the AdamW state (2 fp32 copies)
  // to fwd_bwd, and fwd (an inference model) holds less than fwd_bwd by exactly the difference of the two
  // models' memory reports (the gradients and the backward-only activations and workspace).
  const double adamw_bytes = 2.0 * 4.0 * static_cast<double>(tiny_numel());
  for (std::size_t base : {0u, 3u, 6u, 9u}) {
    ModelOptions o;
    o.precision = rows[base].c.precision;
    o.max_batch = config.batch;
    const std::size_t training_bytes = TransformerLM(rows[base].c.model, o).memory().total();
    o.training = false;
    const std::size_t inference_bytes = TransformerLM(rows[base].c.model, o).memory().total();
    ASSERT_LT(inference_bytes, training_bytes);
    EXPECT_DOUBLE_EQ((rows[base + 1].peak_gib - rows[base].peak_gib) * kGiB,
                     static_cast<double>(training_bytes - inference_bytes));
    EXPECT_DOUBLE_EQ((rows[base + 2].peak_gib - rows[base + 1].peak_gib) * kGiB, adamw_bytes);
  }
  EXPECT_GT(rows[6].peak_gib, rows[0].peak_gib);  // ctx 32 holds more activations than ctx 16

  const std::string table = format_model_bench(rows, false);
  EXPECT_NE(table.find("| tiny "), std::string::npos) << table;
  EXPECT_NE(table.find("fwd_bwd"), std::string::npos) << table;
  EXPECT_EQ(format_model_bench(rows, true).find("size,params_m,ctx,precision,mode,first_step_ms,step_ms"), 0u);

  testing_util::TempFolder folder;
  const std::string path = folder.file("results/model-tiny.json");
  write_json_atomic(path, model_bench_document(config, rows));
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["benchmark"], "model");
  EXPECT_EQ(doc["config"]["warmup"], 1);
  EXPECT_EQ(doc["config"]["steps"], 2);
  ASSERT_EQ(doc["rows"].size(), 12u);
  const nlohmann::json& row = doc["rows"][5];
  EXPECT_EQ(row["size"], "tiny");
  EXPECT_EQ(row["ctx"], 16);
  EXPECT_EQ(row["precision"], "bf16");
  EXPECT_EQ(row["mode"], "train");
  EXPECT_EQ(row["batch"], 2);
  EXPECT_EQ(row["parameters"], tiny_numel());
  for (const char* key : {"step_ms", "mean_ms", "std_ms", "min_ms", "max_ms", "first_step_ms", "peak_gib",
                          "tokens_per_s"})
    EXPECT_TRUE(row[key].is_number()) << key;
  EXPECT_EQ(row["step_ms"].get<double>(), rows[5].timed.median);
  EXPECT_EQ(row["warmup_ms"].size(), 1u);
  EXPECT_FALSE(row.contains("oom"));
}

TEST(BenchModelRun, WarmupZeroTimesTheFirstStep) {
  const ModelBenchConfig config = tiny("--context 16 --warmup 0 --steps 3 --mode fwd");
  const ModelBenchRow r = run_model_bench_case(expand_model_cases(config).front(), config);
  EXPECT_TRUE(r.warmup_ms.empty());
  ASSERT_EQ(r.step_ms.size(), 3u);
  EXPECT_EQ(r.first_step_ms, r.step_ms[0]);
  EXPECT_EQ(model_bench_document(config, {r})["rows"][0]["warmup_ms"].size(), 0u);
}

TEST(BenchModelRun, OutOfMemoryIsARowAndTheSweepGoesOn) {
  // 2^31 - 1 x 2^16 embedding: 2^49 bytes, beyond any address space, so the allocation fails at once.
  const ModelBenchConfig huge =
      resolve("--d-model 65536 --d-ff 4 --layers 1 --heads 512 --vocab 2147483647 --context 8 --batch 1 "
              "--warmup 0 --steps 1 --device cpu");
  const std::int64_t held = Allocator::instance().stats(Device::cpu()).current_bytes;
  const ModelBenchRow r = run_model_bench_case(expand_model_cases(huge).front(), huge);
  EXPECT_TRUE(r.oom);
  EXPECT_NE(r.oom_message.find("out of host memory"), std::string::npos) << r.oom_message;
  EXPECT_EQ(Allocator::instance().stats(Device::cpu()).current_bytes, held);  // nothing leaked
  EXPECT_GT(r.parameters, std::int64_t{1} << 48);
  EXPECT_NE(format_model_bench({r}, false).find("| OOM "), std::string::npos);
  const nlohmann::json row = model_bench_document(huge, {r})["rows"][0];
  EXPECT_EQ(row["oom"], true);
  EXPECT_EQ(row["size"], "custom");
  EXPECT_FALSE(row.contains("step_ms"));

  const ModelBenchConfig small = tiny("--context 8 --warmup 0 --steps 1 --mode fwd");
  EXPECT_FALSE(run_model_bench_case(expand_model_cases(small).front(), small).oom);
}

TEST(MemoryTimeline, ClassifiesTheModelsTags) {
  EXPECT_EQ(classify_memory_tag("parameters"), MemoryCategory::parameters);
  EXPECT_EQ(classify_memory_tag("gradients"), MemoryCategory::gradients);
  EXPECT_EQ(classify_memory_tag("optimizer state (exp_avg)"), MemoryCategory::optimizer_state);
  EXPECT_EQ(classify_memory_tag("optimizer state (exp_avg_sq)"), MemoryCategory::optimizer_state);
  EXPECT_EQ(classify_memory_tag("activations"), MemoryCategory::activations);
  EXPECT_EQ(classify_memory_tag("workspace"), MemoryCategory::workspace);
  EXPECT_EQ(classify_memory_tag("attention.naive.S"), MemoryCategory::workspace);
  EXPECT_EQ(classify_memory_tag("gemm.workspace"), MemoryCategory::workspace);
  EXPECT_EQ(classify_memory_tag("token ids (inputs)"), MemoryCategory::other);
  EXPECT_EQ(classify_memory_tag("init staging"), MemoryCategory::other);
  EXPECT_EQ(classify_memory_tag("bench.q"), MemoryCategory::other);
  EXPECT_STREQ(name_of(MemoryCategory::optimizer_state), "optimizer_state");
}

AllocationEvent event(const char* device, std::int64_t bytes, std::int64_t current, const char* tag,
                      const char* phase) {
  return {0.0, device, bytes, current, tag, phase};
}

std::int64_t at(const MemoryPhaseSummary& s, MemoryCategory c) { return s.at_peak[static_cast<std::size_t>(c)]; }

TEST(MemoryTimeline, SummaryOfASyntheticTimeline) {
  MemoryTimeline t;
  t.device = "cuda:0";
  t.start_bytes = 100;  // held before recording
  t.phases = {{"init", 0, 1}, {"forward", 1, 2}, {"backward", 2, 3}, {"optimizer", 3, 4}};
  t.events = {
      event("cuda:0", 1000, 1100, "parameters", "init"),
      event("cpu", 7, 7, "init staging", "init"),  // another device: not in the summary
      event("cuda:0", 1000, 2100, "gradients", "init"),
      event("cuda:0", 500, 2600, "activations", "init"),
      event("cuda:0", 300, 2900, "attention.naive.S", "forward"),
      event("cuda:0", -300, 2600, "attention.naive.S", "forward"),
      event("cuda:0", 400, 3000, "attention.naive.dk", "backward"),
      event("cuda:0", 200, 3200, "gemm.workspace", "backward"),
      event("cuda:0", -400, 2800, "attention.naive.dk", "backward"),
      event("cuda:0", -60, 2740, "old buffer", "backward"),  // allocated before recording
  };
  const std::vector<MemoryPhaseSummary> s = summarize_memory_timeline(t);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].phase, "init");
  EXPECT_EQ(s[0].start_bytes, 100);
  EXPECT_EQ(s[0].peak_bytes, 2600);
  EXPECT_EQ(s[0].end_bytes, 2600);
  EXPECT_EQ(s[0].events, 3);
  EXPECT_EQ(at(s[0], MemoryCategory::parameters), 1000);
  EXPECT_EQ(at(s[0], MemoryCategory::gradients), 1000);
  EXPECT_EQ(at(s[0], MemoryCategory::activations), 500);
  EXPECT_EQ(at(s[0], MemoryCategory::other), 100);

  EXPECT_EQ(s[1].peak_bytes, 2900);
  EXPECT_EQ(at(s[1], MemoryCategory::workspace), 300);
  EXPECT_EQ(s[1].allocated_bytes, 300);
  EXPECT_EQ(s[1].freed_bytes, 300);

  EXPECT_EQ(s[2].start_bytes, 2600);
  EXPECT_EQ(s[2].peak_bytes, 3200);
  EXPECT_EQ(at(s[2], MemoryCategory::workspace), 600);
  EXPECT_EQ(s[2].end_bytes, 2740);
  EXPECT_EQ(s[2].freed_bytes, 460);

  // No events: the peak is the level carried over, held as after the free of pre-recording memory.
  EXPECT_EQ(s[3].events, 0);
  EXPECT_EQ(s[3].peak_bytes, 2740);
  EXPECT_EQ(at(s[3], MemoryCategory::other), 40);
  EXPECT_EQ(at(s[3], MemoryCategory::workspace), 200);
  for (const MemoryPhaseSummary& p : s) {
    std::int64_t sum = 0;
    for (std::int64_t bytes : p.at_peak) sum += bytes;
    EXPECT_EQ(sum, p.peak_bytes) << p.phase;
  }

  const std::string table = format_memory_summary(s, false);
  EXPECT_NE(table.find("| phase     | peak_mib | parameters_mib | gradients_mib | optimizer_state_mib"),
            std::string::npos)
      << table;

  MemoryTimeline unknown = t;
  unknown.events.push_back(event("cuda:0", 10, 2750, "x", "evaluation"));
  EXPECT_THROW(summarize_memory_timeline(unknown), Error);
  MemoryTimeline backwards = t;
  backwards.events.push_back(event("cuda:0", 10, 2750, "x", "init"));
  EXPECT_THROW(summarize_memory_timeline(backwards), Error);
  MemoryTimeline mismatched = t;
  mismatched.events.push_back(event("cuda:0", 10, 9999, "x", "optimizer"));
  EXPECT_THROW(summarize_memory_timeline(mismatched), Error);
}

TEST(MemoryTimeline, RecorderLabelsPhasesAndRestoresTheAllocatorsPhase) {
  Allocator& allocator = Allocator::instance();
  allocator.set_phase("before");
  MemoryRecorder recorder;
  recorder.start(Device::cpu(), "init");
  Buffer held(64, Device::cpu(), "parameters");
  recorder.phase("forward");
  { Buffer scratch(1000, Device::cpu(), "attention.naive.S"); }
  EXPECT_THROW(recorder.phase("init"), Error);  // names do not repeat
  recorder.phase("backward");
  const MemoryTimeline t = recorder.stop();
  EXPECT_EQ(allocator.phase(), "before");
  EXPECT_FALSE(allocator.recording());
  allocator.set_phase("init");

  ASSERT_EQ(t.phases.size(), 3u);
  for (std::size_t i = 0; i < t.phases.size(); ++i) {
    EXPECT_LE(t.phases[i].start_ms, t.phases[i].end_ms);
    if (i > 0) EXPECT_EQ(t.phases[i].start_ms, t.phases[i - 1].end_ms);
  }
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0].phase, "init");
  EXPECT_EQ(t.events[1].phase, "forward");
  EXPECT_EQ(t.events[2].bytes, -1000);
  EXPECT_EQ(t.end_bytes, t.start_bytes + 64);
  const std::vector<MemoryPhaseSummary> s = summarize_memory_timeline(t);
  EXPECT_EQ(s[1].peak_bytes, t.start_bytes + 1064);
  EXPECT_EQ(at(s[1], MemoryCategory::workspace), 1000);
  EXPECT_EQ(at(s[1], MemoryCategory::parameters), 64);
  EXPECT_EQ(s[2].events, 0);
  EXPECT_EQ(s[2].peak_bytes, t.start_bytes + 64);
  EXPECT_THROW(recorder.phase("late"), Error);  // stopped
}

// Profiles one tiny step and checks the timeline against the model's own memory report.
void check_profile(const std::string& options, const std::vector<std::string>& phases) {
  const ModelBenchConfig config = tiny(options);
  const ModelBenchCase c = expand_model_cases(config).front();
  const MemoryTimeline t = profile_model_memory(c, config);

  ASSERT_EQ(t.phases.size(), phases.size());
  for (std::size_t i = 0; i < phases.size(); ++i) EXPECT_EQ(t.phases[i].name, phases[i]);
  std::set<std::string> listed(phases.begin(), phases.end()), init_tags;
  std::int64_t deltas = 0;
  for (const AllocationEvent& e : t.events) {
    EXPECT_TRUE(listed.count(e.phase)) << e.phase;
    if (e.phase == "init") init_tags.insert(e.tag);
    deltas += e.bytes;
  }
  EXPECT_EQ(t.end_bytes, t.start_bytes + deltas);

  // The same model, outside the recording, for its memory report.
  ModelOptions mo;
  mo.precision = c.precision;
  mo.max_batch = config.batch;
  mo.device = Device::cpu();
  mo.training = c.mode != BenchMode::fwd;  // fwd profiles an inference model: no gradients
  const TransformerLM model(c.model, mo);
  const MemoryReport expected = model.memory();
  const std::int64_t numel = model.layout().numel();
  const bool train = c.mode == BenchMode::train;
  const std::int64_t grad_bytes = mo.training ? numel * 4 : 0;
  EXPECT_EQ(static_cast<std::int64_t>(expected.gradients), grad_bytes);
  for (const char* tag : {"parameters", "activations", "workspace"}) EXPECT_TRUE(init_tags.count(tag)) << tag;
  EXPECT_EQ(init_tags.count("gradients"), mo.training ? 1u : 0u);
  EXPECT_EQ(init_tags.count("optimizer state (exp_avg)"), train ? 1u : 0u);

  const std::vector<MemoryPhaseSummary> s = summarize_memory_timeline(t);
  ASSERT_EQ(s.size(), phases.size());
  const MemoryPhaseSummary& init = s[0];
  const std::int64_t param_bytes = numel * 4;  // the fp32 masters (bf16 casts live in the workspace)
  EXPECT_EQ(at(init, MemoryCategory::parameters), param_bytes);
  EXPECT_EQ(static_cast<std::size_t>(param_bytes), expected.parameters);
  EXPECT_EQ(at(init, MemoryCategory::gradients), grad_bytes);
  EXPECT_EQ(at(init, MemoryCategory::optimizer_state), train ? 2 * numel * 4 : 0);
  EXPECT_EQ(at(init, MemoryCategory::activations), static_cast<std::int64_t>(expected.activations));
  EXPECT_EQ(at(init, MemoryCategory::workspace), static_cast<std::int64_t>(expected.workspace));
  EXPECT_EQ(at(init, MemoryCategory::other), t.start_bytes);  // the CPU keeps token ids in host vectors
  std::int64_t previous_end = t.start_bytes;
  for (const MemoryPhaseSummary& p : s) {
    EXPECT_EQ(p.start_bytes, previous_end) << p.phase;
    EXPECT_GE(p.peak_bytes, std::max(p.start_bytes, p.end_bytes)) << p.phase;
    std::int64_t sum = 0;
    for (std::int64_t bytes : p.at_peak) sum += bytes;
    EXPECT_EQ(sum, p.peak_bytes) << p.phase;
    std::int64_t count = 0;
    for (const AllocationEvent& e : t.events) count += e.phase == p.phase;
    EXPECT_EQ(p.events, count) << p.phase;
    previous_end = p.end_bytes;
  }
  EXPECT_EQ(s.back().end_bytes, t.end_bytes);
  // The step itself allocates nothing on the CPU: every buffer was planned at init.
  EXPECT_EQ(s.back().end_bytes, init.end_bytes);

  testing_util::TempFolder folder;
  const std::string path = folder.file("memory.json");
  write_json_atomic(path, memory_timeline_document(t, Device::cpu(), memory_profile_config(c, config)));
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["benchmark"], "memory-timeline");
  EXPECT_EQ(doc["memory_device"], "cpu");
  EXPECT_EQ(doc["config"]["mode"], name_of(c.mode));
  EXPECT_EQ(doc["config"]["parameters"], numel);
  EXPECT_EQ(doc["phases"].size(), phases.size());
  ASSERT_EQ(doc["events"].size(), t.events.size());
  const nlohmann::json& first = doc["events"][0];
  for (const char* key : {"time_ms", "device", "bytes", "current_bytes", "tag", "phase", "category"})
    EXPECT_TRUE(first.contains(key)) << key;
  EXPECT_EQ(first["tag"], "parameters");
  EXPECT_EQ(first["category"], "parameters");
  ASSERT_EQ(doc["rows"].size(), phases.size());
  EXPECT_EQ(doc["rows"][0]["parameters_bytes"], param_bytes);
  EXPECT_EQ(doc["rows"][0]["gradients_bytes"], grad_bytes);
  EXPECT_EQ(doc["rows"].back()["end_bytes"], t.end_bytes);
}

TEST(MemoryProfile, TinyTrainStepFp32) {
  check_profile("--context 32 --warmup 1 --mode train --precision fp32",
                {"init", "warmup", "forward", "backward", "optimizer"});
}

TEST(MemoryProfile, TinyTrainStepBf16WithoutWarmup) {
  check_profile("--context 16 --warmup 0 --mode train --precision bf16", {"init", "forward", "backward", "optimizer"});
}

TEST(MemoryProfile, TinyForwardAndForwardBackward) {
  check_profile("--context 16 --warmup 0 --mode fwd", {"init", "forward"});
  check_profile("--context 16 --warmup 2 --mode fwd_bwd", {"init", "warmup", "forward", "backward"});
}

}  // namespace
}  // namespace ft::cli
