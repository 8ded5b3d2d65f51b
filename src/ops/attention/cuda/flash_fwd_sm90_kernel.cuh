// flash_fwd_sm90_kernel.cuh — internal (CUDA builds only): the Hopper (sm_90a) FlashAttention forward kernel,
// 16-bit inputs, head dims 64, 80, 96, 128 and 256 (80 and 96 over zero-padded columns: See Note [Padded head
// dims] in flash_traits.h), warp-specialised and persistent. One block per SM takes query tiles (a
// batch x query head's kBlockM rows) one after another: the first its own index, then the next from a counter
// in global memory, in the order of FwdTileOrder (launch sections of heads, longest causal tiles first; see
// Note [Persistent forward tiles] in flash_sm90_scheduler.cuh). Warpgroup 0 is the producer — one thread claims
// the tiles and issues TMA copies of each tile's Q and of every visited K and V tile into a ring of kStages
// 128-byte-swizzled buffers that runs on across tiles, after the consumers free a slot (Q once every consumer's
// last S of the tile landed) — and keeps 24 registers; each consumer warpgroup owns 64 query rows of the tile
// and takes the freed registers. A consumer waits on a slot's mbarriers, runs S = Q K^T as wgmma with both
// operands in shared memory, rounds P to the input dtype in registers, runs O += P V with P from registers and
// V read N-major, then frees the slot. Where the tile table says so, a warpgroup's softmax overlaps its own
// products and the two consumer warpgroups take turns issuing theirs (See Note [Forward overlap and
// ping-pong]); otherwise warpgroups never wait for each other. Masking, the online softmax on exp2 and the
// final normalisation with sink logits are the sm80 kernel's own steps (flash_fwd_sm80_kernel.cuh), so both
// paths compute the same function, except that at d=64 the tensor cores sum the rows of P (See Note
// [Tensor-core row sums]). O goes from the accumulators straight to global memory, so the next tile's Q can
// land meanwhile.
#pragma once

#include <cstdint>

#include "ops/attention/cuda/flash_fwd_sm80_kernel.cuh"
#include "ops/attention/cuda/flash_sm90_pipeline.cuh"
#include "ops/attention/cuda/flash_sm90_ptx.cuh"
#include "ops/attention/cuda/flash_sm90_scheduler.cuh"

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
  TmaTensor q, k, v;  // boxes of (kBlockM or kBlockN rows) x 64 columns
};

// Note [Forward overlap and ping-pong]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Where the tile table says so (Sm90FwdTiles::overlap, d=128) the consumers' loop is software-pipelined:
// key tile it's S = Q K^T is issued before key tile it-1's O += P V, so a warpgroup's softmax of tile it
// runs while its own P V is on the tensor cores, and O is rescaled only after that product lands. P of
// tile it-1 and S of tile it are live together, hence the register budget of two consumer warpgroups.
// ptxas would move the wait for P V up to the start of the softmax; schedule_boundary keeps it after.
// With Sm90FwdTiles::ping_pong the two consumer warpgroups also take turns issuing their products
// (issue_in_turn, named barriers, the turns running on across tiles), so one's softmax runs while the
// other's products hold the tensor cores. Measurements: docs/perf-notes.md#forward-overlap-and-ping-pong.

// Note [Tensor-core row sums]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With Sm90FwdTiles::tensor_row_sums (d=64) the tensor cores sum the rows of P: O += P V runs 8 columns
// wider (m64n72k16), over a panel of ones after the V ring (sOnes), so those columns of the accumulator
// hold the row sums, rescaled with O, instead of a floating-point add per score (softmax_scores<false>).
// The sums are of P as rounded for that product; the sm80 kernel sums P in fp32. Measurements:
// docs/perf-notes.md#forward-exp2-and-row-sums.

