// flash_fwd_sm80_kernel.cuh — internal (CUDA builds only): the portable (sm_80 and later, mma.sync)
// FlashAttention-2 forward kernel (Algorithm 1), and the per-tile softmax steps the Hopper forward
// (flash_fwd_sm90_kernel.cuh) shares with it. One block per (batch x query head, query tile); each warp
// owns 16 * warp_m query rows. The block loops once over the key tiles of the visible band (sink tiles
// first, then the window), K/V tiles streamed with cp.async through a ring of kStages buffers. Online
// softmax in fp32 on exp2 with scale * log2(e) and the row max applied by one FFMA; O is rescaled only
// when a row max moved; P is rounded to the input dtype before P V; O and L are written once at the end.
#pragma once

#include <cstdint>

#include "ops/attention/cuda/flash_mask.cuh"
#include "ops/attention/cuda/flash_params.h"
#include "ops/attention/cuda/flash_tile.cuh"
#include "ops/attention/cuda/flash_traits.h"
#include "ops/attention/cuda/flash_varlen.cuh"

namespace ft::flash {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// The per-tile steps of the forward shared by the sm80 and sm90 kernels. Each works on one 16-row
// block of accumulators (mma / wgmma layout): this thread's rows row_g (c0, c1) and row_g + 8 (c2, c3).

// Scores of keys n0.. that rows row_g, row_g + 8 do not see -> -inf.
template <bool kHasMask, int NS>
__device__ __forceinline__ void mask_scores(float (&acc_s)[NS][4], int row_g, int n0, int t, const FlashShape& s) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const RowKeys keys(row_keys<kHasMask>(row_g + 8 * r, s));
    // Bounds relative to this thread's first key, so each score's test compares with constants only
    // (and takes no branch): key n0 + 2t + c is visible when c < sink or lo <= c < hi.
    const int first = n0 + 2 * t, sink = keys.sink_end - first, lo = keys.begin - first, hi = keys.end - first;
#pragma unroll
    for (int j = 0; j < NS; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = 8 * j + e;
        const bool visible = (c < sink) | ((c >= lo) & (c < hi));
        acc_s[j][2 * r + e] = visible ? acc_s[j][2 * r + e] : -INFINITY;
      }
    }
  }
}

// The scores' half of an online-softmax step: scores (unscaled) -> P = exp2(S sl - max), running max and
// this thread's part of the row sums updated; `correction` is the factor O must be scaled by (rescale_rows).
// The running max (the reference P is taken against) moves only when a score passes it by more than
// kMaxSlack, so P stays <= 2^kMaxSlack and O is rescaled far less often; L and the final normalisation
// use the same reference, so the result is the softmax's either way. Without kSumRows the row sums are
// left to the caller, row_sum untouched (See Note [Tensor-core row sums] in flash_fwd_sm90_kernel.cuh).
inline constexpr float kMaxSlack = 8.f;
template <bool kSumRows = true, int NS>
__device__ __forceinline__ void softmax_scores(float (&acc_s)[NS][4], float (&row_max)[2], float (&row_sum)[2],
                                               float sl, float (&correction)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < NS; ++j) mx = fmaxf(mx, fmaxf(acc_s[j][2 * r], acc_s[j][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    mx *= sl;
    mx = mx > row_max[r] + kMaxSlack ? mx : row_max[r];
    const float base = mx == -INFINITY ? 0.f : mx;  // a row with nothing visible yet stays at zero
    correction[r] = fast_exp2(row_max[r] - base);
    row_max[r] = mx;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < NS; ++j) {
      acc_s[j][2 * r] = fast_exp2(fmaf(acc_s[j][2 * r], sl, -base));
      acc_s[j][2 * r + 1] = fast_exp2(fmaf(acc_s[j][2 * r + 1], sl, -base));
      if constexpr (kSumRows) sum += acc_s[j][2 * r] + acc_s[j][2 * r + 1];
    }
    if constexpr (kSumRows) row_sum[r] = row_sum[r] * correction[r] + sum;
  }
}

