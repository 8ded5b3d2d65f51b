// flash_traits.h — internal (CUDA builds only): THE tunable table of tile sizes, warps and pipeline
// depths of the FlashAttention-2 kernels: one row per (16-bit or fp32 inputs, head dim) for the portable
// sm80 kernels, one per head dim for the Hopper ones, each row a struct of named per-kernel tiles.
// The measurements behind the values and what else was tried: docs/perf-notes.md#attention-kernels.
#pragma once

namespace ft::flash {

inline constexpr int kHeadDims[] = {16, 32, 64, 80, 96, 128, 256};
inline constexpr const char* kHeadDimList = "16, 32, 64, 80, 96, 128, 256";
inline constexpr int kQueryPad = 128;  // query tiles of every kernel divide this (backward scratch rows)
inline constexpr int kPreRows = 64;      // backward pre-pass: query rows per block
inline constexpr int kPreThreads = 256;  // backward pre-pass: 8 warps, 8 rows each

// ---- portable (sm80) kernels: flash_fwd_sm80_kernel.cuh, flash_bwd_sm80_kernel.cuh ----
// A warp owns 16 * warp_m rows of its kernel's row tile (warp_m mma row blocks share every B fragment it
// loads from shared memory), so the warp count follows from the row tile. Shared-memory rows are padded by
// 16 bytes. Registers bound the accumulators: per thread a warp holds 2 * warp_m * (columns / 8) floats
// for each 16 x columns accumulator.

// The forward kernel: warps = block_m / (16 warp_m).
struct Sm80FwdTiles {
  int block_m;  // query rows per block
  int block_n;  // keys per K/V tile
  int warp_m;   // 16-row blocks per warp
  int stages;   // K/V ring buffers
};
// The deterministic dK/dV kernel: warps = block_n / (16 warp_m) * warps_d.
struct Sm80DkdvTiles {
  int block_n;  // keys per block
  int block_m;  // query rows per step
  int warp_m;   // 16-row blocks of keys per warp
  int warps_d;  // warps splitting the head dim of dK and dV
  int stages;   // Q/dO ring buffers
};
// The deterministic dQ kernel: warps = block_m / (16 warp_m).
struct Sm80DqTiles {
  int block_m;  // query rows per block
  int block_n;  // keys per K/V tile
  int warp_m;   // 16-row blocks per warp
  int stages;   // K/V ring buffers
};
// The atomic dK/dV/dQ kernel (AttentionOptions::deterministic = false): the dK/dV kernel's fields, and
// its dQ = dS K product splits the (block_m, D) tile over the same warps into dq_warps_d column groups of
// D / dq_warps_d columns and warps / dq_warps_d row groups (block_m a multiple of 16 row groups).
struct Sm80AtomicTiles {
  int block_n;     // keys per block
  int block_m;     // query rows per step
  int warp_m;      // 16-row blocks of keys per warp
  int warps_d;     // warps splitting the head dim of dK and dV
  int stages;      // Q/dO ring buffers
  int dq_warps_d;  // column groups of the dQ product
};
struct FlashTiles {
  Sm80FwdTiles fwd;
  Sm80DkdvTiles dkdv;
  Sm80DqTiles dq;
  Sm80AtomicTiles atomic;
};

// 16-bit inputs, rows in kHeadDims order.
inline constexpr FlashTiles kTiles16[] = {
    // d=16
    {.fwd = {.block_m = 128, .block_n = 64, .warp_m = 2, .stages = 2},
     .dkdv = {.block_n = 128, .block_m = 32, .warp_m = 2, .warps_d = 1, .stages = 2},
     .dq = {.block_m = 64, .block_n = 64, .warp_m = 1, .stages = 2},
     .atomic = {.block_n = 128, .block_m = 64, .warp_m = 2, .warps_d = 1, .stages = 2, .dq_warps_d = 1}},
    // d=32
    {.fwd = {.block_m = 128, .block_n = 64, .warp_m = 2, .stages = 2},
     .dkdv = {.block_n = 128, .block_m = 32, .warp_m = 2, .warps_d = 1, .stages = 2},
     .dq = {.block_m = 64, .block_n = 64, .warp_m = 1, .stages = 2},
     .atomic = {.block_n = 128, .block_m = 32, .warp_m = 2, .warps_d = 1, .stages = 2, .dq_warps_d = 2}},
    // d=64 (the atomic tile: docs/perf-notes.md#sm80-tiles)
    {.fwd = {.block_m = 128, .block_n = 64, .warp_m = 2, .stages = 2},
     .dkdv = {.block_n = 128, .block_m = 32, .warp_m = 2, .warps_d = 1, .stages = 2},
     .dq = {.block_m = 64, .block_n = 64, .warp_m = 1, .stages = 2},
     .atomic = {.block_n = 128, .block_m = 32, .warp_m = 2, .warps_d = 1, .stages = 2, .dq_warps_d = 2}},
    // d=80 (the 2.7b model's head dim), as d=96
    {.fwd = {.block_m = 128, .block_n = 64, .warp_m = 2, .stages = 2},
     .dkdv = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 2},
     .dq = {.block_m = 64, .block_n = 64, .warp_m = 1, .stages = 2},
     .atomic = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 2, .dq_warps_d = 1}},
    // d=96
    {.fwd = {.block_m = 128, .block_n = 64, .warp_m = 2, .stages = 2},
     .dkdv = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 2},
     .dq = {.block_m = 64, .block_n = 64, .warp_m = 1, .stages = 2},
     .atomic = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 2, .dq_warps_d = 1}},
    // d=128
    {.fwd = {.block_m = 128, .block_n = 64, .warp_m = 2, .stages = 2},
     .dkdv = {.block_n = 64, .block_m = 32, .warp_m = 1, .warps_d = 1, .stages = 2},
     .dq = {.block_m = 64, .block_n = 64, .warp_m = 1, .stages = 2},
     .atomic = {.block_n = 64, .block_m = 32, .warp_m = 1, .warps_d = 1, .stages = 2, .dq_warps_d = 2}},
    // d=256 (the dK/dV and dQ kernels take ~135 KB of shared memory)
    {.fwd = {.block_m = 64, .block_n = 32, .warp_m = 1, .stages = 2},
     .dkdv = {.block_n = 64, .block_m = 32, .warp_m = 1, .warps_d = 2, .stages = 2},
     .dq = {.block_m = 64, .block_n = 32, .warp_m = 1, .stages = 2},
     .atomic = {.block_n = 64, .block_m = 32, .warp_m = 1, .warps_d = 2, .stages = 2, .dq_warps_d = 4}},
};
// fp32 inputs (TF32 products), rows in kHeadDims order.
inline constexpr FlashTiles kTiles32[] = {
    // d=16
    {.fwd = {.block_m = 128, .block_n = 64, .warp_m = 1, .stages = 2},
     .dkdv = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 2},
     .dq = {.block_m = 64, .block_n = 64, .warp_m = 1, .stages = 2},
     .atomic = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 2, .dq_warps_d = 1}},
    // d=32
    {.fwd = {.block_m = 128, .block_n = 64, .warp_m = 1, .stages = 2},
     .dkdv = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 2},
     .dq = {.block_m = 64, .block_n = 64, .warp_m = 1, .stages = 2},
     .atomic = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 2, .dq_warps_d = 1}},
    // d=64 (the forward takes 104 KB of shared memory)
    {.fwd = {.block_m = 128, .block_n = 64, .warp_m = 1, .stages = 2},
     .dkdv = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 1},
     .dq = {.block_m = 64, .block_n = 64, .warp_m = 1, .stages = 1},
     .atomic = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 1, .dq_warps_d = 1}},
    // d=80, as d=96
    {.fwd = {.block_m = 128, .block_n = 64, .warp_m = 1, .stages = 1},
     .dkdv = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 1},
     .dq = {.block_m = 64, .block_n = 64, .warp_m = 1, .stages = 1},
     .atomic = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 1, .dq_warps_d = 1}},
    // d=96 (~102 KB of shared memory)
    {.fwd = {.block_m = 128, .block_n = 64, .warp_m = 1, .stages = 1},
     .dkdv = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 1},
     .dq = {.block_m = 64, .block_n = 64, .warp_m = 1, .stages = 1},
     .atomic = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 1, .dq_warps_d = 1}},
    // d=128 (dK/dV and dQ kernels 135 KB of shared memory, the atomic one 153 KB)
    {.fwd = {.block_m = 64, .block_n = 64, .warp_m = 1, .stages = 1},
     .dkdv = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 1},
     .dq = {.block_m = 64, .block_n = 64, .warp_m = 1, .stages = 1},
     .atomic = {.block_n = 64, .block_m = 64, .warp_m = 1, .warps_d = 1, .stages = 1, .dq_warps_d = 1}},
    // d=256 (~133 KB of shared memory)
    {.fwd = {.block_m = 64, .block_n = 32, .warp_m = 1, .stages = 1},
     .dkdv = {.block_n = 32, .block_m = 32, .warp_m = 1, .warps_d = 2, .stages = 1},
     .dq = {.block_m = 32, .block_n = 32, .warp_m = 1, .stages = 1},
     .atomic = {.block_n = 32, .block_m = 32, .warp_m = 1, .warps_d = 2, .stages = 1, .dq_warps_d = 2}},
};

