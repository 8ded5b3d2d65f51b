// ddp_bench.h — `flashtrain bench ddp`: the full data-parallel training step (forward, backward, DDP
// gradient averaging, clipping to 1.0, AdamW) of the Transformer LM under each DDP strategy, over the ranks
// of an mpirun/srun job (or a world of one), plus the pieces `bench zero` and `bench fsdp` share (zero_bench.h,
// fsdp_bench.h): the rows' common fields and results, one rank's replica of a model case, a step timed
// between barriers, and gathers over ranks.
//
// Rows: for each model case (size x context x precision) the strategies in order, `bucketed` once per
// bucket size, then the ZeRO rows (`zero2`, `zero3`: the traffic pattern of sharded training for DDP's
// users — gradients reduce-scattered unit by unit during backward, the sharded AdamW, parameters
// all-gathered after; dist/fsdp.h), each on a model of its own built after the DDP rows' is released. `single` is no DDP at all: every rank runs the plain one-GPU step of its own local batch at
// the same time, with no communication (so the GPUs run as they do in the DDP rows, and every row's
// figures are gathered the same way); it is the step DDP adds communication to.
// Figures: each rank times every step on the host (a barrier before it, untimed; the step ends with the
// device synchronised), step_ms = the median over the timed steps of the max over ranks (a step is as
// slow as its slowest rank); comm_ms likewise of DistributedDataParallel::comm_ms() — the sum of the
// step's collective durations, which the overlapped and bucketed strategies mostly hide behind backward
// (dist/ddp.h defines it exactly); null when the communicator does not time device collectives.
// Each case builds its model and Trainer once and reuses them for every strategy (a DDP object per row,
// which broadcasts rank 0's parameters); a case or row that runs out of memory on any rank becomes an OOM
// row on every rank (ranks agree over the host communicator after building and after each row; a rank
// that runs out of memory in the middle of a collective leaves its peer to the communicator's timeout).
// No CLI11 here: cmd_bench_ddp.cpp declares the options into BenchDdpOptions.
#pragma once

#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/memory_timeline.h"
#include "bench/statistics.h"
#include "dist/communicator.h"
#include "dist/context.h"
#include "dist/ddp.h"
#include "dist/nccl_tuning.h"
#include "flashtrain/job.h"
#include "flashtrain/model_bench.h"
#include "flashtrain/output_paths.h"
#include "model/data_loader.h"
#include "model/parameters.h"
#include "model/token_staging.h"
#include "model/trainer.h"
#include "model/transformer.h"

