// gemm_plan.cu — the pieces of a cuBLASLt GEMM plan (ops/gemm_plan.h): per-device handles, a problem's key,
// layouts and alignment preferences, the heuristic's candidates, which of them a plan may run (no split K on
// large fp32 outputs: Note [Split K on large outputs]), what an algorithm's configuration is, one launch.
//
// cuBLASLt is column-major. A row-major (r, c) matrix with leading dimension ld is the column-major
// (c, r) matrix with the same ld, so row-major D = op(A) op(B) runs as column-major
// D^T = op(B)^T op(A)^T: B goes in cuBLASLt's first slot and A in its second, each with its own op.
#include "ops/gemm_plan.h"

#include <array>
#include <mutex>
#include <unordered_map>

#include "core/cuda_check.h"
#include "core/error.h"

namespace ft::gemm::detail {

namespace {

using PrefPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                                decltype(&cublasLtMatmulPreferenceDestroy)>;

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
  }
  FT_THROW(unsupported, "gemm: unknown dtype");
}

// Column-major layout of `batch` stored row-major (rows, cols) matrices.
LayoutPtr layout(const Matrix& x, std::int64_t rows, std::int64_t cols, std::int64_t batch) {
  cublasLtMatrixLayout_t raw = nullptr;
  FT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&raw, cuda_type(x.dtype), static_cast<std::uint64_t>(cols),
                                             static_cast<std::uint64_t>(rows), x.ld));
  LayoutPtr result(raw, &cublasLtMatrixLayoutDestroy);
  const auto count = static_cast<std::int32_t>(batch);
  const std::int64_t stride = x.batch_stride;
  FT_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(raw, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  FT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(raw, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                   sizeof(stride)));
  return result;
}

// Largest power of two (<= 256) dividing the address of every matrix of the batch.
std::uint32_t alignment_of(const Matrix& x, std::int64_t batch) {
  auto bits = reinterpret_cast<std::uintptr_t>(x.data);
  if (batch > 1) bits |= static_cast<std::uintptr_t>(x.batch_stride) * size_of(x.dtype);
  std::uint32_t align = 256;
  while (align > 1 && bits % align != 0) align /= 2;
  return align;
}

cublasComputeType_t compute_type(const Args& args) {
  return args.a.dtype == DType::f32 && args.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// cuBLASLt's first operand is our B, its second our A (see the top of this file).
cublasOperation_t op_first(const Args& args) { return args.b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }
cublasOperation_t op_second(const Args& args) { return args.a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

template <typename T>
T config_attribute(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  T value{};
  std::size_t written = 0;
  FT_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written));
  return value;
}

}  // namespace

cublasLtHandle_t handle_for(int device) {
  static std::mutex mutex;
  static auto* handles = new std::unordered_map<int, cublasLtHandle_t>();
  std::lock_guard lock(mutex);
  auto it = handles->find(device);
  if (it != handles->end()) return it->second;
  cublasLtHandle_t handle = nullptr;
  FT_CUBLAS_CHECK(cublasLtCreate(&handle));
  handles->emplace(device, handle);
  return handle;
}

ProblemKey problem_key(int device, const Args& args) {
  return {device, static_cast<std::int64_t>(compute_type(args)), static_cast<std::int64_t>(op_first(args)),
          static_cast<std::int64_t>(op_second(args)), static_cast<std::int64_t>(args.a.dtype),
          static_cast<std::int64_t>(args.d.dtype), args.m, args.n, args.k, args.batch, args.a.ld, args.b.ld,
          args.d.ld, args.a.batch_stride, args.b.batch_stride, args.d.batch_stride,
          alignment_of(args.b, args.batch), alignment_of(args.a, args.batch), alignment_of(args.d, args.batch),
          args.c.ld, args.c.batch_stride, alignment_of(args.c, args.batch)};
}

std::unique_ptr<Plan> describe(const Args& args) {
  cublasLtMatmulDesc_t raw_desc = nullptr;
  FT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw_desc, compute_type(args), CUDA_R_32F));
  auto p = std::make_unique<Plan>();
  p->desc.reset(raw_desc);
  const cublasOperation_t first = op_first(args), second = op_second(args);
  FT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(raw_desc, CUBLASLT_MATMUL_DESC_TRANSA, &first, sizeof(first)));
  FT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(raw_desc, CUBLASLT_MATMUL_DESC_TRANSB, &second, sizeof(second)));
  p->b = args.b.transpose ? layout(args.b, args.n, args.k, args.batch) : layout(args.b, args.k, args.n, args.batch);
  p->a = args.a.transpose ? layout(args.a, args.k, args.m, args.batch) : layout(args.a, args.m, args.k, args.batch);
  p->c = layout(args.c, args.m, args.n, args.batch);
  p->d = layout(args.d, args.m, args.n, args.batch);
  return p;
}

