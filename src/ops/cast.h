// cast.h — elementwise dtype conversion: dst <- src rounded to dst's dtype (round to nearest even), e.g.
// a block's fp32 master weights cast to bf16 GEMM operands right before use, or an fp32 gradient rounded to
// a bf16 GEMM operand; and fill, the cast of one constant to every element (zeroing optimizer state on its
// device without a host staging copy). Tensors: contiguous, fp32 / bf16 / fp16 (equal dtypes copy).
// Dispatches on the device: CPU or CUDA.
#pragma once

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

// dst <- dtype_cast(src).
void cast(const Tensor& dst, const Tensor& src, const Stream& stream = {});
// dst <- value rounded to dst's dtype, every element.
void fill(const Tensor& dst, double value, const Stream& stream = {});

}  // namespace ft
