// model_bench.cpp — `flashtrain bench model`: option validation, the timed steps of each case (NVTX
// ranges "warmup step N" and "step N" around them; the model adds "model forward", "model backward",
// per-layer and "optimizer step" ranges inside), OOM rows, the table, the results document, the
// memory profile of one step and the kernel profile of the timed steps. The fwd mode builds an inference
// model (ModelOptions::training = false): no gradients and no backward buffers, so its peak is that of a
// forward-only run.
#include "flashtrain/model_bench.h"

#include <chrono>
#include <optional>

#include "bench/report_table.h"
#include "bench/results_json.h"
#include "core/allocator.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "core/tensor_io.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/out_of_memory.h"
#include "model/data_loader.h"
#include "model/graphed_step.h"
#include "model/parameters.h"
#include "model/token_staging.h"
#include "model/trainer.h"
#include "model/transformer.h"

namespace ft::cli {

namespace {


TokenBatch random_batch(const ModelBenchCase& c, const ModelBenchConfig& config) {
  Rng rng(config.seed);
  TokenBatch batch;
  random_token_batch(rng, config.batch, c.model.context_length, c.model.vocab_size, batch);
  return batch;
}

// The model's stream: one of its own for --cuda-graph (CUDA cannot capture the legacy default stream).
Stream bench_stream(const ModelBenchConfig& config) {
  if (config.cuda_graph) return Stream::create(config.device);
  return Stream();
}

TrainerConfig trainer_config() {
  TrainerConfig t;
  t.max_grad_norm = kBenchClipNorm;
  return t;
}

// One case's model (and Trainer in train mode) with its batch, stepped as the mode says.
class BenchStep {
 public:
  BenchStep(const ModelBenchCase& c, const ModelBenchConfig& config)
      : device_(config.device),
        mode_(c.mode),
        stream_(bench_stream(config)),
        model_(c.model, model_bench_options(c, config, stream_)),
        batch_(random_batch(c, config)),
        staging_(config.device, config.batch, c.model.context_length),
        ids_(staging_.place(batch_)) {
    if (mode_ == BenchMode::train) {
      trainer_.emplace(model_, trainer_config());
      if (config.cuda_graph) graphed_.emplace(*trainer_);
    }
  }

  // One step, finished on the device when it returns. With a recorder, its phases are labelled
  // "forward" (with the loss gradient), "backward" and "optimizer".
  void run(MemoryRecorder* recorder) {
    const auto& [inputs, targets] = ids_;
    if (recorder) recorder->phase("forward");
    std::function<void()> enter_backward;
    if (recorder) enter_backward = [recorder] { recorder->phase("backward"); };
    switch (mode_) {
      case BenchMode::fwd:
        model_.forward(inputs, targets);
        break;
      case BenchMode::fwd_bwd: {
        BackwardOptions options;
        options.on_backward_start = enter_backward;
        model_.forward_backward(inputs, targets, options);
        break;
      }
      case BenchMode::train:
        if (graphed_) {  // the host ids are checked and copied into the graph's buffers each step
          graphed_->step(batch_.input_ids(), batch_.target_ids());
          break;
        }
        trainer_->zero_grads();
        trainer_->set_backward_start_hook(enter_backward);
        trainer_->forward_backward(inputs, targets);
        trainer_->set_backward_start_hook({});
        if (recorder) recorder->phase("optimizer");
        trainer_->optimizer_step();
        break;
    }
    if (device_.is_cuda()) model_.options().stream.synchronize();
  }

  // Wall-clock milliseconds of one step inside an NVTX range of that name.
  double timed(const std::string& range_name) {
    NvtxRange range(range_name);
    const auto start = std::chrono::steady_clock::now();
    run(nullptr);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }

  std::int64_t parameters() const { return model_.layout().numel(); }

