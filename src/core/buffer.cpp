// buffer.cpp — Buffer and OwnedTensor lifetimes over the Allocator.
#include "core/buffer.h"

#include "core/allocator.h"

namespace ft {

Buffer::Buffer(std::size_t bytes, Device device, std::string_view tag, const Stream& stream)
    : bytes_(bytes), device_(device), tag_(tag), stream_(stream) {
  data_ = Allocator::instance().allocate(bytes, device, tag, stream);
}

Buffer::~Buffer() { reset(); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_), device_(other.device_), tag_(std::move(other.tag_)),
      stream_(other.stream_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    bytes_ = other.bytes_;
    device_ = other.device_;
    tag_ = std::move(other.tag_);
    stream_ = other.stream_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() {
  if (data_) Allocator::instance().deallocate(data_, bytes_, device_, tag_, stream_);
  data_ = nullptr;
  bytes_ = 0;
}

OwnedTensor::OwnedTensor(Shape shape, DType dtype, Device device, std::string_view tag, const Stream& stream)
    : buffer_(static_cast<std::size_t>(shape_numel(shape)) * size_of(dtype), device, tag, stream),
      tensor_(buffer_.data(), dtype, device, std::move(shape)) {}

}  // namespace ft
