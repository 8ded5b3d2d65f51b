// timeline_profile.h — `--profile timeline --timeline-json PREFIX` of the data-parallel benches (bench ddp,
// bench fsdp): the two options, their check, and the profiled steps a row runs after its timed ones. Rank 0
// records those steps' kernels, memory copies and NCCL collectives per CUDA stream (bench/kernel_profiler.h)
// while the other ranks step along untraced, then writes them as a kernel-timeline document
// (bench/kernel_summary.h: every record, and each step's stream summary of bench/stream_timeline.h) and
// prints the last step's summary. The timed steps are over by then, so profiling does not slow them.
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "dist/communicator.h"
#include "flashtrain/ddp_bench.h"

namespace CLI {
class App;
}

namespace ft::cli {

// Declares --profile (only "timeline") and --timeline-json; row_paths says how a row's file is named
// ("PREFIX-<strategy>.json ...").
void add_timeline_options(CLI::App& command, std::string& profile, std::string& prefix, const std::string& row_paths);

// Checks the two options: none, or --profile timeline with --timeline-json, in a build with the kernel profiler
// (ft::Error unsupported), on a CUDA device. Returns the prefix rows write to ("" without --profile).
std::string resolve_timeline_prefix(const std::string& profile, const std::string& prefix, Device device);

// Runs 2 more steps of the replica ("step 1", "step 2": timed_step's barrier, then the step); collective, every
// rank calls it. Rank 0 records them under the kernel profiler, summarises each step's streams once, writes
// kernel_timeline_document(profile, those summaries, device, row_config) to path and, with summary set, prints
// the last step's summary there. The other ranks return after their steps (their next host collective waits for
// rank 0's writing).
void profile_timeline(DataParallelReplica& replica, Communicator& host, const std::function<void()>& sync,
                      const std::string& path, Device device, nlohmann::json row_config, std::ostream* summary);

}  // namespace ft::cli
