// memory_timeline.cpp — recording phases of the allocator's timeline, the per-phase peak summary by
// category, its table and the JSON document.
#include "bench/memory_timeline.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "bench/report_table.h"
#include "bench/results_json.h"
#include "core/error.h"

namespace ft {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

std::size_t slot(MemoryCategory category) { return static_cast<std::size_t>(category); }

}  // namespace

const char* name_of(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameters: return "parameters";
    case MemoryCategory::gradients: return "gradients";
    case MemoryCategory::optimizer_state: return "optimizer_state";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::workspace: return "workspace";
    case MemoryCategory::other: return "other";
  }
  return "other";
}

MemoryCategory classify_memory_tag(std::string_view tag) {
  if (tag == "parameters") return MemoryCategory::parameters;
  if (tag == "gradients") return MemoryCategory::gradients;
  if (starts_with(tag, "optimizer state")) return MemoryCategory::optimizer_state;
  if (tag == "activations") return MemoryCategory::activations;
  if (starts_with(tag, "token ids") || tag == "init staging" || starts_with(tag, "bench."))
    return MemoryCategory::other;
  return MemoryCategory::workspace;
}

MemoryRecorder::~MemoryRecorder() {
  if (recording_) {
    Allocator& allocator = Allocator::instance();
    allocator.stop_recording();
    allocator.set_phase(previous_phase_);
  }
}

double MemoryRecorder::elapsed_ms() const { return now_ms() - start_ms_; }

void MemoryRecorder::start(Device device, const std::string& first_phase) {
  Allocator& allocator = Allocator::instance();
  FT_CHECK(!recording_ && !allocator.recording(),
           "MemoryRecorder: the allocator is already recording; stop that recording first");
  FT_CHECK(!first_phase.empty(), "MemoryRecorder: the first phase needs a name");
  timeline_ = MemoryTimeline{};
  timeline_.device = device.to_string();
  device_ = device;
  previous_phase_ = allocator.phase();
  allocator.set_phase(first_phase);
  timeline_.start_bytes = allocator.stats(device).current_bytes;
  allocator.start_recording();
  start_ms_ = now_ms();  // the allocator's clock started a moment before: event times are on the same scale
  recording_ = true;
  timeline_.phases.push_back({first_phase, 0.0, 0.0});
}

void MemoryRecorder::phase(const std::string& name) {
  FT_CHECK(recording_, "MemoryRecorder: phase('", name, "') called without a recording; call start() first");
  FT_CHECK(!name.empty(), "MemoryRecorder: a phase needs a name");
  for (const MemoryPhase& p : timeline_.phases)
    FT_CHECK(p.name != name, "MemoryRecorder: phase '", name, "' was already recorded; phase names must not repeat");
  const double t = elapsed_ms();
  timeline_.phases.back().end_ms = t;
  Allocator::instance().set_phase(name);
  timeline_.phases.push_back({name, t, t});
}

MemoryTimeline MemoryRecorder::stop() {
  FT_CHECK(recording_, "MemoryRecorder: stop() called without a recording; call start() first");
  Allocator& allocator = Allocator::instance();
  timeline_.phases.back().end_ms = elapsed_ms();
  timeline_.events = allocator.stop_recording();
  timeline_.end_bytes = allocator.stats(device_).current_bytes;
  allocator.set_phase(previous_phase_);
  recording_ = false;
  return std::move(timeline_);
}

