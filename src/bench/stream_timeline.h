// stream_timeline.h — what a profiled step's streams did, from the kernel profiler's records
// (kernel_profiler.h), in host code that needs no GPU: per stream its busy time (the union of its records'
// intervals) and span; for the compute stream its gaps (where it ran nothing between its first and last
// record), how much of each gap an NCCL kernel, a copy on another stream, or nothing at all filled, the
// largest gaps with the records around them and the slow host call during each (what the host was blocked
// in while the stream waited for its next launch), the gaps summed by phase (the range below the step's of the
// record after each gap: "model forward", "model backward", "optimizer step", or "(step)" between them), and
// the time its kernels ran beside NCCL kernels.
//
// The compute stream is the stream whose kernels other than NCCL's ran longest (the model's stream: it runs
// every GEMM and attention kernel). Communication kernels are those kernel_summary.h classes as
// communication (names containing "nccl"); copies are memcpy and memset records. A step is the records
// whose outermost NvtxRange is the step's ("step 2"), and the records launched outside every range (by a
// library's own thread) that start between its first start and its last end; other records are left out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/kernel_profiler.h"

namespace ft {

struct StreamActivity {
  int device = 0;
  std::uint32_t stream = 0;  // CUPTI's stream id
  std::string lane;          // "compute" (the compute stream), "communication" (ran an NCCL kernel),
                             // "copy" (copies only), "other"
  std::int64_t records = 0;
  double first_ms = 0;  // its first start, from the step's start
  double busy_ms = 0;   // the union of its records' intervals
  double span_ms = 0;   // its first start to its last end
};

// A stretch of the compute stream with nothing on it, and what ran elsewhere on its device meanwhile.
struct ComputeGap {
  std::uint64_t start_ns = 0, end_ns = 0;  // on CUPTI's clock
  double start_ms = 0;  // from the step's start
  double length_ms = 0;
  std::string before, after;  // the compute stream's records ending it and starting after it (full names)
  std::string phase;          // the range of `after` below the step's ("model backward"), or "(step)"
  double communication_ms = 0;  // of the gap, time an NCCL kernel ran
  double copy_ms = 0;           // time a copy ran on another stream
  double idle_ms = 0;           // time no other stream of the device ran anything
  std::string host_call;        // the slow host call (kernel_profiler.h) overlapping it longest, if any
  double host_call_ms = 0;      // how much of the gap that call covered
};

// The compute stream's gaps before records of one phase.
struct PhaseGaps {
  std::string phase;
  std::int64_t gaps = 0;
  double gap_ms = 0;
};

struct StepStreamSummary {
  std::string range;     // the step's outermost range ("step 2")
  double span_ms = 0;    // the step's records: first start to last end
  std::vector<StreamActivity> streams;  // by device, then stream
  std::size_t compute = 0;              // index of the compute stream in streams
  std::int64_t gaps = 0;                // the compute stream's gaps ...
  double gap_ms = 0;                    // ... and their sum (its span - its busy time),
  double gap_communication_ms = 0;      // split as ComputeGap's fields, summed over the gaps
  double gap_copy_ms = 0;
  double gap_idle_ms = 0;
  double gap_host_call_ms = 0;  // of the gaps, time a slow host call (any thread) was running
  double nccl_overlap_ms = 0;  // the compute stream's kernels' time while an NCCL kernel ran (any stream)
  std::vector<PhaseGaps> gaps_by_phase;  // every gap by its phase, in the order phases first had a gap
  std::vector<ComputeGap> largest_gaps;  // the longest `top` gaps, longest first (then earliest)
};

// One step's records (any order, at least one kernel) and the profile's slow host calls (any order; those
// outside the step's gaps do not count). top: how many gaps to list.
StepStreamSummary summarize_step_streams(const std::string& range, const std::vector<KernelRecord>& records,
                                         const std::vector<HostCallRecord>& host_calls, std::size_t top = 10);
// A summary per outermost range (each "step N") that ran a kernel other than NCCL's, in order of first start.
std::vector<StepStreamSummary> summarize_step_streams_by_range(const std::vector<KernelRecord>& records,
                                                               const std::vector<HostCallRecord>& host_calls,
                                                               std::size_t top = 10);

// A line for the step and the compute stream, a line of its gaps by phase, a table of the streams, and a table
// of the largest gaps.
std::string format_step_streams(const StepStreamSummary& summary);
// {"range", "span_ms", "compute_stream", "gaps", "gap_ms", "gap_communication_ms", "gap_copy_ms",
//  "gap_idle_ms", "gap_host_call_ms", "nccl_overlap_ms", "gaps_by_phase": [{"phase", "gaps", "gap_ms"}],
//  "streams": [{"device", "stream", "lane", "records", "first_ms", "busy_ms", "span_ms"}], "largest_gaps":
//  [{"start_ms", "length_ms", "communication_ms", "copy_ms", "idle_ms", "host_call", "host_call_ms", "phase",
//  "before", "after"}]} with short kernel names.
nlohmann::json step_streams_json(const StepStreamSummary& summary);

}  // namespace ft