 private:
  Device device_;
  BenchMode mode_;
  Stream stream_;  // the model's (owned for --cuda-graph)
  TransformerLM model_;
  TokenBatch batch_;  // (B, T) host ids, the same every step
  TokenStaging staging_;
  std::pair<TokenIds, TokenIds> ids_;  // (inputs, targets) where the model reads them
  std::optional<Trainer> trainer_;
  std::optional<GraphedTrainStep> graphed_;  // --cuda-graph
};

nlohmann::json case_fields(const ModelBenchCase& c, const ModelBenchConfig& config) {
  const ModelConfig& m = c.model;
  return {{"size", m.name},           {"d_model", m.d_model},   {"d_ff", m.d_ff},
          {"layers", m.num_layers},   {"heads", m.num_heads},   {"vocab", m.vocab_size},
          {"ctx", m.context_length},  {"batch", config.batch},  {"precision", name_of(c.precision)},
          {"mode", name_of(c.mode)},  {"attention", name_of(config.attention)},
          {"rope_theta", m.rope_theta}, {"recompute", name_of(config.model_training.recompute)},
          {"offload_activations", config.model_training.offload_activations},
          {"deterministic_attention", config.model_training.deterministic_attention}};
}

// The case and the run settings a profile document's config shares (kernel and memory profiles).
nlohmann::json profile_case_fields(const ModelBenchCase& c, const ModelBenchConfig& config) {
  nlohmann::json cfg = case_fields(c, config);
  cfg["parameters"] = ParameterLayout(c.model).numel();
  cfg["warmup"] = config.warmup;
  cfg["tf32"] = config.tf32;
  cfg["seed"] = config.seed;
  return cfg;
}

}  // namespace

ModelOptions model_bench_options(const ModelBenchCase& c, const ModelBenchConfig& config, const Stream& stream) {
  ModelOptions o;
  o.precision = c.precision;
  o.attention = config.attention;
  o.max_batch = config.batch;
  o.max_seq_len = c.model.context_length;
  o.device = config.device;
  o.seed = config.seed;
  o.allow_tf32 = config.tf32;
  o.training = c.mode != BenchMode::fwd;
  config.model_training.apply_to(o);
  o.stream = stream;
  return o;
}

const char* name_of(BenchMode mode) {
  switch (mode) {
    case BenchMode::fwd: return "fwd";
    case BenchMode::fwd_bwd: return "fwd_bwd";
    case BenchMode::train: return "train";
  }
  return "fwd";
}

BenchMode parse_bench_mode(std::string_view text) {
  if (text == "fwd") return BenchMode::fwd;
  if (text == "fwd_bwd") return BenchMode::fwd_bwd;
  if (text == "train") return BenchMode::train;
  FT_THROW(invalid_argument, "unknown mode '", text, "': expected fwd, fwd_bwd or train");
}

ModelBenchConfig resolve_bench_model_options(const BenchModelOptions& o) {
  ModelBenchConfig config;
  const ModelShapeOverrides shape{.d_model = o.d_model, .d_ff = o.d_ff, .num_layers = o.layers,
                                  .num_heads = o.heads, .vocab_size = o.vocab, .context_length = {},
                                  .rope_theta = o.rope_theta};
  const bool explicit_model = o.sizes.empty() && shape.changes_blocks();
  if (explicit_model) {
    std::string missing;
    for (auto [name, value] : {std::pair{"--d-model", o.d_model}, std::pair{"--d-ff", o.d_ff},
                               std::pair{"--layers", o.layers}, std::pair{"--heads", o.heads}})
      if (!value) missing += std::string(missing.empty() ? "" : ", ") + name;
    FT_CHECK(missing.empty(), "an explicit model needs --d-model, --d-ff, --layers and --heads; missing ", missing,
             " (or give --size to replace a named size's fields)");
    ModelConfig m;
    m.name = "custom";
    config.models.push_back(m);
  } else {
    config.models = parse_list<ModelConfig>("--size", o.sizes.empty() ? "small" : o.sizes,
                                            [](const std::string& name) { return model_config(name); });
  }
  config.contexts = parse_list<std::int64_t>("--context", o.contexts, [](const std::string& text) {
    const std::int64_t ctx = parse_integer(text);
    FT_CHECK(ctx >= 1, "expected context lengths >= 1, given ", ctx);
    return ctx;
  });
  for (ModelConfig& m : config.models) {
    m.context_length = config.contexts.front();
    m = for_option("--d-model/--d-ff/--layers/--heads/--vocab/--rope-theta", [&] { return with_overrides(m, shape); });
  }
  config.precisions = parse_list<Precision>("--precision", o.precisions, parse_precision);
  config.modes = parse_list<BenchMode>("--mode", o.modes, parse_bench_mode);
  config.attention = for_option("--attention", [&] { return parse_attention_impl(o.attention); });
  config.model_training = resolve_model_training_options(o.model_training);
  config.tf32 = o.tf32;
  config.device = device_or_auto(for_option("--device", [&] { return parse_device_option(o.device); }));

  FT_CHECK(o.batch >= 1, "--batch must be >= 1, given ", o.batch);
  FT_CHECK(o.warmup >= 0, "--warmup must be >= 0, given ", o.warmup);
  FT_CHECK(o.steps >= 1, "--steps must be >= 1, given ", o.steps);
  config.batch = o.batch;
  config.warmup = o.warmup;
  config.steps = o.steps;
  config.seed = o.seed;

  FT_CHECK(o.profile.empty() || o.profile == "memory" || o.profile == "kernels",
           "--profile: expected memory or kernels, given '", o.profile, "'");
  config.profile_memory = o.profile == "memory";
  config.profile_kernels = o.profile == "kernels";
  FT_CHECK(o.memory_json.empty() || config.profile_memory, "--memory-json ", o.memory_json,
           " needs --profile memory (it is where the memory timeline goes)");
  config.memory_json = o.memory_json;
  FT_CHECK(o.json_path.empty() || !config.profile_memory, "--json ", o.json_path,
           " writes timing results, which --profile memory does not produce; use --memory-json for the timeline");
  FT_CHECK(o.kernels_json.empty() || config.profile_kernels, "--kernels-json ", o.kernels_json,
           " needs --profile kernels (it is where the kernel summary goes)");
  config.kernels_json = o.kernels_json;
  FT_CHECK(o.json_path.empty() || !config.profile_kernels, "--json ", o.json_path,
           " writes timing results, which --profile kernels does not produce; use --kernels-json for the kernel "
           "summary");
  if (config.profile_kernels) {
    FT_CHECK_KIND(unsupported, kernel_profiler_available(), "--profile kernels: ", kernel_profiler_missing());
    const std::size_t cases = expand_model_cases(config).size();
    FT_CHECK(cases == 1, "--profile kernels profiles the timed steps of one case: give one --size, --context, ",
             "--precision and --mode (one run per mode); given ", config.models.size(), " size(s), ",
             config.contexts.size(), " context(s), ", config.precisions.size(), " precision(s), ",
             config.modes.size(), " mode(s)");
    FT_CHECK_KIND(unsupported, config.device.is_cuda(), "--profile kernels records CUDA kernels and needs a CUDA "
                  "device, given --device ", o.device, o.device == "auto" ? " (no GPU is visible)" : "");
  }
  config.cuda_graph = o.cuda_graph;
  if (config.cuda_graph) {
    FT_CHECK_KIND(unsupported, config.device.is_cuda(), "--cuda-graph captures the train step in a CUDA graph and "
                  "needs a CUDA device, given --device ", o.device, o.device == "auto" ? " (no GPU is visible)" : "");
    for (BenchMode mode : config.modes)
      FT_CHECK(mode == BenchMode::train, "--cuda-graph graphs the train step: give --mode train, given --mode ",
               o.modes);
    FT_CHECK(!config.profile_memory, "--cuda-graph and --profile memory exclude each other: the allocator cannot "
             "label the phases of a replayed graph (profile the eager step)");
    FT_CHECK(!config.profile_kernels, "--cuda-graph and --profile kernels exclude each other: a replayed graph "
             "carries no NVTX ranges, so no kernel would be attributed to forward, backward or the optimizer "
             "(profile the eager step)");
  }
  if (config.profile_memory) {
    const std::size_t cases = expand_model_cases(config).size();
    FT_CHECK(cases == 1, "--profile memory records one step of one case: give one --size, --context, --precision ",
             "and --mode; given ", config.models.size(), " size(s), ", config.contexts.size(), " context(s), ",
             config.precisions.size(), " precision(s), ", config.modes.size(), " mode(s)");
  }
  return config;
}

std::vector<ModelBenchCase> expand_model_cases(const ModelBenchConfig& config) {
  std::vector<ModelBenchCase> cases;
  for (const ModelConfig& m : config.models)
    for (std::int64_t ctx : config.contexts)
      for (Precision p : config.precisions)
        for (BenchMode mode : config.modes) {
          ModelBenchCase c{m, p, mode};
          c.model.context_length = ctx;
          cases.push_back(std::move(c));
        }
  return cases;
}

ModelBenchRow run_model_bench_case(const ModelBenchCase& c, const ModelBenchConfig& config) {
  ModelBenchRow row;
  row.c = c;
  Allocator& allocator = Allocator::instance();
  try {
    BenchStep step(c, config);
    row.parameters = step.parameters();
    for (std::int64_t i = 1; i <= config.warmup; ++i) row.warmup_ms.push_back(step.timed(str("warmup step ", i)));
    allocator.reset_peak(config.device);
    for (std::int64_t i = 1; i <= config.steps; ++i) row.step_ms.push_back(step.timed(str("step ", i)));
    row.peak_gib = static_cast<double>(allocator.stats(config.device).peak_bytes) / kBytesPerGiB;
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    row = ModelBenchRow();
    row.c = c;
    row.parameters = ParameterLayout(c.model).numel();
    row.oom = true;
    row.oom_message = out_of_memory_message(e);
    return row;
  }
  row.timed = summarize(row.step_ms);
  row.first_step_ms = row.warmup_ms.empty() ? row.step_ms.front() : row.warmup_ms.front();
  row.tokens_per_s = static_cast<double>(config.batch * c.model.context_length) / (row.timed.median / 1e3);
  return row;
}

std::string describe_model_training(const ModelTrainingOptions& options) {
  return str("recompute ", name_of(options.recompute), options.offload_activations ? " with offloaded activations" : "",
             options.deterministic_attention ? "" : ", atomic attention backward",
             options.gemm_autotune > 0 ? str(", GEMMs autotuned over ", options.gemm_autotune, " candidates") : "");
}

std::string format_model_bench(const std::vector<ModelBenchRow>& rows, bool csv) {
  ReportTable table({"size", "params_m", "ctx", "precision", "mode", "first_step_ms", "step_ms", "mean_ms", "std_ms",
                     "min_ms", "peak_gib", "tokens_per_s"});
  for (const ModelBenchRow& r : rows) {
    std::vector<std::string> cells{r.c.model.name, fixed(static_cast<double>(r.parameters) / 1e6, 1),
                                   std::to_string(r.c.model.context_length), name_of(r.c.precision),
                                   name_of(r.c.mode)};
    if (r.oom) {
      cells.resize(12, "OOM");
    } else {
      for (double ms : {r.first_step_ms, r.timed.median, r.timed.mean, r.timed.stddev, r.timed.min})
        cells.push_back(fixed(ms, 2));
      cells.push_back(fixed(r.peak_gib, 3));
      cells.push_back(fixed(r.tokens_per_s, 0));
    }
    table.add_row(std::move(cells));
  }
  return csv ? table.csv() : table.markdown();
}

nlohmann::json model_bench_document(const ModelBenchConfig& config, const std::vector<ModelBenchRow>& rows) {
  nlohmann::json out_rows = nlohmann::json::array();
  for (const ModelBenchRow& r : rows) {
    nlohmann::json row = case_fields(r.c, config);
    row["parameters"] = r.parameters;
    if (r.oom) {
      row["oom"] = true;
      row["error"] = r.oom_message;
    } else {
      row.update({{"step_ms", r.timed.median},
                  {"mean_ms", r.timed.mean},
                  {"std_ms", r.timed.stddev},
                  {"min_ms", r.timed.min},
                  {"max_ms", r.timed.max},
                  {"first_step_ms", r.first_step_ms},
                  {"warmup_ms", r.warmup_ms},
                  {"peak_gib", r.peak_gib},
                  {"tokens_per_s", r.tokens_per_s}});
    }
    out_rows.push_back(std::move(row));
  }
  nlohmann::json cfg{{"batch", config.batch},
                     {"vocab", config.models.front().vocab_size},
                     {"warmup", config.warmup},
                     {"steps", config.steps},
                     {"attention", name_of(config.attention)},
                     {"tf32", config.tf32},
                     {"cuda_graph", config.cuda_graph},
                     {"seed", config.seed},
                     {"timing", "wall clock per step, synchronised after each; step_ms is the median of the timed "
                                "steps, first_step_ms the first step run (a warm-up step when warmup > 0)"},
                     {"modes", "fwd: forward and loss on a model built for inference (no gradients, no backward "
                               "buffers); fwd_bwd: forward and backward; train: forward, backward, gradient clipping "
                               "to 1.0 and AdamW"},
                     {"peak", "peak flashtrain-held memory on the device over the timed steps (parameters, gradients "
                              "in fwd_bwd and train modes, optimizer state in train mode, activations, workspace; "
                              "fwd holds only what the forward needs)"}};
  cfg.update(training_fields(config.model_training));
  return results_document("model", config.device, std::move(cfg), std::move(out_rows));
}

MemoryTimeline profile_model_memory(const ModelBenchCase& c, const ModelBenchConfig& config) {
  MemoryRecorder recorder;
  recorder.start(config.device, "init");
  BenchStep step(c, config);
  if (config.warmup > 0) recorder.phase("warmup");
  for (std::int64_t i = 1; i <= config.warmup; ++i) step.timed(str("warmup step ", i));
  {
    NvtxRange range("step 1");
    step.run(&recorder);
  }
  return recorder.stop();
}

ModelKernelProfile profile_model_kernels(const ModelBenchCase& c, const ModelBenchConfig& config) {
  BenchStep step(c, config);
  for (std::int64_t i = 1; i <= config.warmup; ++i) step.timed(str("warmup step ", i));
  ModelKernelProfile out;
  KernelProfiler profiler;
  profiler.start();
  for (std::int64_t i = 1; i <= config.steps; ++i) out.step_ms.push_back(step.timed(str("step ", i)));
  out.profile = profiler.stop();
  return out;
}

std::vector<std::string> kernel_profile_ranges(BenchMode mode) {
  switch (mode) {
    case BenchMode::fwd: return {"step *", "model forward"};
    case BenchMode::fwd_bwd: return {"step *", "model forward", "model backward"};
    case BenchMode::train: return {"step *", "model forward", "model backward", "optimizer step"};
  }
  return {"step *"};
}

nlohmann::json kernel_profile_config(const ModelBenchCase& c, const ModelBenchConfig& config) {
  nlohmann::json cfg = profile_case_fields(c, config);
  cfg["steps"] = config.steps;
  cfg["ranges"] = kernel_profile_ranges(c.mode);
  cfg["profiler"] = "CUPTI activity records (kernels, memcpys, memsets) of the timed steps, after the warm-up "
                    "steps; each attributed to the NVTX ranges open at its launch through CUPTI external "
                    "correlation ids";
  cfg["ranges_note"] = "'step *' = every timed step (the overall summary); 'model forward' includes the loss "
                       "(and its fused gradient when the mode trains); figures per occurrence are per step";
  return cfg;
}

nlohmann::json memory_profile_config(const ModelBenchCase& c, const ModelBenchConfig& config) {
  nlohmann::json cfg = profile_case_fields(c, config);
  cfg["categories"] = {
      {"parameters", "tag 'parameters' (fp32 masters; bf16 casts of a block's weights are workspace)"},
      {"gradients", "tag 'gradients'"},
      {"optimizer_state", "tags 'optimizer state ...' (AdamW exp_avg, exp_avg_sq)"},
      {"activations", "tag 'activations' (the arena of tensors saved for backward; in fwd mode one "
                       "residual stream and one layer's temporaries)"},
      {"workspace", "tag 'workspace' (per-layer temporaries) and every other tag (op temporaries)"},
      {"other", "tags 'token ids ...', 'init staging', 'bench. ...', and memory held before recording"}};
  cfg["phases"] = "init: model, trainer, token ids; warmup: the warm-up steps; then one step: forward, "
                  "backward (after the loss gradient), optimizer";
  return cfg;
}

}  // namespace ft::cli
