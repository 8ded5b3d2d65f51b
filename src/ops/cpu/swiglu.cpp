// swiglu.cpp — CPU SwiGLU elementwise forward and backward (h recomputed beside it when wanted), computed in
// fp32.
#include <cmath>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/elem.h"

namespace ft::cpu {

namespace {
inline float sigmoid(float a) { return 1.0f / (1.0f + std::exp(-a)); }
}  // namespace

void swiglu_forward(const ops::RowView& h, const ops::RowView& a, const ops::RowView& b) {
  with_dtype(h.dtype, [&](auto tag) {
    using T = decltype(tag);
    FT_OMP_PARALLEL_FOR
    for (std::int64_t r = 0; r < h.rows; ++r) {
      const T* ar = static_cast<const T*>(a.data) + r * a.row_stride;  // (d_ff)
      const T* br = static_cast<const T*>(b.data) + r * b.row_stride;  // (d_ff)
      T* hr = static_cast<T*>(h.data) + r * h.row_stride;              // (d_ff)
      for (std::int64_t j = 0; j < h.cols; ++j) {
        const float av = load(ar[j]);
        hr[j] = from_float<T>(av * sigmoid(av) * load(br[j]));
      }
    }
  });
}

void swiglu_backward(const ops::RowView& h, const ops::RowView& da, const ops::RowView& db, const ops::RowView& dh,
                     const ops::RowView& a, const ops::RowView& b) {
  with_dtype(dh.dtype, [&](auto tag) {
    using T = decltype(tag);
    FT_OMP_PARALLEL_FOR
    for (std::int64_t r = 0; r < dh.rows; ++r) {
      const T* ar = static_cast<const T*>(a.data) + r * a.row_stride;     // (d_ff)
      const T* br = static_cast<const T*>(b.data) + r * b.row_stride;     // (d_ff)
      const T* gr = static_cast<const T*>(dh.data) + r * dh.row_stride;   // (d_ff)
      T* dar = static_cast<T*>(da.data) + r * da.row_stride;              // (d_ff)
      T* dbr = static_cast<T*>(db.data) + r * db.row_stride;              // (d_ff)
      T* hr = h.data ? static_cast<T*>(h.data) + r * h.row_stride : nullptr;  // (d_ff) or none
      for (std::int64_t j = 0; j < dh.cols; ++j) {
        const float av = load(ar[j]), bv = load(br[j]), g = load(gr[j]);
        const float s = sigmoid(av);
        if (hr) hr[j] = from_float<T>(av * s * bv);
        dar[j] = from_float<T>(g * bv * s * (1.0f + av * (1.0f - s)));
        dbr[j] = from_float<T>(g * av * s);
      }
    }
  });
}

}  // namespace ft::cpu
