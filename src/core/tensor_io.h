// tensor_io.h — moving tensor values between devices and to/from host doubles: copies (any device,
// any strides), element reads/writes in logical (row-major) order, and seeded random fills.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ft {

// dst <- src (same dtype and shape; any devices and strides). Synchronous.
void copy(const Tensor& dst, const Tensor& src);

// The elements of t (any device, any strides) as doubles, in logical row-major order.
std::vector<double> read_as_double(const Tensor& t);
// Writes values (logical row-major order, numel of them) into t, rounding to its dtype.
void write_from_double(const Tensor& t, const std::vector<double>& values);

// Fill with normal(mean, std) draws from a seeded generator: the same seed gives the same values on
// every device (values are drawn on the host).
void fill_normal(const Tensor& t, std::uint64_t seed, double mean = 0.0, double std = 1.0);
// Fill every element with one value.
void fill_constant(const Tensor& t, double value);

}  // namespace ft
