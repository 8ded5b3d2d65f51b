// fsdp_bench.cpp — `flashtrain bench fsdp`: option validation, each row's model under its ZeRO stage with a
// memory recording, the timed steps, gathers over ranks, the table and the results document.
#include "flashtrain/fsdp_bench.h"

#include <algorithm>
#include <iostream>
#include <memory>

#include "bench/report_table.h"
#include "bench/results_json.h"
#include "core/error.h"
#include "dist/ddp_transformer.h"
#include "dist/fsdp.h"
#include "dist/fsdp_plan.h"
#include "dist/zero_transformer.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/ddp_bench.h"
#include "flashtrain/timeline_profile.h"
#include "train/throughput.h"
#include "model/parameters.h"

namespace ft::cli {

namespace {

double gib(std::int64_t bytes) { return static_cast<double>(bytes) / kBytesPerGiB; }

int parse_stage(const std::string& text) {
  FT_CHECK(text == "0" || text == "1" || text == "2" || text == "3", "unknown ZeRO stage '", text,
           "': expected 0 (DDP), 1, 2 or 3");
  return text[0] - '0';
}

// This rank's memory figures of a finished row, as one list (the gather's layout): peak, then by category.
std::vector<std::int64_t> rank_memory(const std::vector<MemoryPhaseSummary>& summary) {
  const auto peak = std::max_element(summary.begin(), summary.end(), [](const auto& a, const auto& b) {
    return a.peak_bytes < b.peak_bytes;
  });
  FT_CHECK_KIND(runtime, peak != summary.end(), "bench fsdp: the memory timeline is empty");
  std::vector<std::int64_t> v{peak->peak_bytes};
  v.insert(v.end(), peak->at_peak.begin(), peak->at_peak.end());
  return v;
}

// The stage's machinery around a replica: what it attaches to the Trainer, and the synchronisation the step
// runs after backward. Declared in the order of destruction the hooks need (hooks cleared first).
struct StageRun {
  std::optional<Fsdp> fsdp;  // stages 2, 3: built before the replica, whose model reads from it
  std::optional<DataParallelReplica> replica;
  std::optional<DistributedDataParallel> ddp;
  std::optional<ZeroOptimizer> zero;
  std::optional<HookReset> reset;
};

void build_stage(StageRun& run, const FsdpBenchCase& c, const FsdpBenchConfig& config, Communicator& comm) {
  const ModelBenchConfig& m = config.model;
  if (c.stage >= 2) {
    FsdpOptions options{.stage = c.stage,
                        .precision = c.model.precision,
                        .adamw = {},
                        .max_grad_norm = kBenchClipNorm,
                        .seed = m.seed,
                        .bf16_grad_comm = config.bf16_grad_comm,
                        .device = m.device,
                        .stream = m.stream};
    run.fsdp.emplace(comm, c.model.model, options);
  }
  run.replica.emplace(c.model, m, c.stage > 0, comm.rank(), run.fsdp ? &*run.fsdp : nullptr);
  Trainer& trainer = run.replica->trainer();
  if (c.stage == 0) {
    DdpOptions options;
    options.strategy = DdpStrategy::bucketed;
    options.bucket_size_mb = config.bucket_mb;
    options.bf16_communication = config.bf16_grad_comm;
    run.ddp.emplace(comm, ddp_model(run.replica->model()), options);
    attach(*run.ddp, trainer);
  } else if (c.stage == 1) {
    run.zero.emplace(comm, ddp_model(run.replica->model()),
                     ZeroOptions{.mode = ZeroMode::reduce_scatter, .max_grad_norm = kBenchClipNorm});
    add_transformer_group(*run.zero, run.replica->model(), trainer.config());
    attach(*run.zero, trainer);
  } else {
    attach(*run.fsdp, trainer);
  }
  run.reset.emplace(trainer);
}

// The config of a row's kernel-timeline document (--profile timeline).
nlohmann::json timeline_config(const FsdpBenchCase& c, const FsdpBenchConfig& config, int world) {
  nlohmann::json out = {{"size", c.model.model.name},
                        {"ctx", c.model.model.context_length},
                        {"precision", name_of(c.model.precision)},
                        {"zero", c.stage},
                        {"grad_comm_dtype", config.bf16_grad_comm ? "bf16" : "fp32"},
                        {"transport", config.copy_engine && c.stage >= 2 ? "copy_engine" : "nccl"},
                        {"world", world},
                        {"local_batch", config.model.batch}};
  out.update(training_fields(config.model.model_training));
  return out;
}

FsdpBenchRow run_fsdp_row(const FsdpBenchCase& c, const FsdpBenchConfig& config, Communicator& comm,
                          Communicator& host, std::ostream* progress) {
  const ModelBenchConfig& m = config.model;
  FsdpBenchRow row = data_parallel_base_row<FsdpBenchRow>(c, m, host.world_size(), comm.backend());
  MemoryRecorder recorder;
  recorder.start(m.device, "init");
  StageRun run;
  std::string oom_message;
  std::vector<double> step_ms;  // (steps) this rank's
  std::vector<std::int64_t> mine;
  try {
    build_stage(run, c, config, comm);
    const std::function<void()> sync = [&run] {
      if (run.ddp) run.ddp->synchronize();
    };
    step_ms = recorded_steps(*run.replica, host, sync, m, recorder);
    mine = rank_memory(summarize_memory_timeline(recorder.stop()));
    if (!config.timeline_prefix.empty())
      profile_timeline(*run.replica, host, sync, fsdp_timeline_path(config.timeline_prefix, c), m.device,
                       timeline_config(c, config, host.world_size()), progress);
  } catch (const Error& e) {
    // As in bench ddp: only host collectives let the ranks agree on an OOM row after a step has started.
    if (e.kind() != ErrorKind::out_of_memory || (comm.compute_stream() && run.replica)) throw;
    oom_message = e.message();
  }
  if (any_rank(host, !oom_message.empty())) return out_of_memory_row(row, oom_message);

  set_step_figures(row, host, step_ms);
  const std::int64_t sequences = row.world * m.batch;
  const std::optional<double> peak =
      m.device.is_cpu() ? std::nullopt : peak_flops(describe_device(m.device), c.model.precision, m.tf32);
  if (peak) row.mfu = anchor_step_flops(c.model.model, sequences) / (row.step.median / 1e3) / (*peak * row.world);
  const std::vector<std::vector<std::int64_t>> all = gather_counts(host, mine);  // (world, 1 + categories)
  row.memory_rank = highest_peak_rank(all);
  row.peak_bytes = all[row.memory_rank][0];
  std::copy(all[row.memory_rank].begin() + 1, all[row.memory_rank].end(), row.at_peak.begin());
  return row;
}

}  // namespace

double anchor_step_flops(const ModelConfig& m, std::int64_t sequences) {
  const auto N = static_cast<double>(ParameterLayout(m).numel());
  const double V = static_cast<double>(m.vocab_size), D = static_cast<double>(m.d_model);
  const double T = static_cast<double>(m.context_length), S = static_cast<double>(sequences);
  return 6 * (N - V * D) * S * T + 3.5 * static_cast<double>(m.num_layers) * 4 * S * T * T * D / 2;
}

FsdpBenchConfig resolve_bench_fsdp_options(const BenchFsdpOptions& o, const Communicator& host) {
  FsdpBenchConfig config;
  config.model = resolve_data_parallel_model(o.model, host);
  config.stages = parse_list<int>("--zero", o.stages, parse_stage);
  FT_CHECK(o.bucket_mb > 0, "--bucket-mb must be > 0 (MiB of gradients per bucket), given ", o.bucket_mb);
  config.bucket_mb = o.bucket_mb;
  FT_CHECK(o.grad_comm_dtype == "fp32" || o.grad_comm_dtype == "bf16",
           "--grad-comm-dtype must be fp32 or bf16, given '", o.grad_comm_dtype, "'");
  config.bf16_grad_comm = o.grad_comm_dtype == "bf16";
  FT_CHECK(o.transport == "nccl" || o.transport == "copy_engine", "--transport must be nccl or copy_engine, given '",
           o.transport, "'");
  config.copy_engine = o.transport == "copy_engine";
  FT_CHECK_KIND(unsupported, !config.copy_engine || (config.model.device.is_cuda() && host.world_size() == 2),
                "--transport copy_engine reduce-scatters by peer copies between 2 GPUs: it needs 2 ranks on GPUs, "
                "given ", host.world_size(), " rank(s) on ", config.model.device.to_string());
  FT_CHECK(!config.bf16_grad_comm ||
               std::find(config.stages.begin(), config.stages.end(), 1) == config.stages.end(),
           "--grad-comm-dtype bf16: ZeRO-1 (stage 1) reduce-scatters in fp32 only; leave stage 1 out of --zero");
  config.timeline_prefix = resolve_timeline_prefix(o.profile, o.timeline_prefix, config.model.device);
  return config;
}

std::string fsdp_timeline_path(const std::string& prefix, const FsdpBenchCase& c) {
  return str(prefix, "-", c.model.model.name, "-ctx", c.model.model.context_length, "-", name_of(c.model.precision),
             "-zero", c.stage, ".json");
}

std::vector<FsdpBenchCase> expand_fsdp_cases(const FsdpBenchConfig& config) {
  std::vector<FsdpBenchCase> cases;
  for (const ModelBenchCase& m : expand_model_cases(config.model))
    for (int stage : config.stages) cases.push_back({m, stage});
  return cases;
}

std::vector<FsdpBenchRow> run_fsdp_bench(const FsdpBenchConfig& config, Communicator& comm, Communicator& host,
                                         std::ostream* progress) {
  std::vector<FsdpBenchRow> rows;
  for (const FsdpBenchCase& c : expand_fsdp_cases(config)) {
    // Stages 2 and 3 over the copy engine: mailboxes of the largest unit's piece in fp32.
    std::unique_ptr<Communicator> peer;
    if (config.copy_engine && c.stage >= 2) {
      FT_CHECK(config.context, "bench fsdp: --transport copy_engine needs the job's DistributedContext");
      peer = config.context->make_copy_engine_communicator(
          FsdpPlan(ParameterLayout(c.model.model), 2).max_padded() / 2 * 4);
    }
    rows.push_back(run_fsdp_row(c, config, peer ? *peer : comm, host, progress));
    if (progress)
      *progress << "  " << c.model.model.name << " ctx " << c.model.model.context_length << " "
                << name_of(c.model.precision) << " zero " << c.stage << (rows.back().oom ? ": OOM" : ": done") << "\n";
  }
  return rows;
}

std::string format_fsdp_bench(const std::vector<FsdpBenchRow>& rows, bool csv) {
  std::vector<std::string> columns{"zero", "size", "ctx", "precision", "world", "local_batch", "step_ms",
                                   "min_ms",  "tokens_per_s", "mfu", "peak_gib"};
  for (std::size_t k = 0; k < kMemoryCategories; ++k)
    columns.push_back(std::string(name_of(static_cast<MemoryCategory>(k))) + "_gib");
  ReportTable table(columns);
  for (const FsdpBenchRow& r : rows) {
    std::vector<std::string> cells{std::to_string(r.c.stage), r.c.model.model.name,
                                   std::to_string(r.c.model.model.context_length), name_of(r.c.model.precision),
                                   std::to_string(r.world), std::to_string(r.local_batch)};
    if (r.oom) {
      cells.resize(columns.size(), "OOM");
      table.add_row(std::move(cells));
      continue;
    }
    cells.push_back(fixed(r.step.median, 2));
    cells.push_back(fixed(r.step.min, 2));
    cells.push_back(fixed(r.tokens_per_s, 0));
    cells.push_back(r.mfu ? fixed(*r.mfu * 100, 1) + "%" : "n/a");
    cells.push_back(fixed(gib(r.peak_bytes), 3));
    for (std::int64_t bytes : r.at_peak) cells.push_back(fixed(gib(bytes), 3));
    table.add_row(std::move(cells));
  }
  return csv ? table.csv() : table.markdown();
}

nlohmann::json fsdp_bench_document(const FsdpBenchConfig& config, const std::vector<FsdpBenchRow>& rows) {
  FT_CHECK(!rows.empty(), "fsdp_bench_document: expected at least one row");
  nlohmann::json out_rows = nlohmann::json::array();
  for (const FsdpBenchRow& r : rows) {
    const ModelConfig& m = r.c.model.model;
    nlohmann::json row = data_parallel_row(r);
    row.update({{"zero", r.c.stage}, {"d_ff", m.d_ff}, {"heads", m.num_heads}, {"vocab", m.vocab_size}});
    row.update(training_fields(config.model.model_training));
    if (!r.oom) {
      nlohmann::json memory;
      for (std::size_t k = 0; k < kMemoryCategories; ++k)
        memory[std::string(name_of(static_cast<MemoryCategory>(k))) + "_gib"] = gib(r.at_peak[k]);
      row.update({{"mfu", r.mfu ? nlohmann::json(*r.mfu) : nlohmann::json(nullptr)},
                  {"peak_gib", gib(r.peak_bytes)},
                  {"memory_rank", r.memory_rank},
                  {"memory", std::move(memory)}});
    }
    out_rows.push_back(std::move(row));
  }
  const ModelBenchConfig& m = config.model;
  nlohmann::json cfg = data_parallel_config(m, rows.front().world, rows.front().backend);
  cfg.update({
      {"bucket_mb", config.bucket_mb},
      {"grad_comm_dtype", config.bf16_grad_comm ? "bf16" : "fp32"},
      {"transport", config.copy_engine ? "copy_engine (stages 2 and 3: reduce-scatter by peer copies)" : "nccl"},
      {"step", "zero_grads, forward and backward of the local batch, gradient averaging (DDP synchronize at zero 0, "
               "the stage's reduce-scatters otherwise), clipping to 1.0 across shards and AdamW; the device "
               "synchronised at the end"},
      {"timing", kBarrierStepTiming},
      {"mfu", "6 x (parameters - vocab x d_model) x tokens + 3.5 x layers x 4 x sequences x ctx^2 x d_model / 2 "
              "per step (the PyTorch anchor's count: recomputation not counted), over step_ms and world x the "
              "GPU's dense peak for the precision"},
      {"memory", "the allocator's timeline of the row's rank with the highest peak (memory_rank): phases init, "
                 "steps, then one more step's forward_backward and optimizer; peak_gib is the highest point, split "
                 "by category there (ZeRO-3's gather and gradient slots count as workspace)"}});
  return results_document("fsdp", m.device, std::move(cfg), std::move(out_rows));
}

void bench_fsdp(const FsdpBenchConfig& config, Communicator& comm, Communicator& host, bool csv,
                const std::string& json_path, std::ostream& out) {
  const bool root = host.rank() == 0;
  const std::vector<FsdpBenchRow> rows = run_fsdp_bench(config, comm, host, root ? &std::cerr : nullptr);
  if (!root) return;
  report_data_parallel_bench(out, "Sharded data-parallel benchmark",
                             str(describe_model_training(config.model.model_training), ", ",
                                 config.bf16_grad_comm ? "bf16" : "fp32", " gradient reduction"),
                             config.model, rows.front().world, rows.front().backend, format_fsdp_bench(rows, csv),
                             json_path, [&] { return fsdp_bench_document(config, rows); });
}

}  // namespace ft::cli
