// gemm_candidates.cpp — time_gemm_candidates: checks the problem, makes its operands on the device (standard
// normal values, rounded to the operand dtype; C = D zero) and times cuBLASLt's candidates on them
// (gemm::time_candidates in ops/gemm_cuda.cu).
#include "ops/gemm_candidates.h"

#include "core/buffer.h"
#include "core/error.h"
#include "ops/cast.h"
#include "ops/op_common.h"
#include "ops/random_fill.h"
#if FT_HAS_CUDA
#include "ops/gemm_cuda.h"
#endif

namespace ft {

namespace {

// A (rows, cols) tensor of `dtype` holding standard normal values (drawn in fp32, then rounded).
[[maybe_unused]] OwnedTensor random_matrix(std::int64_t rows, std::int64_t cols, DType dtype, std::uint64_t key,
                                           Device device, const Stream& stream) {
  OwnedTensor out({rows, cols}, dtype, device, "gemm bench operand", stream);
  TruncatedNormalFill normal;
  normal.key = key;
  normal.stream = stream;
  if (dtype == DType::f32) {
    fill_truncated_normal(out, normal);
    return out;
  }
  OwnedTensor drawn({rows, cols}, DType::f32, device, "gemm bench operand (fp32)", stream);
  fill_truncated_normal(drawn, normal);
  cast(out, drawn, stream);
  return out;
}

}  // namespace

std::vector<GemmCandidateTime> time_gemm_candidates(const GemmProblem& problem, Device device,
                                                    const GemmSweepOptions& options) {
  constexpr const char* op = "time_gemm_candidates";
  FT_CHECK(problem.m >= 1 && problem.n >= 1 && problem.k >= 1, op, ": m, n and k must be >= 1, given m = ",
           problem.m, ", n = ", problem.n, ", k = ", problem.k);
  FT_CHECK(problem.out == problem.operands || problem.out == DType::f32, op, ": the output must be fp32 or the ",
           "operands' ", name_of(problem.operands), ", given ", name_of(problem.out));
  FT_CHECK(options.warmup >= 0 && options.repeats >= 1 && options.candidates >= 1, op,
           ": needs warmup >= 0, repeats >= 1 and candidates >= 1, given ", options.warmup, ", ", options.repeats,
           " and ", options.candidates);
  FT_CHECK(device.is_cuda(), op, ": times cuBLASLt on a CUDA device, given ", device.to_string());
#if FT_HAS_CUDA
  const Stream& s = options.stream;
  const std::uint64_t a_key = derive_key(options.seed, 0), b_key = derive_key(options.seed, 1);
  const OwnedTensor a = problem.a_transpose ? random_matrix(problem.k, problem.m, problem.operands, a_key, device, s)
                                            : random_matrix(problem.m, problem.k, problem.operands, a_key, device, s);
  const OwnedTensor b = problem.b_transpose ? random_matrix(problem.n, problem.k, problem.operands, b_key, device, s)
                                            : random_matrix(problem.k, problem.n, problem.operands, b_key, device, s);
  const OwnedTensor d({problem.m, problem.n}, problem.out, device, "gemm bench output", s);
  fill(d, 0.0, s);
  gemm::Args args;
  args.m = problem.m, args.n = problem.n, args.k = problem.k;
  args.a = {a->data(), problem.operands, a->size(1), 0, problem.a_transpose};
  args.b = {b->data(), problem.operands, b->size(1), 0, problem.b_transpose};
  args.d = {d->data(), problem.out, problem.n, 0, false};
  args.beta = problem.beta;
  return gemm::time_candidates(args, device, static_cast<cudaStream_t>(s.handle()), options);
#else
  ops::no_cuda_build(op, device);
#endif
}

}  // namespace ft
