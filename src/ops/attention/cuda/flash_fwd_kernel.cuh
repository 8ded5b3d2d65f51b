// flash_fwd_kernel.cuh — internal (CUDA builds only): the FlashAttention-2 forward kernel (Algorithm 1).
// One block per (batch x query head, query tile); each warp owns 16 * warp_m query rows. The block
// loops once over the key tiles of the visible band (sink tiles first, then the window), K/V tiles
// streamed with cp.async through a ring of kStages buffers. Online softmax in fp32 on exp2 with scale * log2(e)
// and the row max applied by one FFMA; O is rescaled only when a row max moved; P is rounded to the input
// dtype before P V; O and L are written once at the end.
#pragma once

#include <cstdint>

#include "ops/attention/cuda/flash_mask.cuh"
#include "ops/attention/cuda/flash_params.h"
#include "ops/attention/cuda/flash_tile.cuh"
#include "ops/attention/cuda/flash_traits.h"

namespace ft::flash {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

template <class T, int D>
struct FwdKernelTraits {
  static constexpr FlashTiles kTiles = flash_tiles(sizeof(T), D);
  static constexpr int kBlockM = kTiles.fwd_m, kBlockN = kTiles.fwd_n, kStages = kTiles.fwd_st;
  static constexpr int kWarpM = kTiles.fwd_wm;  // 16-row blocks per warp
  static constexpr int kWarps = kBlockM / (16 * kWarpM), kThreads = kWarps * 32;
  static constexpr int kLdS = kLd<T, D>;
  // sQ (kBlockM, kLdS) | sK (kStages, kBlockN, kLdS) | sV (kStages, kBlockN, kLdS)
  static constexpr int kSmemBytes = (kBlockM + 2 * kStages * kBlockN) * kLdS * static_cast<int>(sizeof(T));
  static_assert(kBlockM % (16 * kWarpM) == 0 && kBlockN % 16 == 0 && kQueryPad % kBlockM == 0, "bad forward tiles");
};

template <class T, int D, bool kHasMask>
__global__ void __launch_bounds__(FwdKernelTraits<T, D>::kThreads, 2)
    flash_fwd_kernel(const __grid_constant__ FlashFwdParams p) {
  using Tr = FwdKernelTraits<T, D>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, kStages = Tr::kStages, kThreads = Tr::kThreads;
  constexpr int MT = Tr::kWarpM;
  constexpr int kLdS = Tr::kLdS;
  constexpr int kNtS = BN / 8;  // score tiles per row block
  constexpr int kNtO = D / 8;   // output tiles per row block
  const FlashShape& s = p.shape;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // (BM, kLdS)
  T* sK = sQ + BM * kLdS;                  // (kStages, BN, kLdS)
  T* sV = sK + kStages * BN * kLdS;        // (kStages, BN, kLdS)

  const int m_block = gridDim.y - 1 - blockIdx.y;  // longest (causal) tiles of every head first
  const int b = blockIdx.x / s.heads_q, h = blockIdx.x % s.heads_q, hk = h / s.group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int m0 = m_block * BM;
  const int rows_valid = s.len_q - m0;
  const int warp_row = warp * 16 * MT;  // first tile row of this warp

  const T* q = static_cast<const T*>(p.q.ptr) + b * p.q.batch_stride + h * p.q.head_stride + m0 * p.q.row_stride;
  const T* k = static_cast<const T*>(p.k.ptr) + b * p.k.batch_stride + hk * p.k.head_stride;
  const T* v = static_cast<const T*>(p.v.ptr) + b * p.v.batch_stride + hk * p.v.head_stride;

  const KeyRange tile_first = row_keys<kHasMask>(m0, s);
  const KeyRange tile_last = row_keys<kHasMask>(min(m0 + BM, s.len_q) - 1, s);
  const KeyTiles tiles = key_tiles(tile_first, tile_last, BN);
  const int n_iters = tiles.count();
  // Scores stay unscaled until exp2, whose FFMA applies scale * log2(e) and subtracts the row max. A
  // negative scale is moved into Q (negated once in shared memory) so that sl > 0; a zero scale
  // becomes a tiny one, which leaves every visible exp2 argument at 0 as it should.
  const float sl = fmaxf(fabsf(s.scale_log2), 1e-30f);

  auto load_kv = [&](int it) {
    if (it < n_iters) {
      const int n0 = tiles.tile(it) * BN;
      const int slot = it % kStages;
      load_tile<T, BN, D, kThreads>(sK + slot * BN * kLdS, k + n0 * p.k.row_stride, p.k.row_stride, s.len_k - n0,
                                    s.vec16, tid);
      load_tile<T, BN, D, kThreads>(sV + slot * BN * kLdS, v + n0 * p.v.row_stride, p.v.row_stride, s.len_k - n0,
                                    s.vec16, tid);
    }
    cp_async_commit();
  };

  load_tile<T, BM, D, kThreads>(sQ, q, p.q.row_stride, rows_valid, s.vec16, tid);
  cp_async_commit();
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) load_kv(st);
  if (s.scale_log2 < 0.f) {  // S = |scale| (-Q) K^T; the loop's first barrier orders these writes
    cp_async_wait<0>();
    __syncthreads();
    for (int i = tid; i < BM * kLdS; i += kThreads) sQ[i] = -sQ[i];
  }

