// flash_tile.cuh — internal (CUDA builds only): moving tiles between global and shared memory, and
// loading mma fragments out of shared memory.
//
// A shared tile is row-major (rows, D) with rows padded by 16 bytes (kLd elements), which keeps
// ldmatrix and the tf32 element loads free of bank conflicts. Warp fragments follow the mma layouts:
// lane = 4 g + t; an accumulator tile (16 x 8) holds (g, 2t..2t+1) in c0,c1 and (g+8, 2t..2t+1) in
// c2,c3. For 16-bit inputs the A operand of a k16 step is exactly two accumulator tiles; for tf32
// (k8) the k index of a register-sourced A is permuted (slot t = column 2t, slot t+4 = column 2t+1),
// and load_b_t reads B rows in the same permuted order. A tile may also be read transposed (stored with
// the product's k as its row: load_b_t, load_a_t), which ldmatrix.trans does at the same cost.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ops/attention/cuda/flash_ptx.cuh"

namespace ft::flash {

template <class T, int D>
inline constexpr int kLd = D + 16 / static_cast<int>(sizeof(T));  // padded shared row, elements

template <class T>
__device__ __forceinline__ T zero_value() {
  if constexpr (std::is_same_v<T, float>)
    return 0.f;
  else
    return T(0.f);
}

// Rows [0, ROWS) of a (rows, D) global matrix (row stride ld_g elements) -> shared tile (ROWS, kLd);
// rows >= valid_rows become zeros. vec16: asynchronous 16-byte copies (commit/wait by the caller),
// else synchronous element copies for operands whose strides or base are not 16-byte aligned.
template <class T, int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_tile(T* smem, const T* gmem, std::int64_t ld_g, int valid_rows, bool vec16,
                                          int tid) {
  constexpr int kLdS = kLd<T, D>;
  if (vec16) {
    constexpr int kPer = 16 / sizeof(T);
    constexpr int kChunks = D / kPer;
#pragma unroll
    for (int idx = tid; idx < ROWS * kChunks; idx += THREADS) {
      const int r = idx / kChunks, c = (idx % kChunks) * kPer;
      const bool valid = r < valid_rows;
      cp_async_16(smem + r * kLdS + c, valid ? gmem + r * ld_g + c : gmem, valid);
    }
  } else {
    for (int idx = tid; idx < ROWS * D; idx += THREADS) {
      const int r = idx / D, c = idx % D;
      smem[r * kLdS + c] = r < valid_rows ? gmem[r * ld_g + c] : zero_value<T>();
    }
  }
}

// Shared tile (ROWS, D) with rows LDS elements apart (default the padded kLd) -> rows [0, valid_rows) of a
// global matrix (row stride ld_g elements).
template <class T, int ROWS, int D, int THREADS, int LDS = kLd<T, D>>
__device__ __forceinline__ void store_tile(T* gmem, std::int64_t ld_g, const T* smem, int valid_rows, bool vec16,
                                           int tid) {
  constexpr int kLdS = LDS;
  if (vec16) {
    constexpr int kPer = 16 / sizeof(T);
    constexpr int kChunks = D / kPer;
#pragma unroll
    for (int idx = tid; idx < ROWS * kChunks; idx += THREADS) {
      const int r = idx / kChunks, c = (idx % kChunks) * kPer;
      if (r < valid_rows)
        *reinterpret_cast<uint4*>(gmem + r * ld_g + c) = *reinterpret_cast<const uint4*>(smem + r * kLdS + c);
    }
  } else {
    for (int idx = tid; idx < ROWS * D; idx += THREADS) {
      const int r = idx / D, c = idx % D;
      if (r < valid_rows) gmem[r * ld_g + c] = smem[r * kLdS + c];
    }
  }
}

// Accumulator tiles acc[j] (16 x 8 each, columns col0 + 8 j) -> shared rows row0..row0+15, as T.
template <class T, int NT>
__device__ __forceinline__ void store_acc(T* smem, int ld, int row0, int col0, const float (&acc)[NT][4],
                                          float factor0, float factor1, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    T* p = smem + (row0 + g) * ld + col0 + 8 * j + 2 * t;
    if constexpr (kIs16Bit<T>) {
      *reinterpret_cast<std::uint32_t*>(p) = Mma<T>::pack(acc[j][0] * factor0, acc[j][1] * factor0);
      *reinterpret_cast<std::uint32_t*>(p + 8 * ld) = Mma<T>::pack(acc[j][2] * factor1, acc[j][3] * factor1);
    } else {
      *reinterpret_cast<float2*>(p) = make_float2(acc[j][0] * factor0, acc[j][1] * factor0);
      *reinterpret_cast<float2*>(p + 8 * ld) = make_float2(acc[j][2] * factor1, acc[j][3] * factor1);
    }
  }
}

