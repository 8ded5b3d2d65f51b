// model_bench.h — `flashtrain bench model`: end-to-end timing of the Transformer LM (forward only,
// forward + backward, or the full training step with AdamW) for sweeps of sizes x context lengths x
// precisions x modes, with warm-up steps timed apart, peak memory, OOM rows, the memory profile of
// one step (the allocator timeline through phases init, warmup, forward, backward, optimizer), and the
// kernel profile of the timed steps (CUPTI: every kernel with the NVTX ranges that launched it).
// No CLI11 here: cmd_bench_model.cpp declares the options into BenchModelOptions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/kernel_profiler.h"
#include "bench/memory_timeline.h"
#include "bench/statistics.h"
#include "core/device.h"
#include "core/stream.h"
#include "flashtrain/model_training_args.h"
#include "model/config.h"
#include "model/training_options.h"
#include "model/transformer.h"
#include "ops/attention.h"

namespace ft::cli {

// fwd: TransformerLM::forward (loss, no gradients); fwd_bwd: forward_backward (gradients of the loss);
// train: zero_grads, forward_backward, optimizer_step (clipping to 1.0, AdamW) through a Trainer.
enum class BenchMode { fwd, fwd_bwd, train };
const char* name_of(BenchMode mode);
BenchMode parse_bench_mode(std::string_view text);  // "fwd" | "fwd_bwd" | "train"

// The command line's values, before validation (lists are comma-separated strings).
struct BenchModelOptions {
  std::string sizes;  // named sizes; empty = "small" unless all four block hyperparameters are given
  // Replace each size's fields; without --size, d_model, d_ff, layers and heads make an explicit model.
  std::optional<std::int64_t> d_model, d_ff, layers, heads;
  std::optional<std::int64_t> vocab;  // default: the size's (10000; tiny 97; 8b 151936)
  std::optional<double> rope_theta;   // default: 10000
  std::string contexts = "512";
  std::int64_t batch = 4;
  std::int64_t warmup = 5;
  std::int64_t steps = 10;
  std::string modes = "fwd,fwd_bwd";
  std::string precisions = "fp32";
  std::string attention = "flash";
  ModelTrainingArgs model_training;  // --recompute, --loss-chunk, --offload-activations, --nondeterministic-attention
  bool tf32 = false;
  bool cuda_graph = false;
  std::string device = "auto";
  std::uint64_t seed = 0;
  bool csv = false;
  std::string json_path;
  std::string profile;       // "", "memory" or "kernels"
  std::string memory_json;   // --profile memory: where the timeline document goes
  std::string kernels_json;  // --profile kernels: where the kernel summary document goes
};

// The validated sweep.
// Every benchmark's train step (bench model, ddp, zero) clips the gradient norm to this, as
// `flashtrain train` does by default.
inline constexpr double kBenchClipNorm = 1.0;

struct ModelBenchConfig {
  std::vector<ModelConfig> models;  // named sizes (with the overrides) or one "custom" model; context per case
  std::vector<std::int64_t> contexts;
  std::vector<Precision> precisions;
  std::vector<BenchMode> modes;
  AttentionImpl attention = AttentionImpl::flash;
  ModelTrainingOptions model_training;  // recomputation, loss chunking (every mode), offloading, determinism
  bool tf32 = false;
  bool cuda_graph = false;  // train mode: the step captured in a CUDA graph and replayed (model/graphed_step.h)
  Device device = Device::cpu();
  Stream stream;  // bench ddp / zero: the model's stream (DistributedContext::model_stream); else unused
  std::int64_t batch = 4;
  std::int64_t warmup = 5;
  std::int64_t steps = 10;
  std::uint64_t seed = 0;
  bool profile_memory = false;
  std::string memory_json;
  bool profile_kernels = false;
  std::string kernels_json;
};

struct ModelBenchCase {
  ModelConfig model;  // context_length = the case's context
  Precision precision = Precision::fp32;
  BenchMode mode = BenchMode::fwd;
};

struct ModelBenchRow {
  ModelBenchCase c;
  std::int64_t parameters = 0;
  bool oom = false;
  std::string oom_message;
  std::vector<double> warmup_ms;  // (warmup) each warm-up step
  std::vector<double> step_ms;    // (steps) each timed step
  Summary timed;                  // of step_ms
  double first_step_ms = 0;       // the first step run (a warm-up step when warmup > 0)
  double peak_gib = 0;            // peak flashtrain-held memory on the device over the timed steps
  double tokens_per_s = 0;        // batch * ctx / median step time
};

// Validates options (ft::Error invalid_argument naming the option and the value given) and fills in the
// defaults; auto devices become cuda:0 when a GPU is visible.
ModelBenchConfig resolve_bench_model_options(const BenchModelOptions& options);

// The model options of a case: fwd builds the model for inference (its peak memory is that of a
// forward-only run); the other modes build it for training. The model runs on `stream`.
ModelOptions model_bench_options(const ModelBenchCase& c, const ModelBenchConfig& config, const Stream& stream);

// Every combination, in order model, context, precision, mode.
std::vector<ModelBenchCase> expand_model_cases(const ModelBenchConfig& config);

// Builds the model (and the Trainer for train), runs warmup then steps steps on one seeded random batch,
// synchronising after each. Running out of memory gives a row with oom = true instead of throwing.
ModelBenchRow run_model_bench_case(const ModelBenchCase& c, const ModelBenchConfig& config);

// "recompute <policy>[ with offloaded activations][, atomic attention backward]": the model training options
// as the report lines of bench model and bench fsdp name them.
std::string describe_model_training(const ModelTrainingOptions& options);

// Markdown table (or CSV); OOM rows read "OOM".
std::string format_model_bench(const std::vector<ModelBenchRow>& rows, bool csv);

// Results document, benchmark "model": a row per case (step_ms = median; mean_ms, std_ms, min_ms,
// max_ms, first_step_ms, warmup_ms, peak_gib, tokens_per_s), OOM rows {"oom": true, "error"}.
nlohmann::json model_bench_document(const ModelBenchConfig& config, const std::vector<ModelBenchRow>& rows);

// The memory profile of one case: phases "init" (model, Trainer, token ids), "warmup" (config.warmup
// steps, when > 0), then one step: "forward", "backward" (fwd_bwd, train), "optimizer" (train).
// "backward" begins when the model reports the forward (and the fused loss gradient) done.
MemoryTimeline profile_model_memory(const ModelBenchCase& c, const ModelBenchConfig& config);

// The config object of the memory profile's document (the case and the sweep's settings).
nlohmann::json memory_profile_config(const ModelBenchCase& c, const ModelBenchConfig& config);

// The kernel profile of one case: config.warmup warm-up steps ("warmup step N", not profiled), then
// config.steps steps ("step N") under the KernelProfiler, timed by the wall clock as the sweep times them.
struct ModelKernelProfile {
  KernelProfile profile;
  std::vector<double> step_ms;  // (steps) wall clock of each profiled step (profiling included)
};
ModelKernelProfile profile_model_kernels(const ModelBenchCase& c, const ModelBenchConfig& config);

// The NVTX ranges a mode's kernel profile is summarised by: "step *" (whole steps) and "model forward";
// fwd_bwd adds "model backward"; train adds "model backward" and "optimizer step".
std::vector<std::string> kernel_profile_ranges(BenchMode mode);

// The config object of the kernel profile's document (the case, the sweep's settings, the ranges).
nlohmann::json kernel_profile_config(const ModelBenchCase& c, const ModelBenchConfig& config);

}  // namespace ft::cli
