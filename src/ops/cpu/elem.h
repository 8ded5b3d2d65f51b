// elem.h — internal CPU helpers: fp32 loads and stores for every element type (fp32, bf16, fp16),
// dispatch from a DType to a template over the element type, and OpenMP pragmas that vanish in a
// build without OpenMP.
#pragma once

#include "core/dtype.h"
#include "core/half.h"

namespace ft::cpu {

inline float load(float x) { return x; }
inline float load(bf16 x) { return to_float(x); }
inline float load(f16 x) { return to_float(x); }

template <class T>
T from_float(float x);
template <>
inline float from_float<float>(float x) { return x; }
template <>
inline bf16 from_float<bf16>(float x) { return to_bf16(x); }
template <>
inline f16 from_float<f16>(float x) { return to_f16(x); }

// fn(T{}) with T the element type of dtype: with_dtype(d, [&](auto tag) { using T = decltype(tag); ... }).
template <class Fn>
void with_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn(float{}); return;
    case DType::bf16: fn(bf16{}); return;
    case DType::f16: fn(f16{}); return;
  }
}

}  // namespace ft::cpu

#if defined(_OPENMP)
#define FT_OMP_PARALLEL _Pragma("omp parallel")
#define FT_OMP_FOR _Pragma("omp for schedule(static)")
#define FT_OMP_PARALLEL_FOR _Pragma("omp parallel for schedule(static)")
#else
#define FT_OMP_PARALLEL
#define FT_OMP_FOR
#define FT_OMP_PARALLEL_FOR
#endif