template <class T, int D>
struct FwdTraits {
  static constexpr Sm90FwdTiles kTiles = sm90_fwd_tiles(D);
  static constexpr int kConsumers = kTiles.consumers, kBlockM = sm90_fwd_block_m(D);
  static constexpr int kBlockN = kTiles.block_n, kStages = kTiles.stages;
  static constexpr bool kOverlap = kTiles.overlap;  // next tile's QK^T issued before this one's PV
  static constexpr bool kPingPong = kTiles.ping_pong;  // the 2 consumer warpgroups issue their products in turn
  static_assert(!kPingPong || (kOverlap && kConsumers == 2), "ping-pong needs the overlapped loop and 2 consumers");
  // See Note [Tensor-core row sums].
  static constexpr bool kTensorRowSums = kTiles.tensor_row_sums;
  static_assert(!kTensorRowSums || D == 64, "row sums on the tensor cores need d = 64 (a 72-column P V)");
  // Columns of the shared tiles and of O's accumulator: See Note [Padded head dims] (flash_traits.h).
  static constexpr int kDs = sm90_smem_dim(D);
  static constexpr int kAccTiles = kDs / 8 + (kTensorRowSums ? 1 : 0);  // accumulator column tiles of O
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kThreads = 128 + kConsumerThreads;  // producer warpgroup first
  // Registers per thread after reallocation (multiples of 8): the producer keeps 24, the consumers take
  // what it gives back (consumer_registers).
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = consumer_registers(kThreads, kProducerRegs);
  static constexpr int kTileBytes = kBlockN * kDs * static_cast<int>(sizeof(T));  // one K or V tile
  // sQ (kBlockM, kDs) | sK (kStages, kBlockN, kDs) | sV (kStages, kBlockN, kDs) | sOnes (kBlockN, 64) with
  // kTensorRowSums, swizzled, then the mbarriers: Q landed, Q free, K and V of each slot landed, each slot
  // free; then the tiles the producer claimed (kTileSlots FwdTiles of kFwdTileWords 8-byte words).
  static constexpr int kTileSlots = 3;
  static constexpr int kBarriers = 2 + 3 * kStages + kTileSlots * kFwdTileWords;
  static constexpr int kOnesElems = kTensorRowSums ? kBlockN * kPanel : 0;
  static constexpr int kSmemBytes =
      ((kBlockM + 2 * kStages * kBlockN) * kDs + kOnesElems) * static_cast<int>(sizeof(T)) + kBarriers * 8 +
      kSmemSlack;
  static_assert(kSmemBytes <= 227 * 1024, "sm90 forward: shared memory over the 227 KB of a block");
  static_assert(D % 16 == 0 && kBlockN % 16 == 0 && kBlockN <= 256 && kStages >= 2, "bad sm90 forward tiles");
};

// One warpgroup's rows of an output tile, from its accumulator straight to global memory: this thread's
// rows row_g and row_g + 8 of `out` (row 0 of a head, rows row_stride elements apart), scaled by factor[0]
// and factor[1], columns 8 j + 2 t and 8 j + 2 t + 1 of D as 4-byte stores; rows outside [0, len) are not
// written. The quads of a warp fill 16 bytes of 8 rows per store; row g whole, then row g + 8. Why not
// store_acc (flash_tile.cuh) with a row bound: docs/perf-notes.md#persistent-forward.
template <class T, int D, int NT>
__device__ __forceinline__ void store_rows_global(T* out, std::int64_t row_stride, int row_g, int len,
                                                  const float (&acc)[NT][4], const float (&factor)[2], int t) {
  static_assert(NT >= D / 8, "store_rows_global: the accumulator holds D columns (and maybe more, not stored)");
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_g + 8 * r;
    if (row < 0 || row >= len) continue;
    T* dst = out + row * row_stride + 2 * t;
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
      *reinterpret_cast<std::uint32_t*>(dst + 8 * j) =
          Mma<T>::pack(acc[j][2 * r] * factor[r], acc[j][2 * r + 1] * factor[r]);
  }
}

