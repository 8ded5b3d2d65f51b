// gemm_candidates.h — cuBLASLt's candidate algorithms for one GEMM problem, each timed on operands of the
// problem's size filled with random values: what `flashtrain bench gemm` reports, and the evidence behind the
// plan's choice (Note [GEMM autotuning] in ops/gemm_autotune.cu). CUDA builds only (a CPU build, or a CPU
// device, throws ft::Error unsupported / invalid_argument).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/stream.h"

namespace ft {

// D (m, n) = op(A) (m, k) @ op(B) (k, n) + beta C, row-major, C = D: how ops/linear.cpp states its GEMMs.
struct GemmProblem {
  std::int64_t m = 0, n = 0, k = 0;
  DType operands = DType::bf16;  // A and B
  DType out = DType::f32;        // C and D: the operands' dtype or fp32
  bool a_transpose = false;      // A stored (k, m)
  bool b_transpose = false;      // B stored (n, k)
  float beta = 0.0f;             // 1: D += op(A) op(B) (accumulated in place)
};

// One algorithm's configuration as cuBLASLt reports it (cublasLtMatmulAlgoConfigAttributes_t): the ids index
// cuBLASLt's enums (cublasLtMatmulTile_t, cublasLtMatmulStages_t, cublasLtClusterShape_t, ...).
struct GemmAlgoInfo {
  int algo_id = 0;
  int tile_id = 0;
  int stages_id = 0;
  int cluster_shape_id = 0;
  int inner_shape_id = 0;
  int split_k = 1;
  int reduction_scheme = 0;
  int swizzle = 0;
  int custom_option = 0;
  std::size_t workspace_bytes = 0;  // what the heuristic says it needs
  float waves = 0.0f;               // the heuristic's waves count
};

struct GemmCandidateTime {
  int index = 0;          // in the heuristic's order, best first
  GemmAlgoInfo algo;
  bool allowed = true;    // a plan may run it (Note [Split K on large outputs] in ops/gemm_plan.cu)
  bool planned = false;   // the one the plan runs without autotuning (the first allowed)
  bool autotuned = false;  // the one autotuning keeps by these times among the first autotune_candidates
  double median_ms = 0.0;
  double min_ms = 0.0;
};

struct GemmSweepOptions {
  int candidates = 16;  // asked of the heuristic (it may return fewer)
  int warmup = 3;       // untimed runs per candidate
  int repeats = 10;     // timed runs per candidate (median and min reported)
  int autotune_candidates = 8;  // how many of them autotuning would time (Note [GEMM autotuning])
  std::uint64_t seed = 0;
  Stream stream;
};

// Times each of the heuristic's candidates for the problem on `device` (buffers allocated here, of the real
// sizes; operands standard normal, C = D zero first). Throws ft::Error on a bad problem, on a CPU device or
// build, or when the buffers do not fit (out_of_memory).
std::vector<GemmCandidateTime> time_gemm_candidates(const GemmProblem& problem, Device device,
                                                    const GemmSweepOptions& options);

}  // namespace ft