// A operand, rows row0..row0+15 and columns k0..k0+kK-1 of a row-major shared tile.
template <class T>
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const T* tile, int ld, int row0, int k0, int lane) {
  if constexpr (kIs16Bit<T>) {
    ldmatrix_x4(a, tile + (row0 + (lane & 15)) * ld + k0 + ((lane >> 4) << 3));
  } else {
    const T* p = tile + (row0 + (lane >> 2)) * ld + k0 + (lane & 3);
    a[0] = to_tf32(p[0]);
    a[1] = to_tf32(p[8 * ld]);
    a[2] = to_tf32(p[4]);
    a[3] = to_tf32(p[8 * ld + 4]);
  }
}

// A operand, rows row0..row0+15 and columns k0..k0+kK-1 of A = tile^T, from a shared tile stored (k, row).
// For tf32 the k index follows load_b_t's permuted order (slot t = k 2t, slot t+4 = k 2t+1), the two pair.
template <class T>
__device__ __forceinline__ void load_a_t(std::uint32_t (&a)[4], const T* tile, int ld, int row0, int k0, int lane) {
  if constexpr (kIs16Bit<T>) {
    ldmatrix_x4_trans(a, tile + (k0 + (lane & 7) + ((lane >> 4) << 3)) * ld + row0 + (((lane >> 3) & 1) << 3));
  } else {
    const T* p = tile + (k0 + 2 * (lane & 3)) * ld + row0 + (lane >> 2);
    a[0] = to_tf32(p[0]);
    a[1] = to_tf32(p[8]);
    a[2] = to_tf32(p[ld]);
    a[3] = to_tf32(p[ld + 8]);
  }
}

// B operands of two n8 tiles (n0..n0+15) for k0..k0+kK-1, from a shared tile stored (n, k): B = tile^T.
template <class T>
__device__ __forceinline__ void load_b_nt(std::uint32_t (&b)[2][2], const T* tile, int ld, int n0, int k0,
                                          int lane) {
  if constexpr (kIs16Bit<T>) {
    std::uint32_t r[4];
    ldmatrix_x4(r, tile + (n0 + (lane & 7) + ((lane >> 4) << 3)) * ld + k0 + (((lane >> 3) & 1) << 3));
    b[0][0] = r[0];
    b[0][1] = r[1];
    b[1][0] = r[2];
    b[1][1] = r[3];
  } else {
    const T* p = tile + (n0 + (lane >> 2)) * ld + k0 + (lane & 3);
    b[0][0] = to_tf32(p[0]);
    b[0][1] = to_tf32(p[4]);
    b[1][0] = to_tf32(p[8 * ld]);
    b[1][1] = to_tf32(p[8 * ld + 4]);
  }
}

// B operands of two n8 tiles (n0..n0+15) for k0..k0+kK-1, from a shared tile stored (k, n).
// Pairs with an A operand taken from accumulators (a_from_acc).
template <class T>
__device__ __forceinline__ void load_b_t(std::uint32_t (&b)[2][2], const T* tile, int ld, int k0, int n0,
                                         int lane) {
  if constexpr (kIs16Bit<T>) {
    std::uint32_t r[4];
    ldmatrix_x4_trans(r, tile + (k0 + (lane & 7) + (((lane >> 3) & 1) << 3)) * ld + n0 + ((lane >> 4) << 3));
    b[0][0] = r[0];
    b[0][1] = r[1];
    b[1][0] = r[2];
    b[1][1] = r[3];
  } else {
    const T* p = tile + (k0 + 2 * (lane & 3)) * ld + n0 + (lane >> 2);
    b[0][0] = to_tf32(p[0]);
    b[0][1] = to_tf32(p[ld]);
    b[1][0] = to_tf32(p[8]);
    b[1][1] = to_tf32(p[ld + 8]);
  }
}

