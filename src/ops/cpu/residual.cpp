// residual.cpp — CPU residual add: x (fp32) += y (fp32 or bf16).
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/elem.h"

namespace ft::cpu {

void residual_add(const ops::RowView& x, const ops::RowView& y) {
  with_dtype(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    FT_OMP_PARALLEL_FOR
    for (std::int64_t r = 0; r < x.rows; ++r) {
      float* xr = static_cast<float*>(x.data) + r * x.row_stride;       // (d)
      const T* yr = static_cast<const T*>(y.data) + r * y.row_stride;  // (d)
      for (std::int64_t j = 0; j < x.cols; ++j) xr[j] += load(yr[j]);
    }
  });
}

}  // namespace ft::cpu
