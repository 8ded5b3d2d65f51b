// residual.h — the residual add of a pre-norm block: x (..., d) += y (..., d), with the residual stream x
// in fp32 and the branch output y in fp32 or bf16 (a bf16 projection output in mixed precision). Rows may
// be strided, the last dim must be contiguous. (The backward of a residual add is the identity: the
// stream's gradient flows to both branches; see rmsnorm_backward's accumulate_dx for the fused sum.)
// Dispatches on the device: CPU or CUDA.
#pragma once

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

// x <- x + y.
void residual_add(const Tensor& x, const Tensor& y, const Stream& stream = {});

}  // namespace ft
