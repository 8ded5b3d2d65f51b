// op_common.h — internal helpers shared by the op families (linear, embedding, rmsnorm, rope, swiglu,
// cross-entropy, optimiser updates, residual add, casts): argument checks whose messages name what was
// expected and what was given, the error a CPU-only build raises for CUDA tensors, and RowView, a tensor
// seen as a (rows, cols) matrix with a contiguous last dim.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/tensor.h"
#include "ops/token_ids.h"

namespace ft::ops {

// Throws ErrorKind::unsupported: the op was given tensors on a CUDA device, but this build has no CUDA.
[[noreturn]] void no_cuda_build(const char* op, Device device);

void check_defined(const char* op, const Tensor& t, const char* name);
void check_dtype(const char* op, const Tensor& t, const char* name, std::initializer_list<DType> allowed);
void check_device(const char* op, const Tensor& t, const char* name, Device expected);
void check_shape(const char* op, const Tensor& t, const char* name, const Shape& expected);
void check_contiguous(const char* op, const Tensor& t, const char* name);

// The shape without its last dim: (B, T, d) -> (B, T).
Shape leading_shape(const Tensor& t);

// A tensor of shape (..., cols) whose leading dims collapse into uniformly strided rows and whose last
// dim is contiguous: row r, column c lives at data + (r * row_stride + c) elements. Covers contiguous
// tensors and column slices of wider matrices (e.g. one projection's part of a fused output).
struct RowView {
  void* data = nullptr;
  DType dtype = DType::f32;
  std::int64_t rows = 0;        // product of the leading dims (1 for a 1-D tensor)
  std::int64_t cols = 0;        // the last dim
  std::int64_t row_stride = 0;  // elements between consecutive rows
};
// Checks that t is defined, has at least one dim, a contiguous last dim and collapsible leading dims.
RowView row_view(const char* op, const Tensor& t, const char* name);

// Checks that ids has data (unless empty) and lives on device.
void check_token_ids(const char* op, const TokenIds& ids, const char* name, Device device);
// Checks every id of host ids in [0, vocab); otherwise throws invalid_argument naming the id, its
// position (index tuple in ids.shape) and the vocabulary size (ids on a CUDA device: gpu::check_token_range).
void check_token_range(const char* op, const TokenIds& ids, std::int64_t vocab, const char* name);
// The error check_token_range raises for id found at flat position `position` of ids.
[[noreturn]] void throw_token_out_of_range(const char* op, const TokenIds& ids, std::int64_t position,
                                           std::int32_t id, std::int64_t vocab, const char* name);

}  // namespace ft::ops
