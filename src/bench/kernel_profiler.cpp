// kernel_profiler.cpp — KernelProfiler over CUPTI's activity API (compiled in CUDA builds with CUPTI;
// elsewhere start() throws unsupported): the activity buffers CUPTI fills on its own thread, the range
// observer that pushes each thread's NvtxRange stack onto CUPTI's external-correlation stack, and the
// assembly of the records (demangled names, range stacks through the correlation ids) at stop().
#include "bench/kernel_profiler.h"

#include "core/error.h"

#if FT_HAS_CUDA && FT_HAS_CUPTI
#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "core/nvtx.h"
#endif

namespace ft {

const char* name_of(ActivityKind kind) {
  switch (kind) {
    case ActivityKind::kernel: return "kernel";
    case ActivityKind::memcpy: return "memcpy";
    case ActivityKind::memset: return "memset";
  }
  return "kernel";
}

#if FT_HAS_CUDA && FT_HAS_CUPTI

bool kernel_profiler_available() { return true; }
std::string kernel_profiler_missing() { return ""; }

namespace {

std::string cupti_result_string(CUptiResult status) {
  const char* text = nullptr;
  if (cuptiGetResultString(status, &text) != CUPTI_SUCCESS || text == nullptr) text = "unknown CUPTI result";
  return str(text, " (CUptiResult ", static_cast<int>(status), ")");
}

}  // namespace

// A failed CUPTI call: ft::Error (device) naming the call, CUPTI's result string, file and line.
#define FT_CUPTI_CHECK(call)                                                              \
  do {                                                                                    \
    const CUptiResult ft_cupti_status_ = (call);                                          \
    if (ft_cupti_status_ != CUPTI_SUCCESS)                                                \
      FT_THROW(device, #call, " failed: ", cupti_result_string(ft_cupti_status_));        \
  } while (0)

namespace {

constexpr CUpti_ActivityKind kActivities[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
constexpr CUpti_ExternalCorrelationKind kExternalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
constexpr std::size_t kBufferBytes = std::size_t{8} << 20;  // per activity buffer CUPTI asks for
constexpr std::size_t kBufferAlignment = 8;                 // CUPTI's requirement for activity buffers

// One node per distinct stack of range names: its innermost name and the stack below it.
struct RangeNode {
  std::uint64_t parent = 0;  // 0: the outermost range
  std::string name;
};

// What the launching threads (range hooks), CUPTI's thread (buffer callbacks) and the profiler share.
// CUPTI calls are made outside the mutex: CUPTI may wait on its own thread, which takes it.
struct Collector {
  std::mutex mutex;
  bool collecting = false;  // between start() and the end of stop()'s flush: buffers are kept
  bool ranges = false;      // between start() and stop(): the range hooks push and pop
  std::uint64_t session = 0;
  std::uint64_t start_ns = 0;
  // Range-stack ids of this session are first_id + index in nodes; they are never reused, so an id left
  // on some thread's CUPTI stack by an earlier session names no node of a later one.
  std::uint64_t first_id = 1;
  std::vector<RangeNode> nodes;
  std::map<std::pair<std::uint64_t, std::string>, std::uint64_t> node_ids;  // (parent, name) -> id
  std::vector<KernelRecord> records;                      // ranges still empty
  std::vector<HostCallRecord> host_calls;                 // ranges still empty
  std::unordered_map<std::uint32_t, std::uint64_t> external;  // API correlation id -> range-stack id
  std::uint64_t dropped = 0;
  std::string hook_error;  // the first CUPTI failure inside a range hook (reported by stop())
  bool callbacks_registered = false;
};

Collector& collector() {
  static Collector* c = new Collector();  // never destroyed: CUPTI's thread may outlive static destructors
  return *c;
}

// The range-stack ids this thread pushed on CUPTI's stack in the current session, innermost last.
struct ThreadRanges {
  std::uint64_t session = 0;
  std::vector<std::uint64_t> ids;
};
thread_local ThreadRanges t_ranges;

void note_hook_error(const char* call, CUptiResult status) {
  Collector& c = collector();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.hook_error.empty()) c.hook_error = str(call, " failed in an NvtxRange: ", cupti_result_string(status));
}

void on_range_push(const char* name) {
  Collector& c = collector();
  std::uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (!c.ranges) return;
    ThreadRanges& t = t_ranges;
    if (t.session != c.session) t = ThreadRanges{c.session, {}};
    const std::uint64_t parent = t.ids.empty() ? 0 : t.ids.back();
    const auto [it, added] = c.node_ids.try_emplace({parent, name}, c.first_id + c.nodes.size());
    if (added) c.nodes.push_back({parent, name});
    id = it->second;
    t.ids.push_back(id);
  }
  const CUptiResult status = cuptiActivityPushExternalCorrelationId(kExternalKind, id);
  if (status != CUPTI_SUCCESS) note_hook_error("cuptiActivityPushExternalCorrelationId", status);
}

void on_range_pop() {
  Collector& c = collector();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    ThreadRanges& t = t_ranges;
    if (!c.ranges || t.session != c.session || t.ids.empty()) return;  // opened before start()
    t.ids.pop_back();
  }
  const CUptiResult status = cuptiActivityPopExternalCorrelationId(kExternalKind, nullptr);
  if (status != CUPTI_SUCCESS) note_hook_error("cuptiActivityPopExternalCorrelationId", status);
}

const NvtxObserver kRangeObserver{on_range_push, on_range_pop};

std::string demangle(const char* name) {
  if (name == nullptr) return "(unnamed kernel)";
  int status = 0;
  char* readable = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || readable == nullptr) return name;  // not a C++ mangled name (extern "C", cuBLAS's)
  std::string out(readable);
  std::free(readable);
  return out;
}

