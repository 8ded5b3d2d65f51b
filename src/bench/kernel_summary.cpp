// kernel_summary.cpp — classification of profiled kernels, per-range summaries, their tables and JSON,
// and the timeline document.
#include "bench/kernel_summary.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

#include "bench/report_table.h"
#include "bench/results_json.h"
#include "bench/stream_timeline.h"
#include "core/error.h"

namespace ft {

namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// A name as tables show it: without "void " in front.
std::string_view without_void(std::string_view name) {
  return name.substr(0, 5) == "void " ? name.substr(5) : name;
}

constexpr const char* kNoRange = "(no range)";

}  // namespace

const char* name_of(KernelClass cls) {
  switch (cls) {
    case KernelClass::matmul: return "matmul";
    case KernelClass::attention: return "attention";
    case KernelClass::communication: return "communication";
    case KernelClass::other: return "other";
    case KernelClass::memory: return "memory";
  }
  return "other";
}

KernelClass classify_kernel_name(std::string_view name) {
  const std::string n = lower(without_void(name));
  if (contains(n, "nccl")) return KernelClass::communication;
  if (contains(n, "flash::") || n.rfind("flash_", 0) == 0 || contains(n, "attention_impl::naive::"))
    return KernelClass::attention;
  for (std::string_view part : {"gemm", "gemv", "xmma", "cutlass", "nvjet", "splitkreduce"})
    if (contains(n, part)) return KernelClass::matmul;
  return KernelClass::other;
}

KernelClass classify(const KernelRecord& record) {
  return record.kind == ActivityKind::kernel ? classify_kernel_name(record.name) : KernelClass::memory;
}

std::string short_kernel_name(std::string_view name, std::size_t max_chars) {
  std::string_view n = without_void(name);
  // The parameter list: the last top-level "(...)" closing the name (template arguments may hold parens).
  if (!n.empty() && n.back() == ')') {
    int depth = 0;
    for (std::size_t i = n.size(); i-- > 0;) {
      if (n[i] == ')') ++depth;
      if (n[i] == '(' && --depth == 0) {
        if (i > 0) n = n.substr(0, i);
        break;
      }
    }
  }
  if (max_chars < 8 || n.size() <= max_chars) return std::string(n);
  const std::size_t head = (max_chars - 3) / 2, tail = max_chars - 3 - head;
  return str(n.substr(0, head), "...", n.substr(n.size() - tail));
}

bool range_matches(std::string_view pattern, std::string_view range_name) {
  // Greedy wildcard matching: on a mismatch, let the last '*' swallow one more character and retry.
  std::size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < range_name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() && pattern[p] == range_name[n]) {
      ++p;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {

// The summary of the records for which depth_of gives a value: the number of ranges (outermost first)
// that name the record's occurrence (0: the whole profile is one occurrence).
template <class DepthOf>
RangeKernelSummary summarize_where(const std::vector<KernelRecord>& records, std::string label, DepthOf depth_of) {
  RangeKernelSummary s;
  s.range = std::move(label);
  std::map<std::vector<std::string>, std::pair<std::uint64_t, std::uint64_t>> spans;  // occurrence -> first, last
  std::unordered_map<std::string, std::size_t> index;  // kernel name -> position in s.kernels
  for (const KernelRecord& r : records) {
    const std::optional<std::size_t> depth = depth_of(r);
    if (!depth) continue;
    const std::vector<std::string> key(r.ranges.begin(), r.ranges.begin() + static_cast<std::ptrdiff_t>(*depth));
    auto [span, added] = spans.try_emplace(key, r.start_ns, r.end_ns);
    if (!added) {
      span->second.first = std::min(span->second.first, r.start_ns);
      span->second.second = std::max(span->second.second, r.end_ns);
    }
    const double ms = r.duration_ms();
    const KernelClass cls = classify(r);
    ++s.records;
    s.kernel_ms += ms;
    s.class_ms[static_cast<std::size_t>(cls)] += ms;
    auto [it, fresh] = index.try_emplace(r.name, s.kernels.size());
    if (fresh) s.kernels.push_back(KernelStat{r.name, cls, 0, 0, 0, 0});
    KernelStat& k = s.kernels[it->second];
    ++k.count;
    k.total_ms += ms;
  }
  s.occurrences = static_cast<std::int64_t>(spans.size());
  for (const auto& [key, span] : spans) s.span_ms += static_cast<double>(span.second - span.first) * 1e-6;
  for (KernelStat& k : s.kernels) {
    k.mean_ms = k.total_ms / static_cast<double>(k.count);
    k.share = s.kernel_ms > 0 ? k.total_ms / s.kernel_ms : 0;
  }
  std::sort(s.kernels.begin(), s.kernels.end(), [](const KernelStat& a, const KernelStat& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms : a.name < b.name;
  });
  return s;
}

double per(double total, std::int64_t occurrences) {
  return occurrences > 0 ? total / static_cast<double>(occurrences) : 0;
}

double percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0; }

}  // namespace

