// flash_sm90_ptx.cuh — internal (CUDA builds only): the Hopper (sm_90a) instructions the FlashAttention
// sm90 kernels are built from: warpgroup MMA (wgmma.mma_async, m64nNk16, fp32 accumulation, bf16/fp16
// operands) with its fence / commit / wait and shared-memory matrix descriptors for 128-byte-swizzled
// tiles (TMA writes them: flash_sm90_pipeline.cuh; generic-proxy writes need fence_proxy_async from
// flash_ptx.cuh before wgmma reads them).
//
// Swizzled tiles ("sw128"): a (rows, D) 16-bit tile is stored as D / 64 panels of (rows, 64); a panel
// row is 128 bytes, and 16-byte chunk c of row r sits at chunk position c ^ (r % 8). Panels start
// 1024-byte aligned, so the hardware's swizzle (address bits 4-6 ^= bits 7-9) matches. The same tile
// is a K-major operand (rows = M or N, K along D: S = Q K^T) and an MN-major one (rows = K, N along
// D: O = P V, transposed-B wgmma).
//
// Accumulators of m64nNk16 use float d[N / 8][4]: warp w of the warpgroup holds rows 16 w + g and
// 16 w + g + 8 (lane = 4 g + t), columns 8 j + 2 t and 8 j + 2 t + 1 — the mma.sync m16n8 layout of
// flash_tile.cuh repeated over N. A register-sourced A fragment is the mma.sync m16n8k16 A fragment
// (a_from_acc), for this warp's 16 rows.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/attention/cuda/flash_ptx.cuh"

// Only the sm_90a pass assembles wgmma; other passes compile the sm90 kernels to empty bodies, which
// flash_api.cu never launches (it dispatches to them only on a compute capability 9.0 device with
// FT_CUDA_SM90A set by the build).
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FT_SM90_DEVICE 1
#else
#define FT_SM90_DEVICE 0
#endif