namespace ft::cli {

// The command line's values, before validation (lists are comma-separated strings). `model` holds the
// model options bench model has (its mode, profile and json fields are not used: leave them unset).
struct BenchDdpOptions {
  BenchModelOptions model;  // sizes (or explicit dims), vocab, contexts, batch = the local batch, warmup,
                            // steps, precisions, attention, tf32, device, seed
  std::string strategies = "single,naive,flat,overlapped,bucketed";
  std::string bucket_mbs = "1,10,100,1000";  // the bucketed rows' bucket sizes, MiB
  std::string transports = "nccl";            // nccl, copy_engine
  std::string buffers = "plain";              // communication buffer kinds (CommBufferKind names)
  std::string max_ctas = "0";                 // NCCL max CTAs per row (0: NCCL's default)
  int min_ctas = 0;                           // NCCL min CTAs of the tuned rows (0: NCCL's default)
  std::string cta_policies = "default";       // NCCL CTA policies (CtaPolicy names)
  std::string priorities = "high";            // the NCCL stream's priority (high, low)
  bool bf16_comm = false;
  std::string bf16_rounding = "model";        // --bf16-comm: where buckets are rounded (model, comm)
  bool csv = false;
  std::string json_path;
  std::string profile;          // "" or "timeline"
  std::string timeline_prefix;  // --profile timeline: rank 0 writes PREFIX-<row>.json per row
  JobOptions job;               // --timeout
};

// The model options of a data-parallel benchmark with its defaults: local batch 2, bf16, 3 warm-up and 10
// timed steps.
BenchModelOptions data_parallel_model_options();

// Validates the model part (the same rules as bench model) for train steps on this rank's device
// (rank_device: GPU local_rank under mpirun).
ModelBenchConfig resolve_data_parallel_model(const BenchModelOptions& options, const Communicator& host);

// One row's data parallelism: no DDP (`single`) or a strategy, with the bucket size when bucketed, where
// its buckets are reduced and the NCCL limits of its communicator (not the default: a communicator of its
// own for the row, DistributedContext::make_device_communicator), or the copy-engine transport instead of
// NCCL (plain buffers, no NCCL tuning).
struct DdpBenchCase {
  ModelBenchCase model{};                 // mode train
  std::optional<DdpStrategy> strategy{};  // nullopt: single
  std::optional<double> bucket_mb{};      // bucketed only
  CommBufferKind buffer = CommBufferKind::plain;
  NcclTuning tuning{};
  bool copy_engine = false;  // all-reduce by peer copies (DistributedContext::make_copy_engine_communicator)
  bool round_on_comm = false;  // bf16 communication: buckets rounded on the communication stream
  int zero_stage = 0;        // 2 or 3: not DDP but ZeRO-2/3 (dist/fsdp.h; strategy nullopt)
};

struct DdpBenchConfig {
  ModelBenchConfig model;                           // batch is the local batch; device is this rank's
  std::vector<std::optional<DdpStrategy>> strategies;  // nullopt: single
  std::vector<int> zero_stages;                       // the zero2 / zero3 rows, after the DDP rows
  std::vector<double> bucket_mbs;
  std::vector<CommBufferKind> buffers;  // each DDP row once per buffer kind ...
  std::vector<NcclTuning> tunings;      // ... and per NCCL tuning,
  bool copy_engine = false;             // then once over the copy-engine transport
  bool nccl = true;                     // (false: the copy-engine rows alone)
  std::vector<bool> rounding_on_comm{false};  // --bf16-comm: each of those per rounding place
  bool bf16_comm = false;
  // Makes the rows' tuned communicators (set by the command from its job's context); null: every row
  // uses the data-parallel communicator, and a tuned row is an ft::Error.
  DistributedContext* context = nullptr;
  // Non-empty: after its timed steps each row runs 2 more steps ("step 1", "step 2") under the kernel
  // profiler on rank 0 (flashtrain/timeline_profile.h), and rank 0 writes their kernel-timeline document to
  // timeline_path(timeline_prefix, row) (draw it with tools/plot_timeline.py) and prints step 2's stream summary.
  std::string timeline_prefix;
};

// "<prefix>-<strategy>.json", bucketed "<prefix>-bucketed-<mb>mb.json"; a buffer other than plain adds
// "-<buffer>", a tuned communicator "-min<min>", "-ctas<max>" and "-<policy>", the copy engine "-copy_engine",
// bf16 rounding on the communication stream "-round_comm".
std::string timeline_path(const std::string& prefix, const DdpBenchCase& c);

// What the row of every data-parallel bench holds beside its own figures (DdpBenchRow, ZeroBenchRow,
// FsdpBenchRow): its case, the job, the model, and either the step time or why it ran out of memory.
template <class Case>
struct DataParallelRow {
  Case c;
  int world = 1;
  std::string backend;  // the communicator's ("nccl", "mpi", "single")
  std::int64_t local_batch = 0;
  std::int64_t parameters = 0;
  bool oom = false;
  std::string oom_message;
  Summary step;             // of the per-step max over ranks, ms
  double tokens_per_s = 0;  // world x local batch x ctx / step_ms
};

struct DdpBenchRow : DataParallelRow<DdpBenchCase> {
  std::string unsupported;        // non-empty: the row's communicator or buffers are not available here (why)
  std::size_t collectives = 0;    // all-reduces per step (DDP buckets); 0 for single
  std::optional<double> comm_ms;  // median over steps of the max over ranks; 0 for single
  double backward_ms = 0;         // median over steps of the max over ranks of backward's own time
  double peak_gib = 0;            // max over ranks of the peak over the timed steps
};

// Validates options (ft::Error invalid_argument naming the option and the value given).
DdpBenchConfig resolve_bench_ddp_options(const BenchDdpOptions& options, const Communicator& host);

// Every row, in order model case (size, context, precision), then strategy (bucketed: each bucket size).
std::vector<DdpBenchCase> expand_ddp_cases(const DdpBenchConfig& config);

// Runs every row; collective over both communicators (all ranks call it with the same config). comm moves
// the model's buffers, host the timings (the same communicator on the CPU). progress (rank 0 passes
// std::cerr, or nullptr) gets a line per row. Every rank returns the same rows.
std::vector<DdpBenchRow> run_ddp_bench(const DdpBenchConfig& config, Communicator& comm, Communicator& host,
                                       std::ostream* progress);

std::string format_ddp_bench(const std::vector<DdpBenchRow>& rows, bool csv);  // markdown (or CSV); OOM rows
// Results document, benchmark "ddp": a row per case {strategy, bucket_mb (null unless bucketed), transport, buffer,
// min_ctas, max_ctas, cta_policy, world, backend, size, ctx, precision, local_batch, parameters, bf16_comm,
// collectives, step_ms (median), mean_ms, min_ms, max_ms, bwd_ms, comm_ms, peak_gib, tokens_per_s}; OOM
// rows {"oom": true, "error"}; rows this machine cannot run {"unsupported": true, "error"}.
nlohmann::json ddp_bench_document(const DdpBenchConfig& config, const std::vector<DdpBenchRow>& rows);

// The whole subcommand: runs the rows; rank 0 prints the table to out and writes json_path (when given).
void bench_ddp(const DdpBenchConfig& config, Communicator& comm, Communicator& host, bool csv,
               const std::string& json_path, std::ostream& out);

// ---- shared with bench zero and bench fsdp ----

// The results config every data-parallel document starts from: world, backend, local_batch, vocab, warmup,
// steps, attention, tf32, seed.
nlohmann::json data_parallel_config(const ModelBenchConfig& m, int world, const std::string& backend);

// The results config's "timing" of bench zero and bench fsdp.
inline constexpr const char* kBarrierStepTiming =
    "step_ms: median over the timed steps of the max over ranks of each rank's host wall time "
    "(an untimed barrier before each step)";

// The fields every data-parallel results row has: world, backend, the model (size, d_model, layers, ctx,
// precision), local_batch, parameters, then either oom and error or the step time's summary (step_ms:
// median, mean_ms, min_ms, max_ms) and tokens_per_s. Each bench adds its own.
template <class Case>
nlohmann::json data_parallel_row(const DataParallelRow<Case>& r) {
  const ModelConfig& m = r.c.model.model;
  nlohmann::json row{{"world", r.world},
                     {"backend", r.backend},
                     {"size", m.name},
                     {"d_model", m.d_model},
                     {"layers", m.num_layers},
                     {"ctx", m.context_length},
                     {"precision", name_of(r.c.model.precision)},
                     {"local_batch", r.local_batch},
                     {"parameters", r.parameters}};
  if (r.oom) {
    row["oom"] = true;
    row["error"] = r.oom_message;
  } else {
    row.update({{"step_ms", r.step.median},
                {"mean_ms", r.step.mean},
                {"min_ms", r.step.min},
                {"max_ms", r.step.max},
                {"tokens_per_s", r.tokens_per_s}});
  }
  return row;
}

// Rank 0's report of a data-parallel bench to out: "<title>: W rank(s), backend B, <device>; local batch b,
// vocab v, <detail>, w warm-up + s timed steps", the table, then document() written to json_path (when given).
void report_data_parallel_bench(std::ostream& out, const std::string& title, const std::string& detail,
                                const ModelBenchConfig& m, int world, const std::string& backend,
                                const std::string& table, const std::string& json_path,
                                const std::function<nlohmann::json()>& document);

// Runs bench ddp or bench zero in this job's DistributedContext: resolve(options, host) gives the
// config (each rank's device), whose model runs on the stream NCCL orders itself after, then
// bench(config, comm, host, csv, json_path, std::cout) over the data-parallel communicator. Returns 0.
// The collectives' timeout is options.job's; one rank's error ends every rank (run_job).
template <class Options, class Resolve, class Bench>
int run_data_parallel_bench(const Options& options, Resolve&& resolve, Bench&& bench) {
  DistributedContext context(distributed_options(options.job));  // MPI under a launcher, else a world of one
  return run_job(context, [&] {
    Communicator& host = context.host_communicator();
    auto config = resolve(options, host);
    if constexpr (requires { config.context; }) config.context = &context;
    if (host.rank() == 0) check_output_file(options.json_path, "--json");
    config.model.stream = context.model_stream(config.model.device);
    Communicator& comm = context.data_parallel_communicator(config.model.device);
    bench(config, comm, host, options.csv, options.json_path, std::cout);
    return 0;
  });
}

// This rank's replica of a model case: the model on the config's device, its Trainer (clipping to 1.0)
// and one random local batch (seed config.seed + 1 + rank: the ranks train on different data), staged.
// With a parameter source (ZeRO-3), the model takes its parameters from it (ModelOptions::parameter_source).
class DataParallelReplica {
 public:
  DataParallelReplica(const ModelBenchCase& c, const ModelBenchConfig& config, bool external_optimizer, int rank,
                      ParameterSource* source = nullptr);

