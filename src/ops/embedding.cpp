// embedding.cpp — validation of embedding calls and dispatch to the CPU kernels (cpu/embedding.cpp) or the
// CUDA kernels (cuda/embedding.cu).
#include "ops/embedding.h"

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_common.h"

namespace ft {

namespace {

// Checks weight-like (vocab, d) and activation-like ids.shape + (d) tensors, all fp32 on one device.
void validate(const char* op, const Tensor& table, const char* table_name, const TokenIds& ids, const Tensor& rows,
              const char* rows_name) {
  ops::check_dtype(op, table, table_name, {DType::f32});
  FT_CHECK(table.dim() == 2, op, ": ", table_name, " must be (vocab, d): expected 2 dims, given ", table.dim(),
           " (", table.describe(), ")");
  const Device device = table.device();
  ops::check_token_ids(op, ids, "ids", device);
  ops::check_dtype(op, rows, rows_name, {DType::f32});
  ops::check_device(op, rows, rows_name, device);
  Shape expected = ids.shape;
  expected.push_back(table.size(1));
  ops::check_shape(op, rows, rows_name, expected);
}

}  // namespace

void embedding_forward(const Tensor& out, const TokenIds& ids, const Tensor& weight,
                       [[maybe_unused]] const Stream& stream) {
  constexpr const char* op = "embedding_forward";
  NvtxRange range(op);
  validate(op, weight, "weight", ids, out, "out");
  const ops::RowView w = ops::row_view(op, weight, "weight");
  const ops::RowView o = ops::row_view(op, out, "out");
#if FT_HAS_CUDA
  if (weight.device().is_cuda()) {
    gpu::check_token_range(op, ids, weight.size(0), "ids", stream);
    return gpu::embedding_forward(o, ids.data, w, weight.device(), stream);
  }
#else
  if (weight.device().is_cuda()) ops::no_cuda_build(op, weight.device());
#endif
  ops::check_token_range(op, ids, weight.size(0), "ids");
  cpu::embedding_forward(o, ids.data, w);
}

void embedding_backward(const Tensor& dweight, const TokenIds& ids, const Tensor& dout, bool accumulate,
                        [[maybe_unused]] const Stream& stream) {
  constexpr const char* op = "embedding_backward";
  NvtxRange range(op);
  validate(op, dweight, "dweight", ids, dout, "dout");
  const ops::RowView dw = ops::row_view(op, dweight, "dweight");
  const ops::RowView g = ops::row_view(op, dout, "dout");
#if FT_HAS_CUDA
  if (dweight.device().is_cuda()) {
    gpu::check_token_range(op, ids, dweight.size(0), "ids", stream);
    return gpu::embedding_backward(dw, ids.data, g, accumulate, dweight.device(), stream);
  }
#else
  if (dweight.device().is_cuda()) ops::no_cuda_build(op, dweight.device());
#endif
  ops::check_token_range(op, ids, dweight.size(0), "ids");
  cpu::embedding_backward(dw, ids.data, g, accumulate);
}

}  // namespace ft
