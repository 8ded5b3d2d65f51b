// pinned_memory.h — host memory a device copies to and from asynchronously: PinnedBuffer (page-locked on a
// CUDA build when it serves a CUDA device, ordinary host memory when it serves the CPU) and copy_bytes_async,
// a byte copy between device and host memory ordered on a stream (on the CPU: at once).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/device.h"
#include "core/stream.h"

namespace ft {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // bytes of host memory for copies with `device` (page-locked when it is a CUDA device). Throws ft::Error
  // (out_of_memory) naming the bytes asked and the tag when the host cannot give them.
  PinnedBuffer(std::size_t bytes, Device device, std::string_view tag);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void reset();
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  bool page_locked_ = false;
};

// dst <- src, `bytes` of them, between memory of `device` and host memory (either way), enqueued on stream
// when device is a CUDA device (the copy is asynchronous: order work after it with an Event), done at once on
// the CPU.
void copy_bytes_async(void* dst, const void* src, std::size_t bytes, Device device, const Stream& stream);

}  // namespace ft
