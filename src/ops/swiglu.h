// swiglu.h — the elementwise part of the SwiGLU feed-forward (the GEMMs a = w1 x, b = w3 x, w2 h are
// linear layers):
//   forward   h = silu(a) * b,  silu(a) = a * sigmoid(a)
//   backward  da = dh * b * sigmoid(a) * (1 + a * (1 - sigmoid(a))),  db = dh * silu(a)
// a, b, h, dh, da, db: one shape (..., d_ff), one dtype (fp32, bf16 or fp16; computed in fp32), last dim
// contiguous, rows possibly strided (a and b may be the two halves of one fused (rows, 2 d_ff) GEMM
// output). An output may share memory with an input element for element (e.g. da written over a).
// Dispatches on the device: CPU or CUDA.
#pragma once

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

// h <- silu(a) * b.
void swiglu_forward(const Tensor& h, const Tensor& a, const Tensor& b, const Stream& stream = {});
// da, db <- gradients given dh and the forward inputs a, b.
void swiglu_backward(const Tensor& da, const Tensor& db, const Tensor& dh, const Tensor& a, const Tensor& b,
                     const Stream& stream = {});
// h <- silu(a) * b and da, db <- the gradients given dh, in one pass over a, b and dh (a backward that recomputes
// h, for the next projection's weight gradient, where dh did not need it): bitwise swiglu_forward then
// swiglu_backward (outputs may overlap inputs element for element there too).
void swiglu_recompute_backward(const Tensor& h, const Tensor& da, const Tensor& db, const Tensor& dh, const Tensor& a,
                               const Tensor& b, const Stream& stream = {});

}  // namespace ft
