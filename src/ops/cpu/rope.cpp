// rope.cpp — CPU rotary embedding on interleaved pairs, in place; angles from a (T, Dh/2) table of (cos, sin)
// computed in double (rope_table), indexed by t or by the token's given position.
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/elem.h"

namespace ft::cpu {

void rope_table(float* table, std::int64_t T, std::int64_t half, double theta, std::int64_t position_offset) {
  std::vector<double> inv_freq(static_cast<std::size_t>(half));  // (half)
  for (std::int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(2 * half));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(position_offset + t) * inv_freq[i];
      table[2 * (t * half + i)] = static_cast<float>(std::cos(angle));
      table[2 * (t * half + i) + 1] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope(const Tensor& x, double theta, std::int64_t position_offset, const std::int32_t* positions, bool inverse) {
  const std::int64_t B = x.size(0), H = x.size(1), T = x.size(2), Dh = x.size(3), half = Dh / 2;
  std::vector<float> table(static_cast<std::size_t>(T * half * 2));  // (T, Dh/2, 2): cos, sin
  rope_table(table.data(), T, half, theta, position_offset);
  const float sign = inverse ? -1.f : 1.f;  // the inverse rotation negates the sines
  const std::int64_t sb = x.stride(0), sh = x.stride(1), st = x.stride(2);
  with_dtype(x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    E* base = static_cast<E*>(x.data());
    FT_OMP_PARALLEL_FOR
    for (std::int64_t row = 0; row < B * H * T; ++row) {
      const std::int64_t b = row / (H * T), h = row / T % H, t = row % T;
      E* v = base + b * sb + h * sh + t * st;  // (Dh)
      const std::int64_t p = positions ? positions[b * T + t] : t;  // in [0, T) (checked by rope.cpp)
      const float* cs = table.data() + 2 * p * half;  // (Dh/2, 2)
      for (std::int64_t i = 0; i < half; ++i) {
        const float x0 = load(v[2 * i]), x1 = load(v[2 * i + 1]);
        const float c = cs[2 * i], s = sign * cs[2 * i + 1];
        v[2 * i] = from_float<E>(x0 * c - x1 * s);
        v[2 * i + 1] = from_float<E>(x0 * s + x1 * c);
      }
    }
  });
}

}  // namespace ft::cpu
