// flash_bwd_sm90_kernel.cuh — internal (CUDA builds only): the Hopper (sm_90a) backward kernel, 16-bit
// inputs, head dims 64, 80, 96 and 128 (80 and 96 over zero-padded columns: See Note [Padded head dims] in
// flash_traits.h). It follows the sm80 scheme of flash_bwd_sm80_kernel.cuh, whose pre-pass (D_i,
// L_i log2(e), sink partials, dq_accum zeroed) and sink-gradient sum it shares, and fuses dQ into the dK/dV
// kernel as FA2's atomic mode does (flash_bwd_atomic.cuh):
//   one block per (batch x kv head, key tile), each warpgroup owning 64 keys; it loops over the query
//   heads of its group and the query tiles that see the key tile. S^T = K Q^T and dP^T = V dO^T run as
//   wgmma from shared memory; P^T and dS^T are rounded to the input dtype in registers and feed
//   dV += P^T dO and dK += dS^T Q as register A operands, with dO and Q read N-major. The warpgroups also
//   write their dS^T to shared memory, and one step later each computes its half of that step's
//   dQ_tile = dS K over all the block's keys (M-major dS, N-major K), stages it as fp32 boxes, and the
//   boxes are added into dq_accum with TMA reductions; a convert kernel then writes dQ.
// The additions run in whatever order the blocks come (AttentionOptions::deterministic = false) or, by
// default, in a fixed order (kOrderedDq), so that repeated runs give bit-identical gradients: see Note
// [Ordered dQ additions] in flash_sm90_scheduler.cuh.
// The kernel is warp-specialised as the forward (flash_fwd_sm90_kernel.cuh): warpgroup 0 is the producer —
// one thread issues the TMA copies of the resident K and V tiles and of every step's Q and dO tiles (and
// bulk copies of its L and D rows) into a ring of 128-byte-swizzled buffers guarded by mbarriers — and the
// consumer warpgroups do the products. Tile sizes come from kSm90Tiles (flash_traits.h). Heads launch in
// L2-sized sections (section_head; see Note [L2 head sections]).
#pragma once

#include <cstdint>

#include "ops/attention/cuda/flash_bwd_atomic.cuh"
#include "ops/attention/cuda/flash_bwd_sm80_kernel.cuh"
#include "ops/attention/cuda/flash_fwd_sm90_kernel.cuh"
#include "ops/attention/cuda/flash_sm90_pipeline.cuh"
#include "ops/attention/cuda/flash_sm90_scheduler.cuh"