std::vector<Candidate> candidates(cublasLtHandle_t handle, const Plan& plan, const Args& args, int count) {
  FT_CHECK(count >= 1 && count <= kMostCandidates, "gemm: asks the heuristic for 1 to ", kMostCandidates,
           " algorithms, given ", count);
  cublasLtMatmulPreference_t raw_pref = nullptr;
  FT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
  PrefPtr pref(raw_pref, &cublasLtMatmulPreferenceDestroy);
  const std::uint64_t workspace_bytes = kWorkspaceBytes;
  FT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes, sizeof(workspace_bytes)));
  const std::uint32_t align_first = alignment_of(args.b, args.batch);
  const std::uint32_t align_second = alignment_of(args.a, args.batch);
  const std::uint32_t align_c = alignment_of(args.c, args.batch);
  const std::uint32_t align_d = alignment_of(args.d, args.batch);
  FT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                       &align_first, sizeof(align_first)));
  FT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                       &align_second, sizeof(align_second)));
  FT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                       &align_c, sizeof(align_c)));
  FT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                       &align_d, sizeof(align_d)));

  std::array<cublasLtMatmulHeuristicResult_t, kMostCandidates> found{};  // best first
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc.get(), plan.b.get(), plan.a.get(),
                                                               plan.c.get(), plan.d.get(), raw_pref, count,
                                                               found.data(), &returned);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && returned == 0)) {
    FT_THROW(unsupported, "gemm: cuBLASLt has no algorithm for ", name_of(args.a.dtype), " (", args.m, " x ",
             args.k, ")", args.a.transpose ? "^T" : "", " @ (", args.k, " x ", args.n, ")",
             args.b.transpose ? "^T" : "", " -> ", name_of(args.d.dtype), ", batch ", args.batch, ", ld ",
             args.a.ld, "/", args.b.ld, "/", args.d.ld, ", alignment ", align_second, "/", align_first, "/",
             align_d, " bytes");
  }
  FT_CUBLAS_CHECK(status);
  std::vector<Candidate> result;
  for (int i = 0; i < returned; ++i) {
    const cublasLtMatmulHeuristicResult_t& r = found[static_cast<std::size_t>(i)];
    result.push_back({r.algo, r.workspaceSize, r.wavesCount});
  }
  return result;
}

// Note [Split K on large outputs]
// cuBLASLt's heuristic may pick an algorithm that splits K even for an fp32 output large enough to fill the
// GPU many times over without it. A GEMM that splits K cannot take an epilogue addend (Note [GEMM epilogue
// addend] in ops/linear.cpp) and then runs unfused, with a pass of its own for the add. So for an fp32 output
// of at least kFullWaves waves of 128 x 256 tiles, a plan runs no algorithm that splits K: it takes the best of
// the heuristic's candidates that does not, if its first does. Every call of the problem runs the plan's
// choice, whatever its beta, so a fused result keeps the bits of the unfused GEMM and add.
constexpr std::int64_t kFullWaves = 8;

bool splits_k(const cublasLtMatmulAlgo_t& algo) {
  return config_attribute<std::int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1;
}

bool allowed(int device, const Args& args, const cublasLtMatmulAlgo_t& algo) {
  if (args.d.dtype != DType::f32 || !splits_k(algo)) return true;
  int sms = 0;
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return args.m * args.n * args.batch < kFullWaves * sms * 128 * 256;  // not a large output
}

std::size_t default_choice(int device, const Args& args, const std::vector<Candidate>& found) {
  for (std::size_t i = 0; i < found.size(); ++i) {
    if (allowed(device, args, found[i].algo)) return i;
  }
  return 0;
}

GemmAlgoInfo info_of(const Candidate& candidate) {
  const cublasLtMatmulAlgo_t& a = candidate.algo;
  GemmAlgoInfo info;
  info.algo_id = config_attribute<std::int32_t>(a, CUBLASLT_ALGO_CONFIG_ID);
  info.tile_id = static_cast<int>(config_attribute<std::uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID));
  info.stages_id = static_cast<int>(config_attribute<std::uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID));
  info.cluster_shape_id = config_attribute<std::uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
  info.inner_shape_id = config_attribute<std::uint16_t>(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID);
  info.split_k = config_attribute<std::int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  info.reduction_scheme = static_cast<int>(config_attribute<std::uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME));
  info.swizzle = static_cast<int>(config_attribute<std::uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING));
  info.custom_option = static_cast<int>(config_attribute<std::uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
  info.workspace_bytes = candidate.workspace_bytes;
  info.waves = candidate.waves;
  return info;
}

void launch(cublasLtHandle_t handle, const Plan& plan, const cublasLtMatmulAlgo_t& algo, const Args& args,
            void* workspace, cudaStream_t stream) {
  FT_CUBLAS_CHECK(cublasLtMatmul(handle, plan.desc.get(), &args.alpha, args.b.data, plan.b.get(), args.a.data,
                                 plan.a.get(), &args.beta, args.c.data, plan.c.get(), const_cast<void*>(args.d.data),
                                 plan.d.get(), &algo, workspace, kWorkspaceBytes, stream));
}

}  // namespace ft::gemm::detail
