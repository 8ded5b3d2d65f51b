// flash_bwd_atomic.cuh — internal (CUDA builds only): the pieces of the non-deterministic backward
// (AttentionOptions::deterministic = false, FA2's own scheme). The dK/dV kernel (flash_bwd_sm80_kernel.cuh
// and flash_bwd_sm90_kernel.cuh, kAtomicDq) also computes dQ_tile = dS K for every (query tile, key tile)
// it visits and adds it into an fp32 accumulator dq_accum (B, Hq, len_q_pad, D), zeroed by the pre-pass
// (flash_bwd_sm80_kernel.cuh) — the sm80 kernel with atomics through accumulate_dq_tile below, the sm90
// one with TMA reductions of staged tiles; a convert kernel then writes dq = scale * dq_accum in q's dtype
// and layout. The order of the additions depends on scheduling, so dQ may differ between runs in its last
// bits (dK, dV and dsinks do not). The deterministic mode runs the sm90 kernel with its additions put in a
// fixed order instead (kOrderedDq; See Note [Ordered dQ additions] in flash_sm90_scheduler.cuh), through
// the same accumulator.
#pragma once

#include <cstdint>

#include "ops/attention/cuda/flash_params.h"
#include "ops/attention/cuda/flash_tile.cuh"
#include "ops/attention/cuda/flash_varlen.cuh"

namespace ft::flash {

// dq_accum[0, rows_valid) (rows of D floats) += dS K for one (query tile, key tile): dS (Tr::kM queries
// x Tr::kN keys) is read transposed from sdS, which holds dS^T (Tr::kN, Tr::kLdDs) as the dK/dV kernel
// computes it, and K from sK (Tr::kN, Tr::kLdS). Each warp owns 16 Tr::kDqWarpM rows and Tr::kDqCols
// columns of the tile, done Tr::kDqChunk columns at a time; each thread adds pairs of consecutive floats.
template <class T, int D, class Tr>
__device__ __forceinline__ void accumulate_dq_tile(float* dq_accum, int rows_valid, const T* sdS, const T* sK,
                                                   int warp, int lane) {
  constexpr int MT = Tr::kDqWarpM, kChunk = Tr::kDqChunk, kNt = kChunk / 8;
  const int row0 = (warp / Tr::kDqWarpsD) * 16 * MT;
  const int col0 = (warp % Tr::kDqWarpsD) * Tr::kDqCols;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int chunk = 0; chunk < Tr::kDqCols / kChunk; ++chunk) {
    const int c0 = col0 + chunk * kChunk;
    float acc[MT][kNt][4] = {};  // dQ rows row0 + 16 m (+ g, + g + 8), columns c0 + 8 j + 2 t (+ 1)
    gemm_tt<T, Tr::kN, MT, kNt>(acc, sdS, Tr::kLdDs, row0, sK, Tr::kLdS, c0, lane);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + 16 * m + g + 8 * r;
        if (row >= rows_valid) continue;
        float* dst = dq_accum + static_cast<std::int64_t>(row) * D + c0 + 2 * t;
#pragma unroll
        for (int j = 0; j < kNt; ++j) atomic_add2(dst + 8 * j, acc[m][j][2 * r], acc[m][j][2 * r + 1]);
      }
    }
  }
}

inline constexpr int kConvertRows = 64;      // dQ convert kernel: rows per block
inline constexpr int kConvertThreads = 256;  // each thread converts 4 consecutive values at a time

// dq (B, Hq, Nq, D) in T <- scale * dq_accum (B, Hq, len_q_pad, D) fp32, rows [64 y, 64 y + 64) of one
// (batch x query head) x. The 4 values of a thread leave in one store where dq's rows allow it.
template <class T, int D>
__global__ void __launch_bounds__(kConvertThreads)
    flash_bwd_dq_convert_kernel(const __grid_constant__ FlashBwdParams p) {
  struct alignas(4 * sizeof(T)) Quad {
    T v[4];
  };
  FlashShape s = p.shape;
  const int bh = blockIdx.x, b = bh / s.heads_q, h = bh % s.heads_q;
  const SeqRows seq = narrow_to_sequence(s, b);  // See Note [Packed sequences]
  const int row_begin = blockIdx.y * kConvertRows;
  if (row_begin >= s.len_q) return;
  const float* accum = p.dq_accum + (scratch_row(p, b, h, seq.q0) + row_begin) * D;  // (64, D)
  T* dq = p.dq.at<T>(b, h, seq.q0 + row_begin);
  const bool packed = reinterpret_cast<std::uintptr_t>(dq) % sizeof(Quad) == 0 && p.dq.row_stride % 4 == 0;
  constexpr int kQuads = D / 4;  // per row
  const int rows = min(kConvertRows, s.len_q - row_begin);
  for (int idx = threadIdx.x; idx < rows * kQuads; idx += kConvertThreads) {
    const int r = idx / kQuads, c = (idx % kQuads) * 4;
    const float4 x = *reinterpret_cast<const float4*>(accum + r * D + c);
    const Quad q{{static_cast<T>(x.x * s.scale), static_cast<T>(x.y * s.scale), static_cast<T>(x.z * s.scale),
                  static_cast<T>(x.w * s.scale)}};
    T* out = dq + static_cast<std::int64_t>(r) * p.dq.row_stride + c;
    if (packed) {
      *reinterpret_cast<Quad*>(out) = q;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) out[e] = q.v[e];
    }
  }
}

}  // namespace ft::flash