std::string memcpy_name(std::uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    default: return "memcpy";
  }
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;  // no buffer: CUPTI drops records and counts them
  *max_records = 0;                    // as many as fit
}

// The record of one kernel, memcpy or memset activity: the fields every CUPTI record of work on a stream has.
template <class Activity>
KernelRecord record_of(ActivityKind kind, std::string name, const Activity& activity) {
  KernelRecord r;
  r.kind = kind;
  r.name = std::move(name);
  r.device = static_cast<int>(activity.deviceId);
  r.stream = activity.streamId;
  r.start_ns = activity.start;
  r.end_ns = activity.end;
  r.correlation = activity.correlationId;
  return r;
}

// On CUPTI's thread: the kernel, memcpy, memset and external-correlation records of one buffer.
void CUPTIAPI buffer_completed(CUcontext context, std::uint32_t stream_id, std::uint8_t* buffer, std::size_t,
                               std::size_t valid_bytes) {
  std::vector<KernelRecord> records;
  std::vector<HostCallRecord> host_calls;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> links;  // (API correlation id, range-stack id)
  std::unordered_map<std::string, std::string> readable;       // mangled -> demangled, within this buffer
  std::uint64_t incomplete = 0;
  auto add = [&](KernelRecord r) {
    if (r.start_ns == 0 || r.end_ns < r.start_ns) {
      ++incomplete;  // timestamps never filled in (the work did not finish)
      return;
    }
    records.push_back(std::move(r));
  };
  CUpti_Activity* activity = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid_bytes, &activity) == CUPTI_SUCCESS) {
    switch (activity->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(activity);
        const std::string mangled = k->name ? k->name : "";
        auto it = readable.find(mangled);
        if (it == readable.end()) it = readable.emplace(mangled, demangle(k->name)).first;
        add(record_of(ActivityKind::kernel, it->second, *k));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(activity);
        KernelRecord r = record_of(ActivityKind::memcpy, memcpy_name(m->copyKind), *m);
        r.bytes = m->bytes;
        add(std::move(r));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(activity);
        KernelRecord r = record_of(ActivityKind::memset, "memset", *m);
        r.bytes = m->bytes;
        add(std::move(r));
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(activity);
        if (e->externalKind == kExternalKind) links.emplace_back(e->correlationId, e->externalId);
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(activity);
        if (a->end < a->start || a->end - a->start < kSlowHostCallNs) break;  // the fast calls: only correlations
        const char* name = nullptr;
        const CUpti_CallbackDomain domain =
            activity->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
        if (cuptiGetCallbackName(domain, a->cbid, &name) != CUPTI_SUCCESS || name == nullptr) name = "(CUDA call)";
        host_calls.push_back({.name = name,
                              .thread = a->threadId,
                              .start_ns = a->start,
                              .end_ns = a->end,
                              .correlation = a->correlationId,
                              .ranges = {}});
        break;
      }
      default:
        break;
    }
  }
  std::size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) != CUPTI_SUCCESS) dropped = 0;
  std::free(buffer);

  Collector& c = collector();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (!c.collecting) return;  // a buffer from after stop(): nobody asked for it
  for (KernelRecord& r : records) c.records.push_back(std::move(r));
  for (HostCallRecord& h : host_calls) c.host_calls.push_back(std::move(h));
  for (const auto& [correlation, id] : links) c.external[correlation] = id;
  c.dropped += dropped + incomplete;
}

