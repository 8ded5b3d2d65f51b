// gemm_tuning.h — how the CUDA GEMMs choose their algorithm, a setting of the whole process: each problem's
// plan, made on its first call and kept, takes cuBLASLt's heuristic choice (the default: runs repeat bit for
// bit), or with autotuning the fastest of the heuristic's first candidates, timed once on that call (Note
// [GEMM autotuning] in ops/gemm_autotune.cu). The commands set it from --gemm-autotune (ModelTrainingOptions);
// a CPU build keeps it and ignores it.
#pragma once

namespace ft {

inline constexpr int kGemmAutotuneMost = 32;

// 0 = off (the default: the heuristic's choice), else 2..kGemmAutotuneMost candidates; plans made before keep
// their algorithm. ft::Error (invalid_argument) for another count.
void set_gemm_autotune(int candidates);
int gemm_autotune();

}  // namespace ft
