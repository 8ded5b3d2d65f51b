// linear.cu — the linear layer on CUDA: its three GEMMs through cuBLASLt (ops/gemm_cuda.h), in row-major
// terms y = x w^T [+ r], dx (+)= dy w, dw (+)= dy^T x, with fp32 accumulation and strided rows as leading dims;
// r and the accumulated dx come in as the GEMM's C with beta = 1 (see Note [GEMM epilogue addend] in linear.cpp).
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/gemm_cuda.h"

namespace ft::gpu {

namespace {

gemm::Matrix matrix(const ops::RowView& v, bool transpose) {
  gemm::Matrix m;
  m.data = v.data;
  m.dtype = v.dtype;
  m.ld = v.row_stride;
  m.transpose = transpose;
  return m;
}

}  // namespace

void linear_forward(const ops::RowView& y, const ops::RowView& x, const ops::RowView& w, const ops::RowView& r,
                    bool allow_tf32, Device device, const Stream& stream) {
  if (x.rows == 0) return;
  gemm::Args g;
  g.m = x.rows, g.n = w.rows, g.k = w.cols;
  g.a = matrix(x, false);  // x (rows, d_in)
  g.b = matrix(w, true);   // w (d_out, d_in), used as w^T
  g.d = matrix(y, false);  // y (rows, d_out)
  if (r.data) {
    g.c = matrix(r, false);  // r (rows, d_out) fp32
    g.beta = 1.0f;
  }
  g.allow_tf32 = allow_tf32;
  gemm::matmul(g, device, cuda_stream(stream));
}

void linear_backward(const ops::RowView& dx, bool accumulate_dx, const ops::RowView& dw, bool accumulate_dw,
                     const ops::RowView& dy, const ops::RowView& x, const ops::RowView& w, bool allow_tf32,
                     Device device, const Stream& stream) {
  const cudaStream_t s = cuda_stream(stream);
  if (dx.data && x.rows > 0) {
    gemm::Args g;
    g.m = x.rows, g.n = w.cols, g.k = w.rows;
    g.a = matrix(dy, false);  // dy (rows, d_out)
    g.b = matrix(w, false);   // w (d_out, d_in)
    g.d = matrix(dx, false);  // dx (rows, d_in)
    g.beta = accumulate_dx ? 1.0f : 0.0f;
    g.allow_tf32 = allow_tf32;
    gemm::matmul(g, device, s);
  }
  if (!dw.data) return;
  if (x.rows == 0) {
    // No rows: dw = 0 (the empty sum), or unchanged when accumulating.
    if (!accumulate_dw) {
      CudaDeviceGuard guard(device.index);
      const std::size_t element = size_of(dw.dtype);
      FT_CUDA_CHECK(cudaMemset2DAsync(dw.data, static_cast<std::size_t>(dw.row_stride) * element, 0,
                                      static_cast<std::size_t>(dw.cols) * element, static_cast<std::size_t>(dw.rows),
                                      s));
    }
    return;
  }
  gemm::Args g;
  g.m = w.rows, g.n = w.cols, g.k = x.rows;
  g.a = matrix(dy, true);   // dy (rows, d_out), used as dy^T
  g.b = matrix(x, false);   // x (rows, d_in)
  g.d = matrix(dw, false);  // dw (d_out, d_in)
  g.beta = accumulate_dw ? 1.0f : 0.0f;
  g.allow_tf32 = allow_tf32;
  gemm::matmul(g, device, s);
}

}  // namespace ft::gpu
