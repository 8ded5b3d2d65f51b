// gemm.h — internal: the CPU GEMM behind linear, in row-major terms:
//   C (m, n) = op(A) (m, k) @ op(B) (k, n)   [+ C when accumulate]   [+ R when an addend R is given]
// Operands fp32, bf16 or fp16 (converted to fp32 while packing), fp32 accumulation, C fp32/bf16/fp16.
// Cache-blocked (packed MR x KC / KC x NR panels, register micro-tiles), OpenMP over output tiles only,
// so every element is summed in the same order whatever the thread count: deterministic.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ft::cpu {

struct GemmOperand {
  const void* data = nullptr;
  DType dtype = DType::f32;
  std::int64_t ld = 0;     // elements between consecutive stored rows
  bool transpose = false;  // use the transpose of the stored matrix
};

struct GemmArgs {
  std::int64_t m = 0, n = 0, k = 0;
  GemmOperand a;  // stored (m, k), or (k, m) when transposed
  GemmOperand b;  // stored (k, n), or (n, k) when transposed
  void* c = nullptr;  // (m, n) with row stride ldc
  DType c_dtype = DType::f32;
  std::int64_t ldc = 0;
  bool accumulate = false;  // C += product instead of C = product
  // Not null: C = product + R, R (m, n) fp32 with row stride ld_addend (may alias an fp32 C); the fp32
  // product plus R in one fp32 add, as a separate add after the GEMM would make it.
  const float* addend = nullptr;
  std::int64_t ld_addend = 0;
};

void gemm(const GemmArgs& args);

}  // namespace ft::cpu
