// stream.h — CUDA streams and events behind opaque handles, so CPU-only code can pass them around.
// A default-constructed Stream is the device's legacy default stream (or nothing, on the CPU).
#pragma once

#include "core/device.h"

namespace ft {

class Stream {
 public:
  Stream() = default;
  // Wrap an existing cudaStream_t (not owned), e.g. a caller's current stream.
  static Stream wrap(void* cuda_stream, Device device = Device::cuda(0));
  // Create a new non-blocking stream on the device (owned).
  static Stream create(Device device, int priority = 0);
  ~Stream();
  Stream(const Stream& other);             // copies do not own: only the creator destroys the stream
  Stream& operator=(const Stream& other);
  Stream(Stream&& other) noexcept;         // moves carry the ownership along
  Stream& operator=(Stream&& other) noexcept;

  void* handle() const { return handle_; }  // cudaStream_t, nullptr = default stream
  Device device() const { return device_; }
  void synchronize() const;

 private:
  void* handle_ = nullptr;
  Device device_ = Device::cuda(0);
  bool owned_ = false;
};

class Event {
 public:
  explicit Event(Device device = Device::cuda(0), bool timing = true);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  void wait_on(const Stream& stream) const;  // stream waits for this event
  void synchronize() const;
  bool query() const;                        // true once complete
  float elapsed_ms(const Event& later) const;  // this -> later
  void* handle() const { return handle_; }

 private:
  void* handle_ = nullptr;
  Device device_;
};

}  // namespace ft
