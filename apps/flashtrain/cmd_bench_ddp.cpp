// cmd_bench_ddp.cpp — `flashtrain bench ddp`: the options (documented, defaults shown in --help), the model
// options bench zero shares, and the action that joins the job, runs the rows of ddp_bench.h and, on rank 0,
// prints the table and writes --json.
//   mpirun -np 2 flashtrain bench ddp --size xl --context 512 --batch 2 --precision bf16
//       --strategy single,naive,flat,overlapped,bucketed --bucket-mb 1,10,100,1000 --json bench/results/ddp-xl.json
//   mpirun -np 2 flashtrain bench ddp --size tiny --device cpu --strategy flat,bucketed --bucket-mb 1
#include <memory>

#include "flashtrain/cli_parse.h"
#include "flashtrain/commands.h"
#include "flashtrain/ddp_bench.h"
#include "flashtrain/timeline_profile.h"

namespace ft::cli {

namespace {

constexpr const char* kFooter = R"(
Run one process per GPU under mpirun or srun (each rank uses GPU local_rank; CUDA_VISIBLE_DEVICES picks
them), or one process alone (a world of one). Every model case (size x context x precision) builds the
model and its Trainer once on each rank; each rank trains on its own random local batch of --batch
sequences. Rows, per case: each --strategy in order, bucketed once per --bucket-mb:
  single      no DDP: every rank runs the plain one-device step of its local batch at the same time,
              with no communication (the step DDP adds communication to)
  naive       one blocking all-reduce per parameter after backward
  flat        one all-reduce of the whole gradient buffer after backward
  overlapped  an all-reduce per parameter as soon as its gradient is final, during backward
  bucketed    buckets of --bucket-mb MiB in reverse parameter order, each all-reduced as soon as its last
              gradient is final, during backward
  zero2       ZeRO-2 (as bench fsdp's stage 2): each unit's gradients reduce-scattered as backward finishes
              it, AdamW on this rank's shard, the parameters all-gathered after the step; zero3 likewise
              with parameters gathered as used. On a model of their own, after the other rows (once per
              --nccl-max-ctas / --cta-policy value, and once over the copy engine's reduce-scatter with
              --transport copy_engine; comm_ms n/a)
A step is the full training step: forward and backward of the local batch, the DDP gradient average,
clipping to 1.0 and AdamW, with the device synchronised at its end. --warmup steps, then --steps timed
ones, each after an untimed barrier. step_ms = the median over the timed steps of the max over ranks;
comm_ms = likewise of the sum of the step's all-reduce durations (NCCL: CUDA events on the
communication stream; MPI: issue to completion) — for overlapped and bucketed most of it runs during
backward, so step_ms - single's step_ms (the exposed cost) is smaller than comm_ms; peak_gib = the
largest rank's peak device memory; tokens_per_s = world x batch x context / step_ms. A case that runs
out of memory while it is built is an OOM row and the sweep goes on; so is a row that runs out during
its steps over MPI, while over NCCL that ends the run (the ranks' collectives no longer match).
--bf16-comm all-reduces bf16 copies of the gradients (half the bytes). bwd_ms = likewise of backward's own
time: CUDA events on the model's stream from its start to its last kernel (what the collectives beside it
cost backward).

Communication beside compute (GPUs, NCCL; each DDP row is repeated per value of each list):
  --comm-buffer plain,registered,nccl_mem,symmetric   plain reduces the buckets in place; registered
              registers the gradient buffer with NCCL (ncclCommRegister); nccl_mem reduces each bucket in a
              staging buffer from ncclMemAlloc (registered); symmetric in a staging buffer in a symmetric
              window (NCCL 2.27+), NCCL's few-CTA symmetric kernels. The staging copies run on NCCL's stream.
  --nccl-max-ctas 0,2,4,8 --nccl-min-ctas N --cta-policy default,efficiency,zero   the CTAs (SMs) each
              collective may hold, set in the row's own communicator's ncclConfig_t.
  --comm-priority high,low   the priority of that communicator's stream (low: backward's pending blocks
              get the SMs first).
  --transport nccl,copy_engine   copy_engine adds a row (plain buffers, no NCCL limits) whose all-reduces
              run on the copy engines over CUDA peer access (2 ranks on one node): each rank copies the
              peer's half of the bucket into the peer's mailbox, reduces its own half with a small kernel
              and copies the result back (reduce-scatter + all-gather by copies).
A row whose communicator or buffers this machine cannot give (an NCCL without symmetric windows, GPUs
without peer access: ft::Error unsupported on a rank) is an `unsupported` row with the reason, and the
sweep goes on.

--profile timeline --timeline-json PREFIX: after each row's timed steps, two more steps ("step 1",
"step 2") run with rank 0's kernels, memory copies and NCCL collectives recorded per CUDA stream through
CUPTI; rank 0 writes them as a kernel-timeline document per row, prints step 2's stream summary (per
stream its busy time and span; the compute stream's gaps, what ran during them, the 10 largest, and its time
beside NCCL kernels; the document keeps it per step as "step_streams"), and
  python3 tools/plot_timeline.py PREFIX-overlapped.json --out overlapped.png
