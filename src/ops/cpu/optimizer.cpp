// optimizer.cpp — CPU AdamW and SGD updates, and the sum of squares and scaling behind gradient
// clipping, over flat fp32 buffers.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/elem.h"

namespace ft::cpu {

namespace {
constexpr std::int64_t kSumChunk = 1 << 14;  // elements per partial sum (fixed: the order never changes)
}

void adamw_step(float* p, const float* g, float* m, float* v, std::int64_t n, const AdamWFactors& f,
                float grad_factor) {
  const float decay = f.decay, beta2 = f.beta2, one_minus_beta1 = f.one_minus_beta1,
              one_minus_beta2 = f.one_minus_beta2, step_size = f.step_size,
              bias_correction2_sqrt = f.bias_correction2_sqrt, eps = f.eps;
  FT_OMP_PARALLEL_FOR
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_factor;
    const float mi = m[i] + one_minus_beta1 * (gi - m[i]);
    const float vi = beta2 * v[i] + one_minus_beta2 * gi * gi;
    const float denom = std::sqrt(vi) / bias_correction2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * (mi / denom);
  }
}

void sgd_step(float* p, const float* g, std::int64_t n, double lr) {
  const float rate = static_cast<float>(lr);
  FT_OMP_PARALLEL_FOR
  for (std::int64_t i = 0; i < n; ++i) p[i] -= rate * g[i];
}

double sum_squares(const float* x, std::int64_t n) {
  const std::int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> partial(static_cast<std::size_t>(chunks));  // (chunks)
  FT_OMP_PARALLEL_FOR
  for (std::int64_t c = 0; c < chunks; ++c) {
    double s = 0;
    for (std::int64_t i = c * kSumChunk, end = std::min(n, i + kSumChunk); i < end; ++i)
      s += static_cast<double>(x[i]) * x[i];
    partial[c] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void scale(float* x, std::int64_t n, double factor) {
  const float f = static_cast<float>(factor);
  FT_OMP_PARALLEL_FOR
  for (std::int64_t i = 0; i < n; ++i) x[i] *= f;
}

}  // namespace ft::cpu
