// flash_traits.h — internal (CUDA builds only): THE tunable table of tile sizes, warps and pipeline
// depths of the FlashAttention-2 kernels, one row per (16-bit or fp32 inputs, head dim). A warp owns
// 16 * warp_m rows of its kernel's row tile (warp_m mma row blocks share every B fragment it loads
// from shared memory), so the warp count follows from the row tile:
//   forward      : query tile fwd_m, key tile fwd_n, warps = fwd_m / (16 fwd_wm), fwd_st K/V buffers
//   dK/dV kernel : key tile kv_n, query tile kv_m, kv_wd warps split the head dim of dK/dV,
//                  warps = kv_n / (16 kv_wm) * kv_wd, kv_st Q/dO buffers
//   dQ kernel    : query tile dq_m, key tile dq_n, warps = dq_m / (16 dq_wm), dq_st K/V buffers
//   atomic dK/dV/dQ kernel (AttentionOptions::deterministic = false): key tile at_n, query tile at_m,
//                  at_wm, at_wd and at_st as kv_wm, kv_wd and kv_st; its dQ = dS K product splits the
//                  (at_m, D) tile over the same warps into at_qd column groups of D / at_qd columns
//                  and warps / at_qd row groups (at_m must be a multiple of 16 row groups)
// Shared-memory rows are padded by 16 bytes. Registers bound the accumulators: per thread a warp
// holds 2 * warp_m * (columns / 8) floats for each 16 x columns accumulator.
#pragma once