draws step 2: a lane per stream, compute and communication apart, so a naive step's all-reduces after
backward and an overlapped step's all-reduces under backward are visible. Needs a CUDA build with CUPTI.)";

int run_bench_ddp(const BenchDdpOptions& options) {
  return run_data_parallel_bench(options, resolve_bench_ddp_options, bench_ddp);
}

}  // namespace

void add_data_parallel_model_options(CLI::App& command, BenchModelOptions& o) {
  add_model_definition_options(command, o);
  command.add_option("--context", o.contexts, "Context lengths, comma-separated");
  command.add_option("--batch", o.batch, "Sequences per rank and step (the local batch)")->check(at_least(1));
  command.add_option("--warmup", o.warmup, "Warm-up steps per row, untimed")->check(at_least(0));
  command.add_option("--steps", o.steps, "Timed steps per row")->check(at_least(1));
  command.add_option("--precision", o.precisions, "Precisions, comma-separated: fp32, bf16 (mixed precision)");
  command.add_option("--attention", o.attention, "Attention implementation: flash or naive");
  command.add_flag("--tf32", o.tf32, "fp32 on CUDA: let GEMMs use TF32 tensor cores");
  command.add_option("--device", o.device,
                     "cpu, cuda or auto (cuda when a GPU is visible); under mpirun each rank uses GPU local_rank")
      ->check(device_validator());
  command.add_option("--seed", o.seed, "Seed of the parameters; rank r's batch uses seed + 1 + r");
}

void register_bench_ddp(CLI::App& bench, Action& action) {
  CLI::App* command = bench.add_subcommand("ddp", "Time data-parallel training steps per DDP strategy (mpirun)");
  command->footer(kFooter);
  command->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto options = std::make_shared<BenchDdpOptions>();
  BenchDdpOptions& o = *options;
  o.model = data_parallel_model_options();
  add_data_parallel_model_options(*command, o.model);
  command->add_option("--strategy", o.strategies,
                      "Strategies, comma-separated: single (no DDP), naive, flat, overlapped, bucketed, zero2, zero3 "
                      "(ZeRO-2/3's traffic: reduce-scatter in backward, sharded AdamW, all-gather)");
  command->add_option("--bucket-mb", o.bucket_mbs, "Bucket sizes of the bucketed rows, MiB, comma-separated");
  command->add_option("--transport", o.transports,
                      "How each DDP row's all-reduces move, comma-separated (a row per transport): nccl, copy_engine "
                      "(2 GPUs: peer copies on the copy engines, a small reduction kernel)");
  command->add_option("--comm-buffer", o.buffers,
                      "Where each DDP row's buckets are reduced, comma-separated (a row per kind): plain, registered, "
                      "nccl_mem, symmetric (GPUs)");
  command->add_option("--nccl-max-ctas", o.max_ctas,
                      "NCCL CTAs per collective at most, comma-separated (a row per value; 0: NCCL's default); a "
                      "value other than 0 gives the row its own communicator (GPUs)");
  command->add_option("--nccl-min-ctas", o.min_ctas, "NCCL CTAs per collective at least, of the tuned rows (0: default)")
      ->check(CLI::Range(0, NcclTuning::kMaxCtas));
  command->add_option("--cta-policy", o.cta_policies,
                      "NCCL CTA policies, comma-separated (a row per policy): default, efficiency (NCCL 2.27+), "
                      "zero (NCCL 2.28+) (GPUs)");
  command->add_flag("--bf16-comm", o.bf16_comm, "All-reduce bf16 copies of the gradients (half the bytes)");
  command->add_option("--comm-priority", o.priorities,
                      "The NCCL stream's priority, comma-separated (a row per value): high (the default), low (the "
                      "model's blocks scheduled first; the row gets its own communicator) (GPUs)");
  command->add_option("--bf16-round", o.bf16_rounding,
                      "With --bf16-comm, where buckets are rounded to bf16, comma-separated (a row per place): model "
                      "(the model's stream), comm (the communication stream, beside backward)");
  command->add_flag("--csv", o.csv, "Print CSV instead of a markdown table");
  command->add_option("--json", o.json_path, "Write the results document (benchmark ddp) to this path (rank 0)");
  add_timeline_options(*command, o.profile, o.timeline_prefix,
                       "PREFIX-<strategy>.json (bucketed: PREFIX-bucketed-<mb>mb.json)");
  add_job_options(*command, o.job);
  command->callback([&action, options] { action = [options] { return run_bench_ddp(*options); }; });
}

}  // namespace ft::cli