namespace ft::flash::sm90 {

inline constexpr int kPanel = 64;             // 16-bit elements per 128-byte swizzled row
inline constexpr int kPanelRowBytes = 128;
inline constexpr int kGroupBytes = 1024;      // 8 swizzled rows: the stride between 8-row groups

// Element offset of (row, col) in a sw128 tile of `rows` rows.
__device__ __forceinline__ int sw128_offset(int rows, int row, int col) {
  return (col / kPanel) * rows * kPanel + row * kPanel + ((((col % kPanel) >> 3) ^ (row & 7)) << 3) + (col & 7);
}

// Shared-memory matrix descriptor of a 128-byte-swizzled operand starting at `smem`. K-major operands
// use sbo = 1024 (8-row groups) and ignore lbo; MN-major ones use sbo = 1024 (8 K-rows) and lbo = the
// stride between 64-element panels along M or N.
__device__ __forceinline__ std::uint64_t sw128_desc(const void* smem, std::uint32_t lbo_bytes = 16,
                                                    std::uint32_t sbo_bytes = kGroupBytes) {
  const std::uint64_t addr = smem_u32(smem);
  return ((addr & 0x3FFFF) >> 4) | (static_cast<std::uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<std::uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32) | (std::uint64_t{1} << 62);
}

// The descriptor of the operand `bytes` further on (a multiple of 16): only the start address field moves,
// and it cannot carry out of its 14 bits while the address stays in shared memory, so the low word alone
// is added to — one integer add per k step instead of rebuilding the descriptor from the address.
__device__ __forceinline__ std::uint64_t desc_advance(std::uint64_t desc, std::uint32_t bytes) {
  const std::uint32_t lo = static_cast<std::uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}
// Hides the start address field of a descriptor from the compiler, so that desc_advance's additions stay
// one integer add each: folded into the address computation, the M-major operands' took an extra mask
// (a ULOP3) per k step.
__device__ __forceinline__ void opaque_desc(std::uint64_t& desc) {
  std::uint32_t lo = static_cast<std::uint32_t>(desc);
  asm("" : "+r"(lo));
  desc = (desc & 0xFFFFFFFF00000000ull) | lo;
}
__device__ __forceinline__ void wgmma_fence() {
#if FT_SM90_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if FT_SM90_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most N committed wgmma groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if FT_SM90_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// Four 8x8 b16 matrices to shared memory (stmatrix, sm_90): register r[m] of lane 4 g + t holds row g,
// columns 2 t and 2 t + 1 of matrix m (the mma.sync fragment layout); lanes 8m..8m+7 give the shared
// addresses (smem_u32) of matrix m's rows, 16 bytes each, 16-byte aligned.
__device__ __forceinline__ void stmatrix_x4(std::uint32_t smem_addr, const std::uint32_t (&r)[4]) {
#if FT_SM90_DEVICE
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
#endif
}

// A branch on `nonneg` (a row sum: >= 0, or NaN, which compares false), never taken, that ptxas does not
// schedule across. ptxas moves a wgmma_wait up past the arithmetic before it as soon as a later
// instruction writes registers the awaited product reads (P's A fragments, rounded after the wait), so
// the softmax overlapped with P V would wait for it; placed between the two, the branch keeps the wait
// after the softmax. A compare and a branch per tile.
__device__ __forceinline__ void schedule_boundary(float nonneg) {
  if (nonneg < 0.f) __nanosleep(1);
}
// x, which the caller knows equal across the warp (a warpgroup index), passed through a shuffle so that
// ptxas knows it too and keeps what derives from it (wgmma descriptors) in uniform registers.
__device__ __forceinline__ int warp_uniform(int x) { return __shfl_sync(0xffffffffu, x, 0); }
// Keeps the compiler from moving accesses of accumulator registers across wgmma_wait / wgmma issue.
template <int NT>
__device__ __forceinline__ void fence_accumulators(float (&d)[NT][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

#define FT_WGMMA_D32_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define FT_WGMMA_D64_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FT_WGMMA_D72_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35}"
#define FT_WGMMA_D128_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
// Accumulator operands of one asm statement, constraint C ("+f" to accumulate, "=f" to overwrite).
#define FT_WGMMA_ROW(C, j) C(d[j][0]), C(d[j][1]), C(d[j][2]), C(d[j][3])
#define FT_WGMMA_D32_OPERANDS(C) FT_WGMMA_ROW(C, 0), FT_WGMMA_ROW(C, 1), FT_WGMMA_ROW(C, 2), FT_WGMMA_ROW(C, 3)
#define FT_WGMMA_D64_OPERANDS(C) \
  FT_WGMMA_D32_OPERANDS(C), FT_WGMMA_ROW(C, 4), FT_WGMMA_ROW(C, 5), FT_WGMMA_ROW(C, 6), FT_WGMMA_ROW(C, 7)
#define FT_WGMMA_D72_OPERANDS(C) FT_WGMMA_D64_OPERANDS(C), FT_WGMMA_ROW(C, 8)
#define FT_WGMMA_D128_OPERANDS(C)                                                                          \
  FT_WGMMA_D64_OPERANDS(C), FT_WGMMA_ROW(C, 8), FT_WGMMA_ROW(C, 9), FT_WGMMA_ROW(C, 10), FT_WGMMA_ROW(C, 11), \
      FT_WGMMA_ROW(C, 12), FT_WGMMA_ROW(C, 13), FT_WGMMA_ROW(C, 14), FT_WGMMA_ROW(C, 15)

#define FT_WGMMA_SS_ASM(SHAPE, TY, REGS, OPERANDS, I_A, I_B, I_P, I_TA, I_TB)                                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" I_P ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY \
               "." TY " " REGS ", %" I_A ", %" I_B ", p, 1, 1, %" I_TA ", %" I_TB ";\n}\n"                     \
               : OPERANDS                                                                                      \
               : "l"(desc_a), "l"(desc_b), "n"(kAccumulate ? 1 : 0), "n"(kTransA), "n"(kTransB))
#define FT_WGMMA_RS_ASM(SHAPE, TY, REGS, OPERANDS, I_A0, I_A1, I_A2, I_A3, I_B, I_P, I_TB)                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" I_P ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY \
               "." TY " " REGS ", {%" I_A0 ", %" I_A1 ", %" I_A2 ", %" I_A3 "}, %" I_B ", p, 1, 1, %" I_TB      \
               ";\n}\n"                                                                                        \
               : OPERANDS                                                                                      \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1), "n"(kTransB))

// d (64 x N) = A B (+ d when kAccumulate), A (64 x 16) and B (16 x N) from shared memory; kTransA /
// kTransB = 1 read A M-major / B N-major instead of K-major. Without kAccumulate d is output only, so no
// instruction has to define it first (ptxas serialises wgmma when one does while products are in flight).
template <class T, int N, int kTransA, int kTransB, bool kAccumulate>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], std::uint64_t desc_a, std::uint64_t desc_b) {
  static_assert(N == 32 || N == 64 || N == 128, "wgmma_ss: N must be 32, 64 or 128");
#if FT_SM90_DEVICE
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
#define FT_WGMMA_SS_CASES(C)                                                                                         \
  if constexpr (N == 32 && kBf16)                                                                                    \
    FT_WGMMA_SS_ASM("m64n32k16", "bf16", FT_WGMMA_D32_REGS, FT_WGMMA_D32_OPERANDS(C), "16", "17", "18", "19", "20"); \
  else if constexpr (N == 32)                                                                                        \
    FT_WGMMA_SS_ASM("m64n32k16", "f16", FT_WGMMA_D32_REGS, FT_WGMMA_D32_OPERANDS(C), "16", "17", "18", "19", "20");  \
  else if constexpr (N == 64 && kBf16)                                                                               \
    FT_WGMMA_SS_ASM("m64n64k16", "bf16", FT_WGMMA_D64_REGS, FT_WGMMA_D64_OPERANDS(C), "32", "33", "34", "35", "36"); \
  else if constexpr (N == 64)                                                                                        \
    FT_WGMMA_SS_ASM("m64n64k16", "f16", FT_WGMMA_D64_REGS, FT_WGMMA_D64_OPERANDS(C), "32", "33", "34", "35", "36");  \
  else if constexpr (kBf16)                                                                                          \
    FT_WGMMA_SS_ASM("m64n128k16", "bf16", FT_WGMMA_D128_REGS, FT_WGMMA_D128_OPERANDS(C), "64", "65", "66", "67",     \
                    "68");                                                                                           \
  else                                                                                                               \
    FT_WGMMA_SS_ASM("m64n128k16", "f16", FT_WGMMA_D128_REGS, FT_WGMMA_D128_OPERANDS(C), "64", "65", "66", "67", "68");
  if constexpr (kAccumulate) {
    FT_WGMMA_SS_CASES("+f")
  } else {
    FT_WGMMA_SS_CASES("=f")
  }
#undef FT_WGMMA_SS_CASES
#endif
}

