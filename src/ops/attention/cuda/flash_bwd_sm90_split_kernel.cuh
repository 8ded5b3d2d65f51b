// flash_bwd_sm90_split_kernel.cuh — internal (CUDA builds only): the Hopper (sm_90a) backward kernel for
// head dim 256, 16-bit inputs, whose two consumer warpgroups split the head dim instead of the keys
// (Sm90BwdTiles::split_d, flash_traits.h). dK and dV of a warpgroup's own 64 keys would take 256 fp32
// registers a thread; here both warpgroups share the block's 64 keys and each owns 128 columns of dK and
// dV (128 floats a thread). Everything else — the pre-pass, the TMA producer, the fused dQ with its writer
// warps and ordered additions (See Note [Ordered dQ additions]), the L2 head sections and packed
// sequences — is the scheme of flash_bwd_sm90_kernel.cuh, whose helpers it uses. A step (64 queries):
//   S^T = K Q^T (warpgroup 0) and dP^T = V dO^T (warpgroup 1), 64 keys x 64 queries (m64n64, over D);
//   P^T goes to shared memory in fp32 for warpgroup 1's dS^T (See Note [Scores split by product]); P^T
//   and dS^T rounded to the input dtype go to shared memory (sP, sdS); once both are there (a barrier of
//   both warpgroups), warpgroup w runs
//     dQ piece = dS K over columns 128 w.. (m64n128, M-major dS, N-major K),
//     dV[:, 128 w..] += P^T dO and dK[:, 128 w..] += dS^T Q (m64n128, K-major P^T / dS^T, N-major dO / Q),
//   and once they have landed stages its dQ piece (64 x 128 fp32, four boxes) for the TMA additions into
//   dq_accum over its own columns of the step's Q and dO tiles, which no product reads any more (See Note
//   [dQ staged in the ring]). Before writing sP and sdS again a warpgroup waits for the other's products
//   of the previous step.

// Note [Scores split by product]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A wgmma with both operands in shared memory reads its A tile (64 x 16) and B tile (N x 16) per
// instruction: at N = 32 that is 3 KB for 32768 multiply-adds, more than shared memory delivers in the
// time the tensor cores take, at N = 64 about as much. So rather than each warpgroup computing S^T and
// dP^T for half the queries (m64n32), one computes S^T and the other dP^T for all 64 (m64n64), through
// one code path with the operands chosen by warpgroup (a branch around wgmma makes ptxas serialise
// them). dS^T = P^T (dP^T - D) needs both: warpgroup 0 stores P^T in fp32 (sPf, each thread's
// accumulator fragment as float4s, thread-interleaved), and warpgroup 1, whose threads hold dP^T in the
// same fragment layout, reads it back after a named barrier.

// Note [dQ staged in the ring]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Two Q/dO buffers of 64 x 256 take 128 KB beside K and V; an fp32 staging area for the dQ pieces (64 KB)
// would leave room for one. After a step's scores barrier the other warpgroup reads only its own 128
// columns of Q (dK) and dO (dV), so once its own dQ, dV and dK products have landed a warpgroup's columns
// of the step's Q and dO tiles (4 panels of 8 KB) hold its piece as 4 fp32 boxes. The slot is freed only
// after the TMA additions have read them: its mbarrier takes one more arrival, from the step's writer warp
// (Tr::kDqInRing in bwd_producer), which issues the additions in both modes, so that no consumer thread
// waits for them to read shared memory. Before dK and dV are staged over K, V and the first bytes of the
// ring, every slot's last step has been freed.

// Note [Split dK/dV epilogue]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// After the loop dK and dV are rounded to T, staged in padded shared tiles (over K, V and the first bytes
// of the ring) and copied out with 16-byte stores. A thread's accumulator fragments cover its warp's 16 key
// rows of its warpgroup's 128 columns, so each warp copies out exactly the 16 x 128 blocks of dK and dV
// its own lanes staged, after a __syncwarp: no warp reads what another staged, so nothing after the
// staging orders one warp behind another (copying whole rows would read the other warpgroup's columns and
// need a barrier of all 256 consumer threads between the stores and the copies). The barrier before the
// staging remains: it keeps the stores off K, V and the ring until both warpgroups' products are done
// with them.
#pragma once