  // One training step: zero_grads, forward_backward, sync() (DDP's synchronize, when given),
  // optimizer_step, then the device synchronised. With a recorder, phases "forward_backward" (from the step's
  // start) and "optimizer" (from the optimizer step's start) are marked.
  void step(const std::function<void()>& sync, MemoryRecorder* recorder = nullptr);
  // A barrier over host (untimed), then step(); the step's host wall time in ms.
  double timed_step(Communicator& host, const std::function<void()>& sync);
  // The last step's backward on its own, in ms: from the backward's start (the Trainer's backward-start
  // hook, after the loss) to the return of forward_backward, before sync() — on a GPU CUDA events on the
  // model's stream (so the time backward's kernels took there, slowed by whatever ran beside them, and
  // not the collectives that end after it), on the CPU the host clock.
  double backward_ms() const;

  TransformerLM& model() { return model_; }
  Trainer& trainer() { return trainer_; }

 private:
  Device device_;
  TransformerLM model_;
  Trainer trainer_;
  TokenBatch batch_;  // (local batch, ctx) host ids, the same every step
  TokenStaging staging_;
  std::pair<TokenIds, TokenIds> ids_;  // (inputs, targets) where the model reads them
  std::optional<Event> backward_start_, backward_end_;  // on the model's stream (GPU)
  double backward_start_host_ms_ = 0, backward_host_ms_ = 0;  // the host clock (CPU)
};

// Clears the Trainer's gradient-ready hook when it goes out of scope (declare it after the DDP object the
// hook points to, so the hook is gone before the object).
class HookReset {
 public:
  explicit HookReset(Trainer& trainer) : trainer_(trainer) {}
  ~HookReset() { trainer_.set_gradient_ready_hook({}); }
  HookReset(const HookReset&) = delete;
  HookReset& operator=(const HookReset&) = delete;

