// dlpack_tensor.h — ft::Tensor views over DLPack arrays (nanobind ndarrays from torch, numpy, cupy, ...):
// data, shape, strides (in elements), dtype and device taken as given, without copies.
#pragma once

#include <nanobind/ndarray.h>

#include "core/tensor.h"
#include "ops/attention_varlen.h"

namespace ft::python {

// Any DLPack array: read-only inputs (q, k, v, ...) and writable outputs (o, lse, gradients).
using InputArray = nanobind::ndarray<nanobind::ro>;
using OutputArray = nanobind::ndarray<>;

// A view of the array's memory. Throws nanobind::type_error for a dtype flashtrain has no name for
// (only float32, float16 and bfloat16 exist) and ft::Error (unsupported) for a device other than the
// host or a CUDA device. `name` is the argument's name, quoted in messages.
Tensor tensor_view(const InputArray& array, const char* name);
Tensor tensor_view(const OutputArray& array, const char* name);

// Cumulative lengths over a 1-D contiguous int32 array (varlen attention's cu_seqlens_q / _k), on the
// host or a CUDA device; nanobind::type_error for another dtype, ft::Error for another shape or device.
CumulativeLengths lengths_view(const InputArray& array, const char* name);

}  // namespace ft::python
