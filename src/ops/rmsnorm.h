// rmsnorm.h — RMSNorm over the last dim, computed in fp32 (docs/design.md's model contract):
//   forward   rstd (rows) = 1 / sqrt(mean(x^2) + eps);  y (..., d) = x * rstd * w
//   backward  dx (..., d) (+)= rstd * (dy*w - xhat * mean(dy*w*xhat)),  xhat = x * rstd
//             dw (d) (+)= sum over rows of dy * xhat   (row order fixed: deterministic)
// x, w, rstd, dx, dw are fp32; y and dy are fp32 or bf16 (bf16 when the norm feeds a bf16 GEMM in mixed
// precision — the cast is fused, as is dx's to a 16-bit GEMM operand, dx_cast). rows = x.numel() / d; rstd
// is any contiguous fp32 tensor of rows elements, kept by the caller between forward and backward.
// Dispatches on the device: CPU or CUDA (dw reduced over fixed row groups in a fixed order: deterministic
// too).
#pragma once

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

struct RmsNormOptions {
  float eps = 1e-5f;
  Stream stream;  // CUDA work is ordered on this stream
};

// y, rstd <- rmsnorm(x) with weight w (d).
void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w,
                     const RmsNormOptions& options = {});

struct RmsNormGrads {
  Tensor dx;                   // (..., d) fp32; undefined = not wanted
  Tensor dw;                   // (d) fp32; undefined = not wanted
  bool accumulate_dx = false;  // dx += (fuses the residual stream's gradient sum) instead of dx =
  bool accumulate_dw = false;  // dw += (gradient accumulation over micro-batches) instead of dw =
  // (..., d) bf16 or fp16; undefined = not wanted. dx's final fp32 value (after accumulating) rounded to it by
  // the same pass: bitwise cast(dx_cast, dx) after the call (the residual stream's gradient as the next
  // bf16 GEMM's operand). Needs dx.
  Tensor dx_cast;
};

// dx (and its 16-bit copy), dw from dy, given the forward's x, w and rstd.
void rmsnorm_backward(const RmsNormGrads& grads, const Tensor& dy, const Tensor& x, const Tensor& w,
                      const Tensor& rstd, const RmsNormOptions& options = {});

}  // namespace ft
