// rmsnorm.cpp — CPU RMSNorm forward and backward in fp32 (row sums in double).
#include <algorithm>
#include <cmath>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/elem.h"

namespace ft::cpu {

namespace {

constexpr std::int64_t kColumnChunk = 64;  // dw columns one thread owns in the backward

// Row r of out <- src (d) fp32 rounded to out's dtype, as cast rounds.
void store_row(const ops::RowView& out, std::int64_t r, const float* src, std::int64_t d) {
  with_dtype(out.dtype, [&](auto tag) {
    using C = decltype(tag);
    C* row = static_cast<C*>(out.data) + r * out.row_stride;  // (d)
    for (std::int64_t j = 0; j < d; ++j) row[j] = from_float<C>(src[j]);
  });
}

}  // namespace

void rmsnorm_forward(const ops::RowView& y, float* rstd, const ops::RowView& x, const float* w, float eps) {
  const std::int64_t d = x.cols;
  with_dtype(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    FT_OMP_PARALLEL_FOR
    for (std::int64_t r = 0; r < x.rows; ++r) {
      const float* xr = static_cast<const float*>(x.data) + r * x.row_stride;  // (d)
      T* yr = static_cast<T*>(y.data) + r * y.row_stride;                      // (d)
      double ss = 0;
      for (std::int64_t j = 0; j < d; ++j) ss += static_cast<double>(xr[j]) * xr[j];
      const float s = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
      rstd[r] = s;
      for (std::int64_t j = 0; j < d; ++j) yr[j] = from_float<T>(xr[j] * s * w[j]);
    }
  });
}

void rmsnorm_backward(const ops::RowView& dx, bool accumulate_dx, const ops::RowView& dx_cast, float* dw,
                      bool accumulate_dw, const ops::RowView& dy, const ops::RowView& x, const float* w,
                      const float* rstd) {
  const std::int64_t d = x.cols;
  with_dtype(dy.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (dx.data) {
      FT_OMP_PARALLEL_FOR
      for (std::int64_t r = 0; r < x.rows; ++r) {
        const float* xr = static_cast<const float*>(x.data) + r * x.row_stride;  // (d)
        const T* gr = static_cast<const T*>(dy.data) + r * dy.row_stride;        // (d)
        float* dxr = static_cast<float*>(dx.data) + r * dx.row_stride;           // (d)
        const float s = rstd[r];
        double dot = 0;  // sum_j dy_j w_j xhat_j
        for (std::int64_t j = 0; j < d; ++j) dot += static_cast<double>(load(gr[j]) * w[j]) * (xr[j] * s);
        const float mean_dot = static_cast<float>(dot / static_cast<double>(d));
        for (std::int64_t j = 0; j < d; ++j) {
          const float value = s * (load(gr[j]) * w[j] - xr[j] * s * mean_dot);
          dxr[j] = accumulate_dx ? dxr[j] + value : value;
        }
        if (dx_cast.data) store_row(dx_cast, r, dxr, d);
      }
    }
    if (dw) {
      // Threads own column chunks and walk the rows in order: one summation order for every thread count.
      const std::int64_t chunks = (d + kColumnChunk - 1) / kColumnChunk;
      FT_OMP_PARALLEL_FOR
      for (std::int64_t c = 0; c < chunks; ++c) {
        const std::int64_t c0 = c * kColumnChunk, c1 = std::min(d, c0 + kColumnChunk);
        float acc[kColumnChunk];
        for (std::int64_t j = c0; j < c1; ++j) acc[j - c0] = accumulate_dw ? dw[j] : 0.0f;
        for (std::int64_t r = 0; r < x.rows; ++r) {
          const float* xr = static_cast<const float*>(x.data) + r * x.row_stride;
          const T* gr = static_cast<const T*>(dy.data) + r * dy.row_stride;
          for (std::int64_t j = c0; j < c1; ++j) acc[j - c0] += load(gr[j]) * (xr[j] * rstd[r]);
        }
        for (std::int64_t j = c0; j < c1; ++j) dw[j] = acc[j - c0];
      }
    }
  });
}

}  // namespace ft::cpu