std::vector<MemoryPhaseSummary> summarize_memory_timeline(const MemoryTimeline& timeline) {
  std::map<std::string, std::size_t> index;  // phase name -> position
  std::vector<MemoryPhaseSummary> out;
  for (const MemoryPhase& p : timeline.phases) {
    FT_CHECK(index.emplace(p.name, out.size()).second, "memory timeline: phase '", p.name, "' is listed twice");
    MemoryPhaseSummary s;
    s.phase = p.name;
    s.start_ms = p.start_ms;
    s.end_ms = p.end_ms;
    out.push_back(std::move(s));
  }
  FT_CHECK(!out.empty(), "memory timeline: no phases; a recording has at least its first phase");

  std::int64_t level = timeline.start_bytes;
  std::array<std::int64_t, kMemoryCategories> live{};  // by MemoryCategory
  live[slot(MemoryCategory::other)] = timeline.start_bytes;
  std::map<std::string, std::int64_t> live_by_tag;  // what each tag holds of the recorded allocations
  std::size_t current = 0;                          // phases only move forward
  const auto open_phase = [&](std::size_t p) {
    out[p].start_bytes = level;
    out[p].peak_bytes = level;
    out[p].at_peak = live;
  };
  open_phase(0);
  for (const AllocationEvent& e : timeline.events) {
    if (e.device != timeline.device) continue;
    const auto it = index.find(e.phase);
    FT_CHECK(it != index.end(), "memory timeline: an event of '", e.tag, "' is in phase '", e.phase,
             "', which the timeline does not list");
    FT_CHECK(it->second >= current, "memory timeline: an event of '", e.tag, "' is in phase '", e.phase,
             "' after phase '", out[current].phase, "' began; the phases must be in the order of the events");
    while (current < it->second) {
      out[current].end_bytes = level;
      open_phase(++current);
    }
    MemoryPhaseSummary& s = out[current];
    const std::size_t c = slot(classify_memory_tag(e.tag));
    std::int64_t& tag_live = live_by_tag[e.tag];
    if (e.bytes >= 0) {
      tag_live += e.bytes;
      live[c] += e.bytes;
      s.allocated_bytes += e.bytes;
    } else {
      const std::int64_t freed = -e.bytes;
      const std::int64_t recorded = std::min(freed, tag_live);  // the rest was held before recording
      tag_live -= recorded;
      live[c] -= recorded;
      live[slot(MemoryCategory::other)] -= freed - recorded;
      s.freed_bytes += freed;
    }
    level += e.bytes;
    FT_CHECK(level == e.current_bytes, "memory timeline: replaying the events of ", timeline.device, " gives ", level,
             " bytes after '", e.tag, "' but the allocator counted ", e.current_bytes,
             "; memory changed on that device outside the recording");
    ++s.events;
    if (level > s.peak_bytes) {
      s.peak_bytes = level;
      s.at_peak = live;
    }
  }
  out[current].end_bytes = level;
  while (++current < out.size()) {  // phases after the last event hold the final level
    open_phase(current);
    out[current].end_bytes = level;
  }
  return out;
}

std::string format_memory_summary(const std::vector<MemoryPhaseSummary>& summary, bool csv) {
  std::vector<std::string> columns{"phase", "peak_mib"};
  for (std::size_t c = 0; c < kMemoryCategories; ++c)
    columns.push_back(std::string(name_of(static_cast<MemoryCategory>(c))) + "_mib");
  columns.insert(columns.end(), {"end_mib", "events"});
  ReportTable table(std::move(columns));
  for (const MemoryPhaseSummary& s : summary) {
    std::vector<std::string> cells{s.phase, fixed(static_cast<double>(s.peak_bytes) / kMiB, 1)};
    for (std::int64_t bytes : s.at_peak) cells.push_back(fixed(static_cast<double>(bytes) / kMiB, 1));
    cells.push_back(fixed(static_cast<double>(s.end_bytes) / kMiB, 1));
    cells.push_back(std::to_string(s.events));
    table.add_row(std::move(cells));
  }
  return csv ? table.csv() : table.markdown();
}

nlohmann::json memory_timeline_document(const MemoryTimeline& timeline, Device device, nlohmann::json config) {
  nlohmann::json rows = nlohmann::json::array();
  for (const MemoryPhaseSummary& s : summarize_memory_timeline(timeline)) {
    nlohmann::json row{{"phase", s.phase},
                       {"start_ms", s.start_ms},
                       {"end_ms", s.end_ms},
                       {"start_bytes", s.start_bytes},
                       {"end_bytes", s.end_bytes},
                       {"peak_bytes", s.peak_bytes},
                       {"peak_gib", static_cast<double>(s.peak_bytes) / kBytesPerGiB},
                       {"events", s.events},
                       {"allocated_bytes", s.allocated_bytes},
                       {"freed_bytes", s.freed_bytes}};
    for (std::size_t c = 0; c < kMemoryCategories; ++c) {
      const std::string name = name_of(static_cast<MemoryCategory>(c));
      row[name + "_bytes"] = s.at_peak[c];
      row[name + "_gib"] = static_cast<double>(s.at_peak[c]) / kBytesPerGiB;
    }
    rows.push_back(std::move(row));
  }
  nlohmann::json doc = results_document("memory-timeline", device, std::move(config), std::move(rows));
  doc["memory_device"] = timeline.device;
  doc["start_bytes"] = timeline.start_bytes;
  doc["end_bytes"] = timeline.end_bytes;
  nlohmann::json phases = nlohmann::json::array();
  for (const MemoryPhase& p : timeline.phases)
    phases.push_back({{"name", p.name}, {"start_ms", p.start_ms}, {"end_ms", p.end_ms}});
  doc["phases"] = std::move(phases);
  nlohmann::json events = nlohmann::json::array();
  for (const AllocationEvent& e : timeline.events)
    events.push_back({{"time_ms", e.time_ms},
                      {"device", e.device},
                      {"bytes", e.bytes},
                      {"current_bytes", e.current_bytes},
                      {"tag", e.tag},
                      {"phase", e.phase},
                      {"category", name_of(classify_memory_tag(e.tag))}});
  doc["events"] = std::move(events);
  return doc;
}

}  // namespace ft