RangeKernelSummary summarize_kernels(const std::vector<KernelRecord>& records, std::string_view pattern) {
  FT_CHECK(!pattern.empty(), "summarize_kernels: the range pattern is empty (give a range name, 'prefix *' or '*')");
  if (pattern == "*")
    return summarize_where(records, "*", [](const KernelRecord&) { return std::optional<std::size_t>(0); });
  return summarize_where(records, std::string(pattern), [pattern](const KernelRecord& r) {
    for (std::size_t i = 0; i < r.ranges.size(); ++i)
      if (range_matches(pattern, r.ranges[i])) return std::optional<std::size_t>(i + 1);
    return std::optional<std::size_t>();
  });
}

std::vector<RangeKernelSummary> summarize_outermost_ranges(const std::vector<KernelRecord>& records) {
  std::vector<std::pair<std::uint64_t, std::string>> firsts;  // (first start, outermost name)
  std::unordered_map<std::string, std::size_t> seen;
  bool outside = false;
  for (const KernelRecord& r : records) {
    if (r.ranges.empty()) {
      outside = true;
      continue;
    }
    auto [it, added] = seen.try_emplace(r.ranges.front(), firsts.size());
    if (added) firsts.emplace_back(r.start_ns, r.ranges.front());
    firsts[it->second].first = std::min(firsts[it->second].first, r.start_ns);
  }
  std::stable_sort(firsts.begin(), firsts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<RangeKernelSummary> out;
  for (const auto& [start, name] : firsts) {
    out.push_back(summarize_where(records, name, [&name](const KernelRecord& r) {
      return !r.ranges.empty() && r.ranges.front() == name ? std::optional<std::size_t>(1) : std::nullopt;
    }));
  }
  if (outside)
    out.push_back(summarize_where(records, kNoRange, [](const KernelRecord& r) {
      return r.ranges.empty() ? std::optional<std::size_t>(0) : std::nullopt;
    }));
  return out;
}

std::string format_range_overview(const std::vector<RangeKernelSummary>& summaries, bool csv) {
  std::vector<std::string> columns{"range", "occurrences", "records", "kernel_ms/occ", "span_ms/occ", "busy_%"};
  for (std::size_t c = 0; c < kKernelClasses; ++c) columns.push_back(str(name_of(static_cast<KernelClass>(c)), "_%"));
  ReportTable table(std::move(columns));
  for (const RangeKernelSummary& s : summaries) {
    std::vector<std::string> cells{s.range,
                                   std::to_string(s.occurrences),
                                   std::to_string(s.records),
                                   fixed(per(s.kernel_ms, s.occurrences), 3),
                                   fixed(per(s.span_ms, s.occurrences), 3),
                                   fixed(percent(s.kernel_ms, s.span_ms), 1)};
    for (double ms : s.class_ms) cells.push_back(fixed(percent(ms, s.kernel_ms), 1));
    table.add_row(std::move(cells));
  }
  return csv ? table.csv() : table.markdown();
}

std::string format_kernel_table(const RangeKernelSummary& summary, bool csv, std::size_t top) {
  ReportTable table({"kernel", "class", "count", "total_ms", "mean_us", "share_%"});
  const std::size_t shown = top > 0 ? std::min(top, summary.kernels.size()) : summary.kernels.size();
  for (std::size_t i = 0; i < shown; ++i) {
    const KernelStat& k = summary.kernels[i];
    table.add_row({csv ? std::string(without_void(k.name)) : short_kernel_name(k.name), name_of(k.cls),
                   std::to_string(k.count), fixed(k.total_ms, 3), fixed(k.mean_ms * 1e3, 1),
                   fixed(100.0 * k.share, 1)});
  }
  if (shown < summary.kernels.size()) {
    std::int64_t count = 0;
    double total = 0, share = 0;
    for (std::size_t i = shown; i < summary.kernels.size(); ++i) {
      count += summary.kernels[i].count;
      total += summary.kernels[i].total_ms;
      share += summary.kernels[i].share;
    }
    table.add_row({str("(", summary.kernels.size() - shown, " more kernels)"), "", std::to_string(count),
                   fixed(total, 3), fixed(total * 1e3 / static_cast<double>(count), 1), fixed(100.0 * share, 1)});
  }
  return csv ? table.csv() : table.markdown();
}

nlohmann::json kernel_summary_json(const RangeKernelSummary& s) {
  nlohmann::json class_ms = nlohmann::json::object(), class_share = nlohmann::json::object();
  for (std::size_t c = 0; c < kKernelClasses; ++c) {
    const char* name = name_of(static_cast<KernelClass>(c));
    class_ms[name] = s.class_ms[c];
    class_share[name] = s.kernel_ms > 0 ? s.class_ms[c] / s.kernel_ms : 0.0;
  }
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelStat& k : s.kernels)
    kernels.push_back({{"name", k.name},
                       {"class", name_of(k.cls)},
                       {"count", k.count},
                       {"total_ms", k.total_ms},
                       {"mean_ms", k.mean_ms},
                       {"share", k.share}});
  return {{"range", s.range},         {"occurrences", s.occurrences}, {"records", s.records},
          {"kernel_ms", s.kernel_ms}, {"span_ms", s.span_ms},         {"class_ms", class_ms},
          {"class_share", class_share}, {"kernels", kernels}};
}

