// comm_bench.h — `flashtrain bench comm`: times the all-reduce (sum) of float32 buffers of given sizes over
// the ranks of a Communicator, as nccl-tests reports it: host buffers over MPI, or buffers on each rank's
// GPU over NCCL. Every rank times each iteration on its own (a barrier first, untimed; then the all-reduce
// and its wait, host wall clock: for NCCL, wait() returns once the collective's completion event has been
// seen, so the time is synchronised with the GPU); a size's time is the MAX OVER
// RANKS of each rank's MEDIAN iteration (a collective is as slow as its slowest rank), gathered with an
// all-gather so every rank returns the same rows. algbw = bytes / time; busbw = algbw * 2 (n - 1) / n
// (NCCL's convention: the traffic a ring all-reduce puts on each link, comparable across world sizes; 0 for
// a world of one, where nothing moves). GB/s are 10^9 bytes per second.
// No CLI11 here: cmd_bench_comm.cpp parses options into CommBenchConfig.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/communicator.h"

namespace ft::cli {

struct CommBenchConfig {
  std::vector<std::int64_t> sizes;  // bytes per buffer, each a positive multiple of 4 (float32)
  int warmup = 5;                   // untimed all-reduces per size
  int iters = 10;                   // timed all-reduces per size
  Device device = Device::cpu();    // where each rank's buffer lives: the CPU (MPI) or its GPU (NCCL)
};

struct CommBenchRow {
  int world = 1;
  std::string backend;   // the communicator's: "mpi" or "nccl", or "single" in a world of one on the CPU
  std::int64_t bytes = 0;
  double time_ms = 0;    // max over ranks of the per-rank median
  double min_rank_ms = 0;  // min over ranks of the per-rank median (the ranks' spread)
  std::optional<double> algbw_gbps, busbw_gbps;  // none when the time is below the clock's resolution
};

// "1MiB,10MB,4096": a comma-separated list of sizes, each a whole number with an optional unit B, KB, MB,
// GB (powers of 1000) or KiB, MiB, GiB (powers of 1024), case-sensitive, spaces allowed around items;
// each must come to a positive multiple of 4 bytes. ft::Error (invalid_argument) naming the item otherwise.
std::vector<std::int64_t> parse_byte_sizes(std::string_view text);
// "1 MiB", "10 MB", "1 GiB", "4096 B": the shortest exact spelling (binary units first).
std::string format_bytes(std::int64_t bytes);

// Times every size; collective over comm (all ranks call it with the same config; comm must move buffers
// on config.device). Each size's buffer is filled with rank + 1 and all-reduced once to check the sum
// (ft::Error runtime when wrong; a GPU buffer is copied to the host for the check), then zero-filled for
// the warm-up and timed iterations. The ranks' medians are gathered over host (the host communicator of the
// same job: MPI, or comm itself when that moves host buffers). progress (rank 0 passes std::cerr, or
// nullptr) gets one line per size.
std::vector<CommBenchRow> run_comm_bench(const CommBenchConfig& config, Communicator& comm, Communicator& host,
                                         std::ostream* progress);

// Markdown table (or CSV) of rows.
std::string format_comm_bench(const std::vector<CommBenchRow>& rows, bool csv);

// Results document: benchmark "comm" on config.device, config (world, backend, dtype, op, warmup, iters,
// statistic, timing), a row per size with world, backend, bytes, time_ms, min_rank_ms, algbw_gbps,
// busbw_gbps (null when unknown).
nlohmann::json comm_bench_document(const CommBenchConfig& config, const std::vector<CommBenchRow>& rows);

// The whole subcommand on a communicator: runs the benchmark; on rank 0 prints the table to out and
// writes json_path (when not empty). Other ranks print and write nothing.
void bench_comm(const CommBenchConfig& config, Communicator& comm, Communicator& host, bool csv,
                const std::string& json_path, std::ostream& out);

}  // namespace ft::cli
