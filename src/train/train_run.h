// train_run.h — the training library: a validated run (TrainPlan), the training loop (run_training:
// micro-batch accumulation, global-norm clipping, AdamW on the cosine schedule, evaluation, logging,
// atomic checkpoints and bit-exact resume, MFU from train/throughput.h) and the results document. The
// CLI (apps/flashtrain/train_options.h) turns options into a plan.
// Data parallelism: run_training over a Communicator of world > 1 (mpirun / srun) trains one model replica
// per rank under DistributedDataParallel (dist/ddp.h): rank 0's parameters are broadcast once (after any
// --resume / --init-from, which every rank loads), every rank draws the same global batch of world x batch
// sequences and trains on its own rows [rank x batch, (rank + 1) x batch) — so a run of W ranks with batch
// B takes the steps of one process with batch W x B, and the one data generator state a checkpoint holds
// is every rank's — gradients are averaged before clipping and AdamW, the logged loss is the mean over
// ranks, validation batches are split by rows like training ones, and only rank 0 logs, writes checkpoints
// and --json. On CUDA each rank trains on GPU local_rank (rank_device) and the gradients move over the
// device communicator (NCCL: DistributedContext::communicator_for), while the few host scalars (the
// logged loss, the final parameter checksums) move over the host communicator (MPI).
// ZeRO-1 (--zero, world > 1 only; dist/zero_optimizer.h): the AdamW state is sharded over the ranks
// instead of replicated. owner_broadcast keeps DDP for the gradients and broadcasts each rank's updated
// range; reduce_scatter replaces DDP's all-reduce (no DDP object: the --ddp-* options do not apply).
// Clipping is the ZeroOptimizer's (global norm over all ranks). Checkpoints hold the whole optimizer state,
// which no rank has under ZeRO: --checkpoint-dir and --resume are refused with --zero (invalid_argument).
// ZeRO-2 and ZeRO-3 (TrainPlan::sharded_stage, dist/fsdp.h; any world, a world of one included): the Fsdp
// holds this rank's shards and is the model's parameter source; no DDP (gradients are reduce-scattered
// unit by unit during backward, in bf16 with plan.ddp.bf16_communication); clipping across shards; the
// final parameter checksum is of the gathered parameters (the same on every rank by construction).
// Checkpoints are folders of shards (dist/fsdp_checkpoint.h: a file per rank and an index), written by every
// rank; --resume takes such a folder (of the same world size and shape); --init-from is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/stream.h"
#include "dist/ddp.h"
#include "dist/zero_optimizer.h"
#include "model/config.h"
#include "model/training_options.h"
#include "ops/attention.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/throughput.h"

namespace ft {

// The validated run: every default filled in, names parsed, the resume path resolved.
struct TrainPlan {
  ModelConfig model;  // size with the shape options applied
  Precision precision = Precision::bf16;
  bool tf32 = false;
  bool cuda_graph = false;  // CUDA, one process, accumulate 1
  Stream stream;            // data parallel on GPUs: the model's stream (DistributedContext::model_stream)
  AttentionImpl attention = AttentionImpl::flash;
  ModelTrainingOptions model_training;  // recomputation, loss chunking, offloading, attention determinism
  // --pack-documents --eos-id N: rows split into documents after each token N (Note [Packed documents]); none =
  // whole-row causal attention.
  std::optional<std::int32_t> eos_id;
  // --max-documents (with --cuda-graph): the documents a graphed batch may hold, its fixed capacity; 0 = B*T.
  std::int64_t max_documents = 0;
  Device device = Device::cpu();
  std::int64_t batch = 4;
  std::int64_t steps = 1000;
  std::int64_t accumulate = 1;
  AdamWConfig adamw;
  CosineSchedule schedule;  // cycle_iters = steps
  double clip = 1.0;
  std::string data, val_data;
  std::int64_t eval_interval = 100, eval_batches = 10;
  std::uint64_t seed = 0;
  std::int64_t log_interval = 10;
  std::string checkpoint_dir;
  std::int64_t checkpoint_interval = 0;
  std::string resume_path;  // resolved ("latest" -> the file it names); empty = fresh start
  std::string init_from;
  std::string json_path;
  DdpOptions ddp;  // used when the run's communicator has world > 1 (owner_broadcast ZeRO included)
  std::optional<ZeroMode> zero;  // ZeRO-1 sharded AdamW; none = every rank holds the whole state
  int sharded_stage = 0;         // 2 or 3: ZeRO-2 / ZeRO-3 (dist/fsdp.h) instead of DDP and ZeRO-1; 0: neither