namespace ft::flash::sm90 {

// The TMA maps of the backward's operands (flash_tma.h), passed beside FlashBwdParams; boxes are the
// kernel's query and key tiles (dq_accum: fp32 boxes of kDqBoxRows rows).
struct BwdTmaMaps {
  TmaTensor q, d_o, k, v, dq_accum;
};

// dQ pieces leave as fp32 boxes of 64 rows x one 128-byte swizzle row of columns.
inline constexpr int kDqBoxRows = 64, kDqBoxCols = kPanelRowBytes / static_cast<int>(sizeof(float));

template <class T, int D>
struct BwdKvTraits {
  static constexpr Sm90BwdTiles kTiles = flash_sm90_tiles(D).bwd;
  static constexpr int kConsumers = kTiles.consumers, kBlockN = sm90_bwd_block_n(D);  // keys
  static constexpr int kBlockM = kTiles.block_m, kStages = kTiles.stages;             // queries
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kThreads = 128 + kConsumerThreads;  // producer warpgroup first
  static constexpr int kProducerRegs = kTiles.producer_regs;
  static constexpr bool kCounterBackoff = kTiles.counter_backoff;  // See counter_wait_eq
  static constexpr bool kDqInRing = false;  // dQ pieces staged in sdQ, not in the ring (bwd_producer)
  static constexpr int kConsumerRegs = consumer_registers(kThreads, kProducerRegs);
  // Columns of the shared tiles and of the dK, dV and dQ accumulators: See Note [Padded head dims]
  // (flash_traits.h).
  static constexpr int kDs = sm90_smem_dim(D);
  // The dQ tile (kBlockM, kDs) is one piece of 64 queries x 64 columns per warpgroup, staged as
  // kPanel / kDqBoxCols fp32 boxes (128-byte swizzled, as dq_accum's TMA map says).
  static constexpr int kDqBoxFloats = kDqBoxRows * kDqBoxCols, kDqBoxesPerPiece = kPanel / kDqBoxCols;
  // sK, sV (kBlockN, kDs) | sQ, sdO (kStages, kBlockM, kDs) | sdS (2, kBlockN, kBlockM) for alternate steps,
  // all swizzled, then sdQ (kConsumers, kDqBoxesPerPiece boxes) fp32 | sL, sD (kStages, kBlockM) fp32 |
  // mbarriers: K and V landed, each step's tiles landed, each slot free. dK and dV are staged as padded
  // (kBlockN, kLd) tiles over the 16-bit part after the loop.
  static constexpr int kDsElems = 2 * kBlockN * kBlockM;  // sdS
  static constexpr int kTileBytes =
      ((2 * kBlockN + 2 * kStages * kBlockM) * kDs + kDsElems) * static_cast<int>(sizeof(T));
  static constexpr int kDqStageFloats = kConsumers * kDqBoxesPerPiece * kDqBoxFloats;  // sdQ
  static constexpr int kStepBytes = 2 * kBlockM * (kDs * static_cast<int>(sizeof(T)) + static_cast<int>(sizeof(float)));
  static constexpr int kBarriers = 1 + 2 * kStages + kBwdSeqWords;  // and the block's BwdSeqSlot
  static constexpr int kFloatBytes = (kDqStageFloats + 2 * kStages * kBlockM) * static_cast<int>(sizeof(float));
  static constexpr int kSmemBytes = kTileBytes + kFloatBytes + kBarriers * 8 + kSmemSlack;
  static_assert(D % 16 == 0 && kBlockM % 64 == 0 && kQueryPad % kBlockM == 0 && kStages >= 2,
                "bad sm90 dK/dV tiles");
  static_assert(kTileBytes % kGroupBytes == 0, "sdQ must start 1024-byte aligned");
  static_assert(kConsumers == 2 && kBlockM / 64 * (kDs / kPanel) == kConsumers,
                "dQ: one 64 x 64 piece of the dQ tile per warpgroup, two warpgroups");
  static_assert(kSmemBytes <= 227 * 1024, "sm90 dK/dV kernel: shared memory over the 227 KB of a block");
  static_assert(2 * kBlockN * kLd<T, D> * static_cast<int>(sizeof(T)) <= kTileBytes, "dK/dV staging does not fit");
};

// Stores this warp's rows of dS^T (the register A fragments of dK += dS^T Q, rows warp_row.., BM query
// columns) into the sw128 tile sdS (BN, BM), 128-byte aligned: one stmatrix per k step, whose fragment e
// is the 8x8 matrix of rows 8 (e % 2).. and columns 8 (e / 2).. of the step's 16 x 16 block. Each
// matrix's 8 rows are 16-byte chunks of consecutive rows, which the swizzle puts in 8 distinct chunk
// positions: 4 wavefronts an instruction, no bank conflicts. k step kk of a panel moves the chunk index
// by 2 (kk % 4), which XORs into the swizzled one: an XOR of this lane's first address.
template <class T, int BN, int BM>
__device__ __forceinline__ void store_ds_t(T* sdS, const std::uint32_t (&dsa)[BM / 16][4], int warp_row, int lane) {
  const int m = lane >> 3;  // the matrix whose row this lane addresses
  const int row = warp_row + (lane & 7) + 8 * (m & 1);
  const std::uint32_t first = smem_u32(sdS + sw128_offset(BN, row, 8 * (m >> 1)));
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk)
    stmatrix_x4((first ^ (kk % 4) * 32) + (kk / 4) * BN * kPanelRowBytes, dsa[kk]);
}