template <class T, int D, bool kHasMask>
__global__ void __launch_bounds__(FwdTraits<T, D>::kThreads, 1)
    flash_fwd_sm90_kernel(const __grid_constant__ FlashFwdParams p, const __grid_constant__ FwdTmaMaps maps) {
#if FT_SM90_DEVICE
  using Tr = FwdTraits<T, D>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, kStages = Tr::kStages, DS = Tr::kDs;
  constexpr int kNtS = BN / 8;  // score tiles of a warp's 16 rows
  constexpr int kNtO = Tr::kAccTiles;  // output tiles (and the row sums' with kTensorRowSums)
  const FlashShape& s = p.shape;

  extern __shared__ unsigned char smem_raw[];
  T* sQ = aligned_smem<T>(smem_raw);  // (BM, DS) swizzled
  T* sK = sQ + BM * DS;               // (kStages, BN, DS) swizzled
  T* sV = sK + kStages * BN * DS;     // (kStages, BN, DS) swizzled
  T* sOnes = sV + kStages * BN * DS;  // (BN, 64) of ones with kTensorRowSums
  std::uint64_t* q_full = reinterpret_cast<std::uint64_t*>(sOnes + Tr::kOnesElems);
  std::uint64_t* q_free = q_full + 1;
  std::uint64_t* k_full = q_free + 1;           // (kStages)
  std::uint64_t* v_full = k_full + kStages;     // (kStages)
  std::uint64_t* slot_free = v_full + kStages;  // (kStages)
  // A block's k-th tile is FwdTile slot k % kTileSlots (b < 0: none left). The producer decodes and publishes
  // tile k + 1 as soon as it claims it, while the consumers still run tiles k - 1 and k; slot (k + 1) %
  // kTileSlots was tile k - 2's, whose consumers are done once they freed tile k - 1's Q, which the producer
  // waited for before it issued tile k. The consumers read a tile's fields where they use them.
  volatile int* claimed = reinterpret_cast<volatile int*>(slot_free + kStages);
  auto tile_slot = [&](int k) { return claimed + k * 2 * kFwdTileWords; };
  auto next_slot = [](int k) { return k + 1 == Tr::kTileSlots ? 0 : k + 1; };

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // The rows and visited key tiles of query tile y of a head: query tiles end at len_q rounded up to 64
  // rows, longest (causal) tiles first; where BM does not divide that, the partial tile is the one of the
  // first rows, which see the fewest keys. Its rows before 0 (whole warpgroups) are read as zeros and never
  // written.
  // ts: the shape with the tile's sequence lengths (See Note [Packed sequences]).
  auto tile_rows = [&](int y, int len_q) { return (len_q + 63) / 64 * 64 - (y + 1) * BM; };
  auto tile_keys = [&](int m0, const FlashShape& ts, KeyRange& first, KeyRange& last) {
    first = row_keys<kHasMask>(max(m0, 0), ts);
    last = row_keys<kHasMask>(min(m0 + BM, ts.len_q) - 1, ts);
    return key_tiles(first, last, BN);
  };

  if (tid == 0) {
    mbar_init(q_full, 1);
    mbar_init(q_free, Tr::kConsumerThreads);
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

  if (warp < 4) {  // ---- producer warpgroup: one thread claims every tile and issues every copy ----
    setmaxnreg_dec<Tr::kProducerRegs>();
    if (tid != 0) return;
    tma_prefetch_map(maps.q);
    tma_prefetch_map(maps.k);
    tma_prefetch_map(maps.v);
    RingPosition<kStages> pos;
    publish_tile(tile_slot(0), decode_fwd_tile(p, BM, first_tile()));
    for (std::uint32_t q_phase = 0, tslot = 0;; q_phase ^= 1, tslot = next_slot(tslot)) {
      mbar_wait(q_free, q_phase ^ 1);  // every consumer read the last tile's Q
      const FwdTileSlot claim{tile_slot(tslot)};
      if (claim.b() < 0) {
        mbar_arrive(q_full);
        return;
      }
      // Packed sequences: one batch of all of them in the maps, the sequence's rows from q0 / k0. Rows
      // past the sequence's end are another's, masked as a dense call's zeros (Note [Packed sequences]).
      const int mb = s.cu_seqlens_q ? 0 : claim.b();
      const int h = claim.h(), hk = h / s.group, m0 = tile_rows(claim.y(), claim.len_q());
      mbar_arrive_expect_tx(q_full, BM * DS * sizeof(T));
      tma_load_tile<T, BM, DS>(sQ, maps.q, claim.q0() + m0, h, mb, q_full);
      KeyRange first, last;
      const KeyTiles tiles = tile_keys(m0, with_lengths(s, claim.len_q(), claim.len_k()), first, last);
      const int n_iters = tiles.count();
      for (int it = 0; it < n_iters; ++it, pos.advance()) {
        const int n0 = claim.k0() + tiles.tile(it) * BN;
        mbar_wait(&slot_free[pos.slot], pos.phase ^ 1);
        mbar_arrive_expect_tx(&k_full[pos.slot], Tr::kTileBytes);
        tma_load_tile<T, BN, DS>(sK + pos.slot * BN * DS, maps.k, n0, hk, mb, &k_full[pos.slot]);
        mbar_arrive_expect_tx(&v_full[pos.slot], Tr::kTileBytes);
        tma_load_tile<T, BN, DS>(sV + pos.slot * BN * DS, maps.v, n0, hk, mb, &v_full[pos.slot]);
      }
      // Claimed once this tile's copies are issued: see Note [Persistent forward tiles].
      publish_tile(tile_slot(next_slot(tslot)), decode_fwd_tile(p, BM, claim_next_tile(p.tile_counter)));
    }
  }

  // ---- consumer warpgroups ----
  setmaxnreg_inc<Tr::kConsumerRegs>();
  const int ctid = tid - 128, cwarp = warp - 4;
  const int wg = warp_uniform(cwarp / 4);
  const int g = lane >> 2, t = lane & 3;
  const int wg_row = wg * 64;        // first tile row of this warpgroup
  const int warp_row = cwarp * 16;   // first tile row of this warp
  const float sl = fmaxf(fabsf(s.scale_log2), 1e-30f);  // as the sm80 kernel: a negative scale moves into Q

  // S = Q K^T of the key tile in `slot` (unscaled; the first k step overwrites) and O += P V, each issued as
  // one wgmma group; their commits and waits are the loops' own.
  auto issue_scores = [&](float (&acc_s)[kNtS][4], int slot) {
    gemm_ss_kmajor<T, BN, D>(acc_s, sQ, BM, wg_row, sK + slot * BN * DS);  // K: D columns of DS
    wgmma_commit();
  };
  auto issue_pv = [&](float (&acc_o)[kNtO][4], const std::uint32_t (&pa)[BN / 16][4], int slot) {
    if constexpr (Tr::kTensorRowSums)  // the second panel of B is sOnes
      gemm_rs_nmajor<T, D + 8, BN>(acc_o, pa, sV + slot * BN * DS, smem_u32(sOnes) - smem_u32(sV + slot * BN * DS));
    else
      gemm_rs_nmajor<T, DS, BN>(acc_o, pa, sV + slot * BN * DS);
    wgmma_commit();
  };
  // Waits for every product issued (the last one a P V of the tile in `slot`), then frees the slot.
  auto retire_pv = [&](float (&acc_o)[kNtO][4], int slot) {
    wgmma_wait<0>();
    fence_accumulators(acc_o);
    mbar_arrive(&slot_free[slot]);
  };

  // Ping-pong (See Note [Forward overlap and ping-pong]): warpgroup wg issues its products after bar.sync
  // on barrier 3 + wg, then arrives on the other's. Both take the same turns (n_iters + 1 per tile), tile
  // after tile: warpgroup 1 opens warpgroup 0's first turn, and warpgroup 0 takes its arrival after the
  // last turn at the end. A turn: the fence, the products `issue` issues and, with ping-pong, the turn
  // barriers around them.
  auto issue_in_turn = [&](auto&& issue) {
    if constexpr (Tr::kPingPong) named_barrier_sync(3 + wg, 2 * 128);
    wgmma_fence();
    issue();
    if constexpr (Tr::kPingPong) named_barrier_arrive(3 + (1 - wg), 2 * 128);
  };
  if (Tr::kPingPong && wg == 1) named_barrier_arrive(3, 2 * 128);

  RingPosition<kStages> pos;
  for (std::uint32_t q_phase = 0, tslot = 0;; q_phase ^= 1, tslot = next_slot(tslot)) {
    mbar_wait(q_full, q_phase);
    const FwdTileSlot claim{tile_slot(tslot)};
    if (claim.b() < 0) break;
    const int m0 = tile_rows(claim.y(), claim.len_q());
    KeyRange tile_first, tile_last;
    const KeyTiles tiles = tile_keys(m0, with_lengths(s, claim.len_q(), claim.len_k()), tile_first, tile_last);
    const RowKeys first_keys(tile_first), last_keys(tile_last);  // 32-bit, for the test of every key tile
    const int n_iters = tiles.count();

    if (s.scale_log2 < 0.f) {  // S = |scale| (-Q) K^T: flip the sign bits of this warpgroup's rows
#pragma unroll
      for (int pn = 0; pn < DS / kPanel; ++pn) {
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
    // Q is read by the tile's last S: once it landed, this thread frees Q.
    auto q_read_after = [&](int it) {
      if (it == n_iters - 1) mbar_arrive(q_free);
    };
    if (n_iters == 0) mbar_arrive(q_free);

    float acc_o[kNtO][4] = {};  // O of this thread's rows (unnormalised), then with kTensorRowSums their sums
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    // Masks the scores of key tile `it` and turns them into P; `correction` is O's rescaling factor.
    auto softmax_tile = [&](float (&acc_s)[kNtS][4], int it, float (&correction)[2]) {
      const int n0 = tiles.tile(it) * BN;
      const int len_k = claim.len_k();
      if (!tile_full(first_keys, last_keys, n0, BN, len_k))
        mask_scores<kHasMask>(acc_s, m0 + warp_row + g, n0, t, with_lengths(s, claim.len_q(), len_k));
      softmax_scores<!Tr::kTensorRowSums>(acc_s, row_max, row_sum, sl, correction);
    };
    float acc_s[kNtS][4];
    std::uint32_t pa[BN / 16][4];  // P rounded to T, as A fragments of the k steps over a tile's keys
    float correction[2];
    auto round_p = [&] {
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) a_from_acc<T>(pa[kk], acc_s, kk);
    };
    if constexpr (Tr::kOverlap) {
      // Software-pipelined: key tile it's S = Q K^T is issued before key tile it-1's O += P V. See Note
      // [Forward overlap and ping-pong].
      if (n_iters > 0) {
        mbar_wait(&k_full[pos.slot], pos.phase);
        issue_in_turn([&] { issue_scores(acc_s, pos.slot); });
        wgmma_wait<0>();
        fence_accumulators(acc_s);
        q_read_after(0);
        softmax_tile(acc_s, 0, correction);  // O is still zero: nothing to rescale
        round_p();
      }
      for (int it = 1; it < n_iters; ++it) {
        const RingPosition<kStages> prev = pos;
        pos.advance();
        mbar_wait_both(&k_full[pos.slot], pos.phase, &v_full[prev.slot], prev.phase);
        issue_in_turn([&] {
          issue_scores(acc_s, pos.slot);
          issue_pv(acc_o, pa, prev.slot);
        });
        wgmma_wait<1>();  // S of tile it landed; P V of tile it-1 may still run
        fence_accumulators(acc_s);
        q_read_after(it);
        softmax_tile(acc_s, it, correction);
        schedule_boundary(row_sum[0]);  // else the wait for P V moves up, before the softmax
        retire_pv(acc_o, prev.slot);
        rescale_rows(acc_o, correction);
        round_p();
      }
      if (n_iters > 0) {
        mbar_wait(&v_full[pos.slot], pos.phase);
        issue_in_turn([&] { issue_pv(acc_o, pa, pos.slot); });
        retire_pv(acc_o, pos.slot);
        pos.advance();
      }
    } else {
      for (int it = 0; it < n_iters; ++it, pos.advance()) {
        mbar_wait(&k_full[pos.slot], pos.phase);
        wgmma_fence();
        issue_scores(acc_s, pos.slot);
        wgmma_wait<0>();
        fence_accumulators(acc_s);
        q_read_after(it);
        softmax_tile(acc_s, it, correction);
        rescale_rows(acc_o, correction);
        round_p();
        mbar_wait(&v_full[pos.slot], pos.phase);
        wgmma_fence();
        issue_pv(acc_o, pa, pos.slot);
        retire_pv(acc_o, pos.slot);
      }
    }

    float factor[2], lse[2];
    if constexpr (Tr::kTensorRowSums) {  // columns D.. of rows g and g + 8 (all alike): the whole rows' sums
      row_sum[0] = acc_o[kNtO - 1][0];
      row_sum[1] = acc_o[kNtO - 1][2];
    }
    const int b = claim.b(), h = claim.h(), q0 = claim.q0(), len_q = claim.len_q();
    finish_rows<Tr::kTensorRowSums>(row_max, row_sum, p.sinks, h, factor, lse);
    const int row_g = m0 + warp_row + g;
    store_rows_global<T, D>(p.o.at<T>(b, h, q0), p.o.row_stride, row_g, len_q, acc_o, factor, t);
    write_lse(p.lse.at<float>(b, h, q0), p.lse.row_stride, row_g, len_q, lse, t);
  }
  if (Tr::kPingPong && wg == 0) named_barrier_sync(3, 2 * 128);  // warpgroup 1's arrival after its last turn
#endif
}

}  // namespace ft::flash::sm90