// O's half: rows scaled by `correction`, skipped when no row of the warp moved (warp-uniform branch).
template <int NO>
__device__ __forceinline__ void rescale_rows(float (&acc_o)[NO][4], const float (&correction)[2]) {
  if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f)) {
#pragma unroll
    for (int j = 0; j < NO; ++j) {
      acc_o[j][0] *= correction[0];
      acc_o[j][1] *= correction[0];
      acc_o[j][2] *= correction[1];
      acc_o[j][3] *= correction[1];
    }
  }
}

// One online-softmax step: both halves.
template <int NS, int NO>
__device__ __forceinline__ void online_softmax(float (&acc_s)[NS][4], float (&acc_o)[NO][4], float (&row_max)[2],
                                               float (&row_sum)[2], float sl) {
  float correction[2];
  softmax_scores(acc_s, row_max, row_sum, sl, correction);
  rescale_rows(acc_o, correction);
}

// Final normalisation of rows row_g, row_g + 8, with the sink logit (sinks, or null) as an extra
// softmax column that carries no value: the factor O is scaled by, and L (natural log). row_sum holds
// this thread's part of each row's sum (summed over the 4 threads of the row here), or with
// kWholeRowSums the whole sum.
template <bool kWholeRowSums = false>
__device__ __forceinline__ void finish_rows(const float (&row_max)[2], const float (&row_sum)[2], const float* sinks,
                                            int h, float (&factor)[2], float (&lse)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    if constexpr (!kWholeRowSums) {
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
    }
    const float mx = row_max[r];
    if (sinks) {
      const float sink = sinks[h] * kLog2e;
      const float top = fmaxf(mx, sink);
      const float scaled = mx == -INFINITY ? 0.f : fast_exp2(mx - top);
      l = l * scaled + fast_exp2(sink - top);
      factor[r] = scaled / l;
      lse[r] = (top + __log2f(l)) * kLn2;
    } else if (l > 0.f) {
      factor[r] = 1.f / l;
      lse[r] = (mx + __log2f(l)) * kLn2;
    } else {
      factor[r] = 0.f;
      lse[r] = -INFINITY;
    }
  }
}

// L of rows row_g, row_g + 8 (those in [0, len_q)) -> out (row stride in elements), by the t == 0 lanes.
__device__ __forceinline__ void write_lse(float* out, std::int64_t row_stride, int row_g, int len_q,
                                          const float (&lse)[2], int t) {
  if (t != 0) return;
#pragma unroll
  for (int r = 0; r < 2; ++r)
    if (row_g + 8 * r >= 0 && row_g + 8 * r < len_q) out[(row_g + 8 * r) * row_stride] = lse[r];
}

// Step `it` of a K/V prefetch ring over the visited key tiles: K and V rows from key tiles.tile(it) * BN
// -> ring slot it % STAGES of sK, sV (padded tiles; rows past len_k zero); nothing past the last tile. One
// cp.async commit group either way.
template <class T, int BN, int D, int STAGES, int THREADS>
__device__ __forceinline__ void prefetch_kv(T* sK, T* sV, const T* k, std::int64_t k_ld, const T* v, std::int64_t v_ld,
                                            const KeyTiles& tiles, int it, int len_k, bool vec16, int tid) {
  if (it < tiles.count()) {
    const int n0 = tiles.tile(it) * BN;
    const int slot = (it % STAGES) * BN * kLd<T, D>;
    load_tile<T, BN, D, THREADS>(sK + slot, k + n0 * k_ld, k_ld, len_k - n0, vec16, tid);
    load_tile<T, BN, D, THREADS>(sV + slot, v + n0 * v_ld, v_ld, len_k - n0, vec16, tid);
  }
  cp_async_commit();
}

