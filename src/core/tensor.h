// tensor.h — Tensor: a non-owning, strided view of memory (dtype, device, shape, strides in elements).
// Owning storage comes from Buffer / OwnedTensor (buffer.h).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace ft {

using Shape = std::vector<std::int64_t>;

Shape contiguous_strides(const Shape& shape);
std::int64_t shape_numel(const Shape& shape);
std::string shape_string(const Shape& shape);  // "[2, 3, 4]"

class Tensor {
 public:
  Tensor() = default;  // undefined: no data, defined() is false
  // A view of data; strides default to contiguous (row-major) for the shape.
  Tensor(void* data, DType dtype, Device device, Shape shape, Shape strides = {});

  bool defined() const { return defined_; }
  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  std::int64_t size(int axis) const;    // negative axes count from the end
  std::int64_t stride(int axis) const;  // in elements
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t element_size() const { return size_of(dtype_); }
  bool is_contiguous() const;
  // Bytes spanned from data() to one past the last element (the extent a kernel may touch).
  std::size_t span_bytes() const;

  template <class T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }

  // Views sharing the same memory.
  Tensor reshape(Shape shape) const;           // contiguous tensors only
  Tensor transpose(int axis0, int axis1) const;
  Tensor permute(const std::vector<int>& order) const;
  Tensor select(int axis, std::int64_t index) const;  // drops the axis
  Tensor narrow(int axis, std::int64_t start, std::int64_t length) const;

  // "bf16[2, 4, 128, 64] on cuda:0" (with strides when not contiguous).
  std::string describe() const;

 private:
  int normalize_axis(int axis) const;

  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Device device_{};
  Shape shape_;
  Shape strides_;
  bool defined_ = false;
};

}  // namespace ft
