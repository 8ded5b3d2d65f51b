// flash_fwd_sm90_kernel.cuh — internal (CUDA builds only): the Hopper (sm_90a) FlashAttention forward kernel,
// 16-bit inputs, head dims 64 and 128, warp-specialised. One block per (batch x query head, query tile), the
// heads launched in L2-sized sections (section_head): warpgroup 0 is the producer — one thread issues TMA
// copies of the Q tile and of every visited K and V tile into a ring of kStages 128-byte-swizzled buffers,
// after the consumers free a slot — and keeps 24 registers; each consumer warpgroup owns 64 query rows and
// takes the freed registers. A consumer waits on a slot's mbarriers, runs S = Q K^T as wgmma with both
// operands in shared memory, rounds P to the input dtype in registers, runs O += P V with P from registers
// and V read N-major, then frees the slot. Where the tile table says so (kOverlap, d=128) the loop is
// software-pipelined: the next tile's QK^T is issued before this tile's PV, so a warpgroup's softmax
// overlaps its own products; with kPingPong the two consumer warpgroups also take turns issuing their
// products (named barriers), so one's softmax runs while the other's products hold the tensor cores.
// Otherwise warpgroups never wait for each other. Masking, the online softmax on exp2 and the final
// normalisation with sink logits are the sm80 kernel's own steps (flash_fwd_kernel.cuh), so both paths
// compute the same function; with kTensorRowSums (d=64) the rows of P are summed by the P V product, over
// a panel of ones beside V, so the sums are of P as rounded for that product (the sm80 kernel sums P in
// fp32). The output tile goes back through the warpgroup's own Q rows and a TMA store.
#pragma once

#include <cstdint>

#include "ops/attention/cuda/flash_fwd_kernel.cuh"
#include "ops/attention/cuda/flash_sm90_pipeline.cuh"
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

// The mbarriers of the forward's K/V ring (STAGES slots of K and V tiles): K and V of
// a slot land on their own (k_full, v_full), so QK^T can start before V arrives, and every consumer
// thread frees the slot (slot_free). One thread, before the block barrier.
template <int STAGES>
__device__ __forceinline__ void init_kv_ring(std::uint64_t* k_full, std::uint64_t* v_full, std::uint64_t* slot_free,
                                             int consumer_threads) {
  for (int i = 0; i < STAGES; ++i) {
    mbar_init(&k_full[i], 1);
    mbar_init(&v_full[i], 1);
    mbar_init(&slot_free[i], consumer_threads);
  }
}

// The TMA maps of the forward's operands (flash_tma.h), passed beside FlashFwdParams.
struct FwdTmaMaps {
  TmaTensor q, k, v, o;  // boxes of (64 rows of a consumer, or kBlockN rows) x 64 columns
};

// The grid head (batch x head) of a block of a sectioned grid (section heads, tiles, sections): blocks
// launch x fastest, then y, then z, so one section's tiles go before the next section's, and within a
// section tile by tile over its heads (flash_launch_template.cuh, section_grid). The last section may
// hold fewer heads: its other blocks have none (-1) and return at once.
__device__ __forceinline__ int section_head(int grid_heads) {
  const int bh = blockIdx.z * gridDim.x + blockIdx.x;
  return bh < grid_heads ? bh : -1;
}

