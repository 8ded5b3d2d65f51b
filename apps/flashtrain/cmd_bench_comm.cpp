// cmd_bench_comm.cpp — `flashtrain bench comm`: options (documented, defaults shown in --help) and the action
// that joins the job (DistributedContext), runs the all-reduce benchmark of comm_bench.h over the chosen
// backend's communicator and, on rank 0, prints the table and writes --json.
//   mpirun -np 4 flashtrain bench comm --json bench/results/comm-mpi-4.json
//   mpirun -np 2 flashtrain bench comm --sizes 64KiB,1MiB,16MiB --iters 50
//   mpirun -np 8 flashtrain bench comm --backend nccl --json bench/results/comm-nccl-8.json
#include <iostream>
#include <memory>

#include "core/error.h"
#include "dist/context.h"
#include "flashtrain/comm_bench.h"
#include "flashtrain/commands.h"
#include "flashtrain/job.h"
#include "flashtrain/output_paths.h"

namespace ft::cli {

namespace {

constexpr const char* kFooter = R"(
Run one process per rank under mpirun or srun (the world is the launcher's); without a launcher the
world is one process. Each size's float32 buffer is first checked (every rank sends rank + 1; the sum
must be world (world + 1) / 2), then all-reduced (sum, in place) --warmup times untimed and --iters
times timed: a barrier (untimed), then the all-reduce until it has completed on this rank.

Reported per size: time_ms = the MAX OVER RANKS of each rank's median iteration (a collective is as
slow as its slowest rank); min_rank_ms = the fastest rank's median; algbw = bytes / time_ms;
busbw = algbw * 2 (world - 1) / world, the convention of nccl-tests (the bytes each rank sends and
receives in a ring all-reduce, comparable across world sizes). In a world of one nothing moves:
busbw is 0 and time_ms is only the call's overhead. GB/s are 10^9 bytes per second.

Backends: mpi (host buffers; MPI when started by a launcher, the single-process communicator
otherwise — the rows name the one that ran); nccl (a buffer on each rank's GPU, local rank r on
cuda:r, over NCCL; without a launcher a world of one GPU). nccl needs a build with CUDA and NCCL,
and as many visible GPUs per node as ranks.
Timing: host wall clock on every backend. For nccl the barrier is an NCCL all-reduce of one float,
and wait() returns once the collective's completion event (on the communication stream) has been
seen: each timed iteration is synchronised with the GPU, launch overhead included.
Memory: every rank holds one buffer of the largest size (1 GiB by default; for nccl on its GPU, plus
a host copy of it for the check).)";

struct BenchCommOptions {
  std::string sizes = "1MiB,10MiB,100MiB,1GiB";
  std::string backend = "mpi";
  int warmup = 5;
  int iters = 10;
  bool csv = false;
  std::string json_path;
  JobOptions job;
};

int run_bench_comm(const BenchCommOptions& options) {
  CommBenchConfig config;
  config.sizes = parse_byte_sizes(options.sizes);
  config.warmup = options.warmup;
  config.iters = options.iters;
  DistributedContext context(distributed_options(options.job));  // MPI under a launcher, a world of one otherwise
  return run_job(context, [&] {
    if (context.rank() == 0) check_output_file(options.json_path, "--json");
    if (options.backend == "nccl") {
      // ft::Error (unsupported) without NCCL in the build or without a GPU for this rank.
      Communicator& comm = context.device_communicator();
      config.device = context.local_gpu();
      bench_comm(config, comm, context.host_communicator(), options.csv, options.json_path, std::cout);
    } else {
      bench_comm(config, context.host_communicator(), context.host_communicator(), options.csv, options.json_path,
                 std::cout);
    }
    return 0;
  });
}

// CLI11 validator: parse_byte_sizes accepts the list.
CLI::Validator byte_sizes_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          parse_byte_sizes(text);
          return {};
        } catch (const Error& e) {
          return e.message();
        }
      },
      "");
}

}  // namespace

void register_bench_comm(CLI::App& bench, Action& action) {
  CLI::App* command = bench.add_subcommand("comm", "Time all-reduce over the ranks of an mpirun/srun job (MPI or NCCL)");
  command->footer(kFooter);
  command->option_defaults()->always_capture_default();
  auto options = std::make_shared<BenchCommOptions>();
  BenchCommOptions& o = *options;
  command->add_option("--sizes", o.sizes,
                      "Buffer sizes, comma-separated: bytes, or with a unit KiB/MiB/GiB (1024^k) or KB/MB/GB (1000^k)")
      ->check(byte_sizes_validator());
  command->add_option("--backend", o.backend, "mpi (host buffers) or nccl (a buffer on each rank's GPU)")
      ->check(CLI::IsMember({"mpi", "nccl"}));
  command->add_option("--warmup", o.warmup, "Untimed all-reduces per size")->check(CLI::Range(0, 100000));
  command->add_option("--iters", o.iters, "Timed all-reduces per size (each rank's median is reported)")
      ->check(CLI::Range(1, 100000));
  command->add_flag("--csv", o.csv, "Print CSV instead of a markdown table");
  command->add_option("--json", o.json_path, "Write the results document (benchmark comm) to this path (rank 0)");
  add_job_options(*command, o.job);
  command->callback([&action, options] { action = [options] { return run_bench_comm(*options); }; });
}

}  // namespace ft::cli
