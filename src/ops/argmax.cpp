// argmax.cpp — validation of argmax_rows and its CPU loop; CUDA in cuda/argmax.cu.
#include "ops/argmax.h"

#include <algorithm>

#include "core/error.h"
#include "ops/cuda/decode_ops.h"
#include "ops/op_common.h"

namespace ft {

void argmax_rows(std::int32_t* out, const Tensor& logits, std::int64_t limit, [[maybe_unused]] const Stream& stream,
                 std::int32_t* history, const std::int32_t* position) {
  constexpr const char* op = "argmax_rows";
  ops::check_dtype(op, logits, "logits", {DType::f32});
  FT_CHECK(logits.dim() == 2, op, ": logits must be (rows, cols): expected 2 dims, given ", logits.describe());
  const ops::RowView x = ops::row_view(op, logits, "logits");
  FT_CHECK(limit >= 0, op, ": the limit must be >= 0 (0 = every column), given ", limit);
  FT_CHECK(out != nullptr || x.rows == 0, op, ": the output is required but was not given");
  const std::int64_t cols = limit > 0 ? std::min(limit, x.cols) : x.cols;
  FT_CHECK(cols >= 1 || x.rows == 0, op, ": rows of no columns have no largest value");
  FT_CHECK((history == nullptr) == (position == nullptr), op,
           ": the history and the position go together: give both or neither");
  if (logits.device().is_cuda()) {
#if FT_HAS_CUDA
    return gpu::argmax_rows(out, history, position, static_cast<const float*>(x.data), x.rows, cols, x.row_stride,
                            logits.device(), stream);
#else
    ops::no_cuda_build(op, logits.device());
#endif
  }
  const auto* data = static_cast<const float*>(x.data);
  for (std::int64_t r = 0; r < x.rows; ++r) {
    const float* row = data + r * x.row_stride;
    out[r] = static_cast<std::int32_t>(std::max_element(row, row + cols) - row);
    if (history) history[*position * x.rows + r] = out[r];
  }
}

}  // namespace ft