// Stores a 64 x 64 fp32 accumulator (rows 16 (warp % 4) + g (+ 8), columns 8 j + 2 t (+ 1)) as
// 128-byte-swizzled boxes of kDqBoxRows x kDqBoxCols at `boxes` (the layout TMA reads for dq_accum's map).
// See Note [dQ box stores].
__device__ __forceinline__ void store_dq_boxes(float* boxes, const float (&acc)[8][4], int warp, int lane) {
  constexpr int kTilesPerBox = kDqBoxCols / 8;  // accumulator column tiles (8 floats) per box row
  static_assert(kTilesPerBox == 4, "store_dq_boxes: the tile swap assumes 4 tiles of 8 floats per box row");
  const int g = lane >> 2, t = lane & 3;
  const int swap = g & 1;  // this lane stores tile j ^ 2 where its even-g neighbours store tile j
  // Tile j's chunk in row r is (2 (j % 4) + t / 2) ^ (r % 8) = (t / 2 ^ g) ^ 2 (j % 4): this lane's
  // element of tile 0 in box 0 (boxes 1024-byte aligned), its index XORed with 8 (j % 4).
  const int row = (warp % 4) * 16 + g;
  const int first = row * kDqBoxCols + ((t / 2) ^ g) * 4 + 2 * (t % 2);
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float2 v = swap ? make_float2(acc[j ^ 2][2 * r], acc[j ^ 2][2 * r + 1])
                            : make_float2(acc[j][2 * r], acc[j][2 * r + 1]);
      const int at = (first ^ ((j % kTilesPerBox) ^ 2 * swap) * 8) + (j / kTilesPerBox) * kDqBoxRows * kDqBoxCols +
                     8 * r * kDqBoxCols;
      *reinterpret_cast<float2*>(boxes + at) = v;
    }
}

// Note [dQ box stores]
// ~~~~~~~~~~~~~~~~~~~~
// Shared memory serves a warp's 8-byte stores in two half-warps, each in one wavefront when its 16 lanes
// write 32 distinct banks. In a box row (128 bytes, 8 chunks of 4 banks) lane (g, t) of tile j writes
// chunk (2 (j % 4) + t / 2) ^ g. Were every lane to store the same tile, the 8 (g % 4, t / 2) pairs of a
// half-warp would cover only 4 chunks (2 (j % 4) ^ {0..3}), two rows each: 4 wavefronts a store instead
// of 2. Lanes of odd g store tile j ^ 2 instead, which XORs their chunk with 4, so each half-warp covers
// all 8 chunks; each lane still stores all 8 tiles once, the same values to the same addresses, at the
// cost of a select per stored float. The conflict-free layouts of the kernel's other stores (dS^T, the
// sdS zeroing, the dK/dV staging) need no such swap.

// A block's position in its steps, which walk the (query head of the group, query tile) pairs head by head
// (period 1) or tile by tile over the group's heads (period = the group): how many tiles the walk has
// passed in this head (tile), how many of the group's heads it has finished (passes) and how many steps
// it has taken on this tile (sub). Carried from step to step instead of divided out of the step index.
struct StepCursor {
  int tile = 0, passes = 0, sub = 0;
  __device__ __forceinline__ int head() const { return passes + sub; }  // the head's index in the group
  __device__ __forceinline__ void advance(int period, int tiles) {
    if (++sub != period) return;
    sub = 0;
    if (++tile == tiles) tile = 0, ++passes;
  }
};

// Named barriers of consumer warpgroup w's dQ pieces: staged and, with ordered additions, read by the writer
// warp of the step's parity (one pair per parity, each between warpgroup w and that writer).
__device__ __forceinline__ int full_barrier(int w, int parity) { return 6 + 2 * w + parity; }
__device__ __forceinline__ int free_barrier(int w, int parity) { return 10 + 2 * w + parity; }
inline constexpr int kWriterThreads = 128 + 32;  // ordered additions: a consumer warpgroup and a writer warp

// Thread 0 of a backward block, before the block barrier: publishes the block's sequence (See Note
// [Packed sequences]) and initialises the mbarriers: K and V landed, each ring slot's step landed and free
// (after slot_arrivals arrivals).
template <int kStages>
__device__ __forceinline__ void init_bwd_block(const FlashBwdParams& p, const BwdSeqSlot& seq, const BwdBlock& block,
                                               const SeqRows& rows, const FlashShape& narrowed, std::uint64_t* kv_full,
                                               std::uint64_t* step_full, std::uint64_t* slot_free,
                                               int slot_arrivals) {
  const FlashShape& s = p.shape;
  const int b = block.b;
  const int dq_row0 = s.cu_seqlens_q ? static_cast<int>(varlen_scratch_row(b, rows.q0)) : 0;
  seq.publish(rows.q0, rows.k0, narrowed.len_q, narrowed.len_k, block.n_tiles, dq_row0, s.cu_seqlens_q ? 0 : b,
              b * s.heads_q * p.pre_blocks);
  mbar_init(kv_full, 1);
  for (int i = 0; i < kStages; ++i) {
    mbar_init(&step_full[i], 1);
    mbar_init(&slot_free[i], slot_arrivals);
  }
  mbar_init_fence();
}

