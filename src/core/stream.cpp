// stream.cpp — Stream and Event over the CUDA runtime; in a CPU-only build they refuse CUDA work.
#include "core/stream.h"

#include "core/error.h"
#if FT_HAS_CUDA
#include "core/cuda_check.h"
#endif

namespace ft {

#if FT_HAS_CUDA
namespace {
cudaStream_t as_stream(void* h) { return static_cast<cudaStream_t>(h); }
cudaEvent_t as_event(void* h) { return static_cast<cudaEvent_t>(h); }
}  // namespace

Stream Stream::wrap(void* cuda_stream, Device device) {
  Stream s;
  s.handle_ = cuda_stream;
  s.device_ = device;
  return s;
}

Stream Stream::create(Device device, int priority) {
  FT_CHECK(device.is_cuda(), "streams live on CUDA devices, given ", device.to_string());
  CudaDeviceGuard guard(device.index);
  cudaStream_t stream = nullptr;
  FT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority));
  Stream s;
  s.handle_ = stream;
  s.device_ = device;
  s.owned_ = true;
  return s;
}

Stream::~Stream() {
  if (owned_ && handle_) cudaStreamDestroy(as_stream(handle_));
}

// Copies do not own: only the creator destroys the stream.
Stream::Stream(const Stream& other) : handle_(other.handle_), device_(other.device_) {}
Stream& Stream::operator=(const Stream& other) {
  if (this != &other) {
    if (owned_ && handle_) cudaStreamDestroy(as_stream(handle_));
    handle_ = other.handle_;
    device_ = other.device_;
    owned_ = false;
  }
  return *this;
}

Stream::Stream(Stream&& other) noexcept : handle_(other.handle_), device_(other.device_), owned_(other.owned_) {
  other.owned_ = false;
}
Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (owned_ && handle_) cudaStreamDestroy(as_stream(handle_));
    handle_ = other.handle_;
    device_ = other.device_;
    owned_ = other.owned_;
    other.owned_ = false;
  }
  return *this;
}

void Stream::synchronize() const { FT_CUDA_CHECK(cudaStreamSynchronize(as_stream(handle_))); }

Event::Event(Device device, bool timing) : device_(device) {
  CudaDeviceGuard guard(device.index);
  cudaEvent_t event = nullptr;
  FT_CUDA_CHECK(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
  handle_ = event;
}
Event::~Event() {
  if (handle_) cudaEventDestroy(as_event(handle_));
}
void Event::record(const Stream& stream) { FT_CUDA_CHECK(cudaEventRecord(as_event(handle_), as_stream(stream.handle()))); }
void Event::wait_on(const Stream& stream) const {
  FT_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream.handle()), as_event(handle_), 0));
}
void Event::synchronize() const { FT_CUDA_CHECK(cudaEventSynchronize(as_event(handle_))); }
bool Event::query() const {
  cudaError_t status = cudaEventQuery(as_event(handle_));
  if (status == cudaErrorNotReady) return false;
  FT_CUDA_CHECK(status);
  return true;
}
float Event::elapsed_ms(const Event& later) const {
  float ms = 0;
  FT_CUDA_CHECK(cudaEventElapsedTime(&ms, as_event(handle_), as_event(later.handle_)));
  return ms;
}

#else  // CPU-only build

namespace {
[[noreturn]] void no_cuda(const char* what) {
  FT_THROW(unsupported, what, " needs CUDA, but this flashtrain build has none (configure with nvcc present)");
}
}  // namespace

Stream Stream::wrap(void* cuda_stream, Device device) {
  Stream s;
  s.handle_ = cuda_stream;
  s.device_ = device;
  return s;
}
Stream Stream::create(Device, int) { no_cuda("Stream::create"); }
Stream::~Stream() = default;
Stream::Stream(const Stream& other) : handle_(other.handle_), device_(other.device_) {}
Stream& Stream::operator=(const Stream& other) {
  handle_ = other.handle_;
  device_ = other.device_;
  return *this;
}
Stream::Stream(Stream&& other) noexcept : handle_(other.handle_), device_(other.device_) {}
Stream& Stream::operator=(Stream&& other) noexcept {
  handle_ = other.handle_;
  device_ = other.device_;
  return *this;
}
void Stream::synchronize() const {}
Event::Event(Device device, bool) : device_(device) { no_cuda("Event"); }
Event::~Event() = default;
void Event::record(const Stream&) { no_cuda("Event::record"); }
void Event::wait_on(const Stream&) const { no_cuda("Event::wait_on"); }
void Event::synchronize() const { no_cuda("Event::synchronize"); }
bool Event::query() const { no_cuda("Event::query"); }
float Event::elapsed_ms(const Event&) const { no_cuda("Event::elapsed_ms"); }

#endif

}  // namespace ft