// ---- Hopper (sm_90a) kernels: flash_fwd_sm90_kernel.cuh, flash_bwd_sm90_kernel.cuh ----
// 16-bit inputs, head dims 64, 80, 96, 128 and 256. Each consumer warpgroup (4 warps) owns 64 rows of its
// kernel's row tile, so the row tile is 64 * consumers (but for the d=256 backward, whose warpgroups split
// the head dim: kSm90BwdTiles256); one more warpgroup issues the TMA copies. Tiles are 128-byte-swizzled
// panels of 64 columns (no padding), so head dims 80 and 96 run the d=128 tiles over zero columns: see
// Note [Padded head dims]. Registers bound the tiles:
// an accumulator of 64 x n takes n / 2 floats per thread, and 1 block per SM leaves 65536 / threads
// registers to each thread.

// Note [Padded head dims]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A head dim that is not a multiple of 64 (80, 96) fills its last 64-column panel in part: TMA copies the
// whole box and fills the columns past D with zeros, so the shared tiles and the accumulators have
// sm90_smem_dim(D) columns, the products over D (S = Q K^T, dP = dO V^T) stop after D / 16 k steps, and
// the products into D columns (O, dK, dV, dQ) run over the padded width, their last columns zero and
// never stored. The d=128 tile row serves both.

