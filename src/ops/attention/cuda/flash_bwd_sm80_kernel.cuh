// flash_bwd_sm80_kernel.cuh — internal (CUDA builds only): the portable (sm_80 and later, mma.sync)
// FlashAttention-2 backward kernels, and the pre-pass and element steps the Hopper backward
// (flash_bwd_sm90_kernel.cuh) shares with them. The default scheme is deterministic, without atomics:
//   1. pre-pass  : D_i = dO_i . O_i (fp32), L_i * log2(e) padded for the tile kernels, and per-block
//                  partial sums of exp(s_h - L_i) D_i for the sink-logit gradient (and, in the
//                  non-deterministic scheme, zeros in the dQ accumulator);
//   2. sink sum  : d s_h = -(fixed-order sum of the partials over batch and blocks), flash_bwd_sink.cu;
//   3. dK/dV     : one block per (batch x kv head, key tile) loops over the query heads of its group
//                  and the query tiles that see the key tile, accumulating dK and dV in registers.
//                  It works on transposed scores (S^T = K Q^T), so P^T and dS^T are register A
//                  operands of dV = P^T dO and dK = dS^T Q;
//   4. dQ        : one block per (batch x query head, query tile) loops over the visible key tiles.
// Every sum runs in a fixed order, so repeated runs give bit-identical gradients.
// The opt-in non-deterministic scheme (FA2's own) replaces 4: the dK/dV kernel, with its own tiles,
// also adds dQ_tile = dS K of every (query tile, key tile) it visits into an fp32 accumulator with
// atomics (flash_bwd_atomic.cuh), and a convert kernel scales and casts that into dq.
#pragma once

#include <cstdint>

#include "ops/attention/cuda/flash_bwd_atomic.cuh"
#include "ops/attention/cuda/flash_fwd_sm80_kernel.cuh"