namespace ft::flash {

inline constexpr int kHeadDims[] = {16, 32, 64, 80, 96, 128, 256};
inline constexpr const char* kHeadDimList = "16, 32, 64, 80, 96, 128, 256";
inline constexpr int kQueryPad = 128;  // query tiles of every kernel divide this (backward scratch rows)
inline constexpr int kPreRows = 64;      // backward pre-pass: query rows per block
inline constexpr int kPreThreads = 256;  // backward pre-pass: 8 warps, 8 rows each

struct FlashTiles {
  int fwd_m, fwd_n, fwd_wm, fwd_st;
  int kv_n, kv_m, kv_wm, kv_wd, kv_st;
  int dq_m, dq_n, dq_wm, dq_st;
  int at_n, at_m, at_wm, at_wd, at_st, at_qd;
};

// Rows in kHeadDims order.
inline constexpr FlashTiles kTiles16[] = {
    // fwd:  m   n wm st | dkdv: n   m wm wd st | dq: m   n wm st | atomic: n   m wm wd st qd
    {128, 64, 2, 2, 128, 32, 2, 1, 2, 64, 64, 1, 2, 128, 64, 2, 1, 2, 1},  // d=16
    {128, 64, 2, 2, 128, 32, 2, 1, 2, 64, 64, 1, 2, 128, 32, 2, 1, 2, 2},  // d=32
    {128, 64, 2, 2, 128, 32, 2, 1, 2, 64, 64, 1, 2, 128, 32, 2, 1, 2, 2},  // d=64   (atomic: 128 x 64 with wm 1 took 7.80 ms bwd on the leaderboard, this 6.71)
    {128, 64, 2, 2, 64, 64, 1, 1, 2, 64, 64, 1, 2, 64, 64, 1, 1, 2, 1},    // d=80   (the 2.7b model's; as d=96)
    {128, 64, 2, 2, 64, 64, 1, 1, 2, 64, 64, 1, 2, 64, 64, 1, 1, 2, 1},    // d=96
    {128, 64, 2, 2, 64, 32, 1, 1, 2, 64, 64, 1, 2, 64, 32, 1, 1, 2, 2},    // d=128
    {64, 32, 1, 2, 64, 32, 1, 2, 2, 64, 32, 1, 2, 64, 32, 1, 2, 2, 4},     // d=256  (dK/dV, dQ ~135 KB)
};
inline constexpr FlashTiles kTiles32[] = {
    {128, 64, 1, 2, 64, 64, 1, 1, 2, 64, 64, 1, 2, 64, 64, 1, 1, 2, 1},  // d=16
    {128, 64, 1, 2, 64, 64, 1, 1, 2, 64, 64, 1, 2, 64, 64, 1, 1, 2, 1},  // d=32
    {128, 64, 1, 2, 64, 64, 1, 1, 1, 64, 64, 1, 1, 64, 64, 1, 1, 1, 1},  // d=64   (forward 104 KB)
    {128, 64, 1, 1, 64, 64, 1, 1, 1, 64, 64, 1, 1, 64, 64, 1, 1, 1, 1},  // d=80   (as d=96)
    {128, 64, 1, 1, 64, 64, 1, 1, 1, 64, 64, 1, 1, 64, 64, 1, 1, 1, 1},  // d=96   (~102 KB)
    {64, 64, 1, 1, 64, 64, 1, 1, 1, 64, 64, 1, 1, 64, 64, 1, 1, 1, 1},   // d=128  (dK/dV, dQ 135 KB; atomic 153 KB)
    {64, 32, 1, 1, 32, 32, 1, 2, 1, 32, 32, 1, 1, 32, 32, 1, 2, 1, 2},   // d=256  (~133 KB)
};

// Hopper (sm_90a) kernels, 16-bit inputs, head dims 64 and 128 (flash_*_sm90_kernel.cuh). Each
// warpgroup (4 warps) owns 64 rows of its kernel's row tile, so the row tile is 64 * warpgroups:
//   forward : fwd_wg consumer warpgroups x 64 queries (plus one TMA producer warpgroup), key tile
//             fwd_n, fwd_st K/V buffers, fwd_ov = 1 to overlap each warpgroup's softmax with its own
//             P V (S of the next tile live beside P: needs the registers of 2 warpgroups), fwd_pp = 1
//             (with fwd_ov and 2 consumers) to have the consumers take turns issuing products (ping-pong),
//             fwd_ts = 1 (d=64 only) to have the tensor cores sum the rows of P: O += P V over 8 more
//             columns, a panel of ones, instead of a floating-point add per score
//   backward: kv_wg warpgroups x 64 keys, query tile kv_m, kv_st Q/dO buffers (beside the dS^T and fp32
//             dQ staging tiles of the fused dQ)
// Tiles are 128-byte-swizzled (no padding). Registers bound the tiles: an accumulator of 64 x n takes
// n / 2 floats per thread, and 1 block per SM leaves 65536 / threads registers to each thread.
struct FlashSm90Tiles {
  int fwd_wg, fwd_n, fwd_st, fwd_ov, fwd_pp, fwd_ts;
  int kv_wg, kv_m, kv_st;
};
inline constexpr FlashSm90Tiles kSm90Tiles[] = {
    // fwd: wg   n st ov pp ts | bwd: wg   m st
    // Deeper forward rings changed nothing measurable; a third backward buffer at d=128 neither, and at
    // d=64 it does not fit (the dS^T and dQ staging take 96 KB). A 128-query step at d=64 took the
    // backward of the former deterministic pair (a dK/dV kernel, then a dQ kernel) 4.02 -> 3.51 ms (H100).
    // Overlap (H200, interleaved): at d=128 the forward's, with a third buffer, took B2 H16 N8192 causal
    // 1.00-1.07 -> 0.90-0.98 ms and non-causal N16384 8.05 -> 7.33 ms; with 2 buffers it gained nothing.
    // Ping-pong on top: non-causal 7.33 -> 7.22-7.29 ms, causal within noise. At d=64 the forward's
    // overlap needs 2 warpgroups (128 keys) or 64-key tiles, and took the leaderboard forward 1.17-1.24
    // -> 1.54 and 1.40 ms (2 warpgroups with ping-pong and 3 buffers: 1.33). The same overlap in the
    // backward does not fit in registers at either head dim.
    // The deterministic backward's ordered dQ additions replaced that pair (H200, interleaved):
    // leaderboard 3.35 -> 2.93 ms, d=128 causal B2 H16 N8192 3.24-3.26 -> 3.04 ms, non-causal N4096
    // (d=128 B2 H16) 1.60 -> 1.45-1.47 and (d=64 B4 H16) 1.86 -> 1.53-1.54 ms. One writer warp (it waits
    // for each step's additions to land before taking the next) took 3.69 and 3.46-3.51 ms instead; two
    // interleaved chains of key tiles (a second accumulator) 3.40 and 3.83-3.88 with one writer, 3.05-3.06
    // and 3.36-3.37 with two; without the counter waits (order not fixed) the two writers ran 3.20 / 3.17
    // ms with the last key tile first and 2.90-3.00 / 3.01-3.04 with the first first.
    // Launch order of the ordered additions (H100, interleaved, deterministic backward, leaderboard /
    // d=128): every head last key tile first, 2.89-2.97 / 3.00-3.14 ms (the longest blocks end the grid;
    // a simulation of the launch gives a 6% tail); every head first key tile first (ascending, query
    // tiles last first), 3.23-3.29 / 2.87-2.96 (blocks launched together wait on each other: 2.87 /
    // 2.72-2.75 without the waits); the heads of the last launch section so, 2.77-2.86 / 2.85-2.94; the
    // last quarter of the heads so (kept, ascending_heads_for: not tied to the sections), 2.77-2.85 /
    // 2.95-2.96.
    // Storing the first piece instead of zeroing dq_accum, alone: 2.96-2.97 / 3.01-3.07.
    // The forward is persistent (one block per SM taking query tiles from a counter in global memory, Q
    // freed at a tile's last S, O stored from registers, the K/V ring and the ping-pong turns running on
    // across tiles). A first version (36f7048) ran slower, 879 -> 925 us under ncu at d=128 causal B2 H16
    // N8192, its loop over tiles taking the wgmma descriptors off the uniform datapath; a static schedule
    // spread the work unevenly (SM active cycles 1.24M-2.07M) and fell to 63% L2 hits. Once the descriptors
    // stayed uniform (warp_uniform, desc_advance), the tiled kernel was measured at about 6.3k cycles per
    // block outside its key-tile loop (SM cycles of non-causal d=128 grids of 2-64 key tiles per block, a
    // straight line, 2.44k per key tile): 7% of the causal N8192 forward. Persistent, SM cycles elapsed
    // under ncu at base clocks (H100, e918f8f's kernels -> persistent): d=128 causal B2 H16 N8192 1.404M ->
    // 1.363M, causal B8 H16 N2048 468k -> 438k, non-causal B32 H16 N1024 822k -> 810k; d=64 causal B2 H16
    // N8192 978k -> 967k, causal B8 H16 N2048 350k -> 324k, non-causal B32 H16 N1024 658k -> 582k; the
    // leaderboard 1.820M -> 1.825M. Claiming the next tile at a tile's start rather than after its last
    // copy is issued left the causal grids a longer tail (d=128 N8192 1.417M, 5% above the SMs' mean).
    // Ping-pong off at d=128 on the persistent kernel: causal N8192 1.364M -> 1.358M, non-causal N8192
    // 2.629M -> 2.591M, B1 H16 N16384 causal 2.600M -> 2.575M, but causal B8 H16 N2048 437k -> 443k and
    // non-causal B32 H16 N1024 808k -> 810k; kept on.
    // Freeing a slot's K once its S lands (its own mbarrier, K copied a tile ahead of V) instead of with
    // its V after the P V changed nothing: d=128 forward 892.7 -> 892.1 us under ncu (H100).
    // At d=64 the forward's MUFU (exp2, 16 per clock per SM) and tensor pipes are each about half busy
    // (52.9% and 51.1% under ncu). Moving the exp2 of every k-th score tile to the FMA pipe (2^f by a
    // cubic, the integer part into the exponent bits; 594 GPU tests passed) made it slower, at base
    // clocks 1.434 ms -> 1.507-1.510 (k = 8), 1.594 (k = 4) and 1.612-1.613 (k = 3), with 10.6%, 21%
    // and 26% more instructions: the loop is bound by issue, not by the MUFU unit (H100, leaderboard).
    // So the row sums went to the tensor cores instead (fwd_ts): at base clocks 1.432 -> 1.381 ms, with
    // 573.3M -> 500.3M instructions and the tensor pipe 51.1% -> 56.3% busy (H100, ncu); in the bench,
    // interleaved, 1.17-1.21 -> 1.12-1.14 ms. Not tried at d=128, whose loop is pipelined.
    // At d=128 ptxas had moved the wait for P V up to the start of the softmax (schedule_boundary), so
    // only the ping-pong hid it: with the wait after the softmax, SM cycles under ncu at base clocks fell
    // 1.539M -> 1.517M (causal B2 H16 N8192) and 10.89M -> 10.47M (non-causal N16384) (H100). The same
    // loops with the softmax left out take 1.143M and 8.33M cycles, 89% and 98% of the tensor cores'
    // peak rate (4096 flop per cycle per SM): what is left is softmax not hidden behind the products.
    // With that overlap in place (5a45555), ping-pong off changed the causal case nothing (1.392M cycles
    // either way) and took non-causal B2 H16 N8192 2.547M -> 2.507M (the persistent kernel's figures above).
    // The row max from four partial maxima (a shallower chain) ran slower: 1.392M -> 1.401M, leaderboard
    // forward 1.782M -> 1.813M (H100, ncu, base clocks). The exp2 of every k-th score tile on the FMA
    // pipe (the cubic above) ran slower at d=128 as well: causal 1.371M -> 1.540M (k = 4) and 1.438M
    // (k = 8), non-causal N8192 2.523M -> 2.856M and 2.739M (e918f8f): MUFU is not what bounds it there.
    {3, 128, 2, 0, 0, 1, 2, 128, 2},  // d=64
    {2, 128, 3, 1, 1, 0, 2, 64, 2},   // d=128
};
// Heads per launch section of a Hopper kernel (flash_api.cu): at most `most` (what the L2 budget allows)
// of `grid_heads`, preferring a divisor of grid_heads in [most / 2, most], then a size whose last section
// holds at least half a section. A last section of few heads starts its longest tiles last and leaves most
// SMs idle at the end: on an H200 (60 MB of L2) sections of 5 over the leaderboard's 16 heads left one
// head last, and its forward ran 1.27-1.31 ms against 1.19-1.26 without sections (sections of 4: 1.19-1.25).
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

// Ordered dQ additions of the Hopper backward (flash_bwd_sm90_kernel.cuh): how many of the last grid
// heads launch and add first key tile first, given the heads and their key tiles. A quarter of them, so
// the grid does not end on the longest causal blocks; none in a grid of fewer than 1024 blocks whose
// heads have fewer than 64 key tiles, where the blocks of those heads start nearly together and waiting
// on each other costs more than the tail. H100, deterministic backward, interleaved, none -> a quarter:
// leaderboard 2.92-2.97 -> 2.77-2.85 ms, d=128 causal B2 H16 N8192 3.02-3.12 -> 2.95-2.96, B1 H2 N32768
// 3.24 -> 2.76, d=64 causal B4 H16 N4096 0.91-0.92 -> 0.88-0.89, but d=128 causal B1 H8 N4096 (256
// blocks of 32 key tiles) 0.28 -> 0.30-0.31. A function of the shape alone, so the gradients do not
// depend on the device or the launch sections.
constexpr long long ascending_heads_for(long long grid_heads, long long key_tiles) {
  if (grid_heads * key_tiles < 1024 && key_tiles < 64) return 0;
  return (grid_heads + 3) / 4;
}
static_assert(ascending_heads_for(16, 128) == 4 && ascending_heads_for(32, 64) == 8 &&
              ascending_heads_for(2, 256) == 1);
static_assert(ascending_heads_for(64, 32) == 16 && ascending_heads_for(8, 32) == 0 && ascending_heads_for(1, 1) == 0);

constexpr FlashSm90Tiles flash_sm90_tiles(int d) { return d == 64 ? kSm90Tiles[0] : kSm90Tiles[1]; }
// Keys per block of the Hopper backward: 64 per consumer warpgroup.
constexpr int sm90_bwd_block_n(int d) { return 64 * flash_sm90_tiles(d).kv_wg; }
constexpr bool has_sm90_kernels(int elem_bytes, int d) { return elem_bytes == 2 && (d == 64 || d == 128); }

constexpr int head_dim_index(int d) {
  for (int i = 0; i < static_cast<int>(sizeof(kHeadDims) / sizeof(kHeadDims[0])); ++i)
    if (kHeadDims[i] == d) return i;
  return -1;
}

// The row of the table for inputs of `elem_bytes` bytes (2 or 4) and head dim d (one of kHeadDims).
constexpr FlashTiles flash_tiles(int elem_bytes, int d) {
  return elem_bytes == 4 ? kTiles32[head_dim_index(d)] : kTiles16[head_dim_index(d)];
}

}  // namespace ft::flash