template <class T, int D>
struct FwdTraits {
  static constexpr FlashSm90Tiles kTiles = flash_sm90_tiles(D);
  static constexpr int kConsumers = kTiles.fwd_wg, kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kTiles.fwd_n, kStages = kTiles.fwd_st;
  static constexpr bool kOverlap = kTiles.fwd_ov;  // next tile's QK^T issued before this one's PV
  static constexpr bool kPingPong = kTiles.fwd_pp;  // the 2 consumer warpgroups issue their products in turn
  static_assert(!kPingPong || (kOverlap && kConsumers == 2), "ping-pong needs the overlapped loop and 2 consumers");
  // The tensor cores sum the rows of P: O += P V runs 8 columns wider, over a panel of ones after V
  // (sOnes), and those columns of the accumulator hold the row sums, rescaled with O.
  static constexpr bool kTensorRowSums = kTiles.fwd_ts;
  static_assert(!kTensorRowSums || D == 64, "row sums on the tensor cores need d = 64 (a 72-column P V)");
  static constexpr int kAccTiles = D / 8 + (kTensorRowSums ? 1 : 0);  // accumulator column tiles of O
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kThreads = 128 + kConsumerThreads;  // producer warpgroup first
  // Registers per thread after reallocation (multiples of 8): the producer keeps 24, the consumers take
  // what it gives back (consumer_registers).
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = consumer_registers(kThreads, kProducerRegs);
  static constexpr int kTileBytes = kBlockN * D * static_cast<int>(sizeof(T));  // one K or V tile
  // sQ (kBlockM, D) | sK (kStages, kBlockN, D) | sV (kStages, kBlockN, D) | sOnes (kBlockN, 64) with
  // kTensorRowSums, swizzled, then the mbarriers: Q landed, K and V of each slot landed, each slot free.
  // O is staged in each consumer's own Q rows.
  static constexpr int kBarriers = 1 + 3 * kStages;
  static constexpr int kOnesElems = kTensorRowSums ? kBlockN * kPanel : 0;
  static constexpr int kSmemBytes =
      ((kBlockM + 2 * kStages * kBlockN) * D + kOnesElems) * static_cast<int>(sizeof(T)) + kBarriers * 8 +
      kSmemSlack;
  static_assert(D % kPanel == 0 && kBlockN % 16 == 0 && kBlockN <= 256 && kStages >= 2, "bad sm90 forward tiles");
};