namespace ft::flash {

// The per-tile element steps of the backward shared by the sm80 and sm90 kernels, each on one 16-row
// block of accumulators (mma / wgmma layout: this thread's rows g (c0, c1) and g + 8 (c2, c3), columns
// 8 j + 2 t (+ 1)).
//
// Transposed scores (rows = keys, columns = queries m0 + col; the dK/dV kernels): S^T -> P^T =
// exp2(S^T scale log2(e) - L log2(e)), zero where the query does not see the key. sL holds L log2(e)
// of the tile's queries; queries[r] the query range of this thread's key rows.
template <int NS>
__device__ __forceinline__ void probs_t(float (&acc_s)[NS][4], const float* sL, const KeyQueries (&queries)[2],
                                        bool full, int m0, int t, float scale_log2) {
#pragma unroll
  for (int j = 0; j < NS; ++j) {
    const float2 l = *reinterpret_cast<const float2*>(sL + 8 * j + 2 * t);  // L of columns 2t, 2t + 1
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_s[j][e] = fast_exp2(acc_s[j][e] * scale_log2 - ((e & 1) ? l.y : l.x));
  }
  if (full) return;  // the block-uniform test once, not per element
#pragma unroll
  for (int j = 0; j < NS; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (!queries[e >> 1].contains(m0 + 8 * j + 2 * t + (e & 1))) acc_s[j][e] = 0.f;
  }
}

// dP^T -> dS^T = P^T (dP^T - D), sD holding D of the tile's queries.
template <int NS>
__device__ __forceinline__ void dscores_t(float (&acc_dp)[NS][4], const float (&p)[NS][4], const float* sD, int t) {
#pragma unroll
  for (int j = 0; j < NS; ++j) {
    const float2 d = *reinterpret_cast<const float2*>(sD + 8 * j + 2 * t);  // D of columns 2t, 2t + 1
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dp[j][e] = p[j][e] * (acc_dp[j][e] - ((e & 1) ? d.y : d.x));
  }
}

// Scores (rows = queries, columns = keys n0 + col; the dQ kernels): S -> P, zero where hidden, with
// lse[r] = L log2(e) and keys[r] the visible keys of this thread's rows.
template <int NS>
__device__ __forceinline__ void probs(float (&acc_s)[NS][4], const float (&lse)[2], const RowKeys (&keys)[2], bool full,
                                      int n0, int t, float scale_log2) {
#pragma unroll
  for (int j = 0; j < NS; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_s[j][e] = fast_exp2(acc_s[j][e] * scale_log2 - lse[e >> 1]);
  }
  if (full) return;  // the block-uniform test once, not per element
#pragma unroll
  for (int j = 0; j < NS; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (!keys[e >> 1].contains(n0 + 8 * j + 2 * t + (e & 1))) acc_s[j][e] = 0.f;
  }
}

// dP -> dS = P (dP - D), dsum[r] = D of this thread's rows.
template <int NS>
__device__ __forceinline__ void dscores(float (&acc_dp)[NS][4], const float (&p)[NS][4], const float (&dsum)[2]) {
#pragma unroll
  for (int j = 0; j < NS; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dp[j][e] = p[j][e] * (acc_dp[j][e] - dsum[e >> 1]);
  }
}

// The pre-pass's lanes per query row: enough for the row's 16-byte chunks (the element count when the
// rows are not 16-byte aligned), at least 32 / (rows per warp) so a warp's rows fill one pass, at most 32.
template <class T, int D>
constexpr int pre_lanes_per_row() {
  constexpr int chunks = D * static_cast<int>(sizeof(T)) / 16, floor = 32 / (kPreRows / (kPreThreads / 32));
  int lanes = floor;
  while (lanes < chunks && lanes < 32) lanes *= 2;
  return lanes;
}

// Pre-pass, one block per (batch x query head, kPreRows padded rows): D_i, L_i log2(e) and the sink
// partials; where dq_accum is set it also zeroes the block's rows of dq_accum, and where dq_order is,
// the block's counter. With dq_order (the Hopper kernel's ordered additions: See Note [Ordered dQ
// additions] in flash_sm90_scheduler.cuh) the first key tile to visit a query tile stores its dQ piece, so
// only the rows that see no key (all of an unvisited tile's) are zeroed.
// Each row's dot product is spread over pre_lanes_per_row lanes reading 16-byte chunks of O and dO where
// both allow it (else elements), and summed over those lanes in a fixed order.
template <class T, int D>
__global__ void __launch_bounds__(kPreThreads) flash_bwd_pre_kernel(const __grid_constant__ FlashBwdParams p) {
  FlashShape s = p.shape;
  const int bh = blockIdx.x, b = bh / s.heads_q, h = bh % s.heads_q;
  const int block = blockIdx.y;  // query rows [block * kPreRows, (block + 1) * kPreRows)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const SeqRows seq = narrow_to_sequence(s, b);  // See Note [Packed sequences]
  const int len_q_pad = scratch_rows_of(p, s);
  if (block * kPreRows >= len_q_pad) {  // past a packed sequence's scratch rows
    if (p.sinks && threadIdx.x == 0) p.sink_partials[static_cast<std::int64_t>(bh) * p.pre_blocks + block] = 0.f;
    return;
  }
  __shared__ float warp_sink[kPreThreads / 32];  // (warps) partial sink sums
  const T* o = p.o.at<const T>(b, h, seq.q0);
  const T* d_o = p.d_o.at<const T>(b, h, seq.q0);
  const float* lse = p.lse.at<const float>(b, h, seq.q0);
  const float sink = p.sinks ? p.sinks[h] : 0.f;
  const std::int64_t scratch = scratch_row(p, b, h, seq.q0);

  if (p.dq_accum) {  // (kPreRows, D) fp32, contiguous and 16-byte aligned (D is a multiple of 16)
    float4* rows =
        reinterpret_cast<float4*>(p.dq_accum + (scratch + static_cast<std::int64_t>(block) * kPreRows) * D);
    const int row0 = block * kPreRows;
    for (int i = threadIdx.x; i < kPreRows * D / 4; i += kPreThreads)
      if (!p.dq_order || row_keys<true>(row0 + i / (D / 4), s).empty()) rows[i] = float4{};
  }
  if (p.dq_order && threadIdx.x == 0) p.dq_order[bh * p.pre_blocks + block] = 0;

  constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements of a 16-byte chunk
  constexpr int kLanes = pre_lanes_per_row<T, D>(), kRowsPerPass = 32 / kLanes;
  constexpr int kRowsPerWarp = kPreRows / (kPreThreads / 32);
  const bool vec = reinterpret_cast<std::uintptr_t>(o) % 16 == 0 && reinterpret_cast<std::uintptr_t>(d_o) % 16 == 0 &&
                   p.o.row_stride % kVec == 0 && p.d_o.row_stride % kVec == 0;
  const int part = lane % kLanes;  // this lane's share of its row
  float sink_part = 0.f;
  for (int r = lane / kLanes; r < kRowsPerWarp; r += kRowsPerPass) {
    const int i = block * kPreRows + warp * kRowsPerWarp + r;
    float dot = 0.f;
    if (i < s.len_q) {
      const T* o_row = o + static_cast<std::int64_t>(i) * p.o.row_stride;
      const T* d_o_row = d_o + static_cast<std::int64_t>(i) * p.d_o.row_stride;
      if (vec) {
        for (int c = part * kVec; c < D; c += kLanes * kVec) {
          alignas(16) T x[kVec], y[kVec];
          *reinterpret_cast<uint4*>(x) = *reinterpret_cast<const uint4*>(o_row + c);
          *reinterpret_cast<uint4*>(y) = *reinterpret_cast<const uint4*>(d_o_row + c);
#pragma unroll
          for (int e = 0; e < kVec; ++e) dot += static_cast<float>(x[e]) * static_cast<float>(y[e]);
        }
      } else {
        for (int c = part; c < D; c += kLanes) dot += static_cast<float>(o_row[c]) * static_cast<float>(d_o_row[c]);
      }
    }
#pragma unroll
    for (int w = kLanes / 2; w >= 1; w /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, w);
    float l2 = INFINITY;
    if (i < s.len_q) {
      const float L = lse[static_cast<std::int64_t>(i) * p.lse.row_stride];
      if (L != -INFINITY) {
        l2 = L * kLog2e;
        if (p.sinks && part == 0) sink_part += expf(sink - L) * dot;
      }
    }
    if (part == 0 && i < len_q_pad) {
      p.dsum[scratch + i] = dot;
      p.lse_log2[scratch + i] = l2;
    }
  }
  if (p.sinks) {
#pragma unroll
    for (int w = 16; w >= kLanes; w /= 2) sink_part += __shfl_xor_sync(0xffffffffu, sink_part, w);
    if (lane == 0) warp_sink[warp] = sink_part;
    __syncthreads();
    if (threadIdx.x == 0) {
      float total = 0.f;
      for (int w = 0; w < kPreThreads / 32; ++w) total += warp_sink[w];
      p.sink_partials[static_cast<std::int64_t>(bh) * p.pre_blocks + block] = total;
    }
  }
}

// Loads kRows fp32 values (16-byte chunks) of a padded scratch row into shared memory.
template <int kRows, int kThreads>
__device__ __forceinline__ void load_row_values(float* smem, const float* gmem, int tid) {
  for (int idx = tid; idx < kRows / 4; idx += kThreads) cp_async_16(smem + 4 * idx, gmem + 4 * idx, true);
}

// The dK/dV kernel's tiles: the deterministic kernel's (dkdv) or, with kAtomicDq, the atomic kernel's,
// which also computes dQ (flash_traits.h).
template <class T, int D, bool kAtomicDq>
struct BwdKvTraits {
  static constexpr FlashTiles kTiles = flash_tiles(sizeof(T), D);
  static constexpr int kLdS = kLd<T, D>;
  // Key tile kN (16 kWarpM rows per warp), query tile kM, head dim split kWarpsD ways.
  static constexpr int kN = kAtomicDq ? kTiles.atomic.block_n : kTiles.dkdv.block_n;
  static constexpr int kM = kAtomicDq ? kTiles.atomic.block_m : kTiles.dkdv.block_m;
  static constexpr int kWarpM = kAtomicDq ? kTiles.atomic.warp_m : kTiles.dkdv.warp_m;
  static constexpr int kWarpsD = kAtomicDq ? kTiles.atomic.warps_d : kTiles.dkdv.warps_d;
  static constexpr int kStages = kAtomicDq ? kTiles.atomic.stages : kTiles.dkdv.stages;
  static constexpr int kThreads = kN / (16 * kWarpM) * kWarpsD * 32;
  // dQ = dS K (kAtomicDq): the (kM, D) tile in kDqWarpsD column groups of kDqCols columns, each warp
  // 16 kDqWarpM rows, kDqChunk columns at a time (bounds its accumulator registers).
  static constexpr int kDqWarpsD = kAtomicDq ? kTiles.atomic.dq_warps_d : 1;
  static constexpr int kDqWarpM = kM / (16 * (kThreads / 32 / kDqWarpsD));
  static constexpr int kDqCols = D / kDqWarpsD;
  static constexpr int kDqChunk = kDqCols <= 96 ? kDqCols : 64;
  static constexpr int kLdDs = kM + 16 / static_cast<int>(sizeof(T));  // padded row of sdS (keys, queries)
  // sK, sV (kN, kLdS) | sQ, sdO (kStages, kM, kLdS) | sL, sD (kStages, kM) fp32 | sdS (kN, kLdDs) if kAtomicDq
  static constexpr int kSmemBytes = (2 * kN + 2 * kStages * kM) * kLdS * static_cast<int>(sizeof(T)) +
                                    2 * kStages * kM * static_cast<int>(sizeof(float)) +
                                    (kAtomicDq ? kN * kLdDs * static_cast<int>(sizeof(T)) : 0);
  static_assert(kN % (16 * kWarpM) == 0 && kM % 16 == 0 && D % (16 * kWarpsD) == 0, "bad dK/dV tiles");
  static_assert(kQueryPad % kM == 0, "bad query padding");
  static_assert(!kAtomicDq || ((kThreads / 32) % kDqWarpsD == 0 && kDqWarpM >= 1 &&
                               kM == 16 * kDqWarpM * (kThreads / 32 / kDqWarpsD) && kDqCols % kDqChunk == 0 &&
                               kDqChunk % 16 == 0),
                "bad atomic dQ split");
};

template <class T, int D>
struct BwdDqTraits {
  static constexpr Sm80DqTiles kTiles = flash_tiles(sizeof(T), D).dq;
  static constexpr int kLdS = kLd<T, D>;
  // Query tile kM (16 kWarpM rows per warp), key tile kN.
  static constexpr int kM = kTiles.block_m, kN = kTiles.block_n, kWarpM = kTiles.warp_m, kStages = kTiles.stages;
  static constexpr int kThreads = kM / (16 * kWarpM) * 32;
  // sQ, sdO (kM, kLdS) | sK, sV (kStages, kN, kLdS)
  static constexpr int kSmemBytes = (2 * kM + 2 * kStages * kN) * kLdS * static_cast<int>(sizeof(T));
  static_assert(kM % (16 * kWarpM) == 0 && kN % 16 == 0, "bad dQ tiles");
  static_assert(kQueryPad % kM == 0 && kQueryPad % kPreRows == 0, "bad query padding");
};

// The body of both dK/dV kernels: one block per (batch x kv head, key tile). With kAtomicDq each
// iteration also stores dS^T in shared memory and adds dS K into the fp32 dQ accumulator.
template <class T, int D, bool kHasMask, bool kAtomicDq>
__device__ __forceinline__ void bwd_dkdv_block(const FlashBwdParams& p) {
  using Tr = BwdKvTraits<T, D, kAtomicDq>;
  constexpr int BN = Tr::kN, BM = Tr::kM, kStages = Tr::kStages, kThreads = Tr::kThreads;
  constexpr int MT = Tr::kWarpM;
  constexpr int kLdS = Tr::kLdS;
  constexpr int kDw = D / Tr::kWarpsD;  // dK/dV columns of one warp
  constexpr int kNtS = BM / 8;          // transposed score tiles (columns = queries)
  constexpr int kNtD = kDw / 8;         // dK/dV tiles of one warp
  FlashShape s = p.shape;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);  // (BN, kLdS)
  T* sV = sK + BN * kLdS;                  // (BN, kLdS)
  T* sQ = sV + BN * kLdS;                  // (kStages, BM, kLdS)
  T* sdO = sQ + kStages * BM * kLdS;       // (kStages, BM, kLdS)
  float* sL = reinterpret_cast<float*>(sdO + kStages * BM * kLdS);  // (kStages, BM) L * log2(e)
  float* sD = sL + kStages * BM;                                    // (kStages, BM) D
  [[maybe_unused]] T* sdS = reinterpret_cast<T*>(sD + kStages * BM);  // (BN, kLdDs) dS^T, kAtomicDq only