template <class T, int D>
struct FwdKernelTraits {
  static constexpr Sm80FwdTiles kTiles = flash_tiles(sizeof(T), D).fwd;
  static constexpr int kBlockM = kTiles.block_m, kBlockN = kTiles.block_n, kStages = kTiles.stages;
  static constexpr int kWarpM = kTiles.warp_m;  // 16-row blocks per warp
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
  FlashShape s = p.shape;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // (BM, kLdS)
  T* sK = sQ + BM * kLdS;                  // (kStages, BN, kLdS)
  T* sV = sK + kStages * BN * kLdS;        // (kStages, BN, kLdS)

  const int m_block = gridDim.y - 1 - blockIdx.y;  // longest (causal) tiles of every head first
  const int b = blockIdx.x / s.heads_q, h = blockIdx.x % s.heads_q, hk = h / s.group;
  const SeqRows seq = narrow_to_sequence(s, b);  // See Note [Packed sequences]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int m0 = m_block * BM;
  const int rows_valid = s.len_q - m0;
  if (rows_valid <= 0) return;
  const int warp_row = warp * 16 * MT;  // first tile row of this warp

  const T* q = p.q.at<const T>(b, h, seq.q0 + m0);
  const T* k = p.k.at<const T>(b, hk, seq.k0);
  const T* v = p.v.at<const T>(b, hk, seq.k0);

  const KeyRange tile_first = row_keys<kHasMask>(m0, s);
  const KeyRange tile_last = row_keys<kHasMask>(min(m0 + BM, s.len_q) - 1, s);
  const KeyTiles tiles = key_tiles(tile_first, tile_last, BN);
  const int n_iters = tiles.count();
  // Scores stay unscaled until exp2, whose FFMA applies scale * log2(e) and subtracts the row max. A
  // negative scale is moved into Q (negated once in shared memory) so that sl > 0; a zero scale
  // becomes a tiny one, which leaves every visible exp2 argument at 0 as it should.
  const float sl = fmaxf(fabsf(s.scale_log2), 1e-30f);

  auto load_kv = [&](int it) {
    prefetch_kv<T, BN, D, kStages, kThreads>(sK, sV, k, p.k.row_stride, v, p.v.row_stride, tiles, it, s.len_k, s.vec16,
                                             tid);
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
    ring_step_begin<kStages>(it, load_kv);
    const int slot = it % kStages;
    const T* sKt = sK + slot * BN * kLdS;
    const T* sVt = sV + slot * BN * kLdS;
    const int n0 = tiles.tile(it) * BN;

    float acc_s[MT][kNtS][4] = {};  // S = Q K^T, unscaled
    gemm_ss<T, D, MT, kNtS>(acc_s, sQ, kLdS, warp_row, sKt, kLdS, lane);

    const bool full = tile_full(tile_first, tile_last, n0, BN, s.len_k);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (!full) mask_scores<kHasMask>(acc_s[m], m0 + warp_row + 16 * m + g, n0, t, s);
      online_softmax(acc_s[m], acc_o[m], row_max[m], row_sum[m], sl);
    }

    gemm_rs<T, MT, kNtS, kNtO>(acc_o, acc_s, sVt, kLdS, 0, lane);
    ring_step_end<kStages>();
  }

  float factor[MT][2], lse[MT][2];
#pragma unroll
  for (int m = 0; m < MT; ++m) finish_rows(row_max[m], row_sum[m], p.sinks, h, factor[m], lse[m]);

  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int m = 0; m < MT; ++m)
    store_acc<T, kNtO>(sQ, kLdS, warp_row + 16 * m, 0, acc_o[m], factor[m][0], factor[m][1], lane);
  __syncthreads();
  T* o = p.o.at<T>(b, h, seq.q0 + m0);
  store_tile<T, BM, D, kThreads>(o, p.o.row_stride, sQ, rows_valid, s.vec16, tid);
  float* lse_out = p.lse.at<float>(b, h, seq.q0);
#pragma unroll
  for (int m = 0; m < MT; ++m) write_lse(lse_out, p.lse.row_stride, m0 + warp_row + 16 * m + g, s.len_q, lse[m], t);
}

}  // namespace ft::flash