// The producer warpgroup of a backward block (Tr: its kernel's traits; the (BN, kDs) K and V tiles, the
// ring of (BM, kDs) Q and dO tiles with their L and D rows). One thread issues every copy. With ordered
// additions warps 1 and 2 are the dQ writers of the even and odd steps: each awaits its step's turn, takes
// every consumer warpgroup's staged piece (full_barrier), adds them with reduce_piece(w, it, at, first),
// hands the boxes back (free_barrier; with Tr::kDqInRing the pieces are staged in the step's ring slot,
// which its lane 0 frees instead, one arrival of the slot's) and, once the additions have landed, advances
// the query tile's counter. With Tr::kDqInRing the writers add the pieces without ordered additions too,
// only without the turns and counters. The steps walk as StepCursor says: tile_row0(at.tile) is a step's
// first query row, advance(at) moves to the next step.
template <class Tr, bool kHasMask, bool kOrderedDq, class T, class TileRow0, class Advance, class Reduce>
__device__ __forceinline__ void bwd_producer(const FlashBwdParams& p, const BwdTmaMaps& maps, const BwdSeqSlot& seq,
                                             const BwdBlock& block, int n_iters, TileRow0 tile_row0, Advance advance,
                                             Reduce reduce_piece, T* sK, T* sV, T* sQ, T* sdO, float* sL, float* sD,
                                             std::uint64_t* kv_full, std::uint64_t* step_full,
                                             std::uint64_t* slot_free) {
  constexpr int BN = Tr::kBlockN, BM = Tr::kBlockM, DS = Tr::kDs, kStages = Tr::kStages;
  const FlashShape& s = p.shape;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int n_block = block.n_block, b = block.b, hk = block.hk, n0 = n_block * BN;
  setmaxnreg_dec<Tr::kProducerRegs>();
  if constexpr (kOrderedDq || Tr::kDqInRing) {
    if (warp == 1 || warp == 2) {  // the dQ writers, warp 1 of the even steps and warp 2 of the odd ones
      const int parity = warp - 1;
      if (!Tr::kDqInRing && parity == 1 && n_iters > 0)  // the consumers' first pieces find their boxes free
        for (int w = 0; w < Tr::kConsumers; ++w) named_barrier_arrive(free_barrier(w, 1), kWriterThreads);
      StepCursor at;
      if (parity == 1) advance(at);
      [[maybe_unused]] int prefix = 0, last_tile = -1;  // key_tiles_before_walked's, carried over the steps
      for (int it = parity; it < n_iters; it += 2, advance(at), advance(at)) {
        int before = 0;          // with ordered additions: the key tiles that add into the step's tile first
        int* counter = nullptr;  // and the tile's counter of them
        if constexpr (kOrderedDq) {
          const int h = hk * s.group + at.head(), m0 = tile_row0(at.tile);
          // The walk's carried state spills in writers of 24 registers (d=64): they search every step.
          before = Tr::kProducerRegs >= 40
                       ? key_tiles_before_walked<kHasMask, BN, BM>(prefix, last_tile, n_block, seq.n_tiles(),
                                                                   block.ascending, m0 / BM, seq.shape(s), lane)
                       : key_tiles_before<kHasMask, BN, BM>(n_block, seq.n_tiles(), block.ascending, m0 / BM,
                                                            seq.shape(s), lane);
          counter = p.dq_order + seq.counter0() + h * p.pre_blocks + m0 / kPreRows;
          // The turn is awaited while the consumers still compute the piece, so that a counter already
          // there costs no read after the piece is staged (See Note [Ordered dQ additions]).
          if (lane == 0) counter_wait_eq<Tr::kCounterBackoff>(counter, before);
        }
        __syncwarp();  // bar.sync is .aligned: the warp reaches it converged
        for (int w = 0; w < Tr::kConsumers; ++w) named_barrier_sync(full_barrier(w, parity), kWriterThreads);
        if (lane == 0) {
          for (int w = 0; w < Tr::kConsumers; ++w) reduce_piece(w, it, at, kOrderedDq && before == 0);
          bulk_wait_read<0>();
          if constexpr (Tr::kDqInRing) mbar_arrive(&slot_free[it % kStages]);
        }
        __syncwarp();
        if (!Tr::kDqInRing && it + 1 < n_iters)
          for (int w = 0; w < Tr::kConsumers; ++w) named_barrier_arrive(free_barrier(w, parity), kWriterThreads);
        if constexpr (kOrderedDq) {
          if (lane == 0) {
            tma_store_wait_all();  // the additions have landed in dq_accum
            counter_release_increment(counter);
          }
        }
      }
      if constexpr (!kOrderedDq) {
        if (lane == 0) tma_store_wait_all();  // the additions have completed
      }
      return;
    }
  }
  if (tid != 0) return;
  tma_prefetch_map(maps.q);
  tma_prefetch_map(maps.d_o);
  tma_prefetch_map(maps.dq_accum);
  mbar_arrive_expect_tx(kv_full, 2 * BN * DS * sizeof(T));
  const int mb = seq.map_batch();
  tma_load_tile<T, BN, DS>(sK, maps.k, seq.k0() + n0, hk, mb, kv_full);
  tma_load_tile<T, BN, DS>(sV, maps.v, seq.k0() + n0, hk, mb, kv_full);
  RingPosition<kStages> pos;
  StepCursor at;
  for (int it = 0; it < n_iters; ++it, pos.advance(), advance(at)) {
    const int h = hk * s.group + at.head(), m0 = tile_row0(at.tile);
    const int q0 = seq.q0();
    const std::int64_t row = scratch_row(p, b, h, q0) + m0;
    std::uint64_t* full = &step_full[pos.slot];
    mbar_wait(&slot_free[pos.slot], pos.phase ^ 1);
    mbar_arrive_expect_tx(full, Tr::kStepBytes);
    tma_load_tile<T, BM, DS>(sQ + pos.slot * BM * DS, maps.q, q0 + m0, h, mb, full);
    tma_load_tile<T, BM, DS>(sdO + pos.slot * BM * DS, maps.d_o, q0 + m0, h, mb, full);
    bulk_load(sL + pos.slot * BM, p.lse_log2 + row, BM * sizeof(float), full);
    bulk_load(sD + pos.slot * BM, p.dsum + row, BM * sizeof(float), full);
  }
}

