// gemm.cpp — the cache-blocked CPU GEMM (see gemm.h). op(A) is packed into MR-row strips and op(B) into
// NR-column strips, both fp32 and zero-padded; each thread takes whole MC x NC tiles of C, runs the
// MR x NR register micro-kernel over KC-deep slices into an fp32 tile buffer, then writes the tile out
// (converting, and adding C when accumulating or the addend when given). No split-K: results do not depend
// on the thread count.
#include "ops/cpu/gemm.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "ops/cpu/elem.h"

// On x86-64 with GCC the tile loop is also compiled for AVX2 and AVX-512 and picked at load time.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FT_GEMM_TARGETS __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FT_GEMM_TARGETS
#endif

namespace ft::cpu {
namespace {

constexpr std::int64_t kMR = 6;    // micro-tile rows
constexpr std::int64_t kNR = 16;   // micro-tile columns
constexpr std::int64_t kKC = 256;  // depth of one packed slice
constexpr std::int64_t kMC = 96;   // tile rows (multiple of kMR)
constexpr std::int64_t kNC = 256;  // tile columns (multiple of kNR)

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Packs X (count, k), X(i, p) = index_major ? src[i * ld + p] : src[p * ld + i], into strips of W
// indices: packed[(s * k + p) * W + w] = X(s * W + w, p), zero past count.
template <class T>
void pack(const T* src, std::int64_t ld, bool index_major, std::int64_t count, std::int64_t k, std::int64_t W,
          float* packed /* (ceil(count / W), k, W) */) {
  const std::int64_t strips = ceil_div(count, W);
  FT_OMP_PARALLEL_FOR
  for (std::int64_t s = 0; s < strips; ++s) {
    float* dst = packed + s * k * W;
    const std::int64_t valid = std::min(W, count - s * W);
    if (index_major) {
      for (std::int64_t w = 0; w < W; ++w) {
        if (w >= valid) {
          for (std::int64_t p = 0; p < k; ++p) dst[p * W + w] = 0.0f;
          continue;
        }
        const T* row = src + (s * W + w) * ld;
        for (std::int64_t p = 0; p < k; ++p) dst[p * W + w] = load(row[p]);
      }
    } else {
      for (std::int64_t p = 0; p < k; ++p) {
        const T* row = src + p * ld + s * W;
        for (std::int64_t w = 0; w < W; ++w) dst[p * W + w] = w < valid ? load(row[w]) : 0.0f;
      }
    }
  }
}

std::unique_ptr<float[]> pack_operand(const GemmOperand& x, bool index_major, std::int64_t count, std::int64_t k,
                                      std::int64_t W) {
  std::unique_ptr<float[]> packed(new float[static_cast<std::size_t>(ceil_div(count, W) * k * W)]);
  with_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    pack(static_cast<const T*>(x.data), x.ld, index_major, count, k, W, packed.get());
  });
  return packed;
}

// Eight floats in one vector register (GCC/Clang vector extension): two make a kNR-wide row.
typedef float Vec8 __attribute__((vector_size(32)));

// c (kMR, kNR) in a tile of row stride kNC += a (kc, kMR) strip slice @ b (kc, kNR) strip slice; the
// kMR x kNR accumulators stay in registers.
__attribute__((always_inline)) inline void micro_kernel(const float* a, const float* b, std::int64_t kc, float* c) {
  Vec8 acc[kMR][2] = {};
  for (std::int64_t p = 0; p < kc; ++p) {
    Vec8 b0, b1;
    std::memcpy(&b0, b + p * kNR, sizeof(Vec8));
    std::memcpy(&b1, b + p * kNR + 8, sizeof(Vec8));
    for (std::int64_t r = 0; r < kMR; ++r) {
      const float ar = a[p * kMR + r];
      acc[r][0] += ar * b0;
      acc[r][1] += ar * b1;
    }
  }
  for (std::int64_t r = 0; r < kMR; ++r)
    for (std::int64_t j = 0; j < 8; ++j) {
      c[r * kNC + j] += acc[r][0][j];
      c[r * kNC + 8 + j] += acc[r][1][j];
    }
}

// tile (kMC, kNC) <- the product block of rows [i0, i0 + mc) and columns [j0, j0 + nc), over all of k.
FT_GEMM_TARGETS
void compute_tile(const float* pa, const float* pb, std::int64_t k, std::int64_t i0, std::int64_t mc, std::int64_t j0,
                  std::int64_t nc, float* tile) {
  std::fill(tile, tile + kMC * kNC, 0.0f);
  for (std::int64_t k0 = 0; k0 < k; k0 += kKC) {
    const std::int64_t kc = std::min(kKC, k - k0);
    for (std::int64_t jr = 0; jr < nc; jr += kNR) {
      const float* b = pb + ((j0 + jr) / kNR * k + k0) * kNR;
      for (std::int64_t ir = 0; ir < mc; ir += kMR) {
        const float* a = pa + ((i0 + ir) / kMR * k + k0) * kMR;
        micro_kernel(a, b, kc, tile + ir * kNC + jr);
      }
    }
  }
}

template <class T>
void store_tile(const float* tile, std::int64_t mc, std::int64_t nc, T* c /* (mc, nc) block, row stride ldc */,
                std::int64_t ldc, bool accumulate, const float* addend /* (mc, nc) block or null */,
                std::int64_t ld_addend) {
  for (std::int64_t r = 0; r < mc; ++r) {
    T* row = c + r * ldc;
    const float* add = addend ? addend + r * ld_addend : nullptr;
    for (std::int64_t j = 0; j < nc; ++j) {
      float value = tile[r * kNC + j];
      if (accumulate) value += load(row[j]);
      if (add) value += add[j];
      row[j] = from_float<T>(value);
    }
  }
}

}  // namespace

void gemm(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  const std::unique_ptr<float[]> pa = pack_operand(g.a, !g.a.transpose, g.m, g.k, kMR);  // (m/MR, k, MR)
  const std::unique_ptr<float[]> pb = pack_operand(g.b, g.b.transpose, g.n, g.k, kNR);   // (n/NR, k, NR)
  const std::int64_t tiles_m = ceil_div(g.m, kMC), tiles_n = ceil_div(g.n, kNC);
  FT_OMP_PARALLEL
  {
    std::unique_ptr<float[]> tile(new float[kMC * kNC]);  // (kMC, kNC) fp32 accumulators
    FT_OMP_FOR
    for (std::int64_t t = 0; t < tiles_m * tiles_n; ++t) {
      const std::int64_t i0 = t / tiles_n * kMC, j0 = t % tiles_n * kNC;
      const std::int64_t mc = std::min(kMC, g.m - i0), nc = std::min(kNC, g.n - j0);
      compute_tile(pa.get(), pb.get(), g.k, i0, mc, j0, nc, tile.get());
      with_dtype(g.c_dtype, [&](auto tag) {
        using T = decltype(tag);
        const float* addend = g.addend ? g.addend + i0 * g.ld_addend + j0 : nullptr;
        store_tile(tile.get(), mc, nc, static_cast<T*>(g.c) + i0 * g.ldc + j0, g.ldc, g.accumulate, addend,
                   g.ld_addend);
      });
    }
  }
}

}  // namespace ft::cpu
