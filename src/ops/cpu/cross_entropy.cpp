// cross_entropy.cpp — CPU cross-entropy with the fused softmax backward; row sums in double, the mean
// over rows taken in row order.
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/elem.h"

namespace ft::cpu {

namespace {

// Returns row r's loss; writes its dlogits row when dl is given (dl may alias x: each element is read
// before it is written).
template <class T>
double row_loss(const float* x /* (V) */, std::int64_t V, std::int32_t target, T* dl /* (V) or null */,
                float scale) {
  float max = x[0];
  for (std::int64_t j = 1; j < V; ++j) max = std::fmax(max, x[j]);
  double sum = 0;
  for (std::int64_t j = 0; j < V; ++j) sum += std::exp(x[j] - max);
  const double lse = max + std::log(sum);
  const double loss = lse - x[target];
  if (dl) {
    // exp(x - max) / sum rather than exp(x - lse): x - max is exact in fp32, lse is not.
    const float inv_sum = static_cast<float>(1.0 / sum);
    for (std::int64_t j = 0; j < V; ++j) {
      const float p = std::exp(x[j] - max) * inv_sum;
      dl[j] = from_float<T>((p - (j == target ? 1.0f : 0.0f)) * scale);
    }
  }
  return loss;
}

}  // namespace

double cross_entropy(const ops::RowView& logits, const std::int32_t* targets, const ops::RowView& dlogits,
                     double grad_scale, double divisor) {
  const std::int64_t rows = logits.rows, V = logits.cols;
  const float scale = static_cast<float>(grad_scale / divisor);
  std::vector<double> losses(static_cast<std::size_t>(rows));  // (rows)
  with_dtype(dlogits.data ? dlogits.dtype : DType::f32, [&](auto tag) {
    using T = decltype(tag);
    FT_OMP_PARALLEL_FOR
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* x = static_cast<const float*>(logits.data) + r * logits.row_stride;
      T* dl = dlogits.data ? static_cast<T*>(dlogits.data) + r * dlogits.row_stride : nullptr;
      losses[r] = row_loss(x, V, targets[r], dl, scale);
    }
  });
  double total = 0;
  for (double l : losses) total += l;
  return total / divisor;
}

}  // namespace ft::cpu
