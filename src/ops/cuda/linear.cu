// linear.cu — the linear layer on CUDA: its three GEMMs through cuBLASLt (ops/gemm_cuda.h), in row-major
// terms y = x w^T [+ r], dx (+)= dy w, dw (+)= dy^T x, with fp32 accumulation and strided rows as leading dims;
// r and the accumulated dx come in as the GEMM's C with beta = 1 (see Note [GEMM epilogue addend] in linear.cpp).
#include "core/buffer.h"
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

// out <- the product of g + addend (g's D is out; addend may be out itself), bit for bit the product then a
// separate add when out is fp32 (see Note [GEMM epilogue addend]): C = addend with beta = 1, unless the
// algorithm splits K, which then runs with beta = 0 into out (into a scratch when the addend is out) with the
// residual add after it.
void matmul_adding(gemm::Args g, const ops::RowView& out, const ops::RowView& addend, Device device,
                   const Stream& stream) {
  g.c = matrix(addend, false);
  g.beta = 1.0f;
  const cudaStream_t s = cuda_stream(stream);
  if (out.dtype != DType::f32 || !gemm::splits_k(g, device, s)) return gemm::matmul(g, device, s);
  g.c = gemm::Matrix{};
  g.beta = 0.0f;
  if (addend.data != out.data) {
    gemm::matmul(g, device, s);  // out = the product
    return residual_add(out, addend, device, stream);
  }
  Buffer scratch(static_cast<std::size_t>(out.rows * out.cols) * sizeof(float), device, "linear product (split K)",
                 stream);
  const ops::RowView product{scratch.data(), DType::f32, out.rows, out.cols, out.cols};  // (rows, cols)
  g.d = matrix(product, false);
  gemm::matmul(g, device, s);
  residual_add(out, product, device, stream);
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
  g.allow_tf32 = allow_tf32;
  if (r.data) return matmul_adding(g, y, r, device, stream);  // r (rows, d_out) fp32
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
    g.allow_tf32 = allow_tf32;
    if (accumulate_dx)
      matmul_adding(g, dx, dx, device, stream);
    else
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
