// rope.cpp — CPU rotary embedding on interleaved pairs, in place; angles from a (T, Dh/2) table computed
// in double, indexed by t or by the token's given position.
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/elem.h"

namespace ft::cpu {

void rope(const Tensor& x, double theta, std::int64_t position_offset, const std::int32_t* positions, bool inverse) {
  const std::int64_t B = x.size(0), H = x.size(1), T = x.size(2), Dh = x.size(3), half = Dh / 2;
  std::vector<float> cos_table(static_cast<std::size_t>(T * half));  // (T, Dh/2)
  std::vector<float> sin_table(static_cast<std::size_t>(T * half));  // (T, Dh/2), negated for the inverse
  std::vector<double> inv_freq(static_cast<std::size_t>(half));  // (Dh/2)
  for (std::int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(Dh));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(position_offset + t) * inv_freq[i];
      cos_table[t * half + i] = static_cast<float>(std::cos(angle));
      sin_table[t * half + i] = static_cast<float>(inverse ? -std::sin(angle) : std::sin(angle));
    }
  }
  const std::int64_t sb = x.stride(0), sh = x.stride(1), st = x.stride(2);
  with_dtype(x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    E* base = static_cast<E*>(x.data());
    FT_OMP_PARALLEL_FOR
    for (std::int64_t row = 0; row < B * H * T; ++row) {
      const std::int64_t b = row / (H * T), h = row / T % H, t = row % T;
      E* v = base + b * sb + h * sh + t * st;  // (Dh)
      const std::int64_t p = positions ? positions[b * T + t] : t;  // in [0, T) (checked by rope.cpp)
      const float* c = cos_table.data() + p * half;
      const float* s = sin_table.data() + p * half;
      for (std::int64_t i = 0; i < half; ++i) {
        const float x0 = load(v[2 * i]), x1 = load(v[2 * i + 1]);
        v[2 * i] = from_float<E>(x0 * c[i] - x1 * s[i]);
        v[2 * i + 1] = from_float<E>(x0 * s[i] + x1 * c[i]);
      }
    }
  });
}

}  // namespace ft::cpu
