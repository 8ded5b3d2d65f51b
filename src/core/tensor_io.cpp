// tensor_io.cpp — host staging for copies, reads, writes and fills of strided tensors on any device.
#include "core/tensor_io.h"

#include <cmath>
#include <cstring>
#include <random>

#include "core/buffer.h"
#include "core/error.h"
#include "core/half.h"
#if FT_HAS_CUDA
#include "core/cuda_check.h"
#endif

namespace ft {

namespace {

// Calls fn(element_offset) for every element in logical row-major order.
template <class Fn>
void for_each_offset(const Tensor& t, Fn&& fn) {
  const std::int64_t n = t.numel();
  if (n == 0) return;
  const int dims = t.dim();
  std::vector<std::int64_t> index(dims, 0);
  std::int64_t offset = 0;
  for (std::int64_t count = 0; count < n; ++count) {
    fn(offset);
    for (int a = dims - 1; a >= 0; --a) {
      if (++index[a] < t.size(a)) {
        offset += t.stride(a);
        break;
      }
      offset -= (t.size(a) - 1) * t.stride(a);
      index[a] = 0;
    }
  }
}

double load(const void* base, DType dtype, std::int64_t offset) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[offset];
    case DType::f16: return to_float(static_cast<const f16*>(base)[offset]);
    case DType::bf16: return to_float(static_cast<const bf16*>(base)[offset]);
  }
  return 0;
}

void store(void* base, DType dtype, std::int64_t offset, double value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[offset] = static_cast<float>(value); break;
    case DType::f16: static_cast<f16*>(base)[offset] = to_f16(static_cast<float>(value)); break;
    case DType::bf16: static_cast<bf16*>(base)[offset] = to_bf16(static_cast<float>(value)); break;
  }
}

void raw_copy(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if FT_HAS_CUDA
  FT_CUDA_CHECK(cudaDeviceSynchronize());  // pending work on the source must be finished
  FT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  // From pageable host memory cudaMemcpy may return before the DMA to the device has landed, and work on
  // a non-blocking stream would not wait for it: finish it here.
  if (!dst_device.is_cpu()) FT_CUDA_CHECK(cudaDeviceSynchronize());
#else
  FT_THROW(unsupported, "copy between ", src_device.to_string(), " and ", dst_device.to_string(),
           " needs CUDA, but this flashtrain build has none");
#endif
}

// A host tensor with the same values as t (t itself when it is already on the host).
struct HostView {
  OwnedTensor staging;
  Tensor view;
};

HostView host_view(const Tensor& t) {
  if (t.device().is_cpu()) return {OwnedTensor(), t};
  // Stage the whole strided extent so the strides stay valid on the host.
  std::size_t span = t.span_bytes();
  std::int64_t elements = static_cast<std::int64_t>(span / t.element_size());
  OwnedTensor staging({elements}, t.dtype(), Device::cpu(), "host staging");
  raw_copy(staging->data(), Device::cpu(), t.data(), t.device(), span);
  Tensor view(staging->data(), t.dtype(), Device::cpu(), t.shape(), t.strides());
  return {std::move(staging), view};
}

}  // namespace

std::vector<double> read_as_double(const Tensor& t) {
  FT_CHECK(t.defined(), "read_as_double: given an undefined tensor");
  HostView host = host_view(t);
  std::vector<double> values;
  values.reserve(static_cast<std::size_t>(t.numel()));
  for_each_offset(host.view, [&](std::int64_t off) { values.push_back(load(host.view.data(), t.dtype(), off)); });
  return values;
}

void write_from_double(const Tensor& t, const std::vector<double>& values) {
  FT_CHECK(t.defined(), "write_from_double: given an undefined tensor");
  FT_CHECK(static_cast<std::int64_t>(values.size()) == t.numel(), "write_from_double: expected ", t.numel(),
           " values for ", t.describe(), ", given ", values.size());
  HostView host = host_view(t);  // keeps the untouched gaps of a strided device tensor intact
  std::size_t i = 0;
  for_each_offset(host.view, [&](std::int64_t off) { store(host.view.data(), t.dtype(), off, values[i++]); });
  if (!t.device().is_cpu()) raw_copy(t.data(), t.device(), host.view.data(), Device::cpu(), t.span_bytes());
}

void copy(const Tensor& dst, const Tensor& src) {
  FT_CHECK(dst.dtype() == src.dtype(), "copy: dtypes differ: destination ", dst.describe(), ", source ",
           src.describe());
  FT_CHECK(dst.shape() == src.shape(), "copy: shapes differ: destination ", dst.describe(), ", source ",
           src.describe());
  if (dst.is_contiguous() && src.is_contiguous()) {
    raw_copy(dst.data(), dst.device(), src.data(), src.device(), static_cast<std::size_t>(dst.numel()) * dst.element_size());
    return;
  }
  write_from_double(dst, read_as_double(src));  // exact: every dtype round-trips through double
}

void fill_normal(const Tensor& t, std::uint64_t seed, double mean, double std) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> normal(mean, std);
  std::vector<double> values(static_cast<std::size_t>(t.numel()));
  for (auto& v : values) v = normal(generator);
  write_from_double(t, values);
}

void fill_constant(const Tensor& t, double value) {
  write_from_double(t, std::vector<double>(static_cast<std::size_t>(t.numel()), value));
}

}  // namespace ft