nlohmann::json kernel_overview_row(const RangeKernelSummary& s) {
  nlohmann::json row{{"range", s.range},
                     {"occurrences", s.occurrences},
                     {"records", s.records},
                     {"kernel_ms", s.kernel_ms},
                     {"span_ms", s.span_ms},
                     {"kernel_ms_per_occurrence", per(s.kernel_ms, s.occurrences)},
                     {"span_ms_per_occurrence", per(s.span_ms, s.occurrences)}};
  for (std::size_t c = 0; c < kKernelClasses; ++c)
    row[str(name_of(static_cast<KernelClass>(c)), "_share")] = s.kernel_ms > 0 ? s.class_ms[c] / s.kernel_ms : 0.0;
  return row;
}

nlohmann::json kernel_record_json(const KernelRecord& r, std::uint64_t origin_ns) {
  // Relative times; a record from before the origin (not expected) keeps a negative offset.
  auto relative = [origin_ns](std::uint64_t t) {
    return static_cast<std::int64_t>(t - origin_ns);  // two's complement: t < origin gives a negative value
  };
  return {{"kind", name_of(r.kind)},
          {"name", r.name},
          {"class", name_of(classify(r))},
          {"device", r.device},
          {"stream", r.stream},
          {"start_ns", relative(r.start_ns)},
          {"end_ns", relative(r.end_ns)},
          {"correlation", r.correlation},
          {"bytes", r.bytes},
          {"ranges", r.ranges}};
}

