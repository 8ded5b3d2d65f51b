// half.h — host-side 16-bit floats: bf16 and fp16 storage types with round-to-nearest-even
// conversion to and from float. Layout-compatible with CUDA's __nv_bfloat16 / __half.
#pragma once

#include <cstdint>
#include <cstring>

namespace ft {

struct bf16 {
  std::uint16_t bits = 0;
};
struct f16 {
  std::uint16_t bits = 0;
};

inline std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

inline float to_float(bf16 h) { return bits_float(static_cast<std::uint32_t>(h.bits) << 16); }

inline bf16 to_bf16(float x) {
  std::uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return bf16{static_cast<std::uint16_t>(u >> 16)};
}

inline float to_float(f16 h) {
  std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  std::uint32_t exponent = (h.bits >> 10) & 0x1fu;
  std::uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    // subnormal: value = mantissa * 2^-24
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline f16 to_f16(float x) {
  std::uint32_t u = float_bits(x);
  std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  std::uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return f16{static_cast<std::uint16_t>(sign | 0x7e00u)};  // NaN
  if (magnitude >= 0x477ff000u) return f16{static_cast<std::uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (magnitude < 0x38800000u) {
    // result is subnormal or zero: round magnitude / 2^-24 to an integer, ties to even
    float scaled = bits_float(magnitude) * 16777216.0f;  // exact: power-of-two scale
    auto whole = static_cast<std::uint32_t>(scaled);
    float fraction = scaled - static_cast<float>(whole);
    if (fraction > 0.5f || (fraction == 0.5f && (whole & 1u))) ++whole;
    return f16{static_cast<std::uint16_t>(sign | whole)};
  }
  // normal: rebias exponent, round the 13 dropped mantissa bits to nearest even
  std::uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return f16{static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13))};
}

}  // namespace ft
