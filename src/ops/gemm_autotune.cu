// gemm_autotune.cu — timing a GEMM problem's candidate algorithms (events on the call's stream) and the
// autotuning choice of a plan among them: Note [GEMM autotuning].
//
// Note [GEMM autotuning]
// cuBLASLt's heuristic ranks its algorithms by a model of the GPU, not by running them; at the model's
// shapes its first choice need not be the fastest. With autotuning (ops/gemm_tuning.h: N candidates, the
// commands' --gemm-autotune N; off by default) a new plan (gemm_cuda.cu: once per problem, on its first call) times the
// heuristic's first N candidates that it may run (Note [Split K on large outputs] in gemm_plan.cu),
// kAutotuneWarmup untimed then kAutotuneRepeats timed runs each, and keeps the one with the least median time
// unless it beats the heuristic's choice by less than kAutotuneMargin (noise, under a power cap, should not
// move a plan).
// The timing runs are the call's own GEMM on its own operands, on its stream, with its workspace: no memory
// is allocated and nothing but D is written. They write D with the call's alpha, beta and C, and the call then
// runs once more with the chosen algorithm, so D ends as the call alone leaves it. Where D is also read — beta
// != 0 with C overlapping D (an accumulation in place) — a repeat would add the product again, so such a
// first call keeps the heuristic's choice, as does a first call while its stream is being captured into a
// graph (the timing waits for events). The plan is then cached: every later call of the problem, whatever its
// beta, runs the same algorithm for the whole process.
// What it trades: different algorithms sum a dot product's K in different orders (tile depth, split K), so
// they give different bits. Within a process the plans are fixed, so a run stays consistent with itself
// (every call of a problem the same algorithm; the fused epilogues keep the bits of the separate GEMM and
// add, the same plan serving both: Note [GEMM epilogue addend] in ops/linear.cpp). But the choice follows
// timings, so two runs may choose differently and differ in the last bits: bit-for-bit repeatable runs (the
// toolkit's default) need autotuning off. In a distributed run each rank tunes its own plans, on its own
// operands: ranks may choose differently. That is still correct — each rank's GEMMs make that rank's
// activations and gradient contributions, which the reductions then combine as they would any other values
// (parameters stay identical across ranks: they are updated from the reduced gradients) — but the result
// then differs in the last bits from a single-process run, as between two runs. Agreeing on one choice
// (rank 0 deciding, then a broadcast per problem) would need the communicator inside the GEMM's first call.
#include "ops/gemm_plan.h"

#include <algorithm>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/gemm_tuning.h"

namespace ft::gemm::detail {

namespace {

constexpr int kAutotuneWarmup = 2;
constexpr int kAutotuneRepeats = 5;
constexpr double kAutotuneMargin = 0.02;  // a fraction of the heuristic's choice's median
static_assert(kGemmAutotuneMost <= kMostCandidates);

// The extent of a matrix operand in bytes from its first element.
std::int64_t extent_bytes(const Matrix& x, std::int64_t rows, std::int64_t cols, std::int64_t batch) {
  return ((batch - 1) * x.batch_stride + (rows - 1) * x.ld + cols) * static_cast<std::int64_t>(size_of(x.dtype));
}

bool output_is_read(const Args& args) {
  if (args.beta == 0.0f) return false;
  const auto* c = static_cast<const char*>(args.c.data);
  const auto* d = static_cast<const char*>(args.d.data);
  return c < d + extent_bytes(args.d, args.m, args.n, args.batch) &&
         d < c + extent_bytes(args.c, args.m, args.n, args.batch);
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    cudaGetLastError();  // e.g. the legacy stream while another stream captures
    return true;
  }
  return capture != cudaStreamCaptureStatusNone;
}

struct Events {
  std::vector<cudaEvent_t> events;
  explicit Events(std::size_t count) : events(count, nullptr) {
    for (cudaEvent_t& e : events) FT_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~Events() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

}  // namespace

Timing time_algo(cublasLtHandle_t handle, const Plan& plan, const cublasLtMatmulAlgo_t& algo, const Args& args,
                 void* workspace, cudaStream_t stream, int warmup, int repeats) {
  FT_CHECK(repeats >= 1 && warmup >= 0, "gemm: timing needs repeats >= 1 and warmup >= 0, given ", repeats, " and ",
           warmup);
  for (int i = 0; i < warmup; ++i) launch(handle, plan, algo, args, workspace, stream);
  Events marks(static_cast<std::size_t>(repeats) + 1);
  FT_CUDA_CHECK(cudaEventRecord(marks.events[0], stream));
  for (int i = 0; i < repeats; ++i) {
    launch(handle, plan, algo, args, workspace, stream);
    FT_CUDA_CHECK(cudaEventRecord(marks.events[static_cast<std::size_t>(i) + 1], stream));
  }
  FT_CUDA_CHECK(cudaEventSynchronize(marks.events.back()));
  std::vector<double> ms;
  for (std::size_t i = 0; i + 1 < marks.events.size(); ++i) {
    float elapsed = 0.0f;
    FT_CUDA_CHECK(cudaEventElapsedTime(&elapsed, marks.events[i], marks.events[i + 1]));
    ms.push_back(elapsed);
  }
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  return {n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]), ms.front()};
}

std::size_t tuned_choice(const std::vector<std::optional<double>>& median_ms, std::size_t heuristic) {
  if (heuristic >= median_ms.size()) return heuristic;  // the heuristic's choice was not among those timed
  std::size_t best = heuristic;
  for (std::size_t i = 0; i < median_ms.size(); ++i) {
    if (median_ms[i] && (!median_ms[best] || *median_ms[i] < *median_ms[best])) best = i;
  }
  if (best == heuristic || !median_ms[heuristic]) return best;
  return *median_ms[best] < (1.0 - kAutotuneMargin) * *median_ms[heuristic] ? best : heuristic;
}

std::optional<std::size_t> autotune_choice(int device, cublasLtHandle_t handle, const Plan& plan, const Args& args,
                                           const std::vector<Candidate>& found, void* workspace, cudaStream_t stream) {
  const int count = gemm_autotune();
  if (count < 2 || output_is_read(args) || capturing(stream)) return std::nullopt;
  const std::size_t heuristic = default_choice(device, args, found);
  std::vector<std::optional<double>> median_ms(std::min(found.size(), static_cast<std::size_t>(count)));
  if (heuristic >= median_ms.size()) return std::nullopt;  // nothing allowed among the first: keep the fallback
  for (std::size_t i = 0; i < median_ms.size(); ++i) {
    if (!allowed(device, args, found[i].algo)) continue;
    median_ms[i] = time_algo(handle, plan, found[i].algo, args, workspace, stream, kAutotuneWarmup, kAutotuneRepeats)
                       .median_ms;
  }
  return tuned_choice(median_ms, heuristic);
}

}  // namespace ft::gemm::detail
