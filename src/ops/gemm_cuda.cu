// gemm_cuda.cu — strided-batched row-major GEMMs over cuBLASLt: per-device handles, layouts, alignment
// preferences, heuristic algorithm choice (no split K on large fp32 outputs: Note [Split K on large outputs])
// and a workspace per device and stream. A problem's descriptors and algorithm are made once and cached (the
// heuristic query costs more than the launch, and remaking the descriptors per call would cost a dozen
// cuBLASLt calls).
//
// cuBLASLt is column-major. A row-major (r, c) matrix with leading dimension ld is the column-major
// (c, r) matrix with the same ld, so row-major D = op(A) op(B) runs as column-major
// D^T = op(B)^T op(A)^T: B goes in cuBLASLt's first slot and A in its second, each with its own op.
#include "ops/gemm_cuda.h"

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "core/buffer.h"
#include "core/cuda_check.h"
#include "core/error.h"

namespace ft::gemm {

namespace {

constexpr std::size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's recommendation for Hopper
constexpr std::int64_t kMaxBatch = 65535;           // batches larger than this run in chunks

using DescPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, decltype(&cublasLtMatmulDescDestroy)>;
using LayoutPtr =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, decltype(&cublasLtMatrixLayoutDestroy)>;
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

// The device's cuBLASLt handle, created on first use; handles live for the whole process.
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

// The workspace of the GEMMs on `stream` of `device`: made on the first call outside a stream capture and kept
// for the process (GEMMs on one stream run in order, so they share it; a graph captured on the stream uses it
// and replays on that stream). nullptr while the stream is being captured and has none yet: the caller then
// takes a stream-ordered buffer of its own. At most kCachedWorkspaces are kept, past that every call takes
// its own.
constexpr std::size_t kCachedWorkspaces = 16;
void* cached_workspace(Device device, cudaStream_t stream) {
  static std::mutex mutex;
  static auto* workspaces = new std::map<std::pair<int, cudaStream_t>, Buffer>();
  std::lock_guard lock(mutex);
  const std::pair<int, cudaStream_t> key{device.index, stream};
  auto it = workspaces->find(key);
  if (it != workspaces->end()) return it->second.data();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    cudaGetLastError();  // e.g. the legacy stream while another stream captures: not a place to allocate
    return nullptr;
  }
  if (capture != cudaStreamCaptureStatusNone || workspaces->size() >= kCachedWorkspaces) return nullptr;
  Buffer made(kWorkspaceBytes, device, "gemm.workspace", Stream::wrap(stream, device));  // ordered before its uses
  void* data = made.data();
  workspaces->emplace(key, std::move(made));
  return data;
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

const void* advance(const Matrix& x, std::int64_t matrices) {
  return static_cast<const char*>(x.data) +
         matrices * x.batch_stride * static_cast<std::int64_t>(size_of(x.dtype));
}

void check_operand(const Matrix& x, const char* name, std::int64_t rows, std::int64_t cols) {
  FT_CHECK(x.data != nullptr, "gemm: ", name, " has no data");
  FT_CHECK(x.ld >= cols, "gemm: ", name, " is stored as (", rows, ", ", cols, ") row-major, so its leading dimension",
           " must be >= ", cols, ": given ", x.ld);
}

// Everything the descriptors and the heuristic's answer depend on: device, compute type, ops, dtypes, sizes,
// leading dimensions, batch strides and alignments (not alpha and beta, which it is not given).
using ProblemKey = std::array<std::int64_t, 22>;

// The descriptors of one GEMM (at most kMaxBatch matrices, C given), the algorithm cuBLASLt's heuristic
// picked for them, and whether that algorithm splits K. Made once per problem and kept for the process (the
// descriptors hold nothing but the problem, so every call of it shares them).
struct Plan {
  DescPtr desc{nullptr, &cublasLtMatmulDescDestroy};
  LayoutPtr a{nullptr, &cublasLtMatrixLayoutDestroy}, b{nullptr, &cublasLtMatrixLayoutDestroy};
  LayoutPtr c{nullptr, &cublasLtMatrixLayoutDestroy}, d{nullptr, &cublasLtMatrixLayoutDestroy};
  cublasLtMatmulAlgo_t algo{};
  bool splits_k = false;
};

cublasComputeType_t compute_type(const Args& args) {
  return args.a.dtype == DType::f32 && args.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// cuBLASLt's first operand is our B, its second our A (see the top of this file).
cublasOperation_t op_first(const Args& args) { return args.b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }
cublasOperation_t op_second(const Args& args) { return args.a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

ProblemKey problem_key(int device, const Args& args) {
  return {device, static_cast<std::int64_t>(compute_type(args)), static_cast<std::int64_t>(op_first(args)),
          static_cast<std::int64_t>(op_second(args)), static_cast<std::int64_t>(args.a.dtype),
          static_cast<std::int64_t>(args.d.dtype), args.m, args.n, args.k, args.batch, args.a.ld, args.b.ld,
          args.d.ld, args.a.batch_stride, args.b.batch_stride, args.d.batch_stride,
          alignment_of(args.b, args.batch), alignment_of(args.a, args.batch), alignment_of(args.d, args.batch),
          args.c.ld, args.c.batch_stride, alignment_of(args.c, args.batch)};
}

// Note [Split K on large outputs]
// cuBLASLt's heuristic may pick an algorithm that splits K even for an fp32 output large enough to fill the
// GPU many times over without it. A GEMM that splits K cannot take an epilogue addend (Note [GEMM epilogue
// addend] in ops/linear.cpp) and then runs unfused, with a pass of its own for the add. So for an fp32 output
// of at least kFullWaves waves of 128 x 256 tiles, the plan takes the best of the heuristic's first
// kCandidates algorithms that does not split K, if one does not. Every call of the problem runs the plan's
// choice, whatever its beta, so a fused result keeps the bits of the unfused GEMM and add.
constexpr int kCandidates = 8;
constexpr std::int64_t kFullWaves = 8;

bool algo_splits_k(const cublasLtMatmulAlgo_t& algo) {
  std::uint32_t splits = 1;
  std::size_t written = 0;
  FT_CUBLAS_CHECK(
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits), &written));
  return splits > 1;
}

// Whether args' output fills the device's SMs kFullWaves times in 128 x 256 tiles (see Note [Split K on large
// outputs]).
bool large_output(int device, const Args& args) {
  int sms = 0;
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return args.m * args.n * args.batch >= kFullWaves * sms * 128 * 256;
}

// A new plan of the problem: its descriptors and the heuristic's algorithm (see Note [Split K on large
// outputs]).
std::unique_ptr<Plan> make_plan(int device, cublasLtHandle_t handle, const Args& args) {
  const cublasComputeType_t compute = compute_type(args);
  cublasLtMatmulDesc_t raw_desc = nullptr;
  FT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw_desc, compute, CUDA_R_32F));
  auto p = std::make_unique<Plan>();
  p->desc.reset(raw_desc);
  const cublasOperation_t first = op_first(args), second = op_second(args);
  FT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(raw_desc, CUBLASLT_MATMUL_DESC_TRANSA, &first, sizeof(first)));
  FT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(raw_desc, CUBLASLT_MATMUL_DESC_TRANSB, &second, sizeof(second)));

  p->b = args.b.transpose ? layout(args.b, args.n, args.k, args.batch) : layout(args.b, args.k, args.n, args.batch);
  p->a = args.a.transpose ? layout(args.a, args.k, args.m, args.batch) : layout(args.a, args.m, args.k, args.batch);
  p->c = layout(args.c, args.m, args.n, args.batch);
  p->d = layout(args.d, args.m, args.n, args.batch);

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

  std::array<cublasLtMatmulHeuristicResult_t, kCandidates> heuristic{};  // best first
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle, raw_desc, p->b.get(), p->a.get(), p->c.get(), p->d.get(), raw_pref,
                                     kCandidates, heuristic.data(), &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    FT_THROW(unsupported, "gemm: cuBLASLt has no algorithm for ", name_of(args.a.dtype), " (", args.m, " x ",
             args.k, ")", args.a.transpose ? "^T" : "", " @ (", args.k, " x ", args.n, ")",
             args.b.transpose ? "^T" : "", " -> ", name_of(args.d.dtype), ", batch ", args.batch, ", ld ",
             args.a.ld, "/", args.b.ld, "/", args.d.ld, ", alignment ", align_second, "/", align_first, "/",
             align_d, " bytes");
  }
  FT_CUBLAS_CHECK(status);
  int pick = 0;
  if (args.d.dtype == DType::f32 && algo_splits_k(heuristic[0].algo) && large_output(device, args)) {
    for (int i = 1; i < found; ++i) {
      if (!algo_splits_k(heuristic[i].algo)) {
        pick = i;
        break;
      }
    }
  }
  p->algo = heuristic[static_cast<std::size_t>(pick)].algo;
  p->splits_k = algo_splits_k(p->algo);
  return p;
}

