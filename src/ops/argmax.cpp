// argmax.cpp — validation of argmax_rows and greedy_next and their CPU loops; CUDA in cuda/argmax.cu.
#include "ops/argmax.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "ops/decode_attention.h"
#include "ops/embedding.h"
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

std::size_t greedy_next_workspace_bytes(std::int64_t rows, Device device) {
  FT_CHECK(rows >= 0, "greedy_next_workspace_bytes: expected rows >= 0, given ", rows);
  if (!device.is_cuda()) return 0;
#if FT_HAS_CUDA
  return gpu::greedy_next_workspace_bytes(rows, device);
#else
  ops::no_cuda_build("greedy_next_workspace_bytes", device);
  return 0;
#endif
}

void greedy_next(const GreedyNextArgs& a) {
  constexpr const char* op = "greedy_next";
  ops::check_dtype(op, a.logits, "logits", {DType::f32});
  FT_CHECK(a.logits.dim() == 2, op, ": logits must be (rows, cols): expected 2 dims, given ", a.logits.describe());
  const ops::RowView x = ops::row_view(op, a.logits, "logits");
  FT_CHECK(a.limit >= 0, op, ": the limit must be >= 0 (0 = every column), given ", a.limit);
  const std::int64_t cols = a.limit > 0 ? std::min(a.limit, x.cols) : x.cols;
  FT_CHECK(cols >= 1, op, ": rows of no columns have no largest value");
  FT_CHECK(a.ids != nullptr && a.history != nullptr && a.position != nullptr, op,
           ": the ids, the history and the position are required");
  for (const auto& [t, name] : {std::pair{&a.embedding, "embedding"}, std::pair{&a.x, "x"}}) {
    ops::check_dtype(op, *t, name, {DType::f32});
    ops::check_device(op, *t, name, a.logits.device());
    FT_CHECK(t->dim() == 2, op, ": ", name, " must be 2-D, given ", t->describe());
  }
  const ops::RowView e = ops::row_view(op, a.embedding, "embedding"), out = ops::row_view(op, a.x, "x");
  FT_CHECK(out.rows == x.rows && out.cols == e.cols, op, ": x must be (", x.rows, ", ", e.cols,
           ") (the logits' rows by the embedding's width), given ", a.x.describe());
  FT_CHECK(e.rows >= cols, op, ": the embedding has ", e.rows, " rows, fewer than the ", cols,
           " columns searched for the largest logit");
  if (x.rows == 0) return;
  if (a.logits.device().is_cuda()) {
#if FT_HAS_CUDA
    const std::size_t need = gpu::greedy_next_workspace_bytes(x.rows, a.logits.device());
    FT_CHECK(a.workspace != nullptr && a.workspace_bytes >= need, op, ": CUDA needs a workspace of ", need,
             " bytes (greedy_next_workspace_bytes), given ", a.workspace ? a.workspace_bytes : 0);
    return gpu::greedy_next(a.ids, a.history, a.position, static_cast<const float*>(x.data), x.rows, cols,
                            x.row_stride, e, out, a.workspace, a.overlap_launch, a.logits.device(), a.stream);
#else
    ops::no_cuda_build(op, a.logits.device());
#endif
  }
  argmax_rows(a.ids, a.logits, a.limit, a.stream, a.history, a.position);
  embedding_forward(a.x, TokenIds{a.ids, {x.rows}, Device::cpu()}, a.embedding, a.stream);
  advance_position(a.position, 1, Device::cpu(), a.stream);
}

}  // namespace ft