  const int n_block = blockIdx.y;  // (causal) key tiles with the most query tiles first
  const int b = blockIdx.x / s.heads_kv, hk = blockIdx.x % s.heads_kv;
  const SeqRows seq = narrow_to_sequence(s, b);  // See Note [Packed sequences]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int warp_row = (warp / Tr::kWarpsD) * 16 * MT, warp_col = (warp % Tr::kWarpsD) * kDw;
  const int n0 = n_block * BN;
  const int keys_valid = s.len_k - n0;
  if (keys_valid <= 0) return;

  const T* k = p.k.at<const T>(b, hk, seq.k0 + n0);
  const T* v = p.v.at<const T>(b, hk, seq.k0 + n0);
  load_tile<T, BN, D, kThreads>(sK, k, p.k.row_stride, keys_valid, s.vec16, tid);
  load_tile<T, BN, D, kThreads>(sV, v, p.v.row_stride, keys_valid, s.vec16, tid);
  cp_async_commit();

  // Query tiles that see some key of this tile.
  const TileSpan span = key_tile_queries<kHasMask, BN, BM>(n0, s);
  const int m_first = span.first, m_count = span.count;
  const int n_iters = m_count * s.group;
  // The query range of this thread's key rows n0 + warp_row + 16 m + g + 8 r.
  KeyQueries queries[MT][2];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    queries[m][0] = KeyQueries(key_queries<kHasMask>(n0 + warp_row + 16 * m + g, s));
    queries[m][1] = KeyQueries(key_queries<kHasMask>(n0 + warp_row + 16 * m + g + 8, s));
  }

  auto load_q = [&](int it) {
    if (it < n_iters) {
      const int h = hk * s.group + it / m_count;
      const int m0 = (m_first + it % m_count) * BM;
      const int slot = it % kStages;
      const T* q = p.q.at<const T>(b, h, seq.q0 + m0);
      const T* d_o = p.d_o.at<const T>(b, h, seq.q0 + m0);
      load_tile<T, BM, D, kThreads>(sQ + slot * BM * kLdS, q, p.q.row_stride, s.len_q - m0, s.vec16, tid);
      load_tile<T, BM, D, kThreads>(sdO + slot * BM * kLdS, d_o, p.d_o.row_stride, s.len_q - m0, s.vec16, tid);
      const std::int64_t row = scratch_row(p, b, h, seq.q0) + m0;
      load_row_values<BM, kThreads>(sL + slot * BM, p.lse_log2 + row, tid);
      load_row_values<BM, kThreads>(sD + slot * BM, p.dsum + row, tid);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) load_q(st);

  float acc_dk[MT][kNtD][4] = {};  // dK of this thread's key rows, columns warp_col..
  float acc_dv[MT][kNtD][4] = {};

  for (int it = 0; it < n_iters; ++it) {
    ring_step_begin<kStages>(it, load_q);
    const int slot = it % kStages;
    const T* sQt = sQ + slot * BM * kLdS;
    const T* sdOt = sdO + slot * BM * kLdS;
    const float* sLt = sL + slot * BM;
    const float* sDt = sD + slot * BM;
    const int m0 = (m_first + it % m_count) * BM;

    // P^T = exp2(K Q^T * scale log2(e) - L log2(e)), zero where the key is not visible.
    float acc_s[MT][kNtS][4] = {};
    gemm_ss<T, D, MT, kNtS>(acc_s, sK, kLdS, warp_row, sQt, kLdS, lane);
    const bool full = tile_full(row_keys<kHasMask>(m0, s), row_keys<kHasMask>(min(m0 + BM, s.len_q) - 1, s), n0, BN,
                                s.len_k);
#pragma unroll
    for (int m = 0; m < MT; ++m) probs_t(acc_s[m], sLt, queries[m], full, m0, t, s.scale_log2);

    // dP^T = V dO^T
    float acc_dp[MT][kNtS][4] = {};
    gemm_ss<T, D, MT, kNtS>(acc_dp, sV, kLdS, warp_row, sdOt, kLdS, lane);

    // dV += P^T dO
    gemm_rs<T, MT, kNtS, kNtD>(acc_dv, acc_s, sdOt, kLdS, warp_col, lane);

    // dS^T = P^T (dP^T - D); dK += dS^T Q
#pragma unroll
    for (int m = 0; m < MT; ++m) dscores_t(acc_dp[m], acc_s[m], sDt, t);
    if constexpr (kAtomicDq) {  // dS^T (rounded to T) -> sdS, by one of the kWarpsD warps holding these rows
      if (warp % Tr::kWarpsD == 0) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
          store_acc<T, kNtS>(sdS, Tr::kLdDs, warp_row + 16 * m, 0, acc_dp[m], 1.f, 1.f, lane);
      }
    }
    gemm_rs<T, MT, kNtS, kNtD>(acc_dk, acc_dp, sQt, kLdS, warp_col, lane);
    if constexpr (kAtomicDq) {  // dQ += dS K (the next iteration's first barrier precedes its sdS writes)
      __syncthreads();  // sdS is complete
      const int h = hk * s.group + it / m_count;
      float* dq_accum = p.dq_accum + (scratch_row(p, b, h, seq.q0) + m0) * D;
      accumulate_dq_tile<T, D, Tr>(dq_accum, s.len_q - m0, sdS, sK, warp, lane);
    } else {
      ring_step_end<kStages>();
    }
  }

  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    store_acc<T, kNtD>(sK, kLdS, warp_row + 16 * m, warp_col, acc_dk[m], s.scale, s.scale, lane);
    store_acc<T, kNtD>(sV, kLdS, warp_row + 16 * m, warp_col, acc_dv[m], 1.f, 1.f, lane);
  }
  __syncthreads();
  T* dk = p.dk.at<T>(b, hk, seq.k0 + n0);
  T* dv = p.dv.at<T>(b, hk, seq.k0 + n0);
  store_tile<T, BN, D, kThreads>(dk, p.dk.row_stride, sK, keys_valid, s.vec16, tid);
  store_tile<T, BN, D, kThreads>(dv, p.dv.row_stride, sV, keys_valid, s.vec16, tid);
}