template <class T, int D, bool kHasMask, bool kOrderedDq>
__global__ void __launch_bounds__(BwdKvTraits<T, D>::kThreads, 1)
    flash_bwd_sm90_kernel(const __grid_constant__ FlashBwdParams p, const __grid_constant__ BwdTmaMaps maps) {
#if FT_SM90_DEVICE
  using Tr = BwdKvTraits<T, D>;
  constexpr int BN = Tr::kBlockN, BM = Tr::kBlockM, kStages = Tr::kStages, kConsumerThreads = Tr::kConsumerThreads;
  constexpr int DS = Tr::kDs;
  constexpr int kNtS = BM / 8;   // transposed score tiles (columns = queries)
  constexpr int kNtD = DS / 8;   // dK/dV tiles
  const FlashShape& s = p.shape;

  extern __shared__ unsigned char smem_raw[];
  T* sK = aligned_smem<T>(smem_raw);  // (BN, DS) swizzled
  T* sV = sK + BN * DS;               // (BN, DS) swizzled
  T* sQ = sV + BN * DS;               // (kStages, BM, DS) swizzled
  T* sdO = sQ + kStages * BM * DS;    // (kStages, BM, DS) swizzled
  T* sdS = sdO + kStages * BM * DS;   // (2, BN, BM) swizzled dS^T, alternate steps
  float* sdQ = reinterpret_cast<float*>(sdS + Tr::kDsElems);  // (kConsumers, 2 boxes) fp32
  float* sL = sdQ + Tr::kDqStageFloats;                        // (kStages, BM) L * log2(e)
  float* sD = sL + kStages * BM;                                 // (kStages, BM) D
  std::uint64_t* kv_full = reinterpret_cast<std::uint64_t*>(sD + kStages * BM);
  std::uint64_t* step_full = kv_full + 1;        // (kStages)
  std::uint64_t* slot_free = step_full + kStages;  // (kStages)
  const BwdSeqSlot seq{reinterpret_cast<volatile int*>(slot_free + kStages)};

  // The launch and addition order of this block's head: ascending key tiles, except with ordered
  // additions for all but the last heads (see Note [Ordered dQ additions]).
  const BwdBlock block = bwd_block(p, kOrderedDq);
  if (block.b < 0) return;
  const bool ascending = block.ascending;
  const int n_block = block.n_block, b = block.b, hk = block.hk;
  // Packed sequences: the maps hold one batch of all of them, the sequence's rows from q0 / k0 and its
  // dq_accum rows from dq_row0 (See Note [Packed sequences]); the loops read them from `seq`, and build
  // the sequence's shape (seq_shape) where they use it.
  FlashShape narrowed = s;
  const SeqRows rows = narrow_to_sequence(narrowed, b);
  auto seq_shape = [&] { return with_lengths(s, seq.len_q(), seq.len_k()); };
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int n0 = n_block * BN;

  // Query tiles that see some key of this tile.
  const TileSpan span = key_tile_queries<kHasMask, BN, BM>(n0, narrowed);
  const int m_first = span.first, m_count = span.count;
  const int n_iters = m_count * s.group;
  // The steps run over the group's heads, each over the tiles; with ordered additions and ascending, over
  // the tiles, last first, each over the group's heads (See Note [Ordered dQ additions]). Why the others
  // not tile by tile: docs/perf-notes.md#ordered-dq-additions.
  const bool last_tile_first = kOrderedDq && ascending;
  const int tile_period = last_tile_first ? s.group : 1;  // steps on a tile before the next (StepCursor)
  auto tile_row0 = [&](int i) { return (m_first + (last_tile_first ? m_count - 1 - i : i)) * BM; };
  auto advance = [&](StepCursor& at) { at.advance(tile_period, m_count); };
  // Warpgroup w stages its piece of a step's dQ tile (queries 64 (w / kColPanels).., columns kPanel
  // (w % kColPanels).., over all BN keys) in its sdQ boxes; one thread adds them into dq_accum.
  constexpr int kColPanels = DS / kPanel;
  auto piece_boxes = [&](int w) { return sdQ + w * Tr::kDqBoxesPerPiece * Tr::kDqBoxFloats; };
  // Adds warpgroup w's staged piece of the step at `at` into dq_accum (stores it when `first`): its boxes
  // differ only in their column. (The step's index, the second argument, is the split kernel's.)
  auto reduce_piece = [&](int w, int, const StepCursor& at, bool first) {
    const int row = seq.dq_row0() + tile_row0(at.tile) + 64 * (w / kColPanels);
    TmaCoords box = tma_coords(maps.dq_accum, 0, row, hk * s.group + at.head(), seq.map_batch());
    auto box_at = [&](int i) {  // false: a box of padded columns only
      box.c[0] = (w % kColPanels) * kPanel + i * kDqBoxCols;
      return D % kPanel == 0 || box.c[0] < D;
    };
    if (first) {
#pragma unroll
      for (int i = 0; i < Tr::kDqBoxesPerPiece; ++i)
        if (box_at(i)) tma_store(maps.dq_accum, box, piece_boxes(w) + i * Tr::kDqBoxFloats);
    } else {
#pragma unroll
      for (int i = 0; i < Tr::kDqBoxesPerPiece; ++i)
        if (box_at(i)) tma_reduce_add(maps.dq_accum, box, piece_boxes(w) + i * Tr::kDqBoxFloats);
    }
    bulk_commit();
  };

  if (tid == 0) init_bwd_block<kStages>(p, seq, block, rows, narrowed, kv_full, step_full, slot_free, kConsumerThreads);
  __syncthreads();

  if (warp < 4) {  // ---- producer warpgroup ----
    bwd_producer<Tr, kHasMask, kOrderedDq>(p, maps, seq, block, n_iters, tile_row0, advance, reduce_piece, sK, sV, sQ,
                                           sdO, sL, sD, kv_full, step_full, slot_free);
    return;
  }

  // ---- consumer warpgroups ----
  setmaxnreg_inc<Tr::kConsumerRegs>();
  const int ctid = tid - 128, cwarp = warp - 4;
  const int g = lane >> 2, t = lane & 3;
  // Known warp-uniform, so that the wgmma descriptors derived from wg_row stay in uniform registers.
  const int wg = warp_uniform(cwarp / 4);
  const int wg_row = wg * 64, warp_row = cwarp * 16;  // first key row of this warpgroup / warp
  const FlashShape ss = seq_shape();
  const KeyQueries queries[2] = {KeyQueries(key_queries<kHasMask>(n0 + warp_row + g, ss)),
                                 KeyQueries(key_queries<kHasMask>(n0 + warp_row + g + 8, ss))};
  // The steps' query tiles that need no per-element mask, found once rather than tested every step.
  const TileSpan full_tiles = full_query_tiles<kHasMask, BN, BM>(n0, ss, span, lane);

  // dQ runs one step behind. Step it waits (bar.sync) for the other warpgroup to announce
  // its dS^T rows of step it - 1 in sdS buffer (it - 1) % 2, then issues this warpgroup's piece of that
  // step's dQ tile (queries 64 qp.., columns 64 cp..; over all BN keys) ahead of dK. Once the piece has
  // landed, it stores its own dS^T rows of step it into buffer it % 2 — both warpgroups are done with
  // it: the other announced step it - 1 only after its piece of step it - 2 had landed — and announces
  // them (bar.arrive on its barrier of parity it % 2); then, while dK runs, it stages the piece in its
  // sdQ boxes and adds them into dq_accum by TMA. Step 0 issues its piece from the zeroed buffer 1 and
  // adds nothing: a branch around the issue makes ptxas serialise every wgmma of the kernel. The last
  // step's piece follows the loop. The leader's wait for its previous reductions to have read sdQ
  // precedes a barrier that every thread of the warpgroup passes before writing sdQ. With ordered
  // additions the writer warp issues the reductions instead, and frees sdQ through a barrier.
  const bool wg_leader = ctid % 128 == 0;
  const int qp = wg / kColPanels, cp = wg % kColPanels;  // this warpgroup's dQ piece
  auto sds_of = [&](int it) { return sdS + (it & 1) * BN * BM; };  // step it's dS^T buffer
  auto ready_barrier = [&](int w, int it) { return 2 + 2 * w + (it & 1); };
  auto issue_dq = [&](int it, float (&acc_dq)[8][4]) {
    gemm_ss_mnmajor<T, 64, BN>(acc_dq, sds_of(it) + qp * BN * kPanel, sK + cp * BN * kPanel);
    wgmma_commit();
  };
  // Stages the piece of step it's dQ tile (at `at`) and adds it into dq_accum, or hands it to the writer
  // warp (every thread of the warpgroup).
  auto add_dq = [&](int it, const StepCursor& at, const float (&acc_dq)[8][4]) {
    if constexpr (kOrderedDq) named_barrier_sync(free_barrier(wg, (it + 1) & 1), kWriterThreads);  // piece it - 1 read
    store_dq_boxes(piece_boxes(wg), acc_dq, cwarp, lane);
    fence_proxy_async();
    if constexpr (kOrderedDq) {
      named_barrier_arrive(full_barrier(wg, it & 1), kWriterThreads);
    } else {
      named_barrier_sync(full_barrier(wg, 0), 128);  // the warpgroup's sdQ boxes are complete
      if (wg_leader) reduce_piece(wg, it, at, false);
    }
  };
  // Ordered before step 0's dQ by the consumer barrier.
  for (int i = ctid; i < BN * BM / 8; i += kConsumerThreads) reinterpret_cast<uint4*>(sds_of(1))[i] = uint4{};
  fence_proxy_async();
  named_barrier_sync(1, kConsumerThreads);


  float acc_dk[kNtD][4] = {};  // dK of this thread's key rows
  float acc_dv[kNtD][4] = {};

  mbar_wait(kv_full, 0);
  RingPosition<kStages> pos;
  StepCursor at, prev;  // this step's and the one before
  for (int it = 0; it < n_iters; ++it, pos.advance(), prev = at, advance(at)) {
    const int slot = pos.slot;
    const T* sQt = sQ + slot * BM * DS;
    const T* sdOt = sdO + slot * BM * DS;
    const int m0 = tile_row0(at.tile);
    mbar_wait(&step_full[slot], pos.phase);

    float acc_s[kNtS][4], acc_dp[kNtS][4];  // S^T = K Q^T, dP^T = V dO^T (the first k step overwrites)
    wgmma_fence();
    gemm_ss_kmajor<T, BM, D>(acc_s, sK, BN, wg_row, sQt);  // over D of the DS columns
    wgmma_commit();
    gemm_ss_kmajor<T, BM, D>(acc_dp, sV, BN, wg_row, sdOt);
    wgmma_commit();
    wgmma_wait<1>();  // P^T is computed while dP^T runs
    fence_accumulators(acc_s);

    probs_t(acc_s, sL + slot * BM, queries, full_tiles.contains(m0 / BM), m0, t, s.scale_log2);
    // dS^T before dV is issued: P^T's A fragments need not live beside both fp32 tiles (else they spill
    // at D=64). Why not dV before dP^T lands: docs/perf-notes.md#backward-step-order.
    wgmma_wait<0>();  // dP^T
    fence_accumulators(acc_dp);
    dscores_t(acc_dp, acc_s, sD + slot * BM, t);
    std::uint32_t pa[BM / 16][4], dsa[BM / 16][4];  // P^T and dS^T rounded to T, k steps over the queries
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) a_from_acc<T>(pa[kk], acc_s, kk);
    wgmma_fence();
    gemm_rs_nmajor<T, DS, BM>(acc_dv, pa, sdOt);  // dV += P^T dO
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) a_from_acc<T>(dsa[kk], acc_dp, kk);
    float acc_dq[8][4];  // this warpgroup's piece of step it - 1's dQ tile
    if (!kOrderedDq && wg_leader) bulk_wait_read<0>();
    if (it > 0) named_barrier_sync(ready_barrier(1 - wg, it - 1), kConsumerThreads);
    wgmma_fence();
    issue_dq(it + 1, acc_dq);  // buffer (it + 1) % 2 = (it - 1) % 2
    gemm_rs_nmajor<T, DS, BM>(acc_dk, dsa, sQt);  // dK += dS^T Q
    wgmma_commit();
    wgmma_wait<1>();  // dQ: this warpgroup is done with buffer (it + 1) % 2
    fence_accumulators(acc_dv);
    fence_accumulators(acc_dq);
    store_ds_t<T, BN, BM>(sds_of(it), dsa, warp_row, lane);
    fence_proxy_async();
    named_barrier_arrive(ready_barrier(wg, it), kConsumerThreads);
    if (it > 0) add_dq(it - 1, prev, acc_dq);  // while dK runs
    wgmma_wait<0>();
    fence_accumulators(acc_dv);
    fence_accumulators(acc_dk);
    mbar_arrive(&slot_free[slot]);
  }
  if (n_iters > 0) {
    if (!kOrderedDq && wg_leader) bulk_wait_read<0>();
    named_barrier_sync(ready_barrier(1 - wg, n_iters - 1), kConsumerThreads);
    float acc_dq[8][4];
    wgmma_fence();
    issue_dq(n_iters - 1, acc_dq);
    wgmma_wait<0>();
    fence_accumulators(acc_dq);
    add_dq(n_iters - 1, prev, acc_dq);
    if (!kOrderedDq && wg_leader) tma_store_wait_all();  // the reductions have completed
  }

  named_barrier_sync(1, kConsumerThreads);  // every product is done with sK, sV, sQ and sdO
  T* sdK = sK;                     // (BN, kLd) padded staging
  T* sdV = sdK + BN * kLd<T, D>;   // (BN, kLd)
  // The first D columns of the accumulators (the others are padding: See Note [Padded head dims]).
  using StoredCols = const float(&)[D / 8][4];
  store_acc<T, D / 8>(sdK, kLd<T, D>, warp_row, 0, reinterpret_cast<StoredCols>(acc_dk), s.scale, s.scale, lane);
  store_acc<T, D / 8>(sdV, kLd<T, D>, warp_row, 0, reinterpret_cast<StoredCols>(acc_dv), 1.f, 1.f, lane);
  named_barrier_sync(1, kConsumerThreads);
  const int keys_valid = seq.len_k() - n0;
  T* dk = p.dk.at<T>(b, hk, seq.k0() + n0);
  T* dv = p.dv.at<T>(b, hk, seq.k0() + n0);
  store_tile<T, BN, D, kConsumerThreads>(dk, p.dk.row_stride, sdK, keys_valid, true, ctid);
  store_tile<T, BN, D, kConsumerThreads>(dv, p.dv.row_stride, sdV, keys_valid, true, ctid);
#endif
}

}  // namespace ft::flash::sm90