// d (64 x N) += A B, A (64 x 16) from this warpgroup's registers (the mma.sync A fragment of each warp's
// 16 rows), B (16 x N) from shared memory, N-major when kTransB = 1. N = 72 is a 64-column product with
// 8 more columns (the forward's row sums: See Note [Tensor-core row sums]).
template <class T, int N, int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const std::uint32_t (&a)[4], std::uint64_t desc_b) {
  static_assert(N == 64 || N == 72 || N == 128, "wgmma_rs: N must be 64, 72 or 128");
#if FT_SM90_DEVICE
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (N == 72 && kBf16)
    FT_WGMMA_RS_ASM("m64n72k16", "bf16", FT_WGMMA_D72_REGS, FT_WGMMA_D72_OPERANDS("+f"), "36", "37", "38", "39", "40",
                    "41", "42");
  else if constexpr (N == 72)
    FT_WGMMA_RS_ASM("m64n72k16", "f16", FT_WGMMA_D72_REGS, FT_WGMMA_D72_OPERANDS("+f"), "36", "37", "38", "39", "40",
                    "41", "42");
  else if constexpr (N == 64 && kBf16)
    FT_WGMMA_RS_ASM("m64n64k16", "bf16", FT_WGMMA_D64_REGS, FT_WGMMA_D64_OPERANDS("+f"), "32", "33", "34", "35", "36",
                    "37", "38");
  else if constexpr (N == 64)
    FT_WGMMA_RS_ASM("m64n64k16", "f16", FT_WGMMA_D64_REGS, FT_WGMMA_D64_OPERANDS("+f"), "32", "33", "34", "35", "36",
                    "37", "38");
  else if constexpr (kBf16)
    FT_WGMMA_RS_ASM("m64n128k16", "bf16", FT_WGMMA_D128_REGS, FT_WGMMA_D128_OPERANDS("+f"), "64", "65", "66", "67",
                    "68", "69", "70");
  else
    FT_WGMMA_RS_ASM("m64n128k16", "f16", FT_WGMMA_D128_REGS, FT_WGMMA_D128_OPERANDS("+f"), "64", "65", "66", "67",
                    "68", "69", "70");
#endif
}

#undef FT_WGMMA_SS_ASM
#undef FT_WGMMA_RS_ASM

