// skinny_linear.h — the decode step's GEMMs for a few rows (M <= kSkinnyMaxRows): y = x' W^T with bf16
// operands and fp32 accumulation, bound by reading W once, with the small per-token ops around them fused in:
//   prologue   norm_weight given: x (M, K) fp32 is RMS-normalised on the fly, x' = bf16(x * rstd * w) as
//              rmsnorm_forward computes it in bf16; otherwise x' = x (M, K) bf16
//   epilogue   store        y (M, N) bf16 | fp32 <- x' W^T
//              residual     y (M, N) fp32 <- residual + x W^T    (x bf16, no norm; y may be residual itself)
//              swiglu       y (M, N) bf16 <- silu(a) * b, a = bf16(x' W^T), b = bf16(x' W3^T)   (as swiglu_forward)
//              rope_append  W = q_proj | k_proj | v_proj (3 H Dh, K): q = rope(bf16(x' Wq^T)) into y (M, H Dh),
//                           rope(k) and v into k_cache / v_cache (M, H, capacity, Dh) at the position read from
//                           memory when the work runs (as rope_append, ops/rope.h)
// CUDA: one kernel; a block stages x' of its rows in shared memory as bf16 and each warp streams two weight
// rows (two output columns, or the rows of W and W3 for one swiglu column — a rope pair is two adjacent
// columns) in 16-byte loads, then reduces and applies the epilogue. The CPU composes the same function from
// the unfused ops (rmsnorm_forward, linear_forward, residual_add, swiglu_forward, rope_append), the reference
// the GPU tests compare against.
#pragma once

#include <cstdint>

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

inline constexpr std::int64_t kSkinnyMaxRows = 8;

enum class SkinnyEpilogue { store, residual, swiglu, rope_append };

struct SkinnyLinearArgs {
  SkinnyEpilogue epilogue = SkinnyEpilogue::store;
  Tensor y;            // (M, N), see above (rope_append: (M, N / 3), the rotated q)
  Tensor x;            // (M, K) bf16, or fp32 with norm_weight
  Tensor w;            // (N, K) bf16, contiguous
  Tensor w3;           // swiglu: (N, K) bf16, contiguous
  Tensor norm_weight;  // (K) fp32, optional: the fused RMSNorm's weight
  float norm_eps = 1e-5f;
  Tensor residual;     // residual: (M, N) fp32
  Tensor k_cache, v_cache;                 // rope_append: (M, H, capacity, Dh) bf16, contiguous last dim
  const std::int32_t* position = nullptr;  // rope_append: one int32 in the tensors' device memory
  double rope_theta = 10000.0;
  // rope_append, optional: (T, Dh/2, 2) fp32 from rope_table (ops/rope.h) with rope_theta. CUDA reads the angles
  // of positions below T from it instead of computing them (the same values); the CPU ignores it.
  Tensor rope_table;
  // CUDA, compute capability 9.0+: the kernel may be scheduled while the previous kernel on the stream finishes
  // (programmatic dependent launch), prefetching its weight rows into L2 meanwhile and, for rope_append, reading
  // the position and its angles, so the previous kernel must not write the position (the generator advances it
  // at the end of the step before); it waits for that kernel before reading anything else. The results are the
  // same.
  bool overlap_launch = false;
  Stream stream;  // CUDA work is ordered on this stream
};

// Whether a call of M rows and K inputs runs here (M in [1, kSkinnyMaxRows], K a multiple of 8, the staged
// rows fitting in shared memory); callers fall back to the unfused ops otherwise.
bool skinny_linear_fits(std::int64_t rows, std::int64_t k);

// Checks shapes, dtypes, devices and strides (ft::Error naming what was expected and what was given).
void skinny_linear(const SkinnyLinearArgs& args);

}  // namespace ft