  float acc_o[MT][kNtO][4] = {};  // O of this thread's rows (unnormalised)
  float row_max[MT][2], row_sum[MT][2];  // running max of scores * sl; this thread's part of the sum
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    row_max[m][0] = row_max[m][1] = -INFINITY;
    row_sum[m][0] = row_sum[m][1] = 0.f;
  }

  for (int it = 0; it < n_iters; ++it) {
    load_kv(it + kStages - 1);
    cp_async_wait<kStages - 1>();
    __syncthreads();
    const int slot = it % kStages;
    const T* sKt = sK + slot * BN * kLdS;
    const T* sVt = sV + slot * BN * kLdS;
    const int n0 = tiles.tile(it) * BN;

    float acc_s[MT][kNtS][4] = {};  // S = Q K^T, unscaled
    gemm_ss<T, D, MT, kNtS>(acc_s, sQ, kLdS, warp_row, sKt, kLdS, lane);

    if (!tile_full(tile_first, tile_last, n0, BN, s.len_k)) {  // hidden scores -> -inf
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const RowKeys keys(row_keys<kHasMask>(m0 + warp_row + 16 * m + g + 8 * r, s));
#pragma unroll
          for (int j = 0; j < kNtS; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (!keys.contains(n0 + 8 * j + 2 * t + e)) acc_s[m][j][2 * r + e] = -INFINITY;
          }
        }
      }
    }

#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float correction[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < kNtS; ++j) mx = fmaxf(mx, fmaxf(acc_s[m][j][2 * r], acc_s[m][j][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mx = fmaxf(row_max[m][r], mx * sl);
        const float base = mx == -INFINITY ? 0.f : mx;  // a row with nothing visible yet stays at zero
        correction[r] = fast_exp2(row_max[m][r] - base);
        row_max[m][r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kNtS; ++j) {
          acc_s[m][j][2 * r] = fast_exp2(fmaf(acc_s[m][j][2 * r], sl, -base));
          acc_s[m][j][2 * r + 1] = fast_exp2(fmaf(acc_s[m][j][2 * r + 1], sl, -base));
          sum += acc_s[m][j][2 * r] + acc_s[m][j][2 * r + 1];
        }
        row_sum[m][r] = row_sum[m][r] * correction[r] + sum;
      }
      // O is rescaled only when the max of some row of this warp's block moved (warp-uniform branch).
      if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f)) {
#pragma unroll
        for (int j = 0; j < kNtO; ++j) {
          acc_o[m][j][0] *= correction[0];
          acc_o[m][j][1] *= correction[0];
          acc_o[m][j][2] *= correction[1];
          acc_o[m][j][3] *= correction[1];
        }
      }
    }

    gemm_rs<T, MT, kNtS, kNtO>(acc_o, acc_s, sVt, kLdS, 0, lane);
    __syncthreads();  // this slot is refilled by the next iteration's prefetch
  }

  // Final normalisation, with the sink logit as an extra softmax column that carries no value.
  float factor[MT][2], lse[MT][2];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[m][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float mx = row_max[m][r];
      if (p.sinks) {
        const float sink = p.sinks[h] * kLog2e;
        const float top = fmaxf(mx, sink);
        const float scaled = mx == -INFINITY ? 0.f : fast_exp2(mx - top);
        l = l * scaled + fast_exp2(sink - top);
        factor[m][r] = scaled / l;
        lse[m][r] = (top + __log2f(l)) * kLn2;
      } else if (l > 0.f) {
        factor[m][r] = 1.f / l;
        lse[m][r] = (mx + __log2f(l)) * kLn2;
      } else {
        factor[m][r] = 0.f;
        lse[m][r] = -INFINITY;
      }
    }
  }

  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int m = 0; m < MT; ++m)
    store_acc<T, kNtO>(sQ, kLdS, warp_row + 16 * m, 0, acc_o[m], factor[m][0], factor[m][1], lane);
  __syncthreads();
  T* o = static_cast<T*>(p.o.ptr) + b * p.o.batch_stride + h * p.o.head_stride + m0 * p.o.row_stride;
  store_tile<T, BM, D, kThreads>(o, p.o.row_stride, sQ, rows_valid, s.vec16, tid);
  if (t == 0) {
    float* out = static_cast<float*>(p.lse.ptr) + b * p.lse.batch_stride + h * p.lse.head_stride;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = m0 + warp_row + 16 * m + g + 8 * r;
        if (row < s.len_q) out[row * p.lse.row_stride] = lse[m][r];
      }
    }
  }
}

}  // namespace ft::flash
