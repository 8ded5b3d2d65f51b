// linear.h — the linear layer (no bias) forward and backward:
//   forward   y (..., d_out) = x (..., d_in) @ w^T [+ r],   w (d_out, d_in)
//   backward  dx (..., d_in) (+)= dy (..., d_out) @ w;   dw (d_out, d_in) (+)= dy^T @ x  (rows summed)
// Operands x, w, dy share one dtype (fp32, or bf16 / fp16 in mixed precision) and are accumulated in
// fp32; outputs y, dx are that dtype or fp32, dw is fp32 (master gradients) or that dtype. Tensors are
// seen as (rows, cols) matrices: leading dims collapse into rows, the last dim must be contiguous, and
// rows may be strided (a column slice of a wider matrix works). Dispatches on the tensors' device:
// CPU = cache-blocked OpenMP GEMM, deterministic; CUDA = cuBLASLt (fp32 accumulation, TF32 only on request).
#pragma once

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

struct LinearOptions {
  bool allow_tf32 = false;  // fp32 operands on CUDA may use TF32 tensor cores (the CPU is always exact fp32)
  Stream stream;            // CUDA work is ordered on this stream
};

// y <- x @ w^T.
void linear_forward(const Tensor& y, const Tensor& x, const Tensor& w, const LinearOptions& options = {});
// y <- x @ w^T + r: a projection and the residual add after it in one pass, r (..., d_out) fp32 shaped like y,
// y fp32; r may be y itself. Bitwise the result of linear_forward(y, x, w) then residual_add(y, r) (see
// Note [GEMM epilogue addend] in linear.cpp).
void linear_forward_residual(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& r,
                             const LinearOptions& options = {});

struct LinearGrads {
  Tensor dx;                   // (..., d_in), undefined = not wanted; overwritten
  Tensor dw;                   // (d_out, d_in), undefined = not wanted
  bool accumulate_dw = false;  // dw += dy^T x (gradient accumulation over micro-batches) instead of dw =
  // dx += dy w (a gradient summed over two branches, the w1 and w3 of SwiGLU) instead of dx =; for an fp32 dx
  // bitwise the separate GEMM and add (see Note [GEMM epilogue addend] in linear.cpp).
  bool accumulate_dx = false;
};

// dx (+)= dy @ w, dw (+)= dy^T @ x, given the forward input x and weight w.
void linear_backward(const LinearGrads& grads, const Tensor& dy, const Tensor& x, const Tensor& w,
                     const LinearOptions& options = {});

}  // namespace ft