template <class T, int D, bool kHasMask>
__global__ void __launch_bounds__(BwdKvTraits<T, D, false>::kThreads)
    flash_bwd_dkdv_kernel(const __grid_constant__ FlashBwdParams p) {
  bwd_dkdv_block<T, D, kHasMask, false>(p);
}

// The non-deterministic scheme's only tile kernel: dK, dV and the atomic dQ accumulation.
template <class T, int D, bool kHasMask>
__global__ void __launch_bounds__(BwdKvTraits<T, D, true>::kThreads)
    flash_bwd_dkdv_dq_atomic_kernel(const __grid_constant__ FlashBwdParams p) {
  bwd_dkdv_block<T, D, kHasMask, true>(p);
}

template <class T, int D, bool kHasMask>
__global__ void __launch_bounds__(BwdDqTraits<T, D>::kThreads)
    flash_bwd_dq_kernel(const __grid_constant__ FlashBwdParams p) {
  using Tr = BwdDqTraits<T, D>;
  constexpr int BM = Tr::kM, BN = Tr::kN, kStages = Tr::kStages, kThreads = Tr::kThreads;
  constexpr int MT = Tr::kWarpM;
  constexpr int kLdS = Tr::kLdS;
  constexpr int kNtS = BN / 8;
  constexpr int kNtQ = D / 8;
  FlashShape s = p.shape;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // (BM, kLdS)
  T* sdO = sQ + BM * kLdS;                 // (BM, kLdS)
  T* sK = sdO + BM * kLdS;                 // (kStages, BN, kLdS)
  T* sV = sK + kStages * BN * kLdS;        // (kStages, BN, kLdS)

  const int m_block = gridDim.y - 1 - blockIdx.y;  // longest (causal) tiles of every head first
  const int bh = blockIdx.x, b = bh / s.heads_q, h = bh % s.heads_q, hk = h / s.group;
  const SeqRows seq = narrow_to_sequence(s, b);  // See Note [Packed sequences]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int m0 = m_block * BM;
  const int rows_valid = s.len_q - m0;
  if (rows_valid <= 0) return;
  const int warp_row = warp * 16 * MT;

  const T* q = p.q.at<const T>(b, h, seq.q0 + m0);
  const T* d_o = p.d_o.at<const T>(b, h, seq.q0 + m0);
  const T* k = p.k.at<const T>(b, hk, seq.k0);
  const T* v = p.v.at<const T>(b, hk, seq.k0);

  const KeyRange tile_first = row_keys<kHasMask>(m0, s);
  const KeyRange tile_last = row_keys<kHasMask>(min(m0 + BM, s.len_q) - 1, s);
  const KeyTiles tiles = key_tiles(tile_first, tile_last, BN);
  const int n_iters = tiles.count();
  // This thread's rows m0 + warp_row + 16 m + g + 8 r: visible keys, L log2(e) and D (padded scratch).
  RowKeys keys[MT][2];
  float lse[MT][2], dsum[MT][2];
  const std::int64_t scratch = scratch_row(p, b, h, seq.q0);
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = m0 + warp_row + 16 * m + g + 8 * r;
      keys[m][r] = RowKeys(row_keys<kHasMask>(row, s));
      lse[m][r] = p.lse_log2[scratch + row];
      dsum[m][r] = p.dsum[scratch + row];
    }
  }

  auto load_kv = [&](int it) {
    prefetch_kv<T, BN, D, kStages, kThreads>(sK, sV, k, p.k.row_stride, v, p.v.row_stride, tiles, it, s.len_k, s.vec16,
                                             tid);
  };

  load_tile<T, BM, D, kThreads>(sQ, q, p.q.row_stride, rows_valid, s.vec16, tid);
  load_tile<T, BM, D, kThreads>(sdO, d_o, p.d_o.row_stride, rows_valid, s.vec16, tid);
  cp_async_commit();
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) load_kv(st);

  float acc_dq[MT][kNtQ][4] = {};

  for (int it = 0; it < n_iters; ++it) {
    ring_step_begin<kStages>(it, load_kv);
    const int slot = it % kStages;
    const T* sKt = sK + slot * BN * kLdS;
    const T* sVt = sV + slot * BN * kLdS;
    const int n0 = tiles.tile(it) * BN;

    float acc_s[MT][kNtS][4] = {};  // P = exp2(Q K^T * scale log2(e) - L log2(e))
    gemm_ss<T, D, MT, kNtS>(acc_s, sQ, kLdS, warp_row, sKt, kLdS, lane);
    const bool full = tile_full(tile_first, tile_last, n0, BN, s.len_k);
#pragma unroll
    for (int m = 0; m < MT; ++m) probs(acc_s[m], lse[m], keys[m], full, n0, t, s.scale_log2);
    float acc_dp[MT][kNtS][4] = {};  // dP = dO V^T, then dS = P (dP - D)
    gemm_ss<T, D, MT, kNtS>(acc_dp, sdO, kLdS, warp_row, sVt, kLdS, lane);
#pragma unroll
    for (int m = 0; m < MT; ++m) dscores(acc_dp[m], acc_s[m], dsum[m]);
    gemm_rs<T, MT, kNtS, kNtQ>(acc_dq, acc_dp, sKt, kLdS, 0, lane);  // dQ += dS K
    ring_step_end<kStages>();
  }

  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int m = 0; m < MT; ++m) store_acc<T, kNtQ>(sQ, kLdS, warp_row + 16 * m, 0, acc_dq[m], s.scale, s.scale, lane);
  __syncthreads();
  T* dq = p.dq.at<T>(b, h, seq.q0 + m0);
  store_tile<T, BM, D, kThreads>(dq, p.dq.row_stride, sQ, rows_valid, s.vec16, tid);
}

}  // namespace ft::flash
