// cmd_bench_zero.cpp — `flashtrain bench zero`: the options (documented, defaults shown in --help) and the
// action that joins the job, runs the rows of zero_bench.h and, on rank 0, prints the tables and writes --json.
//   mpirun -np 2 flashtrain bench zero --size xl --context 512 --batch 2 --precision bf16
//       --json bench/results/zero-xl.json
//   mpirun -np 2 flashtrain bench zero --size tiny --device cpu --zero off,reduce_scatter
#include <memory>

#include "flashtrain/commands.h"
#include "flashtrain/ddp_bench.h"
#include "flashtrain/zero_bench.h"

namespace ft::cli {

namespace {

constexpr const char* kFooter = R"(
Run one process per GPU under mpirun or srun (each rank uses GPU local_rank), or one process alone.
Rows, per model case (size x context x precision), one per --zero entry:
  off              not sharded: DDP (bucketed, --bucket-mb) and the Trainer's AdamW, whose state
                   (8 bytes per parameter) every rank holds whole
  owner_broadcast  ZeRO-1: DDP averages the gradients, each rank updates its 1/N of the parameters with
                   its 1/N of the AdamW state and broadcasts them
  reduce_scatter   ZeRO-1 without DDP: gradients reduce-scattered, parameters all-gathered
Every row builds its own model on each rank (each rank: its own random local batch of --batch sequences)
and takes the full training step (forward, backward, gradient averaging, clipping to 1.0, AdamW):
--warmup untimed and --steps timed steps (step_ms: the median over steps of the max over ranks), then
one more step whose memory is profiled. The allocator's timeline gives the memory at three points:
after_init (the peak while building the model, Trainer, DDP and ZeroOptimizer with its state),
before_optimizer_step (the peak of that step's forward, backward and DDP synchronize) and
after_optimizer_step (the peak of its optimizer step), each split into parameters (fp32 masters),
gradients (with ZeRO's gradient shard), optimizer_state, activations (the model's arena,
allocated at init), workspace and other, and the level at the point. Memory figures are those of the
rank with the highest peak. optimizer_state_gib is that rank's AdamW state: whole, or its shard.)";

int run_bench_zero(const BenchZeroOptions& options) {
  return run_data_parallel_bench(options, resolve_bench_zero_options, bench_zero);
}

}  // namespace

void register_bench_zero(CLI::App& bench, Action& action) {
  CLI::App* command = bench.add_subcommand("zero", "ZeRO-1 vs DDP: step time and memory per rank (mpirun)");
  command->footer(kFooter);
  command->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto options = std::make_shared<BenchZeroOptions>();
  BenchZeroOptions& o = *options;
  o.model = data_parallel_model_options();
  add_data_parallel_model_options(*command, o.model);
  command->add_option("--zero", o.modes, "Rows, comma-separated: off (DDP), owner_broadcast, reduce_scatter");
  command->add_option("--bucket-mb", o.bucket_mb, "MiB per gradient bucket of the DDP in the off and owner_broadcast rows");
  command->add_flag("--csv", o.csv, "Print CSV instead of markdown tables");
  command->add_option("--json", o.json_path, "Write the results document (benchmark zero) to this path (rank 0)");
  add_job_options(*command, o.job);
  command->callback([&action, options] { action = [options] { return run_bench_zero(*options); }; });
}

}  // namespace ft::cli
