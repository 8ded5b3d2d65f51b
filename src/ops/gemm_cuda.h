// gemm_cuda.h — internal (CUDA builds only): strided-batched GEMMs through cuBLASLt, stated in row-major
// terms: D[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i] for i < batch, op = identity or transpose, C = D
// unless given.
// One cuBLASLt handle per device, created on first use. Never include from public headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "core/device.h"
#include "core/dtype.h"
#include "ops/gemm_candidates.h"

namespace ft::gemm {

// One operand: `batch` row-major matrices, matrix i starting at data + i * batch_stride elements.
struct Matrix {
  const void* data = nullptr;
  DType dtype = DType::f32;
  std::int64_t ld = 0;            // elements between consecutive rows (>= the stored row length)
  std::int64_t batch_stride = 0;  // elements between consecutive matrices of the batch
  bool transpose = false;         // A and B only: use the transpose of the stored matrix
};

struct Args {
  std::int64_t m = 0, n = 0, k = 0;  // op(A) (m, k), op(B) (k, n), D (m, n)
  std::int64_t batch = 1;
  Matrix a;              // stored (m, k), or (k, m) when transposed
  Matrix b;              // stored (k, n), or (n, k) when transposed; same dtype as a
  Matrix c;              // (m, n) of d's dtype, read when beta != 0 (may be d itself); no data = d
  Matrix d;              // (m, n), written; dtype of a, or fp32
  float alpha = 1.0f;
  float beta = 0.0f;
  bool allow_tf32 = false;  // fp32 operands: let cuBLASLt use TF32 tensor cores (otherwise true fp32)
};

// Runs the GEMM on `stream` of `device` (the current device is switched for the call). Accumulates in
// fp32 for every dtype. Throws ft::Error (unsupported when cuBLASLt has no algorithm for the layout,
// device when a call fails, out_of_memory when its workspace cannot be allocated).
void matmul(const Args& args, Device device, cudaStream_t stream);

// Whether the algorithm matmul runs for args splits K into slices whose partial products it sums: beta * C may
// then join the sum before its last partial product rather than after the finished one. The same cached
// choice as matmul's (made on first use, on `stream`, which autotuning runs the GEMM on: Note [GEMM
// autotuning] in gemm_autotune.cu). Throws as matmul does.
bool splits_k(const Args& args, Device device, cudaStream_t stream);

// The number of problems planned so far in this process (each keeps its plan for the whole process).
std::size_t cached_plans();

// Each of the heuristic's first `options.candidates` algorithms for args (batch <= 65535) timed on args'
// operands on `stream` (D is written, repeatedly: give scratch operands), best first, with the one matmul's
// plan runs without autotuning marked. Throws as matmul does.
std::vector<GemmCandidateTime> time_candidates(const Args& args, Device device, cudaStream_t stream,
                                               const GemmSweepOptions& options);

}  // namespace ft::gemm
