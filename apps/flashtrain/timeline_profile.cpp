// timeline_profile.cpp — the data-parallel benches' --profile timeline: options, their check, the profiled steps
// and the document.
#include "flashtrain/timeline_profile.h"

#include <CLI/CLI.hpp>

#include "bench/kernel_profiler.h"
#include "bench/kernel_summary.h"
#include "bench/results_json.h"
#include "bench/stream_timeline.h"
#include "core/error.h"
#include "core/nvtx.h"

namespace ft::cli {

namespace {

constexpr int kProfiledSteps = 2;  // the first may carry one-time costs; the summary printed is the last's

}  // namespace

void add_timeline_options(CLI::App& command, std::string& profile, std::string& prefix, const std::string& row_paths) {
  command
      .add_option("--profile", profile,
                  "timeline: after each row's timed steps, record rank 0's kernels, copies and collectives per "
                  "stream for 2 more steps (CUPTI) and print the last one's stream summary")
      ->check(CLI::IsMember({"timeline"}));
  command.add_option("--timeline-json", prefix,
                     "--profile timeline: rank 0 writes " + row_paths + " per row; draw with tools/plot_timeline.py");
}

std::string resolve_timeline_prefix(const std::string& profile, const std::string& prefix, Device device) {
  if (profile.empty()) {
    FT_CHECK(prefix.empty(), "--timeline-json is only used with --profile timeline");
    return "";
  }
  FT_CHECK(profile == "timeline", "--profile: expected timeline, given '", profile, "'");
  FT_CHECK(!prefix.empty(), "--profile timeline needs --timeline-json PREFIX (where rank 0 writes a document per row)");
  FT_CHECK_KIND(unsupported, kernel_profiler_available(), "--profile timeline: ", kernel_profiler_missing());
  FT_CHECK(device.is_cuda(), "--profile timeline records GPU kernels: expected a CUDA device, given ",
           device.to_string());
  return prefix;
}

void profile_timeline(DataParallelReplica& replica, Communicator& host, const std::function<void()>& sync,
                      const std::string& path, Device device, nlohmann::json row_config, std::ostream* summary) {
  const bool root = host.rank() == 0;
  KernelProfiler profiler;
  if (root) profiler.start();
  for (int i = 1; i <= kProfiledSteps; ++i) {
    NvtxRange range(str("step ", i));
    replica.timed_step(host, sync);
  }
  if (!root) return;
  const KernelProfile profile = profiler.stop();
  const std::vector<StepStreamSummary> steps = summarize_step_streams_by_range(profile.records, profile.host_calls);
  const nlohmann::json doc = kernel_timeline_document(profile, steps, device, std::move(row_config));
  if (!summary) {
    write_json_atomic(path, doc);
    return;
  }
  if (!steps.empty()) *summary << "\nStreams of the profiled " << format_step_streams(steps.back()) << "\n";
  write_json_reported(path, doc, *summary);
}

}  // namespace ft::cli
