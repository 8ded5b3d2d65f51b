// zero_bench.h — `flashtrain bench zero`: ZeRO-1 against plain DDP on the full data-parallel training step,
// over the ranks of an mpirun/srun job (or a world of one): step time, peak memory, optimizer-state bytes,
// and the memory at three points of the step broken into what it is for.
//
// Rows, per model case (size x context x precision), one per --zero entry:
//   off              not sharded: DDP (bucketed, --bucket-mb) averages the gradients, the Trainer's AdamW
//                    holds the whole state (8 bytes per parameter) on every rank
//   owner_broadcast  DDP (bucketed) + ZeroOptimizer: each rank updates its range, owners broadcast them
//   reduce_scatter   ZeroOptimizer alone: gradients reduce-scattered, parameters all-gathered
// Clipping to 1.0 and AdamW in every row (the sharded rows clip across shards). Each row builds its own
// model (memory is measured from nothing) with the allocator's timeline recording through phases
//   init              model, Trainer, DDP / ZeroOptimizer (optimizer state included), token ids
//   steps             the warm-up and timed steps
//   forward_backward  one more step's forward, backward and DDP synchronize
//   optimizer         that step's optimizer step (ZeRO: its reduce-scatter, clipping, update and exchange)
// and the three points are the peaks of init ("after model init"), forward_backward ("just before the
// optimizer step") and optimizer ("just after it"), each split by bench/memory_timeline.h's categories at
// that peak (parameters, gradients — the ZeRO gradient shard included —, optimizer_state, activations,
// workspace, other), with the level at the phase's end.
// Figures across ranks: step_ms = median over the timed steps of the max over ranks (bench ddp's rule);
// every memory figure of a row is that of the rank with the highest peak (the first such rank): the
// ranks differ only by the ZeRO tail (fewer than world elements, on the last rank).
// No CLI11 here: cmd_bench_zero.cpp declares the options into BenchZeroOptions.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/memory_timeline.h"
#include "dist/communicator.h"
#include "dist/zero_optimizer.h"
#include "flashtrain/ddp_bench.h"
#include "flashtrain/job.h"
#include "flashtrain/model_bench.h"

namespace ft::cli {

// The command line's values, before validation.
struct BenchZeroOptions {
  BenchModelOptions model;  // as bench ddp's (data_parallel_model_options defaults)
  std::string modes = "off,owner_broadcast,reduce_scatter";
  double bucket_mb = 25;    // the DDP of the off and owner_broadcast rows
  bool csv = false;
  std::string json_path;
  JobOptions job;  // --timeout
};

struct ZeroBenchConfig {
  ModelBenchConfig model;                    // batch is the local batch; device is this rank's
  std::vector<std::optional<ZeroMode>> modes;  // nullopt: off (not sharded)
  double bucket_mb = 25;
};

struct ZeroBenchCase {
  ModelBenchCase model;          // mode train
  std::optional<ZeroMode> mode;  // nullopt: not sharded
};

// The three points, in the order of ZeroBenchRow::points, as the results document names them.
inline constexpr const char* kZeroMemoryPoints[3] = {"after_init", "before_optimizer_step", "after_optimizer_step"};

// One of the three points: the peak of the phase ending there, split by category at that peak.
struct MemoryPoint {
  std::int64_t peak_bytes = 0;
  std::array<std::int64_t, kMemoryCategories> at_peak{};  // by MemoryCategory; sums to peak_bytes
  std::int64_t end_bytes = 0;                             // the level when the phase ends
};

struct ZeroBenchRow : DataParallelRow<ZeroBenchCase> {
  int memory_rank = 0;                  // the rank whose memory figures these are
  std::int64_t peak_bytes = 0;          // its peak over the whole row
  std::int64_t optimizer_state_bytes = 0;  // its optimizer state (Trainer::memory().optimizer_state)
  std::array<MemoryPoint, 3> points;    // its memory at kZeroMemoryPoints
};

// Validates options (ft::Error invalid_argument naming the option and the value given).
ZeroBenchConfig resolve_bench_zero_options(const BenchZeroOptions& options, const Communicator& host);

// Every row, in order model case (size, context, precision), then mode.
std::vector<ZeroBenchCase> expand_zero_cases(const ZeroBenchConfig& config);

// Runs every row; collective over both communicators (comm moves the model's buffers, host the figures).
// progress (rank 0 passes std::cerr, or nullptr) gets a line per row. Every rank returns the same rows.
std::vector<ZeroBenchRow> run_zero_bench(const ZeroBenchConfig& config, Communicator& comm, Communicator& host,
                                         std::ostream* progress);

// Two markdown (or CSV) tables: a row per case, then the three memory points of each, split by category.
std::string format_zero_bench(const std::vector<ZeroBenchRow>& rows, bool csv);
// Results document, benchmark "zero": a row per case {sharded, zero, strategy, bucket_mb, world, backend,
// size, ctx, precision, local_batch, parameters, step_ms, mean_ms, min_ms, max_ms, tokens_per_s, peak_gib,
// optimizer_state_gib, optimizer_state_bytes, memory_rank, memory: {after_init, before_optimizer_step,
// after_optimizer_step: {peak_gib, parameters_gib, gradients_gib, optimizer_state_gib, activations_gib,
// workspace_gib, other_gib, end_gib}}}; OOM rows {"oom": true, "error"}.
nlohmann::json zero_bench_document(const ZeroBenchConfig& config, const std::vector<ZeroBenchRow>& rows);

// The whole subcommand: runs the rows; rank 0 prints the tables to out and writes json_path (when given).
void bench_zero(const ZeroBenchConfig& config, Communicator& comm, Communicator& host, bool csv,
                const std::string& json_path, std::ostream& out);

}  // namespace ft::cli
