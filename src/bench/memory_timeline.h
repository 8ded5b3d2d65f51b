// memory_timeline.h — memory profiles from the allocator's timeline: MemoryRecorder records every
// allocation and free on one device through named phases ("init", "forward", "backward", "optimizer"),
// summarize_memory_timeline gives each phase's peak broken into what the memory is for, and the
// results-style JSON document and table present both (tools/plot_memory.py draws the JSON).
//
// What the memory is for, from the allocation's tag (the tags src/model and src/ops use):
//   parameters       "parameters" (the fp32 masters; bf16 mode casts each block's weights into the workspace)
//   gradients        "gradients"
//   optimizer_state  "optimizer state ..." (AdamW exp_avg and exp_avg_sq)
//   activations      "activations" (the model's arena of tensors saved for backward)
//   workspace        "workspace" (the model's per-layer temporaries) and every other tag: op temporaries
//                    such as "attention.naive.S", "gemm.workspace", "rope table", "cross-entropy losses"
//   other            "token ids ...", "init staging", "bench. ..." (inputs and staging), and memory
//                    already held on the device when recording started (its tags are unknown)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/allocator.h"
#include "core/device.h"

namespace ft {

enum class MemoryCategory { parameters, gradients, optimizer_state, activations, workspace, other };
constexpr std::size_t kMemoryCategories = 6;
const char* name_of(MemoryCategory category);  // "parameters", ..., "optimizer_state", ..., "other"
MemoryCategory classify_memory_tag(std::string_view tag);  // the rules above

struct MemoryPhase {
  std::string name;
  double start_ms = 0, end_ms = 0;  // on the timeline's clock (events' time_ms)
};

// Everything recorded between MemoryRecorder::start and stop.
struct MemoryTimeline {
  std::string device;             // Device::to_string() of the profiled device: the summary covers it
  std::int64_t start_bytes = 0;   // the device's current bytes when recording started
  std::int64_t end_bytes = 0;     // ... and when it stopped
  std::vector<MemoryPhase> phases;        // in order, each name once, spans back to back
  std::vector<AllocationEvent> events;    // every device's, in order
};

// Records the allocator's timeline (one recording at a time per process). Phases are labelled through
// Allocator::set_phase, so every event carries the phase it happened in; the allocator's phase from
// before start() is restored by stop(). The destructor stops a recording still running.
class MemoryRecorder {
 public:
  MemoryRecorder() = default;
  ~MemoryRecorder();
  MemoryRecorder(const MemoryRecorder&) = delete;
  MemoryRecorder& operator=(const MemoryRecorder&) = delete;

  void start(Device device, const std::string& first_phase = "init");
  void phase(const std::string& name);  // ends the current phase; names must not repeat
  MemoryTimeline stop();
  bool recording() const { return recording_; }

 private:
  double elapsed_ms() const;

  bool recording_ = false;
  Device device_ = Device::cpu();
  double start_ms_ = 0;
  std::string previous_phase_;
  MemoryTimeline timeline_;
};

// One phase of the profiled device: its level at the start and end, its peak (the level at its start
// when nothing in it allocates) and the live bytes per category at the moment of that peak.
struct MemoryPhaseSummary {
  std::string phase;
  double start_ms = 0, end_ms = 0;
  std::int64_t start_bytes = 0, end_bytes = 0, peak_bytes = 0;
  std::array<std::int64_t, kMemoryCategories> at_peak{};  // by MemoryCategory; sums to peak_bytes
  std::int64_t events = 0;                                // allocations and frees in the phase
  std::int64_t allocated_bytes = 0, freed_bytes = 0;      // their totals (freed_bytes >= 0)
};

// Replays the profiled device's events from start_bytes (held memory counts as "other"; a free of bytes
// allocated before recording is taken from "other"). Throws ft::Error when an event names a phase the
// timeline does not list, or when the replayed level disagrees with the allocator's current_bytes (memory
// changed on that device outside the recording, e.g. from another thread).
std::vector<MemoryPhaseSummary> summarize_memory_timeline(const MemoryTimeline& timeline);

// Markdown (or CSV) table: per phase the peak and its breakdown in MiB, and the event count.
std::string format_memory_summary(const std::vector<MemoryPhaseSummary>& summary, bool csv);

// The results document (results_json.h) of a memory profile: benchmark "memory-timeline", config as
// given, rows = the per-phase summary (bytes fields exact, *_gib for reading), plus
//   "memory_device", "start_bytes", "end_bytes",
//   "phases": [{"name", "start_ms", "end_ms"}],
//   "events": [{"time_ms", "device", "bytes", "current_bytes", "tag", "phase", "category"}].
nlohmann::json memory_timeline_document(const MemoryTimeline& timeline, Device device, nlohmann::json config);

}  // namespace ft