#include <cstdint>

#include "ops/attention/cuda/flash_bwd_sm90_kernel.cuh"

namespace ft::flash::sm90 {

template <class T, int D>
struct BwdSplitTraits {
  static constexpr Sm90BwdTiles kTiles = sm90_bwd_tiles(D);
  static_assert(kTiles.split_d && kTiles.consumers == 2, "the split kernel: two warpgroups splitting the head dim");
  static constexpr int kConsumers = 2, kBlockN = sm90_bwd_block_n(D);  // keys, shared by both warpgroups
  static constexpr int kBlockM = kTiles.block_m, kStages = kTiles.stages;  // queries
  static constexpr int kDimCols = D / kConsumers;                          // dK / dV / dQ columns per warpgroup
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kThreads = 128 + kConsumerThreads;  // producer warpgroup first
  static constexpr int kProducerRegs = kTiles.producer_regs;
  static constexpr bool kCounterBackoff = kTiles.counter_backoff;  // See counter_wait_eq
  static constexpr int kConsumerRegs = consumer_registers(kThreads, kProducerRegs);
  static constexpr int kDs = D;  // columns of the shared tiles (bwd_producer)
  static constexpr bool kDqInRing = true;  // See Note [dQ staged in the ring]
  // A warpgroup's dQ piece (kBlockM, kDimCols) is staged as kDimCols / kDqBoxCols fp32 boxes, one in each
  // of its 64-column panels of the step's Q tile, then of dO's.
  static constexpr int kDqBoxFloats = kDqBoxRows * kDqBoxCols, kDqBoxesPerPiece = kDimCols / kDqBoxCols;
  // Arrivals that free a ring slot: every consumer thread, and the writer that adds the slot's dQ pieces.
  static constexpr int kSlotArrivals = kConsumerThreads + 1;
  // sK, sV (kBlockN, D) | sQ, sdO (kStages, kBlockM, D) | sP, sdS (kBlockN, kBlockM), all swizzled, then
  // sPf (kBlockN x kBlockM) fp32 | sL, sD (kStages, kBlockM) fp32 | mbarriers: K and V landed, each step's
  // tiles landed, each slot free. dK and dV are staged as padded (kBlockN, kLd) tiles over the 16-bit part
  // after the loop.
  static constexpr int kPsElems = kBlockN * kBlockM;  // sP, and sdS
  static constexpr int kTileBytes =
      ((2 * kBlockN + 2 * kStages * kBlockM) * D + 2 * kPsElems) * static_cast<int>(sizeof(T));
  static constexpr int kStepBytes = 2 * kBlockM * (D * static_cast<int>(sizeof(T)) + static_cast<int>(sizeof(float)));
  static constexpr int kBarriers = 1 + 2 * kStages + kBwdSeqWords;  // and the block's BwdSeqSlot
  static constexpr int kFloatBytes = (kPsElems + 2 * kStages * kBlockM) * static_cast<int>(sizeof(float));
  static constexpr int kSmemBytes = kTileBytes + kFloatBytes + kBarriers * 8 + kSmemSlack;
  // Two buffers at least: a slot loads its next step only once its dQ pieces have been read out of it (See
  // Note [dQ staged in the ring]), which one buffer would wait for at every step.
  static_assert(D % kPanel == 0 && kBlockN == 64 && kBlockM == 64 && kQueryPad % kBlockM == 0 && kStages >= 2,
                "bad sm90 split dK/dV tiles");
  static_assert(kDimCols == 2 * kPanel, "each warpgroup: two panels of dK, dV and dQ");
  static_assert(kDqBoxesPerPiece == 4 && kDqBoxFloats * static_cast<int>(sizeof(float)) ==
                                             kBlockM * kPanel * static_cast<int>(sizeof(T)),
                "a dQ piece: one fp32 box in each of a warpgroup's two Q and two dO panels");
  static_assert(kSmemBytes <= 227 * 1024, "sm90 split dK/dV kernel: shared memory over the 227 KB of a block");
  static_assert(2 * kBlockN * kLd<T, D> * static_cast<int>(sizeof(T)) <= kTileBytes, "dK/dV staging does not fit");
};

template <class T, int D, bool kHasMask, bool kOrderedDq>
__global__ void __launch_bounds__(BwdSplitTraits<T, D>::kThreads, 1)
    flash_bwd_sm90_split_kernel(const __grid_constant__ FlashBwdParams p, const __grid_constant__ BwdTmaMaps maps) {
#if FT_SM90_DEVICE
  using Tr = BwdSplitTraits<T, D>;
  constexpr int BN = Tr::kBlockN, BM = Tr::kBlockM, kStages = Tr::kStages, kConsumerThreads = Tr::kConsumerThreads;
  constexpr int kDc = Tr::kDimCols;
  const FlashShape& s = p.shape;

  extern __shared__ unsigned char smem_raw[];
  T* sK = aligned_smem<T>(smem_raw);  // (BN, D) swizzled
  T* sV = sK + BN * D;                // (BN, D) swizzled
  T* sQ = sV + BN * D;                // (kStages, BM, D) swizzled
  T* sdO = sQ + kStages * BM * D;     // (kStages, BM, D) swizzled
  T* sP = sdO + kStages * BM * D;     // (BN, BM) swizzled P^T
  T* sdS = sP + Tr::kPsElems;         // (BN, BM) swizzled dS^T
  float4* sPf = reinterpret_cast<float4*>(sdS + Tr::kPsElems);  // (BM / 8, 128) fp32 P^T, by thread
  float* sL = reinterpret_cast<float*>(sPf + Tr::kPsElems / 4);  // (kStages, BM) L * log2(e)
  float* sD = sL + kStages * BM;                             // (kStages, BM) D
  std::uint64_t* kv_full = reinterpret_cast<std::uint64_t*>(sD + kStages * BM);
  std::uint64_t* step_full = kv_full + 1;          // (kStages)
  std::uint64_t* slot_free = step_full + kStages;  // (kStages)
  const BwdSeqSlot seq{reinterpret_cast<volatile int*>(slot_free + kStages)};

  // The block's head, key tile, sequence and query steps, as flash_bwd_sm90_kernel.
  const BwdBlock block = bwd_block(p, kOrderedDq);
  if (block.b < 0) return;
  const bool ascending = block.ascending;
  const int n_block = block.n_block, b = block.b, hk = block.hk;
  FlashShape narrowed = s;
  const SeqRows rows = narrow_to_sequence(narrowed, b);
  auto seq_shape = [&] { return with_lengths(s, seq.len_q(), seq.len_k()); };
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int n0 = n_block * BN;
  const TileSpan span = key_tile_queries<kHasMask, BN, BM>(n0, narrowed);
  const int m_first = span.first, m_count = span.count;
  const int n_iters = m_count * s.group;
  const bool last_tile_first = kOrderedDq && ascending;
  const int tile_period = last_tile_first ? s.group : 1;  // steps on a tile before the next (StepCursor)
  auto tile_row0 = [&](int i) { return (m_first + (last_tile_first ? m_count - 1 - i : i)) * BM; };
  auto advance = [&](StepCursor& at) { at.advance(tile_period, m_count); };
  // Named barriers: 1 all consumers; 2 a step's sP and sdS complete; 3 + w warpgroup w done with them and
  // with sPf; 5 sPf complete; the dQ pieces' full_barrier.
  constexpr int kAllBarrier = 1, kScoresBarrier = 2, kProbsBarrier = 5;
  auto done_barrier = [](int w) { return 3 + w; };
  // The fp32 boxes of warpgroup w's dQ piece in ring slot `slot`: columns 64 c.. in its panels of Q (c = 0)
  // or dO (c = 1). See Note [dQ staged in the ring].
  auto piece_boxes = [&](int w, int slot, int c) {
    return reinterpret_cast<float*>((c == 0 ? sQ : sdO) + slot * BM * D + w * kDc * BM);
  };
  // Adds warpgroup w's staged piece of step it, at `at`, (columns kDc w..) into dq_accum (stores it when
  // `first`).
  auto reduce_piece = [&](int w, int it, const StepCursor& at, bool first) {
    const int row = seq.dq_row0() + tile_row0(at.tile), h = hk * s.group + at.head(), slot = it % kStages;
#pragma unroll
    for (int i = 0; i < Tr::kDqBoxesPerPiece; ++i) {
      const TmaCoords box = tma_coords(maps.dq_accum, w * kDc + i * kDqBoxCols, row, h, seq.map_batch());
      const float* boxes = piece_boxes(w, slot, i / 2) + (i % 2) * Tr::kDqBoxFloats;
      if (first)
        tma_store(maps.dq_accum, box, boxes);
      else
        tma_reduce_add(maps.dq_accum, box, boxes);
    }
    bulk_commit();
  };

  if (tid == 0)
    init_bwd_block<kStages>(p, seq, block, rows, narrowed, kv_full, step_full, slot_free,
                            Tr::kSlotArrivals);
  __syncthreads();

  if (warp < 4) {  // ---- producer warpgroup ----
    bwd_producer<Tr, kHasMask, kOrderedDq>(p, maps, seq, block, n_iters, tile_row0, advance, reduce_piece, sK, sV, sQ,
                                           sdO, sL, sD, kv_full, step_full, slot_free);
    return;
  }

  // ---- consumer warpgroups ----
  setmaxnreg_inc<Tr::kConsumerRegs>();
  const int ctid = tid - 128, cwarp = warp - 4;
  const int t = lane & 3;
  // Known warp-uniform, so that the wgmma descriptors derived from wg stay in uniform registers.
  const int wg = warp_uniform(cwarp / 4);
  const int warp_row = (cwarp % 4) * 16;  // this warp's first key row (of both warpgroups' 64)
  const int dc = wg * kDc;  // this warpgroup's columns of dK, dV and dQ
  const FlashShape ss = seq_shape();
  const KeyQueries queries[2] = {KeyQueries(key_queries<kHasMask>(n0 + warp_row + (lane >> 2), ss)),
                                 KeyQueries(key_queries<kHasMask>(n0 + warp_row + (lane >> 2) + 8, ss))};
  const TileSpan full_tiles = full_query_tiles<kHasMask, BN, BM>(n0, ss, span, lane);
  // Stages this warpgroup's dQ piece of step it in its panels of the step's slot and hands it to the writer
  // warp (every thread of the warpgroup, once its products have landed).
  auto add_dq = [&](int it, int slot, const float (&acc_dq)[kDc / 8][4]) {
#pragma unroll
    for (int c = 0; c < kDc / kPanel; ++c)  // 64 columns (8 accumulator tiles) at a time
      store_dq_boxes(piece_boxes(wg, slot, c), *reinterpret_cast<const float(*)[8][4]>(&acc_dq[8 * c]), cwarp, lane);
    fence_proxy_async();
    named_barrier_arrive(full_barrier(wg, it & 1), kWriterThreads);
  };

  float acc_dk[kDc / 8][4] = {};  // dK of this thread's key rows, columns dc..
  float acc_dv[kDc / 8][4] = {};

  mbar_wait(kv_full, 0);
  RingPosition<kStages> pos;
  StepCursor at;  // this step's
  for (int it = 0; it < n_iters; ++it, pos.advance(), advance(at)) {
    const int slot = pos.slot;
    const T* sQt = sQ + slot * BM * D;
    const T* sdOt = sdO + slot * BM * D;
    const int m0 = tile_row0(at.tile);
    mbar_wait(&step_full[slot], pos.phase);

    // Warpgroup 0: S^T = K Q^T, warpgroup 1: dP^T = V dO^T, over the step's 64 queries (the first k step
    // overwrites). One code path, the operands chosen by warpgroup: See Note [Scores split by product].
    float acc[BM / 8][4];
    wgmma_fence();
    gemm_ss_kmajor<T, BM, D>(acc, wg == 0 ? sK : sV, BN, 0, wg == 0 ? sQt : sdOt);
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(acc);
    // The other warpgroup's products of step it - 1 are done with sP, sPf and sdS.
    if (it > 0) named_barrier_sync(done_barrier(1 - wg), kConsumerThreads);
    if (wg == 0) {  // P^T, in fp32 for dS^T and rounded for dV
      probs_t(acc, sL + slot * BM, queries, full_tiles.contains(m0 / BM), m0, t, s.scale_log2);
#pragma unroll
      for (int i = 0; i < BM / 8; ++i) sPf[i * 128 + ctid] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
      named_barrier_arrive(kProbsBarrier, kConsumerThreads);
    } else {  // dS^T = P^T (dP^T - D)
      float p_t[BM / 8][4];
      named_barrier_sync(kProbsBarrier, kConsumerThreads);
#pragma unroll
      for (int i = 0; i < BM / 8; ++i) {
        const float4 v = sPf[i * 128 + ctid - 128];
        p_t[i][0] = v.x, p_t[i][1] = v.y, p_t[i][2] = v.z, p_t[i][3] = v.w;
      }
      dscores_t(acc, p_t, sD + slot * BM, t);
    }
    std::uint32_t frag[BM / 16][4];  // P^T or dS^T rounded to T
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) a_from_acc<T>(frag[kk], acc, kk);
    store_ds_t<T, BN, BM>(wg == 0 ? sP : sdS, frag, warp_row, lane);
    fence_proxy_async();
    named_barrier_sync(kScoresBarrier, kConsumerThreads);  // P^T and dS^T are in place

    float acc_dq[kDc / 8][4];  // this warpgroup's dQ piece
    wgmma_fence();
    gemm_ss_mnmajor<T, kDc, BN>(acc_dq, sdS, sK + dc * BN);
    wgmma_commit();
    gemm_ss_knmajor<T, kDc, BM>(acc_dv, sP, sdOt + dc * BM);  // dV += P^T dO, columns dc..
    wgmma_commit();
    gemm_ss_knmajor<T, kDc, BM>(acc_dk, sdS, sQt + dc * BM);  // dK += dS^T Q, columns dc..
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(acc_dq);
    fence_accumulators(acc_dv);
    fence_accumulators(acc_dk);
    if (it + 1 < n_iters) named_barrier_arrive(done_barrier(wg), kConsumerThreads);
    add_dq(it, slot, acc_dq);
    mbar_arrive(&slot_free[slot]);
  }
  // Every slot's last step freed: no dQ addition reads the ring any more.
  for (int it = n_iters > kStages ? n_iters - kStages : 0; it < n_iters; ++it)
    mbar_wait(&slot_free[it % kStages], (it / kStages) & 1);

