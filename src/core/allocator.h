// allocator.h — the process-wide allocator: host memory and CUDA's stream-ordered pool
// (cudaMallocAsync; the pool keeps freed memory for reuse and hands it back only when an allocation
// would otherwise fail, as PyTorch's caching allocator), with current/peak bytes per device and an
// optional timeline of every allocation and free (tag, bytes, phase, time) for memory profiles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/device.h"
#include "core/stream.h"

namespace ft {

struct MemoryStats {
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t allocations = 0;  // live allocations
};

struct AllocationEvent {
  double time_ms = 0;          // since recording started
  std::string device;          // "cpu", "cuda:0"
  std::int64_t bytes = 0;      // > 0 allocation, < 0 free
  std::int64_t current_bytes = 0;  // device total after this event
  std::string tag;             // what the memory is for ("params", "activations.layer3.attn", ...)
  std::string phase;           // set_phase() at the time ("init", "forward", ...)
};

class Allocator {
 public:
  static Allocator& instance();

  // Throws ErrorKind::out_of_memory (naming the request and what is in use) when memory runs out.
  void* allocate(std::size_t bytes, Device device, std::string_view tag, const Stream& stream = {});
  void deallocate(void* ptr, std::size_t bytes, Device device, std::string_view tag, const Stream& stream = {});

  MemoryStats stats(Device device) const;
  void reset_peak(Device device);  // peak := current

  void set_phase(std::string phase);
  const std::string& phase() const { return phase_; }
  void start_recording();
  bool recording() const { return recording_; }
  std::vector<AllocationEvent> stop_recording();

 private:
  Allocator() = default;
  void account(Device device, std::int64_t delta, std::string_view tag);

  mutable std::mutex mutex_;
  std::unordered_map<std::string, MemoryStats> stats_;  // keyed by Device::to_string()
  std::string phase_ = "init";
  bool recording_ = false;
  double recording_start_ms_ = 0;
  std::vector<AllocationEvent> events_;
  std::vector<int> retaining_pools_;  // CUDA devices whose pool keeps freed memory (allocator.cpp)
};

}  // namespace ft