// The names of range-stack id, outermost first (empty for ids of no node of this session).
std::vector<std::string> range_names(std::uint64_t id, std::uint64_t first_id, const std::vector<RangeNode>& nodes) {
  std::vector<std::string> names;
  while (id >= first_id && id - first_id < nodes.size()) {
    const RangeNode& node = nodes[id - first_id];
    names.push_back(node.name);
    id = node.parent;
  }
  std::reverse(names.begin(), names.end());
  return names;
}

}  // namespace

void KernelProfiler::start() {
  FT_CHECK_KIND(runtime, !active_, "KernelProfiler::start: this profiler is already running; call stop() first");
  Collector& c = collector();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    FT_CHECK_KIND(runtime, !c.collecting,
                  "KernelProfiler::start: another kernel profile is running in this process (one at a time)");
    c.collecting = true;
    ++c.session;
    c.first_id += c.nodes.size();
    c.nodes.clear();
    c.node_ids.clear();
    c.records.clear();
    c.host_calls.clear();
    c.external.clear();
    c.dropped = 0;
    c.hook_error.clear();
  }
  std::vector<CUpti_ActivityKind> enabled;
  try {
    if (!c.callbacks_registered) {
      FT_CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
      c.callbacks_registered = true;
    }
    for (CUpti_ActivityKind kind : kActivities) {
      FT_CUPTI_CHECK(cuptiActivityEnable(kind));
      enabled.push_back(kind);
    }
    std::uint64_t now = 0;
    FT_CUPTI_CHECK(cuptiGetTimestamp(&now));
    std::lock_guard<std::mutex> lock(c.mutex);
    c.start_ns = now;
    c.ranges = true;
  } catch (...) {
    for (CUpti_ActivityKind kind : enabled) cuptiActivityDisable(kind);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard<std::mutex> lock(c.mutex);
    c.collecting = false;
    throw;
  }
  set_nvtx_observer(&kRangeObserver);
  active_ = true;
}