namespace {

void add_timeline_fields(nlohmann::json& doc, const KernelProfile& profile) {
  const std::uint64_t origin = profile.start_ns;
  const auto relative = [origin](std::uint64_t t) { return static_cast<std::int64_t>(t - origin); };
  nlohmann::json windows = nlohmann::json::array();
  std::vector<std::pair<std::string, std::pair<std::uint64_t, std::uint64_t>>> spans;  // in order of first start
  std::unordered_map<std::string, std::size_t> window_of;
  std::map<std::pair<int, std::uint32_t>, std::pair<std::int64_t, bool>> streams;  // -> (records, communication)
  nlohmann::json records = nlohmann::json::array();
  for (const KernelRecord& r : profile.records) {
    if (!r.ranges.empty()) {
      auto [it, added] = window_of.try_emplace(r.ranges.front(), spans.size());
      if (added) spans.push_back({r.ranges.front(), {r.start_ns, r.end_ns}});
      auto& span = spans[it->second].second;
      span.first = std::min(span.first, r.start_ns);
      span.second = std::max(span.second, r.end_ns);
    }
    auto& stream = streams[{r.device, r.stream}];
    ++stream.first;
    stream.second = stream.second || classify(r) == KernelClass::communication;
    records.push_back(kernel_record_json(r, origin));
  }
  std::stable_sort(spans.begin(), spans.end(),
                   [](const auto& a, const auto& b) { return a.second.first < b.second.first; });
  for (const auto& [name, span] : spans)
    windows.push_back({{"name", name}, {"start_ns", relative(span.first)}, {"end_ns", relative(span.second)}});
  nlohmann::json stream_list = nlohmann::json::array();
  for (const auto& [key, value] : streams)
    stream_list.push_back({{"device", key.first},
                           {"stream", key.second},
                           {"lane", value.second ? "communication" : "compute"},
                           {"records", value.first}});
  doc["origin_ns"] = profile.start_ns;
  doc["duration_ns"] = relative(profile.end_ns);
  doc["dropped"] = profile.dropped;
  doc["windows"] = std::move(windows);
  doc["streams"] = std::move(stream_list);
  doc["records"] = std::move(records);
  nlohmann::json calls = nlohmann::json::array();
  for (const HostCallRecord& h : profile.host_calls)
    calls.push_back({{"name", h.name},
                     {"thread", h.thread},
                     {"start_ns", relative(h.start_ns)},
                     {"end_ns", relative(h.end_ns)},
                     {"correlation", h.correlation},
                     {"ranges", h.ranges}});
  doc["host_calls"] = std::move(calls);
}

}  // namespace

nlohmann::json kernel_timeline_document(const KernelProfile& profile, const std::vector<StepStreamSummary>& steps,
                                        Device device, nlohmann::json config) {
  nlohmann::json rows = nlohmann::json::array();
  for (const RangeKernelSummary& s : summarize_outermost_ranges(profile.records))
    rows.push_back(kernel_overview_row(s));
  nlohmann::json doc = results_document("kernel-timeline", device, std::move(config), std::move(rows));
  add_timeline_fields(doc, profile);
  nlohmann::json step_streams = nlohmann::json::array();
  for (const StepStreamSummary& s : steps) step_streams.push_back(step_streams_json(s));
  doc["step_streams"] = std::move(step_streams);
  return doc;
}

nlohmann::json kernel_profile_document(const KernelProfile& profile, const std::vector<RangeKernelSummary>& summaries,
                                       Device device, nlohmann::json config, std::size_t max_records) {
  nlohmann::json rows = nlohmann::json::array(), ranges = nlohmann::json::array();
  for (const RangeKernelSummary& s : summaries) {
    rows.push_back(kernel_overview_row(s));
    ranges.push_back(kernel_summary_json(s));
  }
  nlohmann::json doc = results_document("kernel-profile", device, std::move(config), std::move(rows));
  doc["ranges"] = std::move(ranges);
  doc["classes"] = {
      {"memory", "memcpy and memset records"},
      {"communication", "kernel names containing 'nccl'"},
      {"attention", "names containing 'flash::' or starting with 'flash_' (our FlashAttention kernels), or "
                    "containing 'attention_impl::naive::' (the naive attention's own kernels)"},
      {"matmul", "names containing gemm, gemv, xmma, cutlass, nvjet or splitKreduce (cuBLAS / cuBLASLt)"},
      {"other", "every other kernel"},
      {"rule", "case-insensitive substrings of the demangled name, checked in the order memory, communication, "
               "attention, matmul"}};
  if (profile.records.size() <= max_records) {
    add_timeline_fields(doc, profile);
  } else {
    doc["dropped"] = profile.dropped;
    doc["records_omitted"] = profile.records.size();
  }
  return doc;
}

}  // namespace ft
