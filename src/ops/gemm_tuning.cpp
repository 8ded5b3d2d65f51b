// gemm_tuning.cpp — the process's GEMM autotuning setting (ops/gemm_tuning.h).
#include "ops/gemm_tuning.h"

#include <atomic>

#include "core/error.h"

namespace ft {

namespace {
std::atomic<int> autotune_candidates{0};  // off
}  // namespace

void set_gemm_autotune(int candidates) {
  FT_CHECK(candidates == 0 || (candidates >= 2 && candidates <= kGemmAutotuneMost),
           "GEMM autotuning times 2 to ", kGemmAutotuneMost, " candidates per problem, or is off (0); given ",
           candidates);
  autotune_candidates.store(candidates);
}

int gemm_autotune() { return autotune_candidates.load(); }

}  // namespace ft
