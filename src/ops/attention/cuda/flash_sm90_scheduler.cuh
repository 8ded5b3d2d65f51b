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
// stores) the consumers staged and, once they have landed, advance the counter.
// A block waits only on blocks launched before it (which run or have run: the hardware starts a grid's
// blocks in order), so a head's order is its launch order. For most heads it is descending: last key
// tile launched first, each block taking its query tiles first first, so a key tile reaches every causal
// query tile it shares with the next one a step later than that one and nothing waits, but the head's
// longest blocks launch last. The heads launched last (FlashBwdParams::ascending_heads of them,
// ascending_heads_for) go the other way, so the grid does not end on its longest blocks: first key tile
// first, ascending, each block taking its query tiles last first; blocks launched together then wait on
// each other about a step each, which costs less than the tail. The count depends on the shape alone,
// not on the device or the launch sections, so the gradients do not either; force_flash_ascending_heads
// (tests) forces one. Measurements: docs/perf-notes.md#ordered-dq-additions.

// Note [Sink tokens and the addition order]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Sink tokens make the key tiles that hold them visit every query tile: their blocks run Nq / BM steps
// where a window's run about (window + BN) / BM. In an ascending head they add first and take their
// query tiles last first, so every other block of the head waits, on the SM it holds, until their sweep
// comes down to its tiles. With Sm90BwdTiles::sinks_descend every head descends when there are sink
// tokens: the sink tiles add last and launch last, and their long loops run beside the next launch
// sections' blocks; only the grid's last section ends on them.

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
  __device__ void at(int tile, int& bh, int& y) const {
    const int per_section = section_heads * q_tiles;
    const int section = tile / per_section, in_section = tile - section * per_section;
    const int heads = min(section_heads, grid_heads - section * section_heads);
    y = in_section / heads;
    bh = section * section_heads + (in_section - y * heads);
  }
};

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

// How many key tiles add into query tile `tile` before key tile n_block (of n_tiles) does, i.e. visit it
// and come earlier in the head's order: lower key tiles when `ascending`, else higher ones. A count of 0
// makes n_block the first, which stores its piece. Every lane of the warp calls it and gets the count.
// See Note [Ordered dQ additions].
template <bool kHasMask, int BN, int BM>
__device__ __forceinline__ int key_tiles_before(int n_block, int n_tiles, bool ascending, int tile, const FlashShape& s,
                                                int lane) {
  const int first = ascending ? 0 : n_block + 1, end = ascending ? n_block : n_tiles;
  int count = 0;
  for (int base = first; base < end; base += 32) {
    const int n = base + lane;
    const bool visits = n < end && key_tile_queries<kHasMask, BN, BM>(n * BN, s).contains(tile);
    count += __popc(__ballot_sync(0xffffffffu, visits));
  }
  return count;
}

}  // namespace sm90

}  // namespace ft::flash
