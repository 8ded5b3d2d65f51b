// random_fill.cpp — the CPU truncated-normal fill: one draw per element (ops/truncated_normal_draw.h), in
// parallel over elements (each a pure function of its index, so the thread count does not matter).
#include "ops/cpu/cpu_ops.h"
#include "ops/truncated_normal_draw.h"

namespace ft::cpu {

void fill_truncated_normal(float* out, std::int64_t n, std::uint64_t key, std::int64_t first, double stddev,
                           double cut) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
  for (std::int64_t i = 0; i < n; ++i)
    out[i] = static_cast<float>(ops::draw::mul(stddev, ops::draw::truncated_normal(
                                                        key, static_cast<std::uint64_t>(first + i), cut)));
}

}  // namespace ft::cpu
