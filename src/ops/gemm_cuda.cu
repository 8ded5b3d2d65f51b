// gemm_cuda.cu — strided-batched row-major GEMMs over cuBLASLt: a workspace per device and stream, the
// checks of a call, and a plan per problem (ops/gemm_plan.h): its descriptors and algorithm made once and
// cached (the heuristic query costs more than the launch, and remaking the descriptors per call would cost a
// dozen cuBLASLt calls). The algorithm is the heuristic's first allowed one (Note [Split K on large outputs]
// in gemm_plan.cu), or under autotuning the fastest of its first candidates (Note [GEMM autotuning] in
// gemm_autotune.cu).
#include "ops/gemm_cuda.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "core/buffer.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/gemm_plan.h"
#include "ops/gemm_tuning.h"

namespace ft::gemm {

namespace {

using detail::kWorkspaceBytes;
constexpr std::int64_t kMaxBatch = 65535;  // batches larger than this run in chunks

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

const void* advance(const Matrix& x, std::int64_t matrices) {
  return static_cast<const char*>(x.data) +
         matrices * x.batch_stride * static_cast<std::int64_t>(size_of(x.dtype));
}

void check_operand(const Matrix& x, const char* name, std::int64_t rows, std::int64_t cols) {
  FT_CHECK(x.data != nullptr, "gemm: ", name, " has no data");
  FT_CHECK(x.ld >= cols, "gemm: ", name, " is stored as (", rows, ", ", cols, ") row-major, so its leading dimension",
           " must be >= ", cols, ": given ", x.ld);
}

// Heuristic candidates asked for: the split-K fallback's choices, or gemm_autotune()'s count to time.
constexpr int kCandidates = 8;

// A new plan of the problem: its descriptors and its algorithm (see the top of this file), chosen on the call's
// stream (autotuning runs the call's GEMM there).
std::unique_ptr<detail::Plan> make_plan(int device, cublasLtHandle_t handle, const Args& args, void* workspace,
                                        cudaStream_t stream) {
  std::unique_ptr<detail::Plan> p = detail::describe(args);
  const auto found = detail::candidates(handle, *p, args, std::max(kCandidates, gemm_autotune()));
  const std::optional<std::size_t> tuned = detail::autotune_choice(device, handle, *p, args, found, workspace, stream);
  p->algo = found[tuned ? *tuned : detail::default_choice(device, args, found)].algo;
  p->splits_k = detail::splits_k(p->algo);
  return p;
}

// The plans made so far, by problem (entries are never erased: references to them stay valid), and their lock.
struct PlanCache {
  std::mutex mutex;
  std::map<detail::ProblemKey, std::unique_ptr<detail::Plan>> plans;
};
PlanCache& plan_cache() {
  static auto* cache = new PlanCache();  // kept for the process, past static destruction
  return *cache;
}

// The plan of the problem args states: made on its first use (on the call's stream, with its workspace), then
// looked up.
const detail::Plan& plan(int device, cublasLtHandle_t handle, const Args& args, void* workspace,
                         cudaStream_t stream) {
  PlanCache& cache = plan_cache();
  const detail::ProblemKey key = detail::problem_key(device, args);
  {
    std::lock_guard lock(cache.mutex);
    auto it = cache.plans.find(key);
    if (it != cache.plans.end()) return *it->second;
  }
  std::unique_ptr<detail::Plan> made = make_plan(device, handle, args, workspace, stream);
  std::lock_guard lock(cache.mutex);
  return *cache.plans.emplace(key, std::move(made)).first->second;  // another thread's plan, if it came first
}

// The workspace of a call on `stream`: the cached one, or (while the stream is captured) one of its own.
struct Workspace {
  void* data = nullptr;
  Buffer own;
};
Workspace workspace_for(Device device, cudaStream_t stream) {
  Workspace w;
  w.data = cached_workspace(device, stream);
  if (w.data == nullptr) {
    w.own = Buffer(kWorkspaceBytes, device, "gemm.workspace", Stream::wrap(stream, device));
    w.data = w.own.data();
  }
  return w;
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
  cublasLtHandle_t handle = detail::handle_for(device.index);
  const Workspace workspace = workspace_for(device, stream);
  for (std::int64_t first = 0; first < full.batch; first += kMaxBatch) {
    Args chunk = full;
    chunk.batch = std::min(kMaxBatch, full.batch - first);
    chunk.a.data = advance(full.a, first);
    chunk.b.data = advance(full.b, first);
    chunk.c.data = advance(full.c, first);
    chunk.d.data = advance(full.d, first);
    const detail::Plan& p = plan(device.index, handle, chunk, workspace.data, stream);
    detail::launch(handle, p, p.algo, chunk, workspace.data, stream);
  }
}

std::size_t cached_plans() {
  PlanCache& cache = plan_cache();
  std::lock_guard lock(cache.mutex);
  return cache.plans.size();
}

bool splits_k(const Args& args, Device device, cudaStream_t stream) {
  Args chunk = checked(args, device);
  chunk.batch = std::min(kMaxBatch, chunk.batch);  // every chunk but a last, smaller one: the same problem
  CudaDeviceGuard guard(device.index);
  const Workspace workspace = workspace_for(device, stream);
  return plan(device.index, detail::handle_for(device.index), chunk, workspace.data, stream).splits_k;
}

std::vector<GemmCandidateTime> time_candidates(const Args& args, Device device, cudaStream_t stream,
                                               const GemmSweepOptions& options) {
  const Args full = checked(args, device);
  FT_CHECK(full.batch <= kMaxBatch, "gemm: time_candidates takes at most ", kMaxBatch, " matrices, given ", full.batch);
  FT_CHECK(options.candidates >= 1, "gemm: time_candidates needs candidates >= 1, given ", options.candidates);
  CudaDeviceGuard guard(device.index);
  cublasLtHandle_t handle = detail::handle_for(device.index);
  const Workspace workspace = workspace_for(device, stream);
  const std::unique_ptr<detail::Plan> p = detail::describe(full);
  const auto found = detail::candidates(handle, *p, full, options.candidates);
  const std::size_t planned = detail::default_choice(device.index, full, found);
  std::vector<GemmCandidateTime> rows;
  std::vector<std::optional<double>> tunable;  // what autotuning would compare
  for (std::size_t i = 0; i < found.size(); ++i) {
    GemmCandidateTime row;
    row.index = static_cast<int>(i);
    row.algo = detail::info_of(found[i]);
    row.allowed = detail::allowed(device.index, full, found[i].algo);
    row.planned = i == planned;
    const detail::Timing t =
        detail::time_algo(handle, *p, found[i].algo, full, workspace.data, stream, options.warmup, options.repeats);
    row.median_ms = t.median_ms, row.min_ms = t.min_ms;
    if (static_cast<int>(i) < options.autotune_candidates)
      tunable.push_back(row.allowed ? std::optional<double>(t.median_ms) : std::nullopt);
    rows.push_back(row);
  }
  if (planned < tunable.size()) rows[detail::tuned_choice(tunable, planned)].autotuned = true;
  return rows;
}

}  // namespace ft::gemm
