// flash_sm90_scheduler.cuh — internal (CUDA builds only): the order in which the Hopper (sm_90a)
// attention kernels run their tiles, in one place: launch sections of grid heads sized to the L2
// (Note [L2 head sections]), the persistent forward's tile order and tile counter (Note [Persistent
// forward tiles]) and the backward's launch order, which is also the order of its deterministic dQ
// additions (Note [Ordered dQ additions]). The host side (section sizes from the device's L2, the
// forward's block count, the ascending-heads count and the test hooks that force each) is
// flash_sm90_scheduler.{h,cu}.
#pragma once

#include <cuda_runtime.h>

#include "ops/attention/cuda/flash_mask.cuh"
#include "ops/attention/cuda/flash_params.h"
#include "ops/attention/cuda/flash_varlen.cuh"

namespace ft::flash {

// Note [L2 head sections]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The Hopper kernels run the tiles of a few grid heads (batch x head) at a time, a launch section,
// instead of every head's longest tiles first: that streams the operands of all heads at once, and past
// the L2 they come from memory. A section holds as many grid heads as a third of the L2 holds the
// streamed operands of (K and V of a query head for the forward; Q, dO, L and D of a kv head's group for
// the backward), so they stay in L2 while the section's tiles run. The forward takes its tiles section by
// section (FwdTileOrder); the backward's grid is (section heads, key tiles, sections) (section_grid), and
// the hardware starts blocks x fastest, so one section's blocks go before the next one's (section_head).
// The last section may hold fewer heads; section_heads_for balances the sizes, because a last section of
// few heads starts its longest tiles last and leaves most SMs idle at the end. FlashFwdParams::
// section_heads and FlashBwdParams::dkdv_section_heads carry the size; force_flash_section_heads
// (tests) forces one. Measurements: docs/perf-notes.md#l2-head-sections.

// Heads per launch section: at most `most` (what the L2 budget allows) of `grid_heads`, preferring a
// divisor of grid_heads in [most / 2, most], then a size whose last section holds at least half a
// section. See Note [L2 head sections].
constexpr long long section_heads_for(long long most, long long grid_heads) {
  if (grid_heads <= 1) return 1;
  most = most < 1 ? 1 : most > grid_heads ? grid_heads : most;
  const long long least = (most + 1) / 2;
  for (long long h = most; h >= least; --h)
    if (grid_heads % h == 0) return h;
  for (long long h = most; h >= least; --h)
    if (2 * (grid_heads % h) >= h) return h;
  return most;
}
static_assert(section_heads_for(5, 16) == 4 && section_heads_for(4, 16) == 4 && section_heads_for(5, 32) == 4);
static_assert(section_heads_for(5, 13) == 5 && section_heads_for(4, 17) == 3 && section_heads_for(3, 10) == 2);
static_assert(section_heads_for(100, 12) == 12 && section_heads_for(0, 12) == 1 && section_heads_for(1, 7) == 1);

// Note [Ordered dQ additions]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The Hopper backward (flash_bwd_sm90_kernel.cuh) adds each step's dQ piece into the fp32 dq_accum.
// AttentionOptions::deterministic = false lets each warpgroup add its boxes as soon as they are staged,
// in whatever order the blocks reach a query tile; its blocks launch first key tile first (the longest
// causal blocks first). Deterministic (the default, kOrderedDq) fixes that order, so repeated runs give
// bit-identical gradients: a query tile's counter (dq_order) says how many key tiles have added into it,
// and a key tile adds once every key tile before it in its head's order has (key_tiles_before); the
// first one stores its boxes instead, so the pre-pass zeroes only the rows that see no key. Two writer
// warps of the producer warpgroup (even and odd steps) wait on the counter, issue the reductions (or
// stores) the consumers staged and, once they have landed, advance the counter. A writer awaits its turn
// before its piece is staged, so the read of a counter already there overlaps the consumers' products
// instead of following them: what is left between one key tile's additions landing and the next one's
// being issued is the increment's trip to L2 and the next writer's read of it.
// A block waits only on blocks launched before it (which run or have run: the hardware starts a grid's
// blocks in order), so a head's order is its launch order. For most heads it is descending: last key
// tile launched first, each block taking its query tiles first first, so a key tile reaches every causal
// query tile it shares with the next one a step later than that one and nothing waits, but the head's
// longest blocks launch last. The heads launched last (FlashBwdParams::ascending_heads of them,
// ascending_heads_for) go the other way, so the grid does not end on its longest blocks: first key tile
// first, ascending, each block taking its query tiles last first; blocks launched together then wait on
// each other about a step each, which costs less than the tail. With grouped-query heads an ascending block
// takes its steps tile by tile over the group's heads: head by head, it would reach the group's j-th head
// r j steps before the key tile before it (which has r = block_n / block_m more query tiles a head) and
// wait there, the waits adding up along the key tiles launched together. Descending blocks, whose
// predecessors run ahead, keep head by head (for the L2). The count depends on the shape alone, not on the
// device or the launch sections, so the gradients do not either; force_flash_ascending_heads (tests)
// forces one. Measurements: docs/perf-notes.md#ordered-dq-additions.

// How many of the last grid heads launch and add first key tile first, given the heads and their key
// tiles: a quarter of them, none in a grid of fewer than 1024 blocks whose heads have fewer than 64 key
// tiles, where the blocks of those heads start nearly together and waiting on each other costs more than
// the tail. See Note [Ordered dQ additions].
constexpr long long ascending_heads_for(long long grid_heads, long long key_tiles) {
  if (grid_heads * key_tiles < 1024 && key_tiles < 64) return 0;
  return (grid_heads + 3) / 4;
}
static_assert(ascending_heads_for(16, 128) == 4 && ascending_heads_for(32, 64) == 8 &&
              ascending_heads_for(2, 256) == 1);
static_assert(ascending_heads_for(64, 32) == 16 && ascending_heads_for(8, 32) == 0 && ascending_heads_for(1, 1) == 0);

namespace sm90 {

// Note [Persistent forward tiles]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The Hopper forward (flash_fwd_sm90_kernel.cuh) is persistent: FlashFwdParams::blocks blocks (one per
// SM, at most one per query tile; force_flash_forward_blocks sets another count for tests) each run query
// tiles one after another, the first their own index (first_tile), then the next from a counter in global
// memory (FlashFwdParams::tile_counter, zero at launch; claim_next_tile). A claim numbers tiles from the
// grid size on, up to tiles + blocks - 1 for the claims that find none left, as int: hence the host's
// limit of int max / 2 query tiles. The producer claims the next tile only once the current tile's copies
// are issued, so that the blocks that free up first take the tiles left; claimed at a tile's start, the
// causal forward's last tiles went to blocks still busy. Tiles are numbered in FwdTileOrder.
// Measurements: docs/perf-notes.md#persistent-forward.

// The query tiles of a forward in the order its persistent blocks take them: launch sections of
// section_heads grid heads (batch x query head) one after another, within a section tile by tile, longest
// (causal) first, over its heads, so a section's K and V stay in L2 while its tiles run. The last section
// may hold fewer heads. See Notes [Persistent forward tiles] and [L2 head sections].
struct FwdTileOrder {
  int grid_heads, section_heads, q_tiles;
  __device__ FwdTileOrder(const FlashFwdParams& p, int block_m)
      : grid_heads(p.shape.batch * p.shape.heads_q),
        section_heads(p.section_heads),
        q_tiles((p.shape.len_q + block_m - 1) / block_m) {}
  __device__ int count() const { return grid_heads * q_tiles; }
  // Tile `tile` (< count()) -> its grid head bh and query tile y (y = 0 holds the last rows).
  __device__ void at(int tile, int& bh, int& y) const { section_tile(tile, grid_heads, section_heads, q_tiles, bh, y); }
  // Tile `tile` of grid_heads heads of q_tiles query tiles each, in launch sections of section_heads heads.
  __device__ static void section_tile(int tile, int grid_heads, int section_heads, int q_tiles, int& bh, int& y) {
    const int per_section = section_heads * q_tiles;
    const int section = tile / per_section, in_section = tile - section * per_section;
    const int heads = min(section_heads, grid_heads - section * section_heads);
    y = in_section / heads;
    bh = section * section_heads + (in_section - y * heads);
  }
};

// Note [Packed-sequence tiles]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Over packed sequences (Note [Packed sequences] in flash_varlen.cuh) the Hopper kernels schedule tiles
// sequence by sequence: no block is spent on a padded maximum and no tile spans two sequences. A prefix
// over the sequences' tile counts (varlen_tile_offsets, FlashFwdParams::varlen_tiles and FlashBwdParams::
// varlen_key_tiles, computed on the device before the launch) numbers every tile of every sequence once;
// sequence_of finds a tile's sequence by binary search.
// - Forward: the persistent blocks' tiles are numbered sequence after sequence (Hq times the sequence's
//   query tiles each), and within a sequence in the dense order (FwdTileOrder over its query heads). The
//   producer decodes each claimed tile (decode_fwd_tile) and hands the sequence's rows and lengths to the
//   consumers with the tile (FwdTile in shared memory).
// - Backward: the grid's y enumerates the key tiles of every sequence, sequence after sequence, with the
//   kv heads in x and z as for dense calls (Note [L2 head sections]). A (sequence, kv head)'s blocks then
//   launch in y order, which is the order of its dQ additions (Note [Ordered dQ additions]): last key tile
//   first, or first first for the ascending heads.

// The sequence holding item `index` (< offsets[batch]) of a prefix `offsets` (batch + 1 entries,
// non-decreasing, offsets[0] = 0): the last b with offsets[b] <= index (which skips empty sequences).
__device__ __forceinline__ int sequence_of(const int* offsets, int batch, int index) {
  int lo = 0, hi = batch;  // offsets[lo] <= index < offsets[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (offsets[mid] <= index)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// A forward tile as the producer hands it to the consumers: batch entry b (< 0: none left), query head h,
// query tile y, and its sequence's first rows and lengths (the call's for dense calls).
struct FwdTile {
  int b = -1, h = 0, y = 0, q0 = 0, k0 = 0, len_q = 0, len_k = 0;
};
inline constexpr int kFwdTileInts = 7, kFwdTileWords = 4;  // FwdTile in shared memory: ints, 8-byte words
static_assert(sizeof(FwdTile) == kFwdTileInts * sizeof(int) && kFwdTileInts <= 2 * kFwdTileWords);

__device__ __forceinline__ void publish_tile(volatile int* slot, const FwdTile& tile) {
  const int v[kFwdTileInts] = {tile.b, tile.h, tile.y, tile.q0, tile.k0, tile.len_q, tile.len_k};
#pragma unroll
  for (int i = 0; i < kFwdTileInts; ++i) slot[i] = v[i];
}
// A published FwdTile, read field by field where it is used (each read a load from shared memory).
struct FwdTileSlot {
  const volatile int* w;
  __device__ int b() const { return w[0]; }
  __device__ int h() const { return w[1]; }
  __device__ int y() const { return w[2]; }
  __device__ int q0() const { return w[3]; }
  __device__ int k0() const { return w[4]; }
  __device__ int len_q() const { return w[5]; }
  __device__ int len_k() const { return w[6]; }
};

// Tile `tile` (FwdTileOrder numbers, or Note [Packed-sequence tiles]'s) of a forward of block_m-row query
// tiles; b < 0 when it is past the last tile.
__device__ __forceinline__ FwdTile decode_fwd_tile(const FlashFwdParams& p, int block_m, int tile) {
  const FlashShape& s = p.shape;
  FwdTile out;
  int bh = 0;
  if (!s.cu_seqlens_q) {
    const FwdTileOrder order(p, block_m);
    if (tile >= order.count()) return out;
    order.at(tile, bh, out.y);
    out.b = bh / s.heads_q;
    out.h = bh % s.heads_q;
    out.len_q = s.len_q;
    out.len_k = s.len_k;
    return out;
  }
  if (tile >= s.heads_q * p.varlen_tiles[s.batch]) return out;
  const int b = sequence_of(p.varlen_tiles, s.batch, tile / s.heads_q);
  const int base = p.varlen_tiles[b], q_tiles = p.varlen_tiles[b + 1] - base;
  FwdTileOrder::section_tile(tile - s.heads_q * base, s.heads_q, p.section_heads, q_tiles, out.h, out.y);
  out.b = b;
  out.q0 = s.cu_seqlens_q[b];
  out.k0 = s.cu_seqlens_k[b];
  out.len_q = s.cu_seqlens_q[b + 1] - out.q0;
  out.len_k = s.cu_seqlens_k[b + 1] - out.k0;
  return out;
}

// A persistent forward block's first tile, and the tile of its next claim on the counter (FwdTileOrder
// numbers; count() or more: none left). See Note [Persistent forward tiles].
__device__ __forceinline__ int first_tile() { return blockIdx.x; }
__device__ __forceinline__ int claim_next_tile(int* tile_counter) {
  return atomicAdd(tile_counter, 1) + static_cast<int>(gridDim.x);
}

// The grid of a Hopper backward launched in sections of `section` grid heads, given the grid of one
// section (section, key tiles) (tile_grid in flash_launch_template.cuh): (section, key tiles, sections).
// See Note [L2 head sections].
inline dim3 section_grid(const dim3& section_tiles, int heads) {
  return dim3(section_tiles.x, section_tiles.y, (heads + section_tiles.x - 1) / section_tiles.x);
}

// The grid head (batch x kv head) of a block of a section_grid of grid_heads heads. The last section may
// hold fewer heads: its other blocks have none (-1) and return at once.
__device__ __forceinline__ int section_head(int grid_heads) {
  const int bh = blockIdx.z * gridDim.x + blockIdx.x;
  return bh < grid_heads ? bh : -1;
}

// A backward block's work: batch entry b (< 0: none, the block returns at once), kv head hk, key tile
// n_block of the sequence's n_tiles, and whether its head adds ascending (See Note [Ordered dQ additions]).
struct BwdBlock {
  int b, hk, n_block, n_tiles;
  bool ascending;
};

// The block of a section_grid: dense calls' y is the key tile of grid head (batch x kv head) bh; packed
// sequences' y enumerates every sequence's key tiles, the grid heads being the kv heads (See Note
// [Packed-sequence tiles]). `ordered`: the additions are ordered (all but the last ascending_heads heads
// descend). One return, every field set: the block keeps them in registers.
__device__ __forceinline__ BwdBlock bwd_block(const FlashBwdParams& p, bool ordered) {
  const FlashShape& s = p.shape;
  const bool packed = s.cu_seqlens_k != nullptr;
  const int grid_heads = packed ? s.heads_kv : s.batch * s.heads_kv;
  const int bh = section_head(grid_heads), y = static_cast<int>(blockIdx.y);
  const bool ascending = !ordered || bh >= grid_heads - p.ascending_heads;
  int b = bh < 0 ? -1 : bh / s.heads_kv, hk = bh % s.heads_kv, first = 0, n_tiles = static_cast<int>(gridDim.y);
  if (packed && bh >= 0) {
    hk = bh;
    if (y < p.varlen_key_tiles[s.batch]) {
      b = sequence_of(p.varlen_key_tiles, s.batch, y);
      first = p.varlen_key_tiles[b];
      n_tiles = p.varlen_key_tiles[b + 1] - first;
    } else {
      b = -1;
    }
  }
  const int n_local = y - first;
  return BwdBlock{b, hk, ascending ? n_local : n_tiles - 1 - n_local, n_tiles, ascending};
}

// A backward block's sequence in shared memory, written once by thread 0 before the block's barrier and read
// where it is used, not held in registers (the producer warpgroup's warps keep 24): its first rows, lengths,
// key tiles, first dq_accum row, batch coordinate in the TMA maps and first dq_order counter (the call's
// lengths and rows 0 for dense calls).
struct BwdSeqSlot {
  volatile int* w;
  __device__ void publish(int q0, int k0, int len_q, int len_k, int n_tiles, int dq_row0, int map_batch,
                          int counter0) const {
    w[0] = q0, w[1] = k0, w[2] = len_q, w[3] = len_k, w[4] = n_tiles, w[5] = dq_row0, w[6] = map_batch;
    w[7] = counter0;
  }
  __device__ int q0() const { return w[0]; }
  __device__ int k0() const { return w[1]; }
  __device__ int len_q() const { return w[2]; }
  __device__ int len_k() const { return w[3]; }
  __device__ int n_tiles() const { return w[4]; }
  __device__ int dq_row0() const { return w[5]; }
  __device__ int map_batch() const { return w[6]; }
  __device__ int counter0() const { return w[7]; }
  // The sequence's shape for the mask helpers, every field read where it is used (SeqShapeRef).
  __device__ SeqShapeRef shape(const FlashShape& s) const {
    return SeqShapeRef{w[2], w[3], s.window_left, s.window_right, s.sink_tokens};
  }
};
inline constexpr int kBwdSeqWords = 4;  // BwdSeqSlot's 8 ints in 8-byte words

// How many key tiles add into query tile `tile` before key tile n_block (of n_tiles) does, i.e. visit it
// and come earlier in the head's order: lower key tiles when `ascending`, else higher ones. A count of 0
// makes n_block the first, which stores its piece. Every lane of the warp calls it and gets the count.
// Without a left window bound (causal, no mask, sink tokens) the key tiles that visit a query tile are a
// prefix of the key tiles: every key tile's query span ends at the last query tile and starts no earlier
// than the one before it (key_tile_queries). The count is then where that prefix ends in [first, end),
// found by a search (warp_first_true) instead of testing every key tile of the range, a few hundred at long
// context, for every step. See Note [Ordered dQ additions].
template <bool kHasMask, int BN, int BM, class Shape>
__device__ __forceinline__ int key_tiles_before(int n_block, int n_tiles, bool ascending, int tile, const Shape& s,
                                                int lane) {
  const int first = ascending ? 0 : n_block + 1, end = ascending ? n_block : n_tiles;
  auto visits = [&](int n) { return key_tile_queries<kHasMask, BN, BM>(n * BN, s).contains(tile); };
  if (!kHasMask || s.window_left < 0)
    return warp_first_true(first, end, lane, [&](int n) { return !visits(n); }) - first;
  int count = 0;
  for (int base = first; base < end; base += 32) {
    const int n = base + lane;
    count += __popc(__ballot_sync(0xffffffffu, n < end && visits(n)));
  }
  return count;
}

// key_tiles_before for a writer warp that walks its steps' query tiles, carrying `prefix` and `last_tile` from
// call to call (start last_tile at -1). Without a left window bound the key tiles that visit a query tile are
// a prefix of the range, whose end does not decrease as the tile grows (each bound of key_tile_queries is
// non-decreasing in the key tile). Where the tile grows or stays, the end is moved up from the last call's,
// a key tile or so a step for the steps' consecutive tiles; where it drops and the end moves (a descending
// block's next query head), or at the first call, it is searched for (key_tiles_before). With a left window,
// key_tiles_before's count. See Note [Ordered dQ additions].
template <bool kHasMask, int BN, int BM, class Shape>
__device__ __forceinline__ int key_tiles_before_walked(int& prefix, int& last_tile, int n_block, int n_tiles,
                                                       bool ascending, int tile, const Shape& s, int lane) {
  if (kHasMask && s.window_left >= 0)
    return key_tiles_before<kHasMask, BN, BM>(n_block, n_tiles, ascending, tile, s, lane);
  const int first = ascending ? 0 : n_block + 1, end = ascending ? n_block : n_tiles;
  auto visits = [&](int n) { return key_tile_queries<kHasMask, BN, BM>(n * BN, s).contains(tile); };
  if (last_tile < 0 || (tile < last_tile && prefix > first && !visits(prefix - 1))) {
    prefix = first + key_tiles_before<kHasMask, BN, BM>(n_block, n_tiles, ascending, tile, s, lane);
  } else {
    while (prefix < end && visits(prefix)) ++prefix;
  }
  last_tile = tile;
  return prefix - first;
}

}  // namespace sm90

}  // namespace ft::flash