// The plan of the problem args states: made (a heuristic query) on its first use, then looked up.
const Plan& plan(int device, cublasLtHandle_t handle, const Args& args) {
  static std::mutex mutex;
  static auto* cache = new std::map<ProblemKey, std::unique_ptr<Plan>>();
  const ProblemKey key = problem_key(device, args);
  {
    std::lock_guard lock(mutex);
    auto it = cache->find(key);
    if (it != cache->end()) return *it->second;  // entries are never erased: the reference stays valid
  }
  std::unique_ptr<Plan> made = make_plan(device, handle, args);
  std::lock_guard lock(mutex);
  return *cache->emplace(key, std::move(made)).first->second;  // another thread's plan, if it came first
}

void run_chunk(int device, cublasLtHandle_t handle, const Args& args, void* workspace, cudaStream_t stream) {
  const Plan& p = plan(device, handle, args);
  FT_CUBLAS_CHECK(cublasLtMatmul(handle, p.desc.get(), &args.alpha, args.b.data, p.b.get(), args.a.data, p.a.get(),
                                 &args.beta, args.c.data, p.c.get(), const_cast<void*>(args.d.data), p.d.get(),
                                 &p.algo, workspace, kWorkspaceBytes, stream));
}

// args checked, with C = D when no C is given.
Args checked(const Args& args, Device device) {
  FT_CHECK(device.is_cuda(), "gemm: runs on a CUDA device, given ", device.to_string());
  FT_CHECK(args.m >= 1 && args.n >= 1 && args.k >= 1 && args.batch >= 1,
           "gemm: m, n, k and batch must be >= 1, given m = ", args.m, ", n = ", args.n, ", k = ", args.k,
           ", batch = ", args.batch);
  FT_CHECK(args.a.dtype == args.b.dtype, "gemm: A and B must share a dtype, given ", name_of(args.a.dtype), " and ",
           name_of(args.b.dtype));
  FT_CHECK(args.d.dtype == args.a.dtype || args.d.dtype == DType::f32, "gemm: D must be ", name_of(args.a.dtype),
           " or fp32 for ", name_of(args.a.dtype), " operands, given ", name_of(args.d.dtype));
  check_operand(args.a, "A", args.a.transpose ? args.k : args.m, args.a.transpose ? args.m : args.k);
  check_operand(args.b, "B", args.b.transpose ? args.n : args.k, args.b.transpose ? args.k : args.n);
  check_operand(args.d, "D", args.m, args.n);
  Args full = args;
  if (full.c.data == nullptr) full.c = full.d;
  FT_CHECK(full.c.dtype == full.d.dtype, "gemm: C must have D's dtype ", name_of(full.d.dtype), ", given ",
           name_of(full.c.dtype));
  check_operand(full.c, "C", args.m, args.n);
  return full;
}

}  // namespace

void matmul(const Args& args, Device device, cudaStream_t stream) {
  const Args full = checked(args, device);
  CudaDeviceGuard guard(device.index);
  cublasLtHandle_t handle = handle_for(device.index);
  void* workspace = cached_workspace(device, stream);
  Buffer own;
  if (workspace == nullptr) {
    own = Buffer(kWorkspaceBytes, device, "gemm.workspace", Stream::wrap(stream, device));
    workspace = own.data();
  }
  for (std::int64_t first = 0; first < full.batch; first += kMaxBatch) {
    Args chunk = full;
    chunk.batch = std::min(kMaxBatch, full.batch - first);
    chunk.a.data = advance(full.a, first);
    chunk.b.data = advance(full.b, first);
    chunk.c.data = advance(full.c, first);
    chunk.d.data = advance(full.d, first);
    run_chunk(device.index, handle, chunk, workspace, stream);
  }
}

bool splits_k(const Args& args, Device device) {
  Args chunk = checked(args, device);
  chunk.batch = std::min(kMaxBatch, chunk.batch);  // every chunk but a last, smaller one: the same problem
  CudaDeviceGuard guard(device.index);
  return plan(device.index, handle_for(device.index), chunk).splits_k;
}

}  // namespace ft::gemm