// The k loops the kernels run, each issued as one wgmma group (commit and wait are the caller's).
//
// d (64 x N) = A B with A rows a_row0.. of the sw128 tile `a` (a_rows rows) and B = tile `b`^T, b the first
// N rows at `b` of an sw128 tile of b_rows rows (N, K) — both K-major, K = D running over the panels.
template <class T, int N, int K>
__device__ __forceinline__ void gemm_ss_kmajor(float (&d)[N / 8][4], const T* a, int a_rows, int a_row0, const T* b,
                                               int b_rows = N) {
  const std::uint64_t a0 = sw128_desc(a + a_row0 * kPanel), b0 = sw128_desc(b);
  auto desc_a = [&](int kk) { return desc_advance(a0, ((kk / 4) * a_rows * kPanel + (kk % 4) * 16) * sizeof(T)); };
  auto desc_b = [&](int kk) { return desc_advance(b0, ((kk / 4) * b_rows * kPanel + (kk % 4) * 16) * sizeof(T)); };
  wgmma_ss<T, N, 0, 0, false>(d, desc_a(0), desc_b(0));
#pragma unroll
  for (int kk = 1; kk < K / 16; ++kk) wgmma_ss<T, N, 0, 0, true>(d, desc_a(kk), desc_b(kk));
}

// d (64 x N) += A B with A = K_ROWS / 16 register fragments (k steps over B's rows) and B the sw128 tile
// `b` (K_ROWS, N) read N-major: K runs over its rows, N over its panels, panel_bytes apart (by default
// the tile's own panels, one after the other). N over 128 runs as products of 128 columns (two panels).
template <class T, int N, int K_ROWS>
__device__ __forceinline__ void gemm_rs_nmajor(float (&d)[N / 8][4], const std::uint32_t (&a)[K_ROWS / 16][4],
                                               const T* b, std::uint32_t panel_bytes = K_ROWS * kPanelRowBytes) {
  constexpr int kChunk = N > 128 ? 128 : N;  // columns per wgmma
  static_assert(N % kChunk == 0, "gemm_rs_nmajor: N over 128 must be a multiple of 128");
  const std::uint64_t b0 = sw128_desc(b, panel_bytes);
#pragma unroll
  for (int c = 0; c < N / kChunk; ++c) {
    float(&dc)[kChunk / 8][4] = *reinterpret_cast<float(*)[kChunk / 8][4]>(&d[c * kChunk / 8]);
    const std::uint32_t chunk_bytes = c * (kChunk / kPanel) * panel_bytes;
#pragma unroll
    for (int kk = 0; kk < K_ROWS / 16; ++kk)
      wgmma_rs<T, kChunk, 1>(dc, a[kk], desc_advance(b0, chunk_bytes + kk * kPanelRowBytes * 16));
  }
}

// d (64 x N) += A B with A the one-panel sw128 tile `a` (64, K_ROWS) read K-major and B the sw128 tile
// `b` (K_ROWS, N) read N-major, its panels panel_bytes apart (by default the tile's own panels).
template <class T, int N, int K_ROWS>
__device__ __forceinline__ void gemm_ss_knmajor(float (&d)[N / 8][4], const T* a, const T* b,
                                                std::uint32_t panel_bytes = K_ROWS * kPanelRowBytes) {
  static_assert(K_ROWS <= kPanel && N <= 128, "gemm_ss_knmajor: A of one panel, B of at most 128 columns");
  const std::uint64_t a0 = sw128_desc(a), b0 = sw128_desc(b, panel_bytes);
#pragma unroll
  for (int kk = 0; kk < K_ROWS / 16; ++kk)
    wgmma_ss<T, N, 0, 1, true>(d, desc_advance(a0, kk * 16 * sizeof(T)), desc_advance(b0, kk * 16 * kPanelRowBytes));
}

// d (64 x N) = A B with A = `a`^T, `a` a one-panel sw128 tile (K_ROWS, 64) read M-major (K runs over its
// rows, M over its 64 columns), and B = N <= 64 columns of an sw128 tile of K_ROWS rows starting at `b`
// (a panel, or a 16-byte-multiple column offset inside one), or N = 128 columns from a panel's start (that
// panel and the next), read N-major.
template <class T, int N, int K_ROWS>
__device__ __forceinline__ void gemm_ss_mnmajor(float (&d)[N / 8][4], const T* a, const T* b) {
  static_assert(N <= kPanel || N == 2 * kPanel, "gemm_ss_mnmajor: B within one panel, or two whole panels");
  std::uint64_t a0 = sw128_desc(a, K_ROWS * kPanelRowBytes), b0 = sw128_desc(b, K_ROWS * kPanelRowBytes);
  opaque_desc(a0);
  opaque_desc(b0);
  wgmma_ss<T, N, 1, 1, false>(d, a0, b0);
#pragma unroll
  for (int kk = 1; kk < K_ROWS / 16; ++kk) {
    const std::uint32_t step = kk * 16 * kPanelRowBytes;  // 16 rows further down both tiles
    wgmma_ss<T, N, 1, 1, true>(d, desc_advance(a0, step), desc_advance(b0, step));
  }
}

}  // namespace ft::flash::sm90
