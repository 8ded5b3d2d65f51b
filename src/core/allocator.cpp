// allocator.cpp — host allocations (64-byte aligned) and CUDA stream-ordered pool allocations,
// with per-device statistics and the allocation timeline.
#include "core/allocator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <new>

#include "core/error.h"
#if FT_HAS_CUDA
#include "core/cuda_check.h"
#endif

namespace ft {

namespace {
double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}
std::string gib(std::int64_t bytes) { return str(static_cast<double>(bytes) / (1ull << 30), " GiB"); }

#if FT_HAS_CUDA
// The device's current pool keeps what flashtrain frees for reuse: with CUDA's default release threshold
// (0) it hands every unused byte back at each synchronisation, and the next allocation maps fresh memory
// while the GPU waits (docs/perf-notes.md#device-memory-pool).
cudaMemPool_t device_pool(int device) {
  cudaMemPool_t pool = nullptr;
  FT_CUDA_CHECK(cudaDeviceGetMemPool(&pool, device));
  return pool;
}
void retain_freed_memory(int device) {
  std::uint64_t keep_all = UINT64_MAX;
  FT_CUDA_CHECK(cudaMemPoolSetAttribute(device_pool(device), cudaMemPoolAttrReleaseThreshold, &keep_all));
}
#endif
}  // namespace

Allocator& Allocator::instance() {
  static Allocator* allocator = new Allocator();  // never destroyed: buffers may outlive statics
  return *allocator;
}

void* Allocator::allocate(std::size_t bytes, Device device, std::string_view tag, const Stream& stream) {
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  if (device.is_cpu()) {
    std::size_t rounded = (bytes + 63) / 64 * 64;
    ptr = std::aligned_alloc(64, rounded);
    if (!ptr)
      FT_THROW(out_of_memory, "out of host memory: requested ", bytes, " bytes for '", tag, "' with ",
               gib(stats(device).current_bytes), " already held by flashtrain");
  } else {
#if FT_HAS_CUDA
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();
      count = 0;
    }
    FT_CHECK_KIND(unsupported, device.index < count, "no CUDA device ", device.to_string(), ": ", count,
                  " device(s) visible");
    CudaDeviceGuard guard(device.index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (std::find(retaining_pools_.begin(), retaining_pools_.end(), device.index) == retaining_pools_.end()) {
        retain_freed_memory(device.index);
        retaining_pools_.push_back(device.index);
      }
    }
    auto cuda_stream = static_cast<cudaStream_t>(stream.handle());
    cudaError_t status = cudaMallocAsync(&ptr, bytes, cuda_stream);
    if (status == cudaErrorMemoryAllocation) {  // hand the pool's unused memory back, then try once more
      cudaGetLastError();
      FT_CUDA_CHECK(cudaDeviceSynchronize());
      FT_CUDA_CHECK(cudaMemPoolTrimTo(device_pool(device.index), 0));
      status = cudaMallocAsync(&ptr, bytes, cuda_stream);
    }
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      FT_THROW(out_of_memory, "out of memory on ", device.to_string(), ": requested ", gib(bytes), " for '", tag,
               "' with ", gib(stats(device).current_bytes), " held by flashtrain, ",
               gib(static_cast<std::int64_t>(free_bytes)), " free of ", gib(static_cast<std::int64_t>(total_bytes)));
    }
    FT_CUDA_CHECK(status);
#else
    (void)stream;
    FT_THROW(unsupported, "memory on ", device.to_string(),
             " requested, but this flashtrain build has no CUDA (configure with nvcc present)");
#endif
  }
  account(device, static_cast<std::int64_t>(bytes), tag);
  return ptr;
}

void Allocator::deallocate(void* ptr, std::size_t bytes, Device device, std::string_view tag, const Stream& stream) {
  if (!ptr) return;
  if (device.is_cpu()) {
    std::free(ptr);
  } else {
#if FT_HAS_CUDA
    CudaDeviceGuard guard(device.index);
    cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream.handle()));
#else
    (void)stream;
#endif
  }
  account(device, -static_cast<std::int64_t>(bytes), tag);
}

void Allocator::account(Device device, std::int64_t delta, std::string_view tag) {
  std::lock_guard lock(mutex_);
  auto key = device.to_string();
  MemoryStats& s = stats_[key];
  s.current_bytes += delta;
  s.allocations += delta > 0 ? 1 : -1;
  if (s.current_bytes > s.peak_bytes) s.peak_bytes = s.current_bytes;
  if (recording_) {
    events_.push_back({now_ms() - recording_start_ms_, key, delta, s.current_bytes, std::string(tag), phase_});
  }
}

MemoryStats Allocator::stats(Device device) const {
  std::lock_guard lock(mutex_);
  auto it = stats_.find(device.to_string());
  return it == stats_.end() ? MemoryStats{} : it->second;
}

void Allocator::reset_peak(Device device) {
  std::lock_guard lock(mutex_);
  MemoryStats& s = stats_[device.to_string()];
  s.peak_bytes = s.current_bytes;
}

void Allocator::set_phase(std::string phase) {
  std::lock_guard lock(mutex_);
  phase_ = std::move(phase);
}

void Allocator::start_recording() {
  std::lock_guard lock(mutex_);
  events_.clear();
  recording_ = true;
  recording_start_ms_ = now_ms();
}

std::vector<AllocationEvent> Allocator::stop_recording() {
  std::lock_guard lock(mutex_);
  recording_ = false;
  return std::move(events_);
}

}  // namespace ft
