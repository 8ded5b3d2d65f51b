// pinned_memory.cpp — PinnedBuffer over cudaHostAlloc (CUDA devices) or aligned host memory (the CPU), and
// copy_bytes_async over cudaMemcpyAsync or memcpy.
#include "core/pinned_memory.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.h"
#if FT_HAS_CUDA
#include "core/cuda_check.h"
#endif

namespace ft {

namespace {
double gib(std::size_t bytes) { return static_cast<double>(bytes) / (1ull << 30); }
}  // namespace

PinnedBuffer::PinnedBuffer(std::size_t bytes, Device device, std::string_view tag) : bytes_(bytes) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!data_)
      FT_THROW(out_of_memory, "out of host memory: requested ", bytes, " bytes (", gib(bytes), " GiB) for '", tag,
               "'");
    return;
  }
#if FT_HAS_CUDA
  CudaDeviceGuard guard(device.index);
  const cudaError_t status = cudaHostAlloc(&data_, bytes, cudaHostAllocDefault);
  if (status != cudaSuccess) {
    cudaGetLastError();
    data_ = nullptr;
    FT_THROW(out_of_memory, "out of pinned host memory: cudaHostAlloc of ", bytes, " bytes (", gib(bytes),
             " GiB) for '", tag, "' failed: ", cudaGetErrorString(status),
             " (the host needs that much free page-lockable memory per process)");
  }
  page_locked_ = true;
#else
  FT_THROW(unsupported, "pinned host memory for ", device.to_string(), " needs CUDA, but this flashtrain build has none");
#endif
}

PinnedBuffer::~PinnedBuffer() { reset(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      page_locked_(std::exchange(other.page_locked_, false)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    page_locked_ = std::exchange(other.page_locked_, false);
  }
  return *this;
}

void PinnedBuffer::reset() {
  if (!data_) return;
#if FT_HAS_CUDA
  if (page_locked_) cudaFreeHost(data_);
  else std::free(data_);
#else
  std::free(data_);
#endif
  data_ = nullptr;
  bytes_ = 0;
  page_locked_ = false;
}

void copy_bytes_async(void* dst, const void* src, std::size_t bytes, Device device, const Stream& stream) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if FT_HAS_CUDA
  CudaDeviceGuard guard(device.index);
  FT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream.handle())));
#else
  (void)stream;
  FT_THROW(unsupported, "a copy on ", device.to_string(), " needs CUDA, but this flashtrain build has none");
#endif
}

}  // namespace ft