// The forward kernel: 64 * consumers query rows per tile.
struct Sm90FwdTiles {
  int consumers;  // consumer warpgroups
  int block_n;    // keys per K/V tile
  int stages;     // K/V ring buffers
  // Each warpgroup's softmax overlaps its own P V: S of the next tile lives beside P, which needs the
  // registers of 2 consumer warpgroups. See Note [Forward overlap and ping-pong]
  // (flash_fwd_sm90_kernel.cuh).
  bool overlap;
  // With overlap and 2 consumers: the consumers take turns issuing their products.
  bool ping_pong;
  // d=64 only: the tensor cores sum the rows of P (O += P V over 8 more columns, a panel of ones) instead
  // of a floating-point add per score. See Note [Tensor-core row sums] (flash_fwd_sm90_kernel.cuh).
  bool tensor_row_sums;
};
// The backward kernel (dK, dV and the fused dQ): 64 * consumers keys per block.
struct Sm90BwdTiles {
  int consumers;  // consumer warpgroups
  int block_m;    // query rows per step
  int stages;     // Q/dO ring buffers, beside the dS^T and fp32 dQ staging tiles of the fused dQ
  // Registers the producer warpgroup (the copies and, with ordered additions, the dQ writers) keeps after
  // setmaxnreg (a multiple of 8); the consumers take the rest (consumer_registers, flash_sm90_pipeline.cuh).
  int producer_regs = 24;
  // Ordered additions: the dQ writers back off (a growing nanosleep) between polls of a counter that
  // has not reached their turn, instead of polling again at once (counter_wait_eq,
  // flash_sm90_pipeline.cuh). Measurements: docs/perf-notes.md#ordered-dq-additions.
  bool counter_backoff = false;
  // The consumer warpgroups share one tile of 64 keys and split the head dim of dK and dV between them
  // (flash_bwd_sm90_split_kernel.cuh) instead of owning 64 keys each.
  bool split_d = false;
};
struct FlashSm90Tiles {
  Sm90FwdTiles fwd;
  Sm90BwdTiles bwd;
};
// Rows for d=64 and d=128 (and 80, 96). A third backward buffer does not fit at d=64 (the dS^T and dQ
// staging take 96 KB).
inline constexpr FlashSm90Tiles kSm90Tiles[] = {
    // d=64
    {.fwd = {.consumers = 3, .block_n = 128, .stages = 2,
             .overlap = false, .ping_pong = false, .tensor_row_sums = true},
     .bwd = {.consumers = 2, .block_m = 128, .stages = 2}},
    // d=128 (and 80, 96); a backward producer of 40 registers (consumers 232) is the least that spills none;
    // its dQ writers back off between counter polls (at d=64 that was slower)
    {.fwd = {.consumers = 2, .block_n = 128, .stages = 3,
             .overlap = true, .ping_pong = true, .tensor_row_sums = false},
     .bwd = {.consumers = 2, .block_m = 64, .stages = 2, .producer_regs = 40, .counter_backoff = true}},
};
constexpr FlashSm90Tiles flash_sm90_tiles(int d) { return d == 64 ? kSm90Tiles[0] : kSm90Tiles[1]; }
// d=256. The forward: O takes 128 floats per thread, so keys come in tiles of 64 (S and P of the next tile
// beside O), and two K/V buffers beside Q take 192 KB of shared memory. The backward: dK and dV of a
// warpgroup's 64 keys would take 256 floats per thread, so the two consumers split the head dim of one
// tile of 64 keys (split_d, 128 floats each); two Q/dO buffers beside K and V take 192 KB, the dQ pieces
// staged inside them (the layout: BwdSplitTraits in flash_bwd_sm90_split_kernel.cuh).
inline constexpr Sm90FwdTiles kSm90FwdTiles256 = {.consumers = 2, .block_n = 64, .stages = 2,
                                                  .overlap = true, .ping_pong = true, .tensor_row_sums = false};
