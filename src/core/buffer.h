// buffer.h — owning memory: Buffer (bytes from the Allocator, freed on destruction) and
// OwnedTensor (a Buffer with a contiguous Tensor view over it).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

class Buffer {
 public:
  Buffer() = default;
  Buffer(std::size_t bytes, Device device, std::string_view tag, const Stream& stream = {});
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  const std::string& tag() const { return tag_; }
  void reset();  // free now

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_{};
  std::string tag_;
  Stream stream_;
};

class OwnedTensor {
 public:
  OwnedTensor() = default;
  OwnedTensor(Shape shape, DType dtype, Device device, std::string_view tag, const Stream& stream = {});

  const Tensor& tensor() const { return tensor_; }
  operator const Tensor&() const { return tensor_; }  // NOLINT: pass where a view is wanted
  const Tensor* operator->() const { return &tensor_; }
  bool defined() const { return tensor_.defined(); }

 private:
  Buffer buffer_;
  Tensor tensor_;
};

}  // namespace ft