// A operand of k step kk (columns kk*kK..) from accumulator tiles, rounded to the input dtype.
template <class T, int NT>
__device__ __forceinline__ void a_from_acc(std::uint32_t (&a)[4], const float (&acc)[NT][4], int kk) {
  if constexpr (kIs16Bit<T>) {
    a[0] = Mma<T>::pack(acc[2 * kk][0], acc[2 * kk][1]);
    a[1] = Mma<T>::pack(acc[2 * kk][2], acc[2 * kk][3]);
    a[2] = Mma<T>::pack(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
    a[3] = Mma<T>::pack(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
  } else {
    a[0] = to_tf32(acc[kk][0]);
    a[1] = to_tf32(acc[kk][2]);
    a[2] = to_tf32(acc[kk][1]);
    a[3] = to_tf32(acc[kk][3]);
  }
}

// The k loop of every tile product: acc[m] (16 x 8*NT) += A_m * B for k = 0..K-1, where
// load_a(a, m, k0) gives the A fragment of row block m and load_b(b, j, k0) the B fragments of n8 tiles
// 2j, 2j+1. Each B fragment feeds MT row blocks, which is what keeps shared-memory traffic below the
// tensor cores' rate.
template <class T, int K, int MT, int NT, class LoadA, class LoadB>
__device__ __forceinline__ void gemm_k_loop(float (&acc)[MT][NT][4], const LoadA& load_a_m, const LoadB& load_b_j) {
  constexpr int kK = Mma<T>::kK;
  static_assert(K % kK == 0 && NT % 2 == 0, "gemm: k must be a multiple of the mma's k, n of 16");
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += kK) {
    std::uint32_t a[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) load_a_m(a[m], m, k0);
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
      std::uint32_t b[2][2];
      load_b_j(b, j, k0);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        Mma<T>::run(acc[m][2 * j], a[m], b[0]);
        Mma<T>::run(acc[m][2 * j + 1], a[m], b[1]);
      }
    }
  }
}

// acc[m] (16 x 8*NT each, rows row0 + 16 m) += A * tile^T: A rows from the shared tile `a_tile`
// (row, k), B from the shared tile `b_tile` stored (n, k) with n = 0..8*NT-1.
template <class T, int K, int MT, int NT>
__device__ __forceinline__ void gemm_ss(float (&acc)[MT][NT][4], const T* a_tile, int a_ld, int row0,
                                        const T* b_tile, int b_ld, int lane) {
  gemm_k_loop<T, K, MT, NT>(
      acc, [&](std::uint32_t(&a)[4], int m, int k0) { load_a(a, a_tile, a_ld, row0 + 16 * m, k0, lane); },
      [&](std::uint32_t(&b)[2][2], int j, int k0) { load_b_nt(b, b_tile, b_ld, 16 * j, k0, lane); });
}

// acc[m] (16 x 8*NT) += P[m] (16 x 8*NP, from accumulators) * tile[rows 0..8*NP-1, columns n0..n0+8*NT-1].
template <class T, int MT, int NP, int NT>
__device__ __forceinline__ void gemm_rs(float (&acc)[MT][NT][4], const float (&p)[MT][NP][4], const T* b_tile,
                                        int b_ld, int n0, int lane) {
  gemm_k_loop<T, NP * 8, MT, NT>(
      acc, [&](std::uint32_t(&a)[4], int m, int k0) { a_from_acc<T>(a, p[m], k0 / Mma<T>::kK); },
      [&](std::uint32_t(&b)[2][2], int j, int k0) { load_b_t(b, b_tile, b_ld, k0, n0 + 16 * j, lane); });
}

// acc[m] (16 x 8*NT each, rows row0 + 16 m) += a_tile^T * b_tile[rows 0..K-1, columns n0..n0+8*NT-1]:
// both shared tiles stored with k as their row (a_tile (k, row), b_tile (k, n)).
template <class T, int K, int MT, int NT>
__device__ __forceinline__ void gemm_tt(float (&acc)[MT][NT][4], const T* a_tile, int a_ld, int row0,
                                        const T* b_tile, int b_ld, int n0, int lane) {
  gemm_k_loop<T, K, MT, NT>(
      acc, [&](std::uint32_t(&a)[4], int m, int k0) { load_a_t(a, a_tile, a_ld, row0 + 16 * m, k0, lane); },
      [&](std::uint32_t(&b)[2][2], int j, int k0) { load_b_t(b, b_tile, b_ld, k0, n0 + 16 * j, lane); });
}

}  // namespace ft::flash
