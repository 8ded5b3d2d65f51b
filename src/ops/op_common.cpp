// op_common.cpp — argument checks, the no-CUDA-build error and row views shared by the op families.
#include "ops/op_common.h"

#include <string>

#include "core/error.h"

namespace ft::ops {

void no_cuda_build(const char* op, Device device) {
  FT_THROW(unsupported, op, ": tensors are on ", device.to_string(),
           ", but this flashtrain build has no CUDA (configure with nvcc present, preset 'cuda')");
}

void check_defined(const char* op, const Tensor& t, const char* name) {
  FT_CHECK(t.defined(), op, ": ", name, " is required but was not given");
}

void check_dtype(const char* op, const Tensor& t, const char* name, std::initializer_list<DType> allowed) {
  check_defined(op, t, name);
  for (DType d : allowed)
    if (t.dtype() == d) return;
  std::string expected;
  for (DType d : allowed) expected += std::string(expected.empty() ? "" : " or ") + name_of(d);
  FT_THROW(invalid_argument, op, ": ", name, " has the wrong dtype: expected ", expected, ", given ",
           name_of(t.dtype()), " (", t.describe(), ")");
}

void check_device(const char* op, const Tensor& t, const char* name, Device expected) {
  check_defined(op, t, name);
  FT_CHECK(t.device() == expected, op, ": ", name, " is on the wrong device: expected ", expected.to_string(),
           ", given ", t.device().to_string());
}

void check_shape(const char* op, const Tensor& t, const char* name, const Shape& expected) {
  check_defined(op, t, name);
  FT_CHECK(t.shape() == expected, op, ": ", name, " has the wrong shape: expected ", shape_string(expected),
           ", given ", shape_string(t.shape()));
}

void check_contiguous(const char* op, const Tensor& t, const char* name) {
  check_defined(op, t, name);
  FT_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous: given ", t.describe());
}

Shape leading_shape(const Tensor& t) {
  const Shape& s = t.shape();
  return s.empty() ? Shape{} : Shape(s.begin(), s.end() - 1);
}

RowView row_view(const char* op, const Tensor& t, const char* name) {
  check_defined(op, t, name);
  FT_CHECK(t.dim() >= 1, op, ": ", name, " must have at least one dim (..., cols): given a 0-dim tensor");
  RowView v;
  v.data = t.data();
  v.dtype = t.dtype();
  v.cols = t.size(-1);
  v.rows = shape_numel(leading_shape(t));
  v.row_stride = v.cols;
  FT_CHECK(v.cols <= 1 || t.stride(-1) == 1, op, ": ", name,
           " must have a contiguous last dim: expected stride 1, given ", t.stride(-1), " (", t.describe(), ")");
  // Leading dims collapse into one row index when each (of size > 1) steps over all the rows inside it.
  std::int64_t inner_rows = 1;
  for (int a = t.dim() - 2; a >= 0; --a) {
    if (t.size(a) == 1) continue;
    if (inner_rows == 1) v.row_stride = t.stride(a);
    FT_CHECK(t.stride(a) == inner_rows * v.row_stride, op, ": ", name,
             " must have leading dims that collapse into evenly strided rows: given ", t.describe());
    inner_rows *= t.size(a);
  }
  FT_CHECK(v.rows <= 1 || v.row_stride >= v.cols, op, ": ", name, " has overlapping rows: row stride ", v.row_stride,
           " is less than the ", v.cols, " columns (", t.describe(), ")");
  return v;
}

void check_token_ids(const char* op, const TokenIds& ids, const char* name, Device device) {
  FT_CHECK(ids.data != nullptr || ids.numel() == 0, op, ": ", name, " has no data but shape ",
           shape_string(ids.shape));
  FT_CHECK(ids.device == device, op, ": ", name, " is on the wrong device: expected ", device.to_string(),
           ", given ", ids.device.to_string());
}

void check_token_range(const char* op, const TokenIds& ids, std::int64_t vocab, const char* name) {
  const std::int64_t n = ids.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t id = ids.data[i];
    if (id < 0 || id >= vocab) throw_token_out_of_range(op, ids, i, id, vocab, name);
  }
}

void throw_token_out_of_range(const char* op, const TokenIds& ids, std::int64_t position, std::int32_t id,
                              std::int64_t vocab, const char* name) {
  std::string index;
  std::int64_t rest = position;
  for (int a = static_cast<int>(ids.shape.size()) - 1; a >= 0; --a) {
    const std::int64_t size = ids.shape[a] > 0 ? ids.shape[a] : 1;
    index = std::to_string(rest % size) + (index.empty() ? "" : ", ") + index;
    rest /= size;
  }
  FT_THROW(invalid_argument, op, ": token id ", id, " at position [", index, "] of ", name, " ",
           shape_string(ids.shape), " is out of range: expected 0 <= id < vocab size ", vocab);
}

}  // namespace ft::ops