 private:
  Trainer& trainer_;
};

// True when `flag` is true on any rank.
bool any_rank(Communicator& host, bool flag);
// Element-wise max over ranks of values (the same length on every rank), gathered as fp32.
std::vector<double> max_over_ranks(Communicator& host, const std::vector<double>& values);
// Every rank's values (the same count on every rank), exact for 0 <= value < 2^48: result[r] is rank r's.
std::vector<std::vector<std::int64_t>> gather_counts(Communicator& host, const std::vector<std::int64_t>& values);
// The first rank whose first count (its peak) is the highest, of gather_counts' result (world, counts).
int highest_peak_rank(const std::vector<std::vector<std::int64_t>>& counts);

// The steps of a row under a memory recording (bench zero, bench fsdp): phase "steps" of the warm-up and
// timed steps (NVTX "warmup step N", "step N"), then one more step in phases "forward_backward" and
// "optimizer" (NVTX "profiled step"). This rank's timed steps, ms.
std::vector<double> recorded_steps(DataParallelReplica& replica, Communicator& host, const std::function<void()>& sync,
                                   const ModelBenchConfig& m, MemoryRecorder& recorder);

// A row of case c before it runs: the job's world and backend, the config's local batch, the model's
// parameter count.
template <class Row>
Row data_parallel_base_row(const decltype(Row::c)& c, const ModelBenchConfig& m, int world,
                           const std::string& backend) {
  Row row;
  row.c = c;
  row.world = world;
  row.backend = backend;
  row.local_batch = m.batch;
  row.parameters = ParameterLayout(c.model.model).numel();
  return row;
}

// row as an OOM row: this rank's message, or "out of memory on another rank" where it has none.
template <class Row>
Row out_of_memory_row(Row row, const std::string& message) {
  row.oom = true;
  row.oom_message = message.empty() ? "out of memory on another rank" : message;
  return row;
}

// Sets row.step from every rank's step times (a host collective: all ranks call it), and tokens_per_s.
template <class Case>
void set_step_figures(DataParallelRow<Case>& row, Communicator& host, const std::vector<double>& step_ms) {
  row.step = summarize(max_over_ranks(host, step_ms));
  row.tokens_per_s = static_cast<double>(row.world * row.local_batch * row.c.model.model.context_length) /
                     (row.step.median / 1e3);
}

}  // namespace ft::cli
