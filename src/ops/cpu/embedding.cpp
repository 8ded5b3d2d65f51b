// embedding.cpp — CPU embedding gather and its deterministic scatter-add backward.
#include <algorithm>
#include <cstring>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/elem.h"

namespace ft::cpu {

namespace {
constexpr std::int64_t kColumnChunk = 64;  // dweight columns one thread owns in the backward
}

void embedding_forward(const ops::RowView& out, const std::int32_t* ids, const ops::RowView& weight) {
  const auto* w = static_cast<const float*>(weight.data);  // (vocab, d)
  auto* o = static_cast<float*>(out.data);                 // (n, d)
  const std::int64_t d = out.cols;
  FT_OMP_PARALLEL_FOR
  for (std::int64_t i = 0; i < out.rows; ++i)
    std::memcpy(o + i * out.row_stride, w + ids[i] * weight.row_stride, static_cast<std::size_t>(d) * sizeof(float));
}

// Threads own column chunks of dweight and walk the positions in order, so every sum has one order.
void embedding_backward(const ops::RowView& dweight, const std::int32_t* ids, const ops::RowView& dout,
                        bool accumulate) {
  auto* dw = static_cast<float*>(dweight.data);          // (vocab, d)
  const auto* g = static_cast<const float*>(dout.data);  // (n, d)
  const std::int64_t d = dweight.cols;
  if (!accumulate) {
    FT_OMP_PARALLEL_FOR
    for (std::int64_t v = 0; v < dweight.rows; ++v) std::fill(dw + v * dweight.row_stride, dw + v * dweight.row_stride + d, 0.0f);
  }
  const std::int64_t chunks = (d + kColumnChunk - 1) / kColumnChunk;
  FT_OMP_PARALLEL_FOR
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t c0 = c * kColumnChunk, c1 = std::min(d, c0 + kColumnChunk);
    for (std::int64_t i = 0; i < dout.rows; ++i) {
      float* dst = dw + ids[i] * dweight.row_stride;
      const float* src = g + i * dout.row_stride;
      for (std::int64_t j = c0; j < c1; ++j) dst[j] += src[j];
    }
  }
}

}  // namespace ft::cpu
