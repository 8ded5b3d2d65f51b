// gemm_plan.h — internal (CUDA builds only): a cuBLASLt GEMM's plan and its pieces, shared by
// gemm_cuda.cu (the cached plans matmul runs, and the benchmark's sweep of a problem's candidates) and
// gemm_autotune.cu (timing candidates, the autotuned choice): the per-device handle, the descriptors of a
// problem, the heuristic's candidates, which of them a plan may run, one launch. Never include from public
// headers.
#pragma once

#include <cublasLt.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "ops/gemm_candidates.h"
#include "ops/gemm_cuda.h"

namespace ft::gemm::detail {

inline constexpr std::size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's recommendation for Hopper

// The device's cuBLASLt handle, created on first use; handles live for the whole process.
cublasLtHandle_t handle_for(int device);

// Everything the descriptors and the heuristic's answer depend on: device, compute type, ops, dtypes, sizes,
// leading dimensions, batch strides and alignments (not alpha and beta, which it is not given).
using ProblemKey = std::array<std::int64_t, 22>;
ProblemKey problem_key(int device, const Args& args);

using DescPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, decltype(&cublasLtMatmulDescDestroy)>;
using LayoutPtr =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, decltype(&cublasLtMatrixLayoutDestroy)>;

// The descriptors of one GEMM (at most 65535 matrices, C given), the algorithm chosen for them, and
// whether that algorithm splits K. The descriptors hold nothing but the problem, so every call of it shares
// them.
struct Plan {
  DescPtr desc{nullptr, &cublasLtMatmulDescDestroy};
  LayoutPtr a{nullptr, &cublasLtMatrixLayoutDestroy}, b{nullptr, &cublasLtMatrixLayoutDestroy};
  LayoutPtr c{nullptr, &cublasLtMatrixLayoutDestroy}, d{nullptr, &cublasLtMatrixLayoutDestroy};
  cublasLtMatmulAlgo_t algo{};
  bool splits_k = false;
};

// A plan of args with its descriptors and no algorithm yet.
std::unique_ptr<Plan> describe(const Args& args);

// One of the heuristic's answers (what it says of an algorithm; its own result struct, held in a std::vector,
// trips nvcc's front end).
struct Candidate {
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace_bytes = 0;
  float waves = 0.0f;
};
inline constexpr int kMostCandidates = 32;

// Up to `count` (<= kMostCandidates) algorithms for the plan's problem, the heuristic's best first (within
// kWorkspaceBytes and args' alignments). Throws ft::Error unsupported when there is none.
std::vector<Candidate> candidates(cublasLtHandle_t handle, const Plan& plan, const Args& args, int count);

bool splits_k(const cublasLtMatmulAlgo_t& algo);
// Whether a plan of args may run algo: not one that splits K on a large fp32 output (see Note [Split K on
// large outputs] in gemm_plan.cu).
bool allowed(int device, const Args& args, const cublasLtMatmulAlgo_t& algo);
// The heuristic's first allowed candidate, else its first (the plan without autotuning).
std::size_t default_choice(int device, const Args& args, const std::vector<Candidate>& found);

GemmAlgoInfo info_of(const Candidate& candidate);

// D = alpha op(A) op(B) + beta C of args with the plan's descriptors and `algo` on `stream`.
void launch(cublasLtHandle_t handle, const Plan& plan, const cublasLtMatmulAlgo_t& algo, const Args& args,
            void* workspace, cudaStream_t stream);

// The median and least time of `repeats` runs of algo on args (after `warmup` untimed ones), in ms, timed with
// events on `stream`; waits for the stream. See Note [GEMM autotuning] in gemm_autotune.cu.
struct Timing {
  double median_ms = 0.0, min_ms = 0.0;
};
Timing time_algo(cublasLtHandle_t handle, const Plan& plan, const cublasLtMatmulAlgo_t& algo, const Args& args,
                 void* workspace, cudaStream_t stream, int warmup, int repeats);

// Autotuning (Note [GEMM autotuning]; how many candidates it times is ops/gemm_tuning.h's): the index it keeps
// given the candidates' median times (none: not timed, or not allowed) and the heuristic's choice
// (default_choice).
std::size_t tuned_choice(const std::vector<std::optional<double>>& median_ms, std::size_t heuristic);
// The candidate of `found` a plan of args runs under autotuning, timed on args' own operands on `stream`;
// nullopt where autotuning must not run (see the Note): the caller then takes default_choice.
std::optional<std::size_t> autotune_choice(int device, cublasLtHandle_t handle, const Plan& plan, const Args& args,
                                           const std::vector<Candidate>& found, void* workspace, cudaStream_t stream);

}  // namespace ft::gemm::detail