inline constexpr Sm90BwdTiles kSm90BwdTiles256 = {.consumers = 2, .block_m = 64, .stages = 2, .producer_regs = 40,
                                                  .counter_backoff = true, .split_d = true};

constexpr Sm90FwdTiles sm90_fwd_tiles(int d) { return d == 256 ? kSm90FwdTiles256 : flash_sm90_tiles(d).fwd; }
constexpr Sm90BwdTiles sm90_bwd_tiles(int d) { return d == 256 ? kSm90BwdTiles256 : flash_sm90_tiles(d).bwd; }
// Columns of the Hopper kernels' shared tiles and accumulators for head dim d: whole 64-column panels.
// See Note [Padded head dims].
constexpr int sm90_smem_dim(int d) { return (d + 63) / 64 * 64; }
// Query rows per tile of the Hopper forward and keys per block of its backward: 64 per consumer warpgroup
// (64 in all where they split the head dim).
constexpr int sm90_fwd_block_m(int d) { return 64 * sm90_fwd_tiles(d).consumers; }
constexpr int sm90_bwd_block_n(int d) { return sm90_bwd_tiles(d).split_d ? 64 : 64 * sm90_bwd_tiles(d).consumers; }
// Whether the Hopper kernels (forward and backward alike) run inputs of elem_bytes bytes at head dim d.
constexpr bool has_sm90_kernels(int elem_bytes, int d) {
  return elem_bytes == 2 && (d == 64 || d == 80 || d == 96 || d == 128 || d == 256);
}
// The head dims of has_sm90_kernels, for messages.
inline constexpr const char* kSm90HeadDims = "64, 80, 96, 128, 256";

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
