// truncated_normal_draw.h — internal: the one draw behind fill_truncated_normal (random_fill.h), compiled
// for the host (cpu/random_fill.cpp) and the device (cuda/random_fill.cu) from this single source.
//
// Note [Counter-based truncated normal]
// Element i of sequence `key`, attempt a (0, 1, ...): counter = splitmix64(key ^ splitmix64(i * 64 + a)) gives
// two 53-bit uniforms u, v in [-1, 1); Marsaglia's polar method turns them into a standard normal
// z = u sqrt(-2 ln s / s), s = u^2 + v^2, rejecting s outside (0, 1) and |z| > cut by trying the next attempt.
// Only correctly rounded IEEE operations are used (+, -, *, /, sqrt) and the exact frexp, with ln
// evaluated by a fixed polynomial rather than a math library, and every product spelled out so that no
// compiler fuses a multiply-add on one side only (device code uses the _rn intrinsics, which nvcc never
// contracts; cpu/random_fill.cpp is built with -ffp-contract=off). So host and device give the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define FT_DRAW_FN __host__ __device__ inline
#else
#define FT_DRAW_FN inline
#endif

namespace ft::ops::draw {

FT_DRAW_FN std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

FT_DRAW_FN double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
FT_DRAW_FN double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
FT_DRAW_FN double divide(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
FT_DRAW_FN double square_root(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// ln x for x in (0, 1]: x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(t), t = (m - 1) / (m + 1),
// |t| <= 0.1716, by its series to t^23 (truncation below 1e-18 relative).
FT_DRAW_FN double log_unit(double x) {
  int e = 0;
  double m = frexp(x, &e);  // exact: m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m = mul(m, 2.0);  // exact
    e -= 1;
  }
  const double f = add(m, -1.0);  // exact (Sterbenz)
  const double t = divide(f, add(f, 2.0));
  const double t2 = mul(t, t);
  double p = divide(1.0, 23.0);
  for (int k = 21; k >= 3; k -= 2) p = add(divide(1.0, k), mul(t2, p));  // 1/3 + t^2/5 + ... + t^20/23
  const double ln_m = add(mul(2.0, t), mul(mul(2.0, t), mul(t2, p)));
  return add(mul(static_cast<double>(e), 0.69314718055994530942), ln_m);
}

// A uniform in [-1, 1) from the top 53 bits.
FT_DRAW_FN double signed_unit(std::uint64_t bits) {
  return add(mul(static_cast<double>(bits >> 11), 0x1.0p-52), -1.0);  // exact
}

// The truncated standard normal of element i of sequence key (see the Note).
FT_DRAW_FN double truncated_normal(std::uint64_t key, std::uint64_t i, double cut) {
  for (std::uint64_t attempt = 0;; ++attempt) {
    const std::uint64_t counter = splitmix64(key ^ splitmix64(i * 64 + attempt));
    const double u = signed_unit(splitmix64(counter)), v = signed_unit(splitmix64(~counter));
    const double s = add(mul(u, u), mul(v, v));
    if (!(s > 0.0 && s < 1.0)) continue;
    const double z = mul(u, square_root(divide(mul(-2.0, log_unit(s)), s)));
    if (z >= -cut && z <= cut) return z;
  }
}

}  // namespace ft::ops::draw
