// fsdp_bench.h — `flashtrain bench fsdp`: the full training step of the Transformer LM under each ZeRO stage
// over the ranks of an mpirun/srun job (or a world of one): step time, tokens/s, MFU, peak memory per rank
// and what it is made of.
//
// Rows, per model case (size x context x precision), one per --zero stage:
//   0  DDP (bucketed, --bucket-mb): whole parameters, gradients and AdamW state on every rank
//   1  ZeRO-1 (ZeroOptimizer reduce_scatter): AdamW state sharded; gradients reduce-scattered and parameters
//      all-gathered after backward
//   2  ZeRO-2 (dist/fsdp.h): gradients reduce-scattered into shards during backward, unit by unit (a block,
//      the embedding, the head); a replica of the parameters in their compute dtype all-gathered after the step
//   3  ZeRO-3 (dist/fsdp.h): parameters, gradients and AdamW state sharded; units gathered as used
// Clipping to 1.0 and AdamW in every row. Each row builds its own model (memory is measured from nothing)
// under the allocator's timeline: init, the warm-up and timed steps, then one more step's forward_backward
// and optimizer phases; peak_gib is the highest point of the row, split by category at that point.
// MFU counts as the PyTorch anchor (shared/anchors/bench_torch_8b.py) does: model FLOPs per step =
// 6 x (parameters - the token embedding) x tokens + 3.5 x layers x 4 x sequences x ctx^2 x d_model / 2
// (matrix products forward and backward, causal attention; recomputation not counted), over the step time
// and world x the GPU's dense peak for the precision (null on the CPU or an unknown GPU).
// Figures across ranks: step_ms = median over the timed steps of the max over ranks; memory figures are
// the rank with the highest peak (memory_rank).
// No CLI11 here: cmd_bench_fsdp.cpp declares the options into BenchFsdpOptions.
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
#include "dist/context.h"
#include "flashtrain/ddp_bench.h"
#include "flashtrain/job.h"
#include "flashtrain/model_bench.h"

namespace ft::cli {

// The command line's values, before validation.
struct BenchFsdpOptions {
  BenchModelOptions model;  // as bench ddp's (data_parallel_model_options defaults)
  std::string stages = "0,1,2,3";
  double bucket_mb = 25;  // stage 0's DDP buckets
  std::string grad_comm_dtype = "fp32";  // bf16: gradients reduced in bf16 (stages 0, 2, 3)
  std::string transport = "nccl";        // copy_engine: stages 2 and 3 reduce-scatter by peer copies
  bool csv = false;
  std::string json_path;
  std::string profile;          // "" or "timeline"
  std::string timeline_prefix;  // --profile timeline: rank 0 writes fsdp_timeline_path(PREFIX, row) per row
  JobOptions job;  // --timeout
};

struct FsdpBenchConfig {
  ModelBenchConfig model;  // batch is the local batch; device is this rank's
  std::vector<int> stages;
  double bucket_mb = 25;
  bool bf16_grad_comm = false;
  // Stages 2 and 3 over the copy-engine communicator (dist/nccl/peer_communicator.h: reduce-scatter by peer
  // copies, all-gathers over NCCL), made per row through `context` (set by the command); 2 GPUs only.
  bool copy_engine = false;
  DistributedContext* context = nullptr;
  // Non-empty: after its timed steps and its memory-profiled step each row runs 2 more steps under rank 0's
  // kernel profiler (flashtrain/timeline_profile.h), rank 0 writes their kernel-timeline document to
  // fsdp_timeline_path(timeline_prefix, row) and prints the last step's stream summary.
  std::string timeline_prefix;
};

struct FsdpBenchCase {
  ModelBenchCase model;  // mode train
  int stage = 0;
};

struct FsdpBenchRow : DataParallelRow<FsdpBenchCase> {
  std::optional<double> mfu;         // the anchor's count (see the top of this file)
  int memory_rank = 0;               // the rank whose memory figures these are
  std::int64_t peak_bytes = 0;       // its peak over the row
  std::array<std::int64_t, kMemoryCategories> at_peak{};  // by MemoryCategory, at that peak
};

// "<prefix>-<size>-ctx<ctx>-<precision>-zero<stage>.json" ("tl-8b-ctx32768-bf16-zero3.json").
std::string fsdp_timeline_path(const std::string& prefix, const FsdpBenchCase& c);

// Model FLOPs of one step on `sequences` sequences of the config's context, counted as the anchor does.
double anchor_step_flops(const ModelConfig& config, std::int64_t sequences);

// Validates options (ft::Error invalid_argument naming the option and the value given).
FsdpBenchConfig resolve_bench_fsdp_options(const BenchFsdpOptions& options, const Communicator& host);
std::vector<FsdpBenchCase> expand_fsdp_cases(const FsdpBenchConfig& config);
// Runs every row; collective over both communicators. progress (rank 0: std::cerr) gets a line per row.
std::vector<FsdpBenchRow> run_fsdp_bench(const FsdpBenchConfig& config, Communicator& comm, Communicator& host,
                                         std::ostream* progress);
std::string format_fsdp_bench(const std::vector<FsdpBenchRow>& rows, bool csv);
// Results document, benchmark "fsdp": a row per case {zero, world, backend, size, d_model, d_ff, layers, heads,
// vocab, ctx, precision, recompute, local_batch, parameters, step_ms, mean_ms, min_ms, max_ms, tokens_per_s, mfu,
// peak_gib, memory_rank, memory: {<category>_gib at the peak}}; OOM rows {"oom": true, "error"}.
nlohmann::json fsdp_bench_document(const FsdpBenchConfig& config, const std::vector<FsdpBenchRow>& rows);
// The whole subcommand: runs the rows; rank 0 prints the table to out and writes json_path (when given).
void bench_fsdp(const FsdpBenchConfig& config, Communicator& comm, Communicator& host, bool csv,
                const std::string& json_path, std::ostream& out);

}  // namespace ft::cli
