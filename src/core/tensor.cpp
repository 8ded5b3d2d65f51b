// tensor.cpp — Tensor views: strides, reshapes, permutations and descriptions.
#include "core/tensor.h"

#include <algorithm>

#include "core/error.h"

namespace ft {

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t running = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = running;
    running *= std::max<std::int64_t>(shape[i], 1);
  }
  return strides;
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

std::string shape_string(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

Tensor::Tensor(void* data, DType dtype, Device device, Shape shape, Shape strides)
    : data_(data), dtype_(dtype), device_(device), shape_(std::move(shape)), defined_(true) {
  for (auto s : shape_) FT_CHECK(s >= 0, "tensor sizes must be >= 0, given shape ", shape_string(shape_));
  if (strides.empty() && !shape_.empty()) strides = contiguous_strides(shape_);
  FT_CHECK(strides.size() == shape_.size(), "tensor strides must match its shape: expected ", shape_.size(),
           " strides, given ", strides.size());
  strides_ = std::move(strides);
}

int Tensor::normalize_axis(int axis) const {
  int n = dim();
  int a = axis < 0 ? axis + n : axis;
  FT_CHECK(a >= 0 && a < n, "axis ", axis, " out of range for a tensor with ", n, " dims");
  return a;
}

std::int64_t Tensor::size(int axis) const { return shape_[normalize_axis(axis)]; }
std::int64_t Tensor::stride(int axis) const { return strides_[normalize_axis(axis)]; }

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

std::size_t Tensor::span_bytes() const {
  if (numel() == 0) return 0;
  std::int64_t last = 0;
  for (int i = 0; i < dim(); ++i) last += (shape_[i] - 1) * strides_[i];
  return static_cast<std::size_t>(last + 1) * element_size();
}

Tensor Tensor::reshape(Shape shape) const {
  FT_CHECK(is_contiguous(), "reshape needs a contiguous tensor, given ", describe());
  FT_CHECK(shape_numel(shape) == numel(), "reshape to ", shape_string(shape), " (", shape_numel(shape),
           " elements) from ", describe(), " (", numel(), " elements)");
  return Tensor(data_, dtype_, device_, std::move(shape));
}

Tensor Tensor::transpose(int axis0, int axis1) const {
  Tensor out = *this;
  int a = normalize_axis(axis0), b = normalize_axis(axis1);
  std::swap(out.shape_[a], out.shape_[b]);
  std::swap(out.strides_[a], out.strides_[b]);
  return out;
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  FT_CHECK(static_cast<int>(order.size()) == dim(), "permute needs ", dim(), " axes, given ", order.size());
  Tensor out = *this;
  std::vector<bool> seen(dim(), false);
  for (int i = 0; i < dim(); ++i) {
    int a = normalize_axis(order[i]);
    FT_CHECK(!seen[a], "permute repeats axis ", order[i]);
    seen[a] = true;
    out.shape_[i] = shape_[a];
    out.strides_[i] = strides_[a];
  }
  return out;
}

Tensor Tensor::select(int axis, std::int64_t index) const {
  int a = normalize_axis(axis);
  FT_CHECK(index >= 0 && index < shape_[a], "index ", index, " out of range for axis ", axis, " of size ",
           shape_[a]);
  Tensor out = *this;
  out.data_ = static_cast<char*>(data_) + index * strides_[a] * static_cast<std::int64_t>(element_size());
  out.shape_.erase(out.shape_.begin() + a);
  out.strides_.erase(out.strides_.begin() + a);
  return out;
}

Tensor Tensor::narrow(int axis, std::int64_t start, std::int64_t length) const {
  int a = normalize_axis(axis);
  FT_CHECK(start >= 0 && length >= 0 && start + length <= shape_[a], "narrow [", start, ", ", start + length,
           ") out of range for axis ", axis, " of size ", shape_[a]);
  Tensor out = *this;
  out.data_ = static_cast<char*>(data_) + start * strides_[a] * static_cast<std::int64_t>(element_size());
  out.shape_[a] = length;
  return out;
}

std::string Tensor::describe() const {
  if (!defined_) return "undefined tensor";
  std::string out = str(name_of(dtype_), shape_string(shape_));
  if (!is_contiguous()) out += " strides " + shape_string(strides_);
  return out + " on " + device_.to_string();
}

}  // namespace ft
