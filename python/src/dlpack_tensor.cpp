// dlpack_tensor.cpp — DLPack dtype/device/shape/strides -> ft::Tensor.
#include "dlpack_tensor.h"

#include <string>

#include "core/error.h"

namespace nb = nanobind;

namespace ft::python {

namespace {

std::string dtype_string(nb::dlpack::dtype dtype) {
  const char* code = nullptr;
  switch (static_cast<nb::dlpack::dtype_code>(dtype.code)) {
    case nb::dlpack::dtype_code::Int: code = "int"; break;
    case nb::dlpack::dtype_code::UInt: code = "uint"; break;
    case nb::dlpack::dtype_code::Float: code = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: code = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: code = "complex"; break;
    case nb::dlpack::dtype_code::Bool: code = "bool"; break;
    default: return str("DLPack dtype code ", int{dtype.code}, " with ", int{dtype.bits}, " bits");
  }
  return str(code, int{dtype.bits}, dtype.lanes == 1 ? "" : str("x", dtype.lanes));
}

DType dtype_of(nb::dlpack::dtype dtype, const char* name) {
  const auto code = static_cast<nb::dlpack::dtype_code>(dtype.code);
  if (dtype.lanes == 1 && code == nb::dlpack::dtype_code::Float && dtype.bits == 32) return DType::f32;
  if (dtype.lanes == 1 && code == nb::dlpack::dtype_code::Float && dtype.bits == 16) return DType::f16;
  if (dtype.lanes == 1 && code == nb::dlpack::dtype_code::Bfloat && dtype.bits == 16) return DType::bf16;
  throw nb::type_error(
      str("flashtrain: ", name, " has dtype ", dtype_string(dtype), ": expected float32, float16 or bfloat16").c_str());
}

Device device_of(int device_type, int device_id, const char* name) {
  // kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 (pinned host memory, read and written like any host memory).
  if (device_type == nb::device::cpu::value || device_type == nb::device::cuda_host::value) return Device::cpu();
  if (device_type == nb::device::cuda::value) return Device::cuda(device_id);
  FT_THROW(unsupported, "flashtrain: ", name, " lives on DLPack device type ", device_type,
           ": expected the host (1, 3) or a CUDA device (2)");
}

template <class Array>
Tensor view_of(const Array& array, const char* name) {
  const DType dtype = dtype_of(array.dtype(), name);
  const Device device = device_of(array.device_type(), array.device_id(), name);
  Shape shape(array.ndim());    // logical sizes
  Shape strides(array.ndim());  // in elements, as DLPack gives them
  for (std::size_t axis = 0; axis < array.ndim(); ++axis) {
    shape[axis] = static_cast<std::int64_t>(array.shape(axis));
    strides[axis] = array.stride(axis);
  }
  return Tensor(const_cast<void*>(static_cast<const void*>(array.data())), dtype, device, std::move(shape),
                std::move(strides));
}

}  // namespace

Tensor tensor_view(const InputArray& array, const char* name) { return view_of(array, name); }
Tensor tensor_view(const OutputArray& array, const char* name) { return view_of(array, name); }

CumulativeLengths lengths_view(const InputArray& array, const char* name) {
  const nb::dlpack::dtype dtype = array.dtype();
  if (dtype != nb::dtype<std::int32_t>())
    throw nb::type_error(str("flashtrain: ", name, " has dtype ", dtype_string(dtype), ": expected int32").c_str());
  FT_CHECK(array.ndim() == 1, "flashtrain: ", name, " must be 1-D (B + 1 cumulative lengths): given ", array.ndim(),
           " dims");
  FT_CHECK(array.shape(0) <= 1 || array.stride(0) == 1, "flashtrain: ", name,
           " must be contiguous: expected stride 1, given ", array.stride(0));
  return {static_cast<const std::int32_t*>(array.data()), nullptr, static_cast<std::int64_t>(array.shape(0)),
          device_of(array.device_type(), array.device_id(), name)};
}

}  // namespace ft::python