template <class T, int D, bool kHasMask>
__global__ void __launch_bounds__(FwdTraits<T, D>::kThreads, 1)
    flash_fwd_sm90_kernel(const __grid_constant__ FlashFwdParams p, const __grid_constant__ FwdTmaMaps maps) {
#if FT_SM90_DEVICE
  using Tr = FwdTraits<T, D>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, kStages = Tr::kStages;
  constexpr int kNtS = BN / 8;  // score tiles of a warp's 16 rows
  constexpr int kNtO = Tr::kAccTiles;  // output tiles (and the row sums' with kTensorRowSums)
  const FlashShape& s = p.shape;

  extern __shared__ unsigned char smem_raw[];
  T* sQ = aligned_smem<T>(smem_raw);  // (BM, D) swizzled
  T* sK = sQ + BM * D;                // (kStages, BN, D) swizzled
  T* sV = sK + kStages * BN * D;      // (kStages, BN, D) swizzled
  T* sOnes = sV + kStages * BN * D;   // (BN, 64) of ones with kTensorRowSums
  std::uint64_t* q_full = reinterpret_cast<std::uint64_t*>(sOnes + Tr::kOnesElems);
  std::uint64_t* k_full = q_full + 1;          // (kStages)
  std::uint64_t* v_full = k_full + kStages;    // (kStages)
  std::uint64_t* slot_free = v_full + kStages;  // (kStages)

  const int bh = section_head(s.batch * s.heads_q);
  if (bh < 0) return;
  const int b = bh / s.heads_q, h = bh % s.heads_q, hk = h / s.group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // Query tiles end at len_q rounded up to 64 rows, longest (causal) tiles of the section's heads first:
  // where BM does not divide that, the partial tile is the first, whose rows see the fewest keys. Its
  // rows before 0 come in whole warpgroups (TMA stores take no negative rows), read as zeros, never
  // written.
  const int m0 = (s.len_q + 63) / 64 * 64 - (blockIdx.y + 1) * BM;

  const KeyRange tile_first = row_keys<kHasMask>(max(m0, 0), s);
  const KeyRange tile_last = row_keys<kHasMask>(min(m0 + BM, s.len_q) - 1, s);
  const KeyTiles tiles = key_tiles(tile_first, tile_last, BN);
  const RowKeys first_keys(tile_first), last_keys(tile_last);  // 32-bit, for the test of every key tile
  const int n_iters = tiles.count();

  if (tid == 0) {
    mbar_init(q_full, 1);
    init_kv_ring<kStages>(k_full, v_full, slot_free, Tr::kConsumerThreads);
    mbar_init_fence();
  }
  if constexpr (Tr::kTensorRowSums) {
    const std::uint32_t ones2 = Mma<T>::pack(1.f, 1.f);
    for (int i = tid; i < Tr::kOnesElems / 8; i += Tr::kThreads)
      reinterpret_cast<uint4*>(sOnes)[i] = uint4{ones2, ones2, ones2, ones2};
    fence_proxy_async();  // generic-proxy writes, read by wgmma
  }
  __syncthreads();

  if (warp < 4) {  // ---- producer warpgroup: one thread issues every copy ----
    setmaxnreg_dec<Tr::kProducerRegs>();
    if (tid != 0) return;
    tma_prefetch_map(maps.k);
    tma_prefetch_map(maps.v);
    mbar_arrive_expect_tx(q_full, BM * D * sizeof(T));
    tma_load_tile<T, BM, D>(sQ, maps.q, m0, h, b, q_full);
    RingPosition<kStages> pos;
    for (int it = 0; it < n_iters; ++it, pos.advance()) {
      const int n0 = tiles.tile(it) * BN;
      mbar_wait(&slot_free[pos.slot], pos.phase ^ 1);
      mbar_arrive_expect_tx(&k_full[pos.slot], Tr::kTileBytes);
      tma_load_tile<T, BN, D>(sK + pos.slot * BN * D, maps.k, n0, hk, b, &k_full[pos.slot]);
      mbar_arrive_expect_tx(&v_full[pos.slot], Tr::kTileBytes);
      tma_load_tile<T, BN, D>(sV + pos.slot * BN * D, maps.v, n0, hk, b, &v_full[pos.slot]);
    }
    return;
  }

  // ---- consumer warpgroups ----
  setmaxnreg_inc<Tr::kConsumerRegs>();
  const int ctid = tid - 128, cwarp = warp - 4;
  const int wg = warp_uniform(cwarp / 4);
  const int g = lane >> 2, t = lane & 3;
  const int wg_row = wg * 64;        // first tile row of this warpgroup
  const int warp_row = cwarp * 16;   // first tile row of this warp
  const float sl = fmaxf(fabsf(s.scale_log2), 1e-30f);  // as the sm80 kernel: a negative scale moves into Q

  mbar_wait(q_full, 0);
  if (s.scale_log2 < 0.f) {  // S = |scale| (-Q) K^T: flip the sign bits of this warpgroup's rows
#pragma unroll
    for (int pn = 0; pn < D / kPanel; ++pn) {
      uint4* rows = reinterpret_cast<uint4*>(sQ + pn * BM * kPanel + wg_row * kPanel);  // 64 rows x 128 bytes
      for (int i = ctid % 128; i < 64 * kPanelRowBytes / 16; i += 128) {
        uint4 x = rows[i];
        x.x ^= 0x80008000u, x.y ^= 0x80008000u, x.z ^= 0x80008000u, x.w ^= 0x80008000u;
        rows[i] = x;
      }
    }
    fence_proxy_async();
    named_barrier_sync(1 + wg, 128);
  }

  float acc_o[kNtO][4] = {};  // O of this thread's rows (unnormalised), then with kTensorRowSums their sums
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  // S = Q K^T of the tile in `slot` (unscaled; the first k step overwrites) and O += P V, each issued as
  // one wgmma group; their commits and waits are the loops' own.
  auto issue_scores = [&](float (&acc_s)[kNtS][4], int slot) {
    gemm_ss_kmajor<T, BN, D>(acc_s, sQ, BM, wg_row, sK + slot * BN * D);
    wgmma_commit();
  };
  auto issue_pv = [&](const std::uint32_t (&pa)[BN / 16][4], int slot) {
    if constexpr (Tr::kTensorRowSums)  // the second panel of B is sOnes
      gemm_rs_nmajor<T, D + 8, BN>(acc_o, pa, sV + slot * BN * D, smem_u32(sOnes) - smem_u32(sV + slot * BN * D));
    else
      gemm_rs_nmajor<T, D, BN>(acc_o, pa, sV + slot * BN * D);
    wgmma_commit();
  };
  // Waits for every product issued (the last one a P V of the tile in `slot`), then frees the slot.
  auto retire_pv = [&](int slot) {
    wgmma_wait<0>();
    fence_accumulators(acc_o);
    mbar_arrive(&slot_free[slot]);
  };
  // Masks the scores of key tile `it` and turns them into P; `correction` is O's rescaling factor.
  auto softmax_tile = [&](float (&acc_s)[kNtS][4], int it, float (&correction)[2]) {
    const int n0 = tiles.tile(it) * BN;
    if (!tile_full(first_keys, last_keys, n0, BN, s.len_k)) mask_scores<kHasMask>(acc_s, m0 + warp_row + g, n0, t, s);
    softmax_scores<!Tr::kTensorRowSums>(acc_s, row_max, row_sum, sl, correction);
  };

  // Ping-pong: warpgroup wg issues its products after bar.sync on barrier 3 + wg, then arrives on the
  // other's, so one warpgroup's softmax runs while the other's products hold the tensor cores. Both take
  // n_iters + 1 turns; warpgroup 1 opens warpgroup 0's first turn and skips its arrival after its last.
  // A turn: the fence, the products `issue` issues and, with ping-pong, the turn barriers around them;
  // `last` marks the final turn.
  auto issue_in_turn = [&](bool last, auto&& issue) {
    if constexpr (Tr::kPingPong) named_barrier_sync(3 + wg, 2 * 128);
    wgmma_fence();
    issue();
    if constexpr (Tr::kPingPong) {
      if (!(last && wg == 1)) named_barrier_arrive(3 + (1 - wg), 2 * 128);
    }
  };
  if (Tr::kPingPong && wg == 1 && n_iters > 0) named_barrier_arrive(3, 2 * 128);

  float acc_s[kNtS][4];
  std::uint32_t pa[BN / 16][4];  // P rounded to T, as A fragments of the k steps over a tile's keys
  float correction[2];
  auto round_p = [&] {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) a_from_acc<T>(pa[kk], acc_s, kk);
  };
  RingPosition<kStages> pos;
  if constexpr (Tr::kOverlap) {
    // Software-pipelined: tile it's S = Q K^T is issued before tile it-1's O += P V, so this warpgroup's
    // softmax of tile it runs while its own P V is on the tensor cores. O is rescaled only after that
    // product lands. P of tile it-1 and S of tile it are live together, hence the register budget.
    if (n_iters > 0) {
      mbar_wait(&k_full[pos.slot], pos.phase);
      issue_in_turn(false, [&] { issue_scores(acc_s, pos.slot); });
      wgmma_wait<0>();
      fence_accumulators(acc_s);
      softmax_tile(acc_s, 0, correction);  // O is still zero: nothing to rescale
      round_p();
    }
    for (int it = 1; it < n_iters; ++it) {
      const RingPosition<kStages> prev = pos;
      pos.advance();
      mbar_wait_both(&k_full[pos.slot], pos.phase, &v_full[prev.slot], prev.phase);
      issue_in_turn(false, [&] {
        issue_scores(acc_s, pos.slot);
        issue_pv(pa, prev.slot);
      });
      wgmma_wait<1>();  // S of tile it landed; P V of tile it-1 may still run
      fence_accumulators(acc_s);
      softmax_tile(acc_s, it, correction);
      schedule_boundary(row_sum[0]);  // else the wait for P V moves up, before the softmax
      retire_pv(prev.slot);
      rescale_rows(acc_o, correction);
      round_p();
    }
    if (n_iters > 0) {
      mbar_wait(&v_full[pos.slot], pos.phase);
      issue_in_turn(true, [&] { issue_pv(pa, pos.slot); });
      retire_pv(pos.slot);
    }
  } else {
    for (int it = 0; it < n_iters; ++it, pos.advance()) {
      mbar_wait(&k_full[pos.slot], pos.phase);
      wgmma_fence();
      issue_scores(acc_s, pos.slot);
      wgmma_wait<0>();
      fence_accumulators(acc_s);
      softmax_tile(acc_s, it, correction);
      rescale_rows(acc_o, correction);
      round_p();
      mbar_wait(&v_full[pos.slot], pos.phase);
      wgmma_fence();
      issue_pv(pa, pos.slot);
      retire_pv(pos.slot);
    }
  }

  float factor[2], lse[2];
  if constexpr (Tr::kTensorRowSums) {  // columns D.. of rows g and g + 8 (all alike): the whole rows' sums
    row_sum[0] = acc_o[kNtO - 1][0];
    row_sum[1] = acc_o[kNtO - 1][2];
  }
  finish_rows<Tr::kTensorRowSums>(row_max, row_sum, p.sinks, h, factor, lse);

  // O -> this warpgroup's Q rows (no longer read) -> global.
  store_rows_tma<T, BM, D>(sQ, wg_row, warp_row, acc_o, factor[0], factor[1], maps.o, m0, h, b, s.len_q, 1 + wg,
                           ctid % 128 == 0, lane);
  float* lse_out = p.lse.at<float>(b, h);
  write_lse(lse_out, p.lse.row_stride, m0 + warp_row + g, s.len_q, lse, t);
#endif
}

}  // namespace ft::flash::sm90
