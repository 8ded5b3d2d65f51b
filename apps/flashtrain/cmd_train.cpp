// cmd_train.cpp — `flashtrain train`: the options (each documented, defaults shown in --help) and the
// action that resolves them and runs the training loop of train/train_run.h.
//   flashtrain train --size tiny --steps 200 --data tokens.bin --checkpoint-dir ckpt --checkpoint-interval 50
//   flashtrain train --size small --precision bf16 --steps 50 --json bench/results/train-small-h200.json
//   flashtrain train --size tiny --steps 400 --checkpoint-dir ckpt --resume latest
//   mpirun -np 4 flashtrain train --size tiny --device cpu --steps 100 --ddp-strategy bucketed --bucket-mb 1
//   mpirun -np 2 flashtrain train --size small --precision bf16 --steps 100 --zero reduce_scatter   (2 GPUs)
//   mpirun -np 2 flashtrain train --size xl --precision bf16 --steps 100 --zero 3   (2 GPUs)
#include <iostream>
#include <memory>

#include "dist/context.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/commands.h"
#include "flashtrain/job.h"
#include "flashtrain/output_paths.h"
#include "flashtrain/train_options.h"

namespace ft::cli {

namespace {

constexpr const char* kFooter = R"(
Steps: one step is --accumulate micro-batches of --batch sequences of --context tokens (the gradients
average over them), then clipping of the global gradient norm to --clip and one AdamW step
(torch.optim.AdamW semantics) at the learning rate of the cosine schedule: linear warm-up from 0 to
--lr over --warmup steps, then a cosine decay to --min-lr at --steps.

Data: --data maps a file of token ids, told apart by content: .npy of dtype '<u2' or '<u4' (uint16 or
uint32), or raw little-endian ids, uint16 when --vocab is at most 65536 and uint32 above; every id is
checked against --vocab when the file is opened. Every
sequence is a window at a uniformly random position (seed --seed + 1). Without --data the tokens
are uniform random ids (a throughput run; the loss cannot fall below ln(vocab)). --val-data is read
the same way (seed --seed + 2); each evaluation averages the loss over the same --eval-batches
batches. Parameters are initialised from --seed.

Packed documents: with --pack-documents --eos-id N each sequence is split into documents after every
token N (a sequence also starts one); attention is confined to each document (varlen attention) and
RoPE positions restart at 0 at each document's start; the loss still covers every position. Validation
batches are split the same way. MFU keeps counting the whole-row attention FLOPs. A CUDA graph
(--cuda-graph) captures a fixed number of documents, --batch x --context unless --max-documents
bounds it (the attention then schedules fewer empty documents; a batch with more is an error).

Log: every --log-interval steps (and the first and last): the step's loss, learning rate, gradient
norm before clipping, mean wall time per step and tokens/s over the interval, and MFU = model FLOPs
per token * tokens/s / the device's dense peak. Model FLOPs per token (PaLM): 6 N + 12 L d T with N
the parameters in matrix products (all but the token embedding), L layers, d d_model, T context.
Peaks (TFLOP/s, bf16 / tf32 / fp32): H100 SXM and H200 989.4 / 494.7 / 66.9, H100 PCIe 756 / 378 /
51.2, H100 NVL and H200 NVL 835 / 417.5 / 60, A100 312 / 156 / 19.5; other GPUs and the CPU: n/a.

Checkpoints: DIR/step_NNNNNN.safetensors (model parameters under the reference state-dict names,
AdamW state under optimizer.m.* and optimizer.v.*, step and data generator in the metadata), each
written atomically, then DIR/latest names the newest. --resume restores all of it and continues to
--steps with the same losses as an uninterrupted run (give the same options). --init-from loads
model parameters only, from a checkpoint or a reference model's exported state dict.

Failures: in a job of several ranks, the ranks first check that they were started alike (every option
that shapes the run, the build, and the size and first MiB of every file they read): a difference is one
error naming the option and each rank's value, on every rank, before step 1. An error on any one rank
(an unwritable --json, out of memory, ...) ends every rank at once with that rank's message; a peer
that hangs or dies ends the job after --timeout seconds of waiting for it.

Data parallel: started by mpirun or srun with N processes, every rank trains a replica of the model
(DDP): rank 0's parameters are broadcast at the start (after --resume / --init-from, which every rank
reads: the checkpoint folder must be visible to all ranks), every rank draws the same global batch of
N x --batch sequences and trains on its own --batch of them (so N ranks take the steps one process
with --batch N x B would), gradients are averaged over the ranks before clipping and AdamW, and only
rank 0 logs, writes checkpoints and --json. The loss logged is the mean over ranks, tokens/s counts
all ranks, and validation batches are split by rows like training ones. At the end the ranks check that their
parameters are identical. --ddp-strategy: naive (one all-reduce per parameter after backward), flat
(one all-reduce of all gradients after backward), overlapped (an all-reduce per parameter as soon as
its gradient is final), bucketed (buckets of --bucket-mb MiB in reverse parameter order, each
all-reduced in place as soon as its last gradient is final). --grad-comm-dtype bf16 halves the bytes
sent, at about 3 significant digits of gradient precision. On GPUs (--device cuda or auto) each rank
trains on GPU local_rank (start one rank per GPU; CUDA_VISIBLE_DEVICES picks them) and gradients move
over NCCL; with --device cpu they move over MPI. The log adds each interval's mean communication time
(comm: the sum of the step's all-reduce durations, most of which overlapped and bucketed hide behind
backward). In a single process the --ddp-* options are ignored (the log says so when they are given).
ZeRO-1 (--zero, data-parallel runs only): each rank keeps the AdamW state of 1/N of the parameters.
owner_broadcast: DDP (--ddp-strategy) averages the gradients, each rank updates its range and broadcasts
it. reduce_scatter: no DDP (the --ddp-* options do not apply); gradients are reduce-scattered so each
rank gets the average of its range, and one all-gather of the parameters makes the ranks whole again.
ZeRO-2 and ZeRO-3 (--zero 2, --zero 3; any number of ranks, one included): no DDP; each rank holds
1/N of the fp32 master parameters, gradients and AdamW state, and gradients are reduce-scattered a block
at a time during backward (in bf16 with --grad-comm-dtype bf16). ZeRO-3 all-gathers each block's
parameters (bf16 in bf16 mode) right before its forward and again before its backward, the next
block's while this one computes; ZeRO-2 keeps a replica of the parameters in the compute dtype,
all-gathered after each step. Their checkpoints are folders (step_000100/: a file of shards per rank
and index.json), resumed with the same number of ranks; `flashtrain checkpoint gather` makes one
parameter file of one. ZeRO-1's checkpoints would hold the whole optimizer state, which no rank has:
--zero owner_broadcast / reduce_scatter cannot be combined with --checkpoint-dir or --resume.)";

