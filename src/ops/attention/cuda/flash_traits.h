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
    {128, 64, 2, 2, 128, 32, 2, 1, 2, 64, 64, 1, 2, 128, 32, 2, 1, 2, 2},  // d=64   (atomic: docs/perf-notes.md#sm80-tiles)
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
    // The measurements behind these values and what else was tried: docs/perf-notes.md#attention-kernels.
    // A third backward buffer does not fit at d=64 (the dS^T and dQ staging take 96 KB).
    {3, 128, 2, 0, 0, 1, 2, 128, 2},  // d=64
    {2, 128, 3, 1, 1, 0, 2, 64, 2},   // d=128
};
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