  named_barrier_sync(kAllBarrier, kConsumerThreads);  // every product is done with sK, sV, sQ and sdO
  // Each warp stages its 16 key rows of this warpgroup's dK and dV columns and copies out exactly those
  // (See Note [Split dK/dV epilogue]).
  constexpr int kLdS = kLd<T, D>;
  T* sdK = sK + warp_row * kLdS + dc;         // (16, kDc) of the padded (BN, kLd) staging
  T* sdV = sK + (BN + warp_row) * kLdS + dc;  // (16, kDc) of the one after it
  store_acc<T, kDc / 8>(sdK, kLdS, 0, 0, acc_dk, s.scale, s.scale, lane);
  store_acc<T, kDc / 8>(sdV, kLdS, 0, 0, acc_dv, 1.f, 1.f, lane);
  __syncwarp();
  const int rows_valid = seq.len_k() - n0 - warp_row;
  T* dk = p.dk.at<T>(b, hk, seq.k0() + n0 + warp_row) + dc;
  T* dv = p.dv.at<T>(b, hk, seq.k0() + n0 + warp_row) + dc;
  store_tile<T, 16, kDc, 32, kLdS>(dk, p.dk.row_stride, sdK, rows_valid, true, lane);
  store_tile<T, 16, kDc, 32, kLdS>(dv, p.dv.row_stride, sdV, rows_valid, true, lane);
#endif
}

}  // namespace ft::flash::sm90