int run_train(const TrainOptions& options, const JobOptions& job) {
  DistributedContext context(distributed_options(job));  // MPI under a launcher, a world of one otherwise
  return run_job(context, [&] {
    TrainPlan plan = resolve_train_options(options);
    if (context.rank() == 0) {  // the rank that writes them: fail before the first step, not after the last
      check_output_file(plan.json_path, "--json");
      if (!plan.checkpoint_dir.empty()) prepare_checkpoint_folder(plan.checkpoint_dir, "--checkpoint-dir", std::cout);
    }
    plan.device = rank_device(plan.device, context.host_communicator());  // GPU local_rank under mpirun
    if (context.world_size() > 1) plan.stream = context.model_stream(plan.device);
    Communicator& comm = context.data_parallel_communicator(plan.device);
    run_training(plan, std::cout, comm, context.host_communicator());
    return 0;
  });
}

}  // namespace

void add_train_options(CLI::App& command, TrainOptions& o) {
  command.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command.add_option("--size", o.size,
                     "Model size: tiny, small, medium, large, xl, 2.7b or 8b; the options below replace its fields");
  command.add_option("--d-model", o.d_model, "d_model (default: the size's)");
  command.add_option("--d-ff", o.d_ff, "FFN inner size (default: the size's)");
  command.add_option("--layers", o.layers, "Number of blocks (default: the size's)");
  command.add_option("--heads", o.heads, "Attention heads; d_model / heads must be even and at most 256 (default: "
                     "the size's)");
  command.add_option("--vocab", o.vocab, "Vocabulary size (default: the size's, 10000; tiny 97; 8b 151936)");
  command.add_option("--context", o.context,
                     "Context length T of every sequence (default: the size's, 512; tiny 32; 8b 32768)");
  command.add_option("--rope-theta", o.rope_theta, "RoPE base theta (default: 10000)");
  command.add_option("--batch", o.batch, "Sequences per micro-batch");
  command.add_option("--precision", o.precision,
                     "fp32, or bf16 mixed precision (fp32 master weights, bf16 GEMM and attention operands)");
  command.add_flag("--tf32", o.tf32, "fp32 on CUDA: let GEMMs use TF32 tensor cores");
  command.add_flag("--cuda-graph", o.cuda_graph,
                   "CUDA: capture the whole step (forward, backward, clipping, AdamW) in a CUDA graph at the second "
                   "step and replay it (the first runs eagerly as its warm-up); needs --accumulate 1 and one process");
  command.add_option("--attention", o.attention, "Attention implementation: flash or naive");
  command.add_flag("--pack-documents", o.pack_documents,
                   "Train on packed documents: split each sequence after every --eos-id token; attention stays "
                   "within a document and RoPE positions restart at each document's start");
  command.add_option("--eos-id", o.eos_id, "End-of-document token id of --pack-documents");
  command.add_option("--max-documents", o.max_documents,
                     "With --pack-documents --cuda-graph: the documents a batch may hold (the graph's fixed "
                     "capacity; a batch with more is an error); default --batch x --context");
  add_model_training_options(command, o.model_training);
  command.add_option("--device", o.device, "cpu, cuda, cuda:N, or auto (cuda:0 when a GPU is visible, else cpu)");
  command.add_option("--steps", o.steps, "Optimizer steps to train to (a resumed run continues to this step)");
  command.add_option("--accumulate", o.accumulate, "Micro-batches per optimizer step (gradient accumulation)");
  command.add_option("--lr", o.lr, "Peak learning rate");
  command.add_option("--min-lr", o.min_lr, "Learning rate at the end of the cosine decay (default: --lr / 10)");
  command.add_option("--warmup", o.warmup, "Linear warm-up steps (default: --steps / 10)");
  command.add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay");
  command.add_option("--beta1", o.beta1, "AdamW beta1");
  command.add_option("--beta2", o.beta2, "AdamW beta2");
  command.add_option("--eps", o.eps, "AdamW epsilon");
  command.add_option("--clip", o.clip, "Clip the global gradient norm to this; 0 = no clipping");
  command.add_option("--data", o.data, "Training tokens: a uint16/uint32 file (raw or .npy); default: random tokens");
  command.add_option("--val-data", o.val_data, "Validation tokens (same format), evaluated every --eval-interval");
  command.add_option("--eval-interval", o.eval_interval, "Steps between evaluations on --val-data (and the last)");
  command.add_option("--eval-batches", o.eval_batches, "Batches each evaluation averages over");
  command.add_option("--seed", o.seed, "Seed of the parameter initialisation and of the data sampling");
  command.add_option("--log-interval", o.log_interval, "Steps between log lines");
  command.add_option("--checkpoint-dir", o.checkpoint_dir, "Folder of the checkpoints (created when missing)");
  command.add_option("--checkpoint-interval", o.checkpoint_interval,
                     "Steps between checkpoints; 0 = one after the last step only (needs --checkpoint-dir)");
  command.add_option("--resume", o.resume, "Continue from a checkpoint: a path, or latest (in --checkpoint-dir)");
  command.add_option("--init-from", o.init_from, "Load model parameters (only) from a safetensors file");
  command.add_option("--json", o.json_path, "Write the results document (benchmark train, a row per log line)");
  command.add_option("--ddp-strategy", o.ddp_strategy,
                     "Data-parallel runs (mpirun): naive, flat, overlapped or bucketed gradient all-reduce");
  command.add_option("--bucket-mb", o.bucket_mb, "Data-parallel runs, bucketed: MiB of fp32 gradients per bucket");
  command.add_option("--grad-comm-dtype", o.grad_comm_dtype,
                     "Data-parallel runs: fp32, or bf16 (gradients rounded to bf16 for the all-reduce)");
  command.add_option("--zero", o.zero,
                     "off, owner_broadcast or reduce_scatter (ZeRO-1 sharded AdamW state, data-parallel runs), "
                     "2 or 3 (ZeRO-2 / ZeRO-3, any number of ranks; sharded checkpoints)");
}

void register_train(CLI::App& app, Action& action) {
  CLI::App* command = app.add_subcommand("train", "Train the Transformer LM: logs loss and throughput, checkpoints");
  command->footer(kFooter);
  auto options = std::make_shared<TrainOptions>();
  auto job = std::make_shared<JobOptions>();
  add_train_options(*command, *options);
  add_job_options(*command, *job);
  command->callback([&action, options, job] { action = [options, job] { return run_train(*options, *job); }; });
}

}  // namespace ft::cli
