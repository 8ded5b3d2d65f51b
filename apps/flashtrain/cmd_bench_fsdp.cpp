// cmd_bench_fsdp.cpp — `flashtrain bench fsdp`: the options (documented, defaults shown in --help) and the
// action that joins the job, runs the rows of fsdp_bench.h and, on rank 0, prints the table and writes --json.
//   mpirun -np 2 flashtrain bench fsdp --size xl --context 512 --batch 2 --precision bf16 --zero 0,2,3
//       --json bench/results/fsdp-xl.json
//   mpirun -np 3 flashtrain bench fsdp --size tiny --device cpu
#include <memory>

#include "flashtrain/commands.h"
#include "flashtrain/ddp_bench.h"
#include "flashtrain/fsdp_bench.h"
#include "flashtrain/timeline_profile.h"

namespace ft::cli {

namespace {

constexpr const char* kFooter = R"(
Run one process per GPU under mpirun or srun (each rank uses GPU local_rank), or one process alone.
Rows, per model case (size x context x precision), one per --zero stage:
  0  DDP (bucketed, --bucket-mb): parameters, gradients and AdamW state whole on every rank
  1  ZeRO-1: AdamW state sharded; gradients reduce-scattered and parameters all-gathered after backward
  2  ZeRO-2: gradients reduce-scattered into shards during backward, a block at a time, and a
     replica of the parameters (bf16 in bf16 mode) all-gathered after the step
  3  ZeRO-3 (FSDP): parameters, gradients and AdamW state sharded; each block gathered when used
Every row builds its own model on each rank (each rank: its own random local batch of --batch sequences)
and takes the full training step (forward, backward, gradient reduction, clipping to 1.0, AdamW):
--warmup untimed and --steps timed steps (step_ms: the median over steps of the max over ranks), then
one more step whose memory is profiled; peak_gib is the highest point of the row on the rank with the
highest peak, split by category there. mfu counts FLOPs as the PyTorch FSDP anchor does:
6 x non-embedding parameters x tokens + causal attention, recomputation not counted.

--profile timeline --timeline-json PREFIX: after each row's timed steps and its memory-profiled step, two
more steps ("step 1", "step 2") run with rank 0's kernels, memory copies and NCCL collectives recorded per
CUDA stream through CUPTI (the other ranks step along untraced; the timed steps are not affected). Rank 0
writes them to PREFIX-<size>-ctx<ctx>-<precision>-zero<stage>.json and prints step 2's stream summary:
per stream its busy time and span; for the compute stream (the one running most non-NCCL kernel time) its
gaps, how much of them an NCCL kernel, a copy on another stream or nothing filled, their sum by phase
(model forward, model backward, optimizer step), the 10 largest with the records around them, and the time
its kernels ran beside NCCL kernels (the document keeps it per step as "step_streams"). Draw with
python3 tools/plot_timeline.py PREFIX-...-zero3.json --out zero3.png. Needs a CUDA build with CUPTI.)";

int run_bench_fsdp(const BenchFsdpOptions& options) {
  return run_data_parallel_bench(options, resolve_bench_fsdp_options, bench_fsdp);
}

}  // namespace

void register_bench_fsdp(CLI::App& bench, Action& action) {
  CLI::App* command =
      bench.add_subcommand("fsdp", "ZeRO-0/1/2/3 (FSDP): step time, MFU and memory per rank (mpirun)");
  command->footer(kFooter);
  command->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto options = std::make_shared<BenchFsdpOptions>();
  BenchFsdpOptions& o = *options;
  o.model = data_parallel_model_options();
  add_data_parallel_model_options(*command, o.model);
  command->add_option("--zero", o.stages, "Rows, comma-separated ZeRO stages: 0 (DDP), 1, 2, 3");
  command->add_option("--grad-comm-dtype", o.grad_comm_dtype,
                      "fp32 or bf16: the dtype gradients are reduced in (stages 0, 2, 3; bf16 rounds them)");
  command->add_option("--bucket-mb", o.bucket_mb, "MiB per gradient bucket of stage 0's DDP");
  command->add_option("--transport", o.transport,
                      "nccl, or copy_engine: stages 2 and 3 reduce-scatter by peer copies on the copy engines (2 GPUs "
                      "of one node; all-gathers stay on NCCL)");
  command->add_flag("--csv", o.csv, "Print CSV instead of a markdown table");
  command->add_option("--json", o.json_path, "Write the results document (benchmark fsdp) to this path (rank 0)");
  add_timeline_options(*command, o.profile, o.timeline_prefix, "PREFIX-<size>-ctx<ctx>-<precision>-zero<stage>.json");
  add_job_options(*command, o.job);
  command->callback([&action, options] { action = [options] { return run_bench_fsdp(*options); }; });
}

}  // namespace ft::cli
