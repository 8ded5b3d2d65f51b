// zero_bench.cpp — `flashtrain bench zero`: option validation, each row's model with DDP and/or the
// ZeroOptimizer under a memory recording, the timed steps, the three memory points, gathers over ranks,
// the tables and the results document.
#include "flashtrain/zero_bench.h"

#include <algorithm>
#include <iostream>

#include "bench/report_table.h"
#include "bench/results_json.h"
#include "core/error.h"
#include "dist/ddp_transformer.h"
#include "dist/zero_transformer.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/ddp_bench.h"
#include "flashtrain/out_of_memory.h"

namespace ft::cli {

namespace {

constexpr const char* kPointPhases[3] = {"init", "forward_backward", "optimizer"};  // ending at kZeroMemoryPoints

double gib(std::int64_t bytes) { return static_cast<double>(bytes) / kBytesPerGiB; }

std::string mode_name(const std::optional<ZeroMode>& mode) { return mode ? name_of(*mode) : "off"; }

std::optional<ZeroMode> parse_mode_item(const std::string& text) {
  if (text == "off") return std::nullopt;
  try {
    return parse_zero_mode(text);
  } catch (const Error&) {
    FT_THROW(invalid_argument, "unknown mode '", text, "': expected off, owner_broadcast or reduce_scatter");
  }
}

bool uses_ddp(const ZeroBenchCase& c) { return c.mode != ZeroMode::reduce_scatter; }

// This rank's figures of a finished row.
struct RankMemory {
  std::int64_t peak_bytes = 0;
  std::int64_t optimizer_state_bytes = 0;
  std::array<MemoryPoint, 3> points;
};

MemoryPoint point_of(const std::vector<MemoryPhaseSummary>& summary, const char* phase) {
  const auto it = std::find_if(summary.begin(), summary.end(),
                               [&](const MemoryPhaseSummary& s) { return s.phase == phase; });
  FT_CHECK_KIND(runtime, it != summary.end(), "bench zero: the memory timeline has no phase ", phase);
  return {it->peak_bytes, it->at_peak, it->end_bytes};
}

// The figures as one list of counts (the gather's layout) and back.
std::vector<std::int64_t> flatten(const RankMemory& m) {
  std::vector<std::int64_t> v{m.peak_bytes, m.optimizer_state_bytes};
  for (const MemoryPoint& p : m.points) {
    v.push_back(p.peak_bytes);
    v.insert(v.end(), p.at_peak.begin(), p.at_peak.end());
    v.push_back(p.end_bytes);
  }
  return v;
}

RankMemory unflatten(const std::vector<std::int64_t>& v) {
  RankMemory m;
  std::size_t at = 0;
  m.peak_bytes = v[at++];
  m.optimizer_state_bytes = v[at++];
  for (MemoryPoint& p : m.points) {
    p.peak_bytes = v[at++];
    for (std::int64_t& bytes : p.at_peak) bytes = v[at++];
    p.end_bytes = v[at++];
  }
  return m;
}

ZeroBenchRow run_zero_row(const ZeroBenchCase& c, const ZeroBenchConfig& config, Communicator& comm,
                          Communicator& host) {
  const ModelBenchConfig& m = config.model;
  ZeroBenchRow row = data_parallel_base_row<ZeroBenchRow>(c, m, host.world_size(), comm.backend());
  MemoryRecorder recorder;
  recorder.start(m.device, "init");
  std::optional<DataParallelReplica> replica;
  std::string oom_message;
  try {
    replica.emplace(c.model, m, c.mode.has_value(), host.rank());
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    oom_message = out_of_memory_message(e);
  }
  if (any_rank(host, !oom_message.empty())) return out_of_memory_row(row, oom_message);  // before any collective

  std::vector<double> step_ms;  // (steps) this rank's
  RankMemory mine;
  try {
    Trainer& trainer = replica->trainer();
    std::optional<DistributedDataParallel> ddp;
    if (uses_ddp(c)) {
      DdpOptions options;
      options.strategy = DdpStrategy::bucketed;
      options.bucket_size_mb = config.bucket_mb;
      ddp.emplace(comm, ddp_model(replica->model()), options);  // broadcasts rank 0's parameters
      attach(*ddp, trainer);
    }
    const HookReset reset(trainer);
    std::optional<ZeroOptimizer> zero;
    if (c.mode) {
      const ZeroOptions options{.mode = *c.mode,
                                .optimizer = OptimizerKind::adamw,
                                .max_grad_norm = kBenchClipNorm,
                                .broadcast_parameters = !ddp};  // DDP has broadcast them already
      zero.emplace(comm, ddp_model(replica->model()), options);
      add_transformer_group(*zero, replica->model(), trainer.config());
      attach(*zero, trainer);
    }
    mine.optimizer_state_bytes = static_cast<std::int64_t>(trainer.memory().optimizer_state);
    const std::function<void()> sync = [&ddp] {
      if (ddp) ddp->synchronize();
    };
    step_ms = recorded_steps(*replica, host, sync, m, recorder);
    const std::vector<MemoryPhaseSummary> summary = summarize_memory_timeline(recorder.stop());
    for (const MemoryPhaseSummary& s : summary) mine.peak_bytes = std::max(mine.peak_bytes, s.peak_bytes);
    for (std::size_t i = 0; i < 3; ++i) mine.points[i] = point_of(summary, kPointPhases[i]);
  } catch (const std::exception& e) {
    // As in bench ddp: only host collectives let the ranks agree on an OOM row after a step has started.
    if (!is_out_of_memory(e) || comm.compute_stream()) throw;
    oom_message = out_of_memory_message(e);
  }
  if (any_rank(host, !oom_message.empty())) return out_of_memory_row(row, oom_message);

  set_step_figures(row, host, step_ms);
  const std::vector<std::vector<std::int64_t>> all = gather_counts(host, flatten(mine));  // (world, fields)
  row.memory_rank = highest_peak_rank(all);
  const RankMemory chosen = unflatten(all[row.memory_rank]);
  row.peak_bytes = chosen.peak_bytes;
  row.optimizer_state_bytes = chosen.optimizer_state_bytes;
  row.points = chosen.points;
  return row;
}

nlohmann::json point_json(const MemoryPoint& p) {
  nlohmann::json j{{"peak_gib", gib(p.peak_bytes)}};
  for (std::size_t k = 0; k < kMemoryCategories; ++k)
    j[std::string(name_of(static_cast<MemoryCategory>(k))) + "_gib"] = gib(p.at_peak[k]);
  j["end_gib"] = gib(p.end_bytes);
  return j;
}

}  // namespace

ZeroBenchConfig resolve_bench_zero_options(const BenchZeroOptions& o, const Communicator& host) {
  ZeroBenchConfig config;
  config.model = resolve_data_parallel_model(o.model, host);
  config.modes = parse_list<std::optional<ZeroMode>>("--zero", o.modes, parse_mode_item);
  FT_CHECK(o.bucket_mb > 0, "--bucket-mb must be > 0 (MiB of gradients per bucket), given ", o.bucket_mb);
  config.bucket_mb = o.bucket_mb;
  return config;
}

std::vector<ZeroBenchCase> expand_zero_cases(const ZeroBenchConfig& config) {
  std::vector<ZeroBenchCase> cases;
  for (const ModelBenchCase& m : expand_model_cases(config.model))
    for (const std::optional<ZeroMode>& mode : config.modes) cases.push_back({m, mode});
  return cases;
}

std::vector<ZeroBenchRow> run_zero_bench(const ZeroBenchConfig& config, Communicator& comm, Communicator& host,
                                         std::ostream* progress) {
  std::vector<ZeroBenchRow> rows;
  for (const ZeroBenchCase& c : expand_zero_cases(config)) {
    rows.push_back(run_zero_row(c, config, comm, host));
    if (progress)
      *progress << "  " << c.model.model.name << " ctx " << c.model.model.context_length << " "
                << name_of(c.model.precision) << " zero " << mode_name(c.mode) << (rows.back().oom ? ": OOM" : ": done")
                << "\n";
  }
  return rows;
}

std::string format_zero_bench(const std::vector<ZeroBenchRow>& rows, bool csv) {
  ReportTable steps({"zero", "size", "ctx", "precision", "world", "local_batch", "step_ms", "min_ms", "peak_gib",
                     "optimizer_state_gib", "tokens_per_s"});
  std::vector<std::string> memory_columns{"zero", "size", "ctx", "precision", "point", "peak_gib"};
  for (std::size_t k = 0; k < kMemoryCategories; ++k)
    memory_columns.push_back(std::string(name_of(static_cast<MemoryCategory>(k))) + "_gib");
  memory_columns.push_back("end_gib");
  ReportTable memory(memory_columns);
  for (const ZeroBenchRow& r : rows) {
    const std::vector<std::string> what{mode_name(r.c.mode), r.c.model.model.name,
                                        std::to_string(r.c.model.model.context_length), name_of(r.c.model.precision)};
    std::vector<std::string> cells = what;
    cells.push_back(std::to_string(r.world));
    cells.push_back(std::to_string(r.local_batch));
    if (r.oom) {
      cells.resize(11, "OOM");
      steps.add_row(std::move(cells));
      continue;
    }
    for (double value : {r.step.median, r.step.min}) cells.push_back(fixed(value, 2));
    cells.push_back(fixed(gib(r.peak_bytes), 3));
    cells.push_back(fixed(gib(r.optimizer_state_bytes), 3));
    cells.push_back(fixed(r.tokens_per_s, 0));
    steps.add_row(std::move(cells));
    for (std::size_t i = 0; i < 3; ++i) {
      const MemoryPoint& p = r.points[i];
      std::vector<std::string> line = what;
      line.push_back(kZeroMemoryPoints[i]);
      line.push_back(fixed(gib(p.peak_bytes), 3));
      for (std::int64_t bytes : p.at_peak) line.push_back(fixed(gib(bytes), 3));
      line.push_back(fixed(gib(p.end_bytes), 3));
      memory.add_row(std::move(line));
    }
  }
  if (csv) return steps.csv() + "\n" + memory.csv();
  return steps.markdown() + "\nMemory (GiB) at three points: the peak of the phase ending there, by category:\n\n" +
         memory.markdown();
}

nlohmann::json zero_bench_document(const ZeroBenchConfig& config, const std::vector<ZeroBenchRow>& rows) {
  FT_CHECK(!rows.empty(), "zero_bench_document: expected at least one row");
  nlohmann::json out_rows = nlohmann::json::array();
  for (const ZeroBenchRow& r : rows) {
    const bool ddp = uses_ddp(r.c);
    nlohmann::json row = data_parallel_row(r);
    row.update({{"sharded", r.c.mode.has_value()},
                {"zero", mode_name(r.c.mode)},
                {"strategy", ddp ? nlohmann::json("bucketed") : nlohmann::json(nullptr)},
                {"bucket_mb", ddp ? nlohmann::json(config.bucket_mb) : nlohmann::json(nullptr)}});
    if (!r.oom) {
      nlohmann::json memory;
      for (std::size_t i = 0; i < 3; ++i) memory[kZeroMemoryPoints[i]] = point_json(r.points[i]);
      row.update({{"peak_gib", gib(r.peak_bytes)},
                  {"optimizer_state_gib", gib(r.optimizer_state_bytes)},
                  {"optimizer_state_bytes", r.optimizer_state_bytes},
                  {"memory_rank", r.memory_rank},
                  {"memory", std::move(memory)}});
    }
    out_rows.push_back(std::move(row));
  }
  const ModelBenchConfig& m = config.model;
  nlohmann::json cfg = data_parallel_config(m, rows.front().world, rows.front().backend);
  cfg.update({
      {"bucket_mb", config.bucket_mb},
      {"step", "zero_grads, forward and backward of the local batch, DDP synchronize (off, owner_broadcast), "
               "clipping to 1.0 and AdamW (sharded: the ZeroOptimizer's step); the device synchronised at the end"},
      {"timing", kBarrierStepTiming},
      {"memory", "the allocator's timeline of the row's rank with the highest peak (memory_rank): phases init "
                 "(model, Trainer, DDP, ZeroOptimizer with its state, token ids), steps (warm-up and timed), then "
                 "one more step's forward_backward (with DDP's synchronize) and optimizer; after_init, "
                 "before_optimizer_step and after_optimizer_step are the peaks of init, forward_backward and "
                 "optimizer, split by category at that peak (gradients include ZeRO's reduce_scatter shard; "
                 "activations are the model's arena, allocated at init), end_gib the level at the phase's end"},
      {"optimizer_state", "Trainer::memory().optimizer_state of memory_rank: AdamW exp_avg and exp_avg_sq, whole "
                          "(off) or this rank's shard (sharded)"}});
  return results_document("zero", m.device, std::move(cfg), std::move(out_rows));
}

void bench_zero(const ZeroBenchConfig& config, Communicator& comm, Communicator& host, bool csv,
                const std::string& json_path, std::ostream& out) {
  const bool root = host.rank() == 0;
  const std::vector<ZeroBenchRow> rows = run_zero_bench(config, comm, host, root ? &std::cerr : nullptr);
  if (!root) return;
  report_data_parallel_bench(out, "ZeRO-1 benchmark", str("DDP bucketed ", config.bucket_mb, " MiB where used"),
                             config.model, rows.front().world, rows.front().backend, format_zero_bench(rows, csv),
                             json_path, [&] { return zero_bench_document(config, rows); });
}

}  // namespace ft::cli
