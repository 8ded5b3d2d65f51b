// stream_timeline.cpp — per-stream busy time and span of a profiled step, the compute stream's gaps and what
// filled them, and its overlap with NCCL kernels, as intervals on CUPTI's clock; their table and JSON.
#include "bench/stream_timeline.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>

#include "bench/kernel_summary.h"
#include "bench/report_table.h"
#include "core/error.h"

namespace ft {

namespace {

using StreamKey = std::pair<int, std::uint32_t>;  // (device, stream)

struct Interval {
  std::uint64_t start = 0, end = 0;
};

double ms(std::uint64_t ns) { return static_cast<double>(ns) * 1e-6; }

// The union of intervals, as disjoint intervals by start.
std::vector<Interval> merged(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::vector<Interval> out;
  for (const Interval& i : intervals) {
    if (!out.empty() && i.start <= out.back().end)
      out.back().end = std::max(out.back().end, i.end);
    else
      out.push_back(i);
  }
  return out;
}

std::uint64_t total(const std::vector<Interval>& disjoint) {
  std::uint64_t sum = 0;
  for (const Interval& i : disjoint) sum += i.end - i.start;
  return sum;
}

// The length of x's intersection with disjoint intervals (by start).
std::uint64_t overlap(const Interval& x, const std::vector<Interval>& disjoint) {
  auto it = std::lower_bound(disjoint.begin(), disjoint.end(), x.start,
                             [](const Interval& i, std::uint64_t t) { return i.end <= t; });
  std::uint64_t sum = 0;
  for (; it != disjoint.end() && it->start < x.end; ++it)
    sum += std::min(it->end, x.end) - std::max(it->start, x.start);
  return sum;
}

std::uint64_t overlap(const std::vector<Interval>& a, const std::vector<Interval>& disjoint) {
  std::uint64_t sum = 0;
  for (const Interval& x : a) sum += overlap(x, disjoint);
  return sum;
}

bool is_communication(const KernelRecord& r) { return classify(r) == KernelClass::communication; }

// The stream whose kernels other than NCCL's ran longest (the first such stream on a tie).
StreamKey compute_stream(const std::vector<KernelRecord>& records) {
  std::map<StreamKey, std::uint64_t> kernel_ns;
  for (const KernelRecord& r : records)
    if (r.kind == ActivityKind::kernel && !is_communication(r))
      kernel_ns[{r.device, r.stream}] += r.end_ns - r.start_ns;
  FT_CHECK(!kernel_ns.empty(), "summarize_step_streams: the step ran no kernel other than NCCL's");
  return std::max_element(kernel_ns.begin(), kernel_ns.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

// The phase of a record: its range below the step's ("model forward"), or "(step)" when it has none.
std::string phase_of(const KernelRecord& r) { return r.ranges.size() >= 2 ? r.ranges[1] : "(step)"; }

// The gaps of one stream's records (by start): from the latest end so far to the next record's start, when
// that start is later; what the other streams ran meanwhile from the disjoint intervals given.
std::vector<ComputeGap> find_gaps(const std::vector<const KernelRecord*>& list, std::uint64_t origin,
                                  const std::vector<Interval>& communication, const std::vector<Interval>& copies,
                                  const std::vector<Interval>& others) {
  std::uint64_t reach = list.front()->end_ns;
  const KernelRecord* reaching = list.front();
  std::vector<ComputeGap> gaps;
  for (const KernelRecord* r : list) {
    if (r->start_ns > reach) {
      const Interval gap{reach, r->start_ns};
      gaps.push_back({.start_ns = gap.start,
                      .end_ns = gap.end,
                      .start_ms = ms(reach - origin),
                      .length_ms = ms(gap.end - gap.start),
                      .before = reaching->name,
                      .after = r->name,
                      .phase = phase_of(*r),
                      .communication_ms = ms(overlap(gap, communication)),
                      .copy_ms = ms(overlap(gap, copies)),
                      .idle_ms = ms(gap.end - gap.start - overlap(gap, others)),
                      .host_call = {},  // named for the largest gaps only
                      .host_call_ms = 0});
    }
    if (r->end_ns > reach) {
      reach = r->end_ns;
      reaching = r;
    }
  }
  return gaps;
}

// Sets the gap's host call: the slow host call that covers most of it.
void name_host_call(ComputeGap& g, const std::vector<HostCallRecord>& host_calls) {
  for (const HostCallRecord& h : host_calls) {
    const double covered = ms(overlap(Interval{g.start_ns, g.end_ns}, {{h.start_ns, h.end_ns}}));
    if (covered > g.host_call_ms) {
      g.host_call = h.name;
      g.host_call_ms = covered;
    }
  }
}

}  // namespace

StepStreamSummary summarize_step_streams(const std::string& range, const std::vector<KernelRecord>& records,
                                         const std::vector<HostCallRecord>& host_calls, std::size_t top) {
  StepStreamSummary s;
  s.range = range;
  const StreamKey compute = compute_stream(records);
  std::uint64_t origin = records.front().start_ns, last = records.front().end_ns;
  std::map<StreamKey, std::vector<const KernelRecord*>> by_stream;
  std::vector<Interval> communication, copies, others;  // on the compute stream's device, other streams
  std::vector<Interval> compute_kernels;
  for (const KernelRecord& r : records) {
    origin = std::min(origin, r.start_ns);
    last = std::max(last, r.end_ns);
    by_stream[{r.device, r.stream}].push_back(&r);
    const Interval i{r.start_ns, r.end_ns};
    if (is_communication(r)) communication.push_back(i);
    if (r.device != compute.first) continue;
    if (r.stream == compute.second) {
      if (r.kind == ActivityKind::kernel) compute_kernels.push_back(i);
      continue;
    }
    others.push_back(i);
    if (r.kind != ActivityKind::kernel) copies.push_back(i);
  }
  s.span_ms = ms(last - origin);
  communication = merged(std::move(communication));
  copies = merged(std::move(copies));
  others = merged(std::move(others));
  s.nccl_overlap_ms = ms(overlap(merged(std::move(compute_kernels)), communication));

  for (auto& [key, list] : by_stream) {
    std::sort(list.begin(), list.end(), [](const KernelRecord* a, const KernelRecord* b) {
      return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns < b->end_ns;
    });
    StreamActivity a;
    a.device = key.first;
    a.stream = key.second;
    a.records = static_cast<std::int64_t>(list.size());
    std::vector<Interval> busy;
    bool any_communication = false, copies_only = true;
    std::uint64_t end = 0;
    for (const KernelRecord* r : list) {
      busy.push_back({r->start_ns, r->end_ns});
      any_communication = any_communication || is_communication(*r);
      copies_only = copies_only && r->kind != ActivityKind::kernel;
      end = std::max(end, r->end_ns);
    }
    busy = merged(std::move(busy));
    a.first_ms = ms(list.front()->start_ns - origin);
    a.busy_ms = ms(total(busy));
    a.span_ms = ms(end - list.front()->start_ns);
    a.lane = key == compute ? "compute" : any_communication ? "communication" : copies_only ? "copy" : "other";
    if (key == compute) {
      s.compute = s.streams.size();
      std::vector<ComputeGap> gaps = find_gaps(list, origin, communication, copies, others);
      std::vector<Interval> calls;
      for (const HostCallRecord& h : host_calls) calls.push_back({h.start_ns, h.end_ns});
      calls = merged(std::move(calls));
      s.gaps = static_cast<std::int64_t>(gaps.size());
      for (const ComputeGap& g : gaps) {
        s.gap_host_call_ms += ms(overlap(Interval{g.start_ns, g.end_ns}, calls));
        s.gap_ms += g.length_ms;
        s.gap_communication_ms += g.communication_ms;
        s.gap_copy_ms += g.copy_ms;
        s.gap_idle_ms += g.idle_ms;
        auto phase = std::find_if(s.gaps_by_phase.begin(), s.gaps_by_phase.end(),
                                  [&g](const PhaseGaps& p) { return p.phase == g.phase; });
        if (phase == s.gaps_by_phase.end()) phase = s.gaps_by_phase.insert(phase, PhaseGaps{.phase = g.phase});
        ++phase->gaps;
        phase->gap_ms += g.length_ms;
      }
      std::stable_sort(gaps.begin(), gaps.end(),
                       [](const ComputeGap& x, const ComputeGap& y) { return x.length_ms > y.length_ms; });
      gaps.resize(std::min(gaps.size(), top));
      for (ComputeGap& g : gaps) name_host_call(g, host_calls);
      s.largest_gaps = std::move(gaps);
    }
    s.streams.push_back(std::move(a));
  }
  return s;
}

std::vector<StepStreamSummary> summarize_step_streams_by_range(const std::vector<KernelRecord>& records,
                                                               const std::vector<HostCallRecord>& host_calls,
                                                               std::size_t top) {
  std::vector<std::pair<std::string, std::vector<KernelRecord>>> steps;  // in order of first start
  std::map<std::string, std::size_t> index;
  std::vector<const KernelRecord*> ordered;
  for (const KernelRecord& r : records) ordered.push_back(&r);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const KernelRecord* a, const KernelRecord* b) { return a->start_ns < b->start_ns; });
  std::vector<Interval> windows;  // per step: its ranged records' first start and last end
  for (const KernelRecord* r : ordered) {
    if (r->ranges.empty()) continue;
    auto [it, added] = index.try_emplace(r->ranges.front(), steps.size());
    if (added) {
      steps.push_back({r->ranges.front(), {}});
      windows.push_back({r->start_ns, r->end_ns});
    }
    steps[it->second].second.push_back(*r);
    windows[it->second].end = std::max(windows[it->second].end, r->end_ns);
  }
  for (const KernelRecord* r : ordered) {
    if (!r->ranges.empty()) continue;
    for (std::size_t i = 0; i < windows.size(); ++i)
      if (r->start_ns >= windows[i].start && r->start_ns < windows[i].end) {
        steps[i].second.push_back(*r);
        break;
      }
  }
  std::vector<StepStreamSummary> out;
  for (const auto& [range, step] : steps)
    if (std::any_of(step.begin(), step.end(),
                    [](const KernelRecord& r) { return r.kind == ActivityKind::kernel && !is_communication(r); }))
      out.push_back(summarize_step_streams(range, step, host_calls, top));
  return out;
}

std::string format_step_streams(const StepStreamSummary& s) {
  const StreamActivity& c = s.streams.at(s.compute);
  std::ostringstream out;
  out << s.range << ": " << fixed(s.span_ms, 2) << " ms; compute stream " << c.stream << " busy "
      << fixed(c.busy_ms, 2) << " ms of its " << fixed(c.span_ms, 2) << " ms span; " << s.gaps << " gaps, "
      << fixed(s.gap_ms, 2) << " ms (NCCL running " << fixed(s.gap_communication_ms, 2) << ", copies running "
      << fixed(s.gap_copy_ms, 2) << ", no other stream busy " << fixed(s.gap_idle_ms, 2)
      << "; a slow CUDA call on the host " << fixed(s.gap_host_call_ms, 2)
      << "); its kernels beside NCCL kernels " << fixed(s.nccl_overlap_ms, 2) << " ms\n";
  out << "Gaps by the phase of the record after them:";
  for (const PhaseGaps& p : s.gaps_by_phase)
    out << " " << p.phase << " " << p.gaps << " (" << fixed(p.gap_ms, 2) << " ms);";
  out << "\n\n";
  ReportTable streams({"device", "stream", "lane", "records", "first_ms", "busy_ms", "span_ms"});
  for (const StreamActivity& a : s.streams)
    streams.add_row({std::to_string(a.device), std::to_string(a.stream), a.lane, std::to_string(a.records),
                     fixed(a.first_ms, 2), fixed(a.busy_ms, 2), fixed(a.span_ms, 2)});
  out << streams.markdown() << "\n";
  ReportTable gaps(
      {"start_ms", "gap_ms", "nccl_ms", "copy_ms", "idle_ms", "host_call", "phase", "before", "after"});
  for (const ComputeGap& g : s.largest_gaps)
    gaps.add_row({fixed(g.start_ms, 2), fixed(g.length_ms, 3), fixed(g.communication_ms, 3), fixed(g.copy_ms, 3),
                  fixed(g.idle_ms, 3), g.host_call.empty() ? "-" : str(g.host_call, " ", fixed(g.host_call_ms, 3)),
                  g.phase, short_kernel_name(g.before, 50), short_kernel_name(g.after, 50)});
  if (gaps.rows() > 0) out << "Largest gaps of the compute stream:\n\n" << gaps.markdown();
  return out.str();
}

nlohmann::json step_streams_json(const StepStreamSummary& s) {
  nlohmann::json streams = nlohmann::json::array(), gaps = nlohmann::json::array(),
                 phases = nlohmann::json::array();
  for (const StreamActivity& a : s.streams)
    streams.push_back({{"device", a.device},
                       {"stream", a.stream},
                       {"lane", a.lane},
                       {"records", a.records},
                       {"first_ms", a.first_ms},
                       {"busy_ms", a.busy_ms},
                       {"span_ms", a.span_ms}});
  for (const ComputeGap& g : s.largest_gaps)
    gaps.push_back({{"start_ms", g.start_ms},
                    {"length_ms", g.length_ms},
                    {"communication_ms", g.communication_ms},
                    {"copy_ms", g.copy_ms},
                    {"idle_ms", g.idle_ms},
                    {"host_call", g.host_call},
                    {"host_call_ms", g.host_call_ms},
                    {"phase", g.phase},
                    {"before", short_kernel_name(g.before)},
                    {"after", short_kernel_name(g.after)}});
  for (const PhaseGaps& p : s.gaps_by_phase)
    phases.push_back({{"phase", p.phase}, {"gaps", p.gaps}, {"gap_ms", p.gap_ms}});
  return {{"range", s.range},
          {"span_ms", s.span_ms},
          {"compute_stream", s.streams.at(s.compute).stream},
          {"gaps", s.gaps},
          {"gap_ms", s.gap_ms},
          {"gap_communication_ms", s.gap_communication_ms},
          {"gap_copy_ms", s.gap_copy_ms},
          {"gap_idle_ms", s.gap_idle_ms},
          {"gap_host_call_ms", s.gap_host_call_ms},
          {"nccl_overlap_ms", s.nccl_overlap_ms},
          {"gaps_by_phase", std::move(phases)},
          {"streams", std::move(streams)},
          {"largest_gaps", std::move(gaps)}};
}

}  // namespace ft