  // Per rank; a data-parallel step trains world times as many.
  std::int64_t tokens_per_step() const { return batch * model.context_length * accumulate; }
};

// One logged step. Timings and throughput cover the steps since the previous logged one.
struct TrainLogRow {
  std::int64_t step = 0;
  double loss = 0;       // mean over the step's micro-batches
  double lr = 0;         // learning rate the step used
  double grad_norm = 0;  // global gradient norm before clipping
  double step_ms = 0;    // mean wall time per step
  std::optional<double> comm_ms;   // DDP runs: mean over the steps of DistributedDataParallel::comm_ms()
  double tokens_per_s = 0;         // all ranks together
  std::optional<double> mfu;       // fraction of the peak of world devices; none when the peak is unknown
  std::optional<double> val_loss;  // when an evaluation ran after this step
};

struct TrainResult {
  std::int64_t first_step = 1;   // the step the run started with (checkpoint step + 1 on resume)
  std::vector<double> losses;    // (steps run): losses[i] is the loss of step first_step + i
  std::vector<TrainLogRow> rows;         // rank 0's (the others log nothing)
  std::vector<std::string> checkpoints;  // paths written, in order (rank 0 writes them all)
  std::int64_t parameters = 0;
  std::string device_name;
  std::optional<double> peak_flops;
  int world = 1;  // ranks that trained
  // Data-parallel runs: a hash (64-bit FNV-1a over 32-bit words) of this rank's final fp32 parameters,
  // which the run has checked to be the same on every rank. None in a single process.
  std::optional<std::uint64_t> parameter_checksum;
};

// Trains as the plan says, printing the log to `log`; writes checkpoints and the --json document. With
// comm: every rank of comm calls it with the same plan; world > 1 trains data-parallel (see the top of
// this file), and only rank 0 writes to log. comm moves the model's buffers (on plan.device: a host
// communicator for the CPU, NCCL for a GPU), host moves host scalars (the same communicator on the CPU).
// Without comm, or with a world of one: a single process, no DDP (a plan with ZeRO then throws ft::Error
// invalid_argument).
TrainResult run_training(const TrainPlan& plan, std::ostream& log);
TrainResult run_training(const TrainPlan& plan, std::ostream& log, Communicator& comm);
TrainResult run_training(const TrainPlan& plan, std::ostream& log, Communicator& comm, Communicator& host);

// The device this rank uses for a requested one: in a job of several ranks a CUDA device means GPU
// local_rank (one process per GPU; CUDA_VISIBLE_DEVICES chooses which), the CPU stays the CPU; a world of
// one keeps the request. ft::Error: invalid_argument for cuda:N with N > 0 in a job of several ranks (every
// rank would share GPU N), unsupported when this node has fewer visible GPUs than ranks.
Device rank_device(Device requested, const Communicator& host);

// The results document: benchmark "train", config = the plan (with world; and the DDP options when
// world > 1, and "zero": the mode or "off"), a row per logged step.
nlohmann::json train_document(const TrainPlan& plan, const TrainResult& result);

// "step_000100.safetensors": the checkpoint written after `step`.
std::string checkpoint_file_name(std::int64_t step);

// The checkpoint the folder's `latest` file names (the newest run_training wrote there); ft::Error io when
// there is none.
std::string latest_checkpoint(const std::string& folder);

}  // namespace ft