KernelProfile KernelProfiler::stop() {
  FT_CHECK_KIND(runtime, active_, "KernelProfiler::stop: the profiler is not running; call start() first");
  active_ = false;
  set_nvtx_observer(nullptr);
  Collector& c = collector();
  std::vector<std::uint64_t> open;  // ranges of this thread opened since start() and still open
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.ranges = false;
    if (t_ranges.session == c.session) open.swap(t_ranges.ids);
  }
  // Everything is undone before the first failure is reported, so CUPTI is left disabled either way.
  std::string failure;
  auto note = [&](const char* call, CUptiResult status) {
    if (status != CUPTI_SUCCESS && failure.empty()) failure = str(call, " failed: ", cupti_result_string(status));
  };
  for (std::size_t i = 0; i < open.size(); ++i)
    note("cuptiActivityPopExternalCorrelationId", cuptiActivityPopExternalCorrelationId(kExternalKind, nullptr));
  const cudaError_t synced = cudaDeviceSynchronize();
  std::uint64_t end_ns = 0;
  note("cuptiGetTimestamp", cuptiGetTimestamp(&end_ns));
  for (CUpti_ActivityKind kind : kActivities) note("cuptiActivityDisable", cuptiActivityDisable(kind));
  note("cuptiActivityFlushAll", cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));

  KernelProfile profile;
  std::unordered_map<std::uint32_t, std::uint64_t> external;
  std::vector<RangeNode> nodes;
  std::uint64_t first_id = 0;
  std::string hook_error;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.collecting = false;
    profile.start_ns = c.start_ns;
    profile.records = std::move(c.records);
    profile.host_calls = std::move(c.host_calls);
    profile.dropped = c.dropped;
    external = std::move(c.external);
    nodes = c.nodes;
    first_id = c.first_id;
    hook_error = c.hook_error;
    c.records.clear();
    c.host_calls.clear();
    c.external.clear();
  }
  profile.end_ns = end_ns;
  FT_CHECK_KIND(device, synced == cudaSuccess, "KernelProfiler::stop: cudaDeviceSynchronize() failed: ",
                cudaGetErrorName(synced), " (", cudaGetErrorString(synced), ")");
  FT_CHECK_KIND(device, failure.empty(), "KernelProfiler::stop: ", failure);
  FT_CHECK_KIND(device, hook_error.empty(), "KernelProfiler: ", hook_error);

  std::unordered_map<std::uint64_t, std::vector<std::string>> names;  // range-stack id -> its names
  const auto ranges_of = [&](std::uint32_t correlation) -> std::vector<std::string> {
    const auto link = external.find(correlation);
    if (link == external.end()) return {};  // made outside every range
    auto it = names.find(link->second);
    if (it == names.end()) it = names.emplace(link->second, range_names(link->second, first_id, nodes)).first;
    return it->second;
  };
  for (KernelRecord& r : profile.records) r.ranges = ranges_of(r.correlation);
  for (HostCallRecord& h : profile.host_calls) h.ranges = ranges_of(h.correlation);
  std::stable_sort(profile.records.begin(), profile.records.end(),
                   [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  std::stable_sort(profile.host_calls.begin(), profile.host_calls.end(),
                   [](const HostCallRecord& a, const HostCallRecord& b) { return a.start_ns < b.start_ns; });
  return profile;
}

KernelProfiler::~KernelProfiler() {
  if (!active_) return;
  try {
    stop();
  } catch (...) {
    // a destructor reports nothing; stop() disables CUPTI before it throws
  }
}

#else  // no CUDA or no CUPTI

bool kernel_profiler_available() { return false; }

std::string kernel_profiler_missing() {
#if !FT_HAS_CUDA
  return "this build has no CUDA (configured without nvcc, or with FT_CUDA=OFF / the cpu preset); kernel "
         "profiling needs a CUDA build with CUPTI (libcupti from the CUDA toolkit)";
#else
  return "this CUDA build has no CUPTI (CMake found no CUDA::cupti, libcupti from the CUDA toolkit); reconfigure "
         "with a CUDA toolkit that includes CUPTI";
#endif
}

void KernelProfiler::start() { FT_THROW(unsupported, "KernelProfiler: ", kernel_profiler_missing()); }

KernelProfile KernelProfiler::stop() {
  FT_THROW(runtime, "KernelProfiler::stop: the profiler is not running (", kernel_profiler_missing(), ")");
}

KernelProfiler::~KernelProfiler() = default;

#endif

}  // namespace ft
