// flash_fwd_sm90_kernel.cuh — internal (CUDA builds only): the Hopper (sm_90a) FlashAttention forward
// kernel, 16-bit inputs, head dims 64 and 128. One block per (batch x query head, query tile); each
// warpgroup owns 64 query rows. Q, K and V tiles are copied with cp.async into 128-byte-swizzled shared
// memory (K/V through a ring of kStages buffers, one barrier per key tile); S = Q K^T runs as wgmma with
// both operands in shared memory, P is rounded to the input dtype in registers and O += P V runs as wgmma
// with P from registers and V read N-major. Masking, the online softmax on exp2 and the final
// normalisation with sink logits are the sm80 kernel's own steps (flash_fwd_kernel.cuh), so both paths
// compute the same function.
#pragma once

#include <cstdint>

#include "ops/attention/cuda/flash_fwd_kernel.cuh"
#include "ops/attention/cuda/flash_sm90_ptx.cuh"

namespace ft::flash::sm90 {

// The kernels ask for this much more dynamic shared memory and start their tiles at the first 1024-byte
// boundary (the swizzle pattern repeats every 1024 bytes of shared address space).
inline constexpr int kSmemSlack = kGroupBytes;

template <class T>
__device__ __forceinline__ T* aligned_smem(unsigned char* raw) {
  const std::uint32_t misalign = smem_u32(raw) % kGroupBytes;
  return reinterpret_cast<T*>(raw + (misalign ? kGroupBytes - misalign : 0));
}

// Step `it` of a K/V prefetch ring over the visited key tiles: K and V rows from key tiles.tile(it) * BN
// -> ring slot it % STAGES of sK, sV (swizzled; rows past len_k zero); nothing past the last tile. One
// cp.async commit group either way.
template <class T, int BN, int D, int STAGES, int THREADS>
__device__ __forceinline__ void prefetch_kv_sw128(T* sK, T* sV, const T* k, std::int64_t k_ld, const T* v,
                                                  std::int64_t v_ld, const KeyTiles& tiles, int it, int len_k, int tid) {
  if (it < tiles.count()) {
    const int n0 = tiles.tile(it) * BN;
    const int slot = (it % STAGES) * BN * D;
    load_tile_sw128<T, BN, D, THREADS>(sK + slot, k + n0 * k_ld, k_ld, len_k - n0, tid);
    load_tile_sw128<T, BN, D, THREADS>(sV + slot, v + n0 * v_ld, v_ld, len_k - n0, tid);
  }
  cp_async_commit();
}

template <class T, int D>
struct FwdTraits {
  static constexpr FlashSm90Tiles kTiles = flash_sm90_tiles(D);
  static constexpr int kWarpGroups = kTiles.fwd_wg, kBlockM = 64 * kWarpGroups;
  static constexpr int kBlockN = kTiles.fwd_n, kStages = kTiles.fwd_st;
  static constexpr int kThreads = 128 * kWarpGroups;
  // sQ (kBlockM, D) | sK (kStages, kBlockN, D) | sV (kStages, kBlockN, D), swizzled; after the loop O is
  // staged in sK's space as a padded (kBlockM, kLd) tile.
  static constexpr int kSmemBytes = (kBlockM + 2 * kStages * kBlockN) * D * static_cast<int>(sizeof(T)) + kSmemSlack;
  static_assert(D % kPanel == 0 && kBlockN % 16 == 0 && kStages >= 2, "bad sm90 forward tiles");
  static_assert(kBlockM * kLd<T, D> <= 2 * kStages * kBlockN * D, "output staging does not fit the K/V buffers");
};

template <class T, int D, bool kHasMask>
__global__ void __launch_bounds__(FwdTraits<T, D>::kThreads, 1)
    flash_fwd_sm90_kernel(const __grid_constant__ FlashFwdParams p) {
#if FT_SM90_DEVICE
  using Tr = FwdTraits<T, D>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, kStages = Tr::kStages, kThreads = Tr::kThreads;
  constexpr int kNtS = BN / 8;  // score tiles of a warp's 16 rows
  constexpr int kNtO = D / 8;   // output tiles
  const FlashShape& s = p.shape;

  extern __shared__ unsigned char smem_raw[];
  T* sQ = aligned_smem<T>(smem_raw);  // (BM, D) swizzled
  T* sK = sQ + BM * D;                // (kStages, BN, D) swizzled
  T* sV = sK + kStages * BN * D;      // (kStages, BN, D) swizzled

  const int m_block = gridDim.y - 1 - blockIdx.y;  // longest (causal) tiles of every head first
  const int b = blockIdx.x / s.heads_q, h = blockIdx.x % s.heads_q, hk = h / s.group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int wg_row = (warp / 4) * 64;  // first tile row of this warpgroup
  const int warp_row = warp * 16;      // first tile row of this warp
  const int m0 = m_block * BM;
  const int rows_valid = s.len_q - m0;

  const T* q = p.q.at<const T>(b, h, m0);
  const T* k = p.k.at<const T>(b, hk);
  const T* v = p.v.at<const T>(b, hk);

  const KeyRange tile_first = row_keys<kHasMask>(m0, s);
  const KeyRange tile_last = row_keys<kHasMask>(min(m0 + BM, s.len_q) - 1, s);
  const KeyTiles tiles = key_tiles(tile_first, tile_last, BN);
  const int n_iters = tiles.count();
  const float sl = fmaxf(fabsf(s.scale_log2), 1e-30f);  // as the sm80 kernel: a negative scale moves into Q

  auto load_kv = [&](int it) {
    prefetch_kv_sw128<T, BN, D, kStages, kThreads>(sK, sV, k, p.k.row_stride, v, p.v.row_stride, tiles, it, s.len_k,
                                                   tid);
  };

  load_tile_sw128<T, BM, D, kThreads>(sQ, q, p.q.row_stride, rows_valid, tid);
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) load_kv(st);  // Q joins the first group
  if (s.scale_log2 < 0.f) {  // S = |scale| (-Q) K^T; the loop's first fence and barrier order these writes
    cp_async_wait<0>();
    __syncthreads();
    for (int i = tid; i < BM * D; i += kThreads) sQ[i] = -sQ[i];
  }

