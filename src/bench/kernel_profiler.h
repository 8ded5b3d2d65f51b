// kernel_profiler.h — a kernel profiler on CUPTI's activity API (Nsight Systems is not on our GPU
// machines): between start() and stop() it records every kernel, memcpy and memset the process runs on
// its GPUs with device, stream, start and end (GPU timestamps in ns), the CUDA correlation id, and the
// stack of ft::NvtxRange names open on the thread that launched it ("step 3" > "model forward" >
// "layer 0 forward" > "linear.forward"), and every CUDA runtime or driver call on the host that took at least
// kSlowHostCallNs (with its thread and ranges). kernel_summary.h turns the records into per-range tables.
//
// How a kernel finds its ranges: while profiling, an NvtxObserver (core/nvtx.h) sees every NvtxRange
// open and close. Each distinct stack of range names gets an id, and on every open (close) the profiler
// pushes (pops) that id on CUPTI's external-correlation stack of the thread
// (cuptiActivityPushExternalCorrelationId, kind CUSTOM0). CUPTI then emits, before every runtime or
// driver API record made inside a range, an EXTERNAL_CORRELATION record pairing the API call's
// correlation id with the id on top of the stack; the kernel's (memcpy's, memset's) record carries the
// correlation id of the API call that launched it. So attribution is exact per launch and per thread,
// whatever the GPU's queueing delay, unlike matching host timestamps of launches against range times.
// It covers ranges opened after start(); kernels launched inside a range opened before start() get the
// ranges opened since only (start and stop outside any range, as the benchmarks do).
//
// One profiler runs at a time per process. stop() synchronises the current device, delivers every
// record and leaves CUPTI's activity collection disabled, so a later start() begins afresh. A build
// without CUDA or without CUPTI throws ft::Error (unsupported) from start(), naming what it lacks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ft {

enum class ActivityKind { kernel, memcpy, memset };
const char* name_of(ActivityKind kind);  // "kernel", "memcpy", "memset"

struct KernelRecord {
  ActivityKind kind = ActivityKind::kernel;
  std::string name;               // demangled kernel name; "memcpy HtoD" (DtoH, DtoD, ...); "memset"
  int device = 0;                 // CUDA device index
  std::uint32_t stream = 0;       // CUPTI's stream id (unique within the device's context)
  std::uint64_t start_ns = 0;     // GPU start and end, on CUPTI's clock (cuptiGetTimestamp)
  std::uint64_t end_ns = 0;
  std::uint32_t correlation = 0;  // CUDA correlation id of the launching API call
  std::uint64_t bytes = 0;        // memcpy / memset: bytes moved or set; kernels: 0
  std::vector<std::string> ranges;  // NvtxRange names open at the launch, outermost first; may be empty

  double duration_ms() const { return static_cast<double>(end_ns - start_ns) * 1e-6; }
};

// A CUDA runtime or driver call on the host that took at least kSlowHostCallNs: what the host was blocked in
// (a synchronisation, an allocation, a launch that waited) while a GPU stream may have waited for it.
constexpr std::uint64_t kSlowHostCallNs = 100'000;
struct HostCallRecord {
  std::string name;               // the API function ("cudaStreamSynchronize", "cuLaunchKernelEx", ...)
  std::uint32_t thread = 0;       // CUPTI's id of the calling thread
  std::uint64_t start_ns = 0;     // host start and end, on CUPTI's clock
  std::uint64_t end_ns = 0;
  std::uint32_t correlation = 0;  // the call's correlation id (its kernel's or copy's, for a launch)
  std::vector<std::string> ranges;  // NvtxRange names open on the calling thread, outermost first

  double duration_ms() const { return static_cast<double>(end_ns - start_ns) * 1e-6; }
};

struct KernelProfile {
  std::uint64_t start_ns = 0;         // CUPTI's clock at start() and stop()
  std::uint64_t end_ns = 0;
  std::vector<KernelRecord> records;  // by start_ns
  std::vector<HostCallRecord> host_calls;  // the slow runtime and driver calls, by start_ns
  std::uint64_t dropped = 0;          // records lost: CUPTI dropped them (its buffers were full) or their
                                      // timestamps never arrived (the work had not finished); 0 normally
};

// True when this build can profile kernels (CUDA and CUPTI); otherwise kernel_profiler_missing() says
// what the build lacks, in words for an error message.
bool kernel_profiler_available();
std::string kernel_profiler_missing();

class KernelProfiler {
 public:
  KernelProfiler() = default;
  ~KernelProfiler();  // stops a profile still running and discards it
  KernelProfiler(const KernelProfiler&) = delete;
  KernelProfiler& operator=(const KernelProfiler&) = delete;

  // Enables CUPTI's CONCURRENT_KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER and EXTERNAL_CORRELATION
  // activities and the range observer. Throws ft::Error: unsupported (no CUDA / CUPTI in the build),
  // runtime (another profile is running in the process), device (a CUPTI call failed, e.g. another
  // CUPTI client such as Nsight is attached: the message names the call and CUPTI's result string).
  void start();
  // Synchronises the current device (finish work on other devices before), disables the activities,
  // flushes CUPTI's buffers and returns the records. Throws ft::Error (runtime) when not started, (device) when a CUPTI call failed.
  KernelProfile stop();
  bool active() const { return active_; }

 private:
  bool active_ = false;
};

}  // namespace ft