  float acc_o[kNtO][4] = {};  // O of this thread's rows (unnormalised)
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

  for (int it = 0; it < n_iters; ++it) {
    ring_step_begin<kStages, true>(it, load_kv);
    const int slot = it % kStages;
    const T* sKt = sK + slot * BN * D;
    const T* sVt = sV + slot * BN * D;
    const int n0 = tiles.tile(it) * BN;

    float acc_s[kNtS][4];  // S = Q K^T, unscaled (the first k step overwrites)
    wgmma_fence();
    gemm_ss_kmajor<T, BN, D>(acc_s, sQ, BM, wg_row, sKt);
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(acc_s);

    if (!tile_full(tile_first, tile_last, n0, BN, s.len_k)) mask_scores<kHasMask>(acc_s, m0 + warp_row + g, n0, t, s);
    online_softmax(acc_s, acc_o, row_max, row_sum, sl);

    std::uint32_t pa[BN / 16][4];  // P rounded to T, as A fragments of the k steps over this tile's keys
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) a_from_acc<T>(pa[kk], acc_s, kk);
    wgmma_fence();
    gemm_rs_nmajor<T, D, BN>(acc_o, pa, sVt);
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(acc_o);
  }

  float factor[2], lse[2];
  finish_rows(row_max, row_sum, p.sinks, h, factor, lse);

  cp_async_wait<0>();
  __syncthreads();
  T* sO = sK;  // (BM, kLd) padded staging of the output tile
  store_acc<T, kNtO>(sO, kLd<T, D>, warp_row, 0, acc_o, factor[0], factor[1], lane);
  __syncthreads();
  T* o = p.o.at<T>(b, h, m0);
  store_tile<T, BM, D, kThreads>(o, p.o.row_stride, sO, rows_valid, true, tid);
  float* lse_out = p.lse.at<float>(b, h);
  write_lse(lse_out, p.lse.row_stride, m0 + warp_row + g, s.len_q, lse, t);
#endif
}

}  // namespace ft::flash::sm90
