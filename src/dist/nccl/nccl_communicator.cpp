// nccl_communicator.cpp — the NCCL backend: bootstrap over a host communicator, collectives on the
// communication stream ordered after the compute stream by events, polled and bounded completion, and
// the abort path shared by timeouts and NCCL errors.
#include "dist/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>

#include "core/cuda_check.h"
#include "core/error.h"
#include "dist/backoff.h"
#include "dist/nccl/stream_work.h"
#include "ops/cast.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 19, 0)
#error "flashtrain needs NCCL 2.19 or newer (nonblocking communicators, ncclCommFinalize, ncclGetLastError, ncclMemAlloc, ncclCommRegister)"
#endif

namespace ft {

namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

ncclDataType_t nccl_type(DType dtype) { return dtype == DType::bf16 ? ncclBfloat16 : ncclFloat32; }
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::average ? ncclAvg : ncclSum; }

std::string describe(const char* op, const Tensor& t, const std::string& detail = {}) {
  return str(op, " (", name_of(t.dtype()), ", ", t.numel(), " elements", detail.empty() ? "" : ", ", detail, ")");
}

// Buffers must be on this rank's GPU: ft::Error naming the expected device and the tensor given.
void check_on_gpu(const char* op, const char* role, const Tensor& t, Device gpu) {
  FT_CHECK_KIND(unsupported, !t.device().is_cpu(), op, ": the NCCL communicator moves buffers on ", gpu.to_string(),
                " (this rank's GPU); given the host tensor ", t.describe(), " as ", role,
                " (host buffers need the host communicator: DistributedContext::communicator_for(cpu))");
  FT_CHECK(t.device() == gpu, op, ": the ", role, " tensor must be on ", gpu.to_string(), " (this rank's GPU), given ",
           t.describe());
}

std::string version_text(int code) { return str(code / 10000, ".", code / 100 % 100, ".", code % 100); }

// ft::Error (unsupported) unless the NCCL this process runs is at least `needed` (NCCL_VERSION code).
void require_runtime_version(int needed, const std::string& what) {
  const int have = NcclCommunicator::runtime_version();
  FT_CHECK_KIND(unsupported, have >= needed, what, " needs NCCL ", version_text(needed), " or newer; this process runs NCCL ",
                version_text(have), " (built against ", version_text(NCCL_VERSION_CODE), ")");
}

// NcclTuning into the communicator's ncclConfig_t (0 and the default policy leave NCCL's own choice).
void apply_tuning(const NcclTuning& tuning, ncclConfig_t& config) {
  if (tuning.min_ctas > 0) config.minCTAs = tuning.min_ctas;
  if (tuning.max_ctas > 0) config.maxCTAs = tuning.max_ctas;
  if (tuning.cta_policy == CtaPolicy::nccl_default) return;
  const std::string what = str("the NCCL CTA policy '", name_of(tuning.cta_policy), "'");
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  require_runtime_version(tuning.cta_policy == CtaPolicy::zero ? NCCL_VERSION(2, 28, 0) : NCCL_VERSION(2, 27, 0), what);
  config.CTAPolicy = tuning.cta_policy == CtaPolicy::zero ? NCCL_CTA_POLICY_ZERO : NCCL_CTA_POLICY_EFFICIENCY;
#elif NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  FT_CHECK_KIND(unsupported, tuning.cta_policy == CtaPolicy::efficiency, what,
                " needs NCCL 2.28 or newer; flashtrain was built against NCCL ", version_text(NCCL_VERSION_CODE));
  require_runtime_version(NCCL_VERSION(2, 27, 0), what);
  config.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
#else
  FT_THROW(unsupported, what, " needs NCCL 2.27 or newer; flashtrain was built against NCCL ",
           version_text(NCCL_VERSION_CODE));
#endif
}


}  // namespace

struct NcclState {
  ncclComm_t comm = nullptr;       // nullptr once destroyed or aborted
  cudaStream_t stream = nullptr;   // the communication stream (owned)
  cudaEvent_t ready = nullptr;     // recorded on the compute stream before each collective (owned)
  cudaStream_t compute = nullptr;  // the compute stream (not owned); nullptr = the legacy default stream
  float* barrier_word = nullptr;   // (1) fp32 on the GPU, all-reduced by barrier() (owned)
  int device = 0, rank = 0, world = 1;
  CommunicatorOptions options;
  std::string abort_reason;  // why the communicator was aborted; empty while usable

  NcclState() = default;
  NcclState(const NcclState&) = delete;
  NcclState& operator=(const NcclState&) = delete;
  ~NcclState();

  std::string error_message(const std::string& what, ncclResult_t result) const {
    const char* last = ncclGetLastError(comm);
    return str(what, " on rank ", rank, " of ", world, " failed: NCCL error '", ncclGetErrorString(result), "'",
               last && *last ? ": " : "", last ? last : "");
  }

  // ncclCommAbort (kernels waiting on a peer end); later collectives are refused.
  void abort_nccl(const std::string& reason) {
    if (comm) ncclCommAbort(comm);
    comm = nullptr;
    if (abort_reason.empty()) abort_reason = reason;
  }

  // A timeout or an NCCL error: abort, then throw ft::Error or end the job (CommunicatorOptions).
  [[noreturn]] void fail(const std::string& message) {
    if (options.on_timeout == TimeoutAction::abort_job) {
      std::fprintf(stderr, "flashtrain: error: %s; ending every rank (ncclCommAbort, MPI_Abort)\n", message.c_str());
      std::fflush(stderr);
      abort_nccl(message);
      end_job();
    }
    abort_nccl(message);
    FT_THROW(runtime, message);
  }

  void require_usable(const std::string& what) const {
    FT_CHECK_KIND(runtime, abort_reason.empty(), what, " on rank ", rank, ": the NCCL communicator was aborted (",
                  abort_reason, "); make a new one");
  }

  // The result of an NCCL call on the communicator: ncclSuccess, or ncclInProgress (nonblocking mode:
  // finishing in the background; settle() waits for it); anything else fails `what`.
  void check_call(ncclResult_t result, const std::string& what, const char* call, const char* file, int line) {
    if (result != ncclSuccess && result != ncclInProgress)
      fail(str(error_message(what, result), " (", call, " at ", file, ":", line, ")"));
  }

  // The communicator's state: ncclSuccess (ready), ncclInProgress (a call finishing in the background) or
  // the error NCCL reports asynchronously (a peer gone, a network failure).
  ncclResult_t async_state() const {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    return rc != ncclSuccess ? rc : state;
  }

  // An asynchronous NCCL error fails `what`.
  void check_async(const std::string& what) {
    if (!comm) return;
    const ncclResult_t state = async_state();
    if (state != ncclSuccess && state != ncclInProgress) fail(error_message(what, state));
  }

  // Polls the nonblocking communicator until its last call has finished in the background (ncclSuccess),
  // failing `what` on an error or past the timeout.
  void settle(const std::string& what) {
    const auto deadline = deadline_after(options.timeout_seconds);
    Backoff backoff;
    for (;;) {
      const ncclResult_t state = async_state();
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(error_message(what, state));
      if (Clock::now() > deadline) fail(timeout_message(what, rank, world, options.timeout_seconds));
      backoff.pause();
    }
  }

  // Polls until the last call has finished in the background, within the timeout, without failing: true
  // when it succeeded (for destructors, which must not throw or end the job).
  bool settle_quietly() {
    const auto deadline = deadline_after(options.timeout_seconds);
    Backoff backoff;
    ncclResult_t state = async_state();
    while (state == ncclInProgress && Clock::now() < deadline) {
      backoff.pause();
      state = async_state();
    }
    return state == ncclSuccess;
  }

  // The result of a registration call: ncclSuccess or ncclInProgress (then settled); any other result is
  // ft::Error (unsupported) with NCCL's reason — the communicator stays usable (a registration NCCL refuses,
  // e.g. on a topology without symmetric memory, breaks nothing).
  void check_registration(ncclResult_t result, const std::string& what) {
    if (result != ncclSuccess && result != ncclInProgress) FT_THROW(unsupported, error_message(what, result));
    settle(what);
  }

  // The orderly end: collectives still queued finish (bounded by the timeout), then ncclCommFinalize
  // (polled) and ncclCommDestroy; ncclCommAbort when that does not happen in time.
  void shut_down() {
    if (!comm) return;
    const auto deadline = deadline_after(options.timeout_seconds);
    cudaError_t idle = cudaStreamQuery(stream);
    Backoff backoff;
    while (idle == cudaErrorNotReady && Clock::now() < deadline) {
      backoff.pause();
      idle = cudaStreamQuery(stream);
    }
    bool finalized = false;
    if (idle == cudaSuccess) {
      ncclResult_t state = ncclCommFinalize(comm);
      Backoff finalize_backoff;
      while (state == ncclInProgress && Clock::now() < deadline) {
        finalize_backoff.pause();
        state = async_state();
      }
      finalized = state == ncclSuccess;
    }
    if (finalized) {
      ncclCommDestroy(comm);
    } else {
      std::fprintf(stderr,
                   "flashtrain: warning: rank %d: the NCCL communicator could not be shut down in order within %g s "
                   "(collectives still running or an NCCL error: a peer gone?); aborting it\n",
                   rank, options.timeout_seconds);
      abort_nccl("it was destroyed before its collectives finished");
    }
    comm = nullptr;
  }
};

NcclState::~NcclState() {
  int previous = 0;
  const bool switch_device = cudaGetDevice(&previous) == cudaSuccess && previous != device;
  if (switch_device) cudaSetDevice(device);
  if (barrier_word) cudaFree(barrier_word);
  if (ready) cudaEventDestroy(ready);
  if (stream) cudaStreamDestroy(stream);
  if (switch_device) cudaSetDevice(previous);
}

namespace {

// A collective on the communication stream (StreamWork), refused once the communicator is aborted and
// failed by NCCL's asynchronous errors.
class NcclWork final : public StreamWork {
 public:
  NcclWork(std::shared_ptr<NcclState> state, std::string what)
      : StreamWork(std::move(what), state->device, state->compute, state->options.timeout_seconds),
        state_(std::move(state)) {}

 private:
  void check_usable() override { state_->require_usable(what()); }
  void check_progress() override { state_->check_async(what()); }
  [[noreturn]] void time_out(const std::string& message) override { state_->fail(message); }
  int rank() const override { return state_->rank; }
  int world() const override { return state_->world; }

  std::shared_ptr<NcclState> state_;
};

// One collective being issued: on construction the communication stream is ordered after the work
// queued on the compute stream; the caller makes the NCCL call (FT_NCCL_ENQUEUE); finish() waits for the
// nonblocking enqueue and records the Work's event after it.
class Launch {
 public:
  Launch(const std::shared_ptr<NcclState>& state, std::string what) : state_(*state), guard_(state->device) {
    state_.require_usable(what);
    work_ = std::make_unique<NcclWork>(state, std::move(what));
    FT_CUDA_CHECK(cudaEventRecord(state_.ready, state_.compute));
    FT_CUDA_CHECK(cudaStreamWaitEvent(state_.stream, state_.ready, 0));
    FT_CUDA_CHECK(cudaEventRecord(work_->start(), state_.stream));
  }
  ncclComm_t comm() const { return state_.comm; }
  cudaStream_t stream() const { return state_.stream; }
  void check(ncclResult_t result, const char* call, const char* file, int line) {
    state_.check_call(result, work_->what(), call, file, line);
  }
  // `after` (optional) enqueues more work on the communication stream once NCCL's enqueue has settled;
  // the Work completes after it.
  WorkHandle finish(const std::function<void(const Stream&)>& after = {}) {
    state_.settle(work_->what());
    if (after) after(Stream::wrap(state_.stream, Device::cuda(state_.device)));
    FT_CUDA_CHECK(cudaEventRecord(work_->done(), state_.stream));
    return std::move(work_);
  }

 private:
  NcclState& state_;
  CudaDeviceGuard guard_;
  std::unique_ptr<NcclWork> work_;
};

// dst <- src on `stream` (this rank's GPU): the copy engine when the dtypes match, else the cast kernel.
void copy_on(const Tensor& dst, const Tensor& src, cudaStream_t stream, int device) {
  if (dst.dtype() == src.dtype()) {
    FT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), static_cast<std::size_t>(src.numel()) * src.element_size(),
                                  cudaMemcpyDeviceToDevice, stream));
    return;
  }
  cast(dst, src, Stream::wrap(stream, Device::cuda(device)));
}

// Memory from ncclMemAlloc, registered with the communicator (Note [Communication buffers]).
class NcclBuffer final : public CommBuffer {
 public:
  NcclBuffer(std::shared_ptr<NcclState> state, std::int64_t numel, DType dtype, CommBufferKind kind)
      : state_(std::move(state)) {
    NcclState& s = *state_;
    s.require_usable(str("allocate_buffer (", name_of(kind), ")"));
    const std::string what = str(kind == CommBufferKind::symmetric ? "ncclCommWindowRegister" : "ncclCommRegister",
                                 " of a ", name_of(kind), " buffer of ", numel, " ", name_of(dtype), " elements");
    const std::size_t bytes = static_cast<std::size_t>(numel) * size_of(dtype);
    CudaDeviceGuard guard(s.device);
    if (bytes > 0) {
      const ncclResult_t allocated = ncclMemAlloc(&memory_, bytes);
      FT_CHECK_KIND(out_of_memory, allocated == ncclSuccess, "ncclMemAlloc of ", bytes, " bytes for a ",
                    name_of(kind), " communication buffer on ", Device::cuda(s.device).to_string(), " failed: ",
                    ncclGetErrorString(allocated));
      try {
        if (kind == CommBufferKind::symmetric) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
          s.check_registration(ncclCommWindowRegister(s.comm, memory_, bytes, &window_, NCCL_WIN_COLL_SYMMETRIC), what);
#endif
        } else {
          s.check_registration(ncclCommRegister(s.comm, memory_, bytes, &handle_), what);
        }
      } catch (...) {
        ncclMemFree(memory_);
        throw;
      }
    }
    tensor_ = Tensor(memory_, dtype, Device::cuda(s.device), {numel});
  }
  ~NcclBuffer() override {
    CudaDeviceGuard guard(state_->device);
    if (state_->comm) {
      cudaStreamSynchronize(state_->stream);  // the collectives that used it have ended
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
      if (window_ && ncclCommWindowDeregister(state_->comm, window_) == ncclInProgress) state_->settle_quietly();
#endif
      if (handle_ && ncclCommDeregister(state_->comm, handle_) == ncclInProgress) state_->settle_quietly();
    }
    if (memory_) ncclMemFree(memory_);
  }
  NcclBuffer(const NcclBuffer&) = delete;
  NcclBuffer& operator=(const NcclBuffer&) = delete;

 private:
  std::shared_ptr<NcclState> state_;
  void* memory_ = nullptr;  // ncclMemAlloc's
  void* handle_ = nullptr;  // ncclCommRegister's (nccl_mem)
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  ncclWindow_t window_ = nullptr;  // symmetric
#endif
};

// The caller's memory registered with ncclCommRegister.
class NcclRegistration final : public CommRegistration {
 public:
  NcclRegistration(std::shared_ptr<NcclState> state, const Tensor& data) : state_(std::move(state)) {
    NcclState& s = *state_;
    const std::string what = str("ncclCommRegister of ", data.describe());
    s.require_usable(what);
    CudaDeviceGuard guard(s.device);
    s.check_registration(ncclCommRegister(s.comm, data.data(), data.span_bytes(), &handle_), what);
  }
  ~NcclRegistration() override {
    if (!state_->comm || !handle_) return;
    CudaDeviceGuard guard(state_->device);
    cudaStreamSynchronize(state_->stream);
    if (ncclCommDeregister(state_->comm, handle_) == ncclInProgress) state_->settle_quietly();
  }
  NcclRegistration(const NcclRegistration&) = delete;
  NcclRegistration& operator=(const NcclRegistration&) = delete;

 private:
  std::shared_ptr<NcclState> state_;
  void* handle_ = nullptr;
};

// An NCCL call issuing a collective, checked with the call's text, file and line.
#define FT_NCCL_ENQUEUE(launch, call) (launch).check((call), #call, __FILE__, __LINE__)

// The in-place all_reduce of data (checked against gpu), then, when widened is given (checked by the
// caller), its result widened into it on the communication stream before the Work completes.
WorkHandle enqueue_all_reduce(const std::shared_ptr<NcclState>& state, Device gpu, const Tensor& data, ReduceOp op,
                              const Tensor* widened) {
  check_collective_buffer("all_reduce", "data", data, true);
  check_on_gpu("all_reduce", "data", data, gpu);
  if (data.numel() == 0) return std::make_unique<CompletedWork>();
  Launch launch(state, describe("all_reduce", data, widened ? str(name_of(op), ", widened to fp32") : name_of(op)));
  FT_NCCL_ENQUEUE(launch, ncclAllReduce(data.data(), data.data(), static_cast<std::size_t>(data.numel()),
                                        nccl_type(data.dtype()), nccl_op(op), launch.comm(), launch.stream()));
  if (!widened) return launch.finish();
  return launch.finish([&](const Stream& stream) { cast(*widened, data, stream); });
}

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, Device gpu, const CommunicatorOptions& options,
                                   const Stream& compute_stream, const NcclTuning& tuning)
    : state_(std::make_shared<NcclState>()),
      gpu_(gpu),
      tuning_(tuning),
      rank_(bootstrap.rank()),
      world_size_(bootstrap.world_size()),
      local_rank_(bootstrap.local_rank()),
      local_world_size_(bootstrap.local_world_size()) {
  FT_CHECK(options.timeout_seconds > 0, "NcclCommunicator: timeout_seconds must be > 0, given ",
           options.timeout_seconds);
  FT_CHECK(gpu.is_cuda(), "NcclCommunicator: expected a GPU (cuda:N), given ", gpu.to_string());
  tuning.check();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  apply_tuning(tuning, config);
  const int count = cuda_device_count();
  FT_CHECK_KIND(unsupported, gpu.index < count, "NcclCommunicator: no ", gpu.to_string(), " on this node (", count,
                " GPU(s) visible)");
  NcclState& s = *state_;
  s.device = gpu.index;
  s.rank = rank_;
  s.world = world_size_;
  s.options = options;
  set_compute_stream(compute_stream);

  CudaDeviceGuard guard(gpu.index);
  // The highest priority: when backward's kernels fill the GPU, a collective's blocks are scheduled as
  // soon as SMs free up instead of queueing behind the compute stream's next kernels.
  int lowest_priority = 0, highest_priority = 0;
  FT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest_priority, &highest_priority));
  // NcclTuning::low_priority: the other way round, the model's blocks first.
  FT_CUDA_CHECK(cudaStreamCreateWithPriority(&s.stream, cudaStreamNonBlocking,
                                             tuning.low_priority ? lowest_priority : highest_priority));
  FT_CUDA_CHECK(cudaEventCreateWithFlags(&s.ready, cudaEventDisableTiming));
  FT_CUDA_CHECK(cudaMalloc(&s.barrier_word, sizeof(float)));
  FT_CUDA_CHECK(cudaMemset(s.barrier_word, 0, sizeof(float)));

  ncclUniqueId id{};  // 128 bytes
  if (rank_ == 0) FT_NCCL_CHECK(ncclGetUniqueId(&id));
  if (world_size_ > 1) {
    // The id's bytes viewed as 64 bf16 elements: moved bit for bit (MPI sends them as 16-bit integers).
    static_assert(sizeof(id) % 2 == 0);
    const std::int64_t halves = static_cast<std::int64_t>(sizeof(id) / 2);
    bootstrap.broadcast(Tensor(&id, DType::bf16, Device::cpu(), {halves}), 0)->wait();
  }
  const std::string what = str("ncclCommInitRankConfig (", world_size_, " ranks, ", gpu.to_string(),
                               tuning.is_default() ? "" : ", " + tuning.describe(), ")");
  s.check_call(ncclCommInitRankConfig(&s.comm, world_size_, id, rank_, &config), what, "ncclCommInitRankConfig",
               __FILE__, __LINE__);
  s.settle(what);
}

NcclCommunicator::~NcclCommunicator() {
  int previous = 0;
  const bool switch_device = cudaGetDevice(&previous) == cudaSuccess && previous != gpu_.index;
  if (switch_device) cudaSetDevice(gpu_.index);
  state_->shut_down();
  if (switch_device) cudaSetDevice(previous);
}

void NcclCommunicator::set_compute_stream(const Stream& stream) {
  FT_CHECK(stream.handle() == nullptr || stream.device() == gpu_, "NcclCommunicator: the compute stream must be on ",
           gpu_.to_string(), " (this rank's GPU), given a stream on ", stream.device().to_string());
  state_->compute = static_cast<cudaStream_t>(stream.handle());
}

std::optional<Stream> NcclCommunicator::compute_stream() const { return Stream::wrap(state_->compute, gpu_); }

void NcclCommunicator::abort() { state_->abort_nccl("NcclCommunicator::abort() was called"); }

bool NcclCommunicator::aborted() const { return !state_->abort_reason.empty(); }

WorkHandle NcclCommunicator::all_reduce(const Tensor& data, ReduceOp op) {
  return enqueue_all_reduce(state_, gpu_, data, op, nullptr);
}

WorkHandle NcclCommunicator::all_reduce_widened(const Tensor& data, ReduceOp op, const Tensor& widened,
                                                const Stream&) {
  check_collective_buffer("all_reduce", "data", data, true);
  check_widened(data, widened);
  return enqueue_all_reduce(state_, gpu_, data, op, &widened);
}

WorkHandle NcclCommunicator::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_reduce_scatter(output, input, world_size_);
  check_on_gpu("reduce_scatter", "input", input, gpu_);
  if (output.numel() == 0) return std::make_unique<CompletedWork>();
  Launch launch(state_, describe("reduce_scatter", input, name_of(op)));
  FT_NCCL_ENQUEUE(launch, ncclReduceScatter(input.data(), output.data(), static_cast<std::size_t>(output.numel()),
                                            nccl_type(input.dtype()), nccl_op(op), launch.comm(), launch.stream()));
  return launch.finish();
}

WorkHandle NcclCommunicator::all_gather(const Tensor& output, const Tensor& input) {
  check_all_gather(output, input, world_size_);
  check_on_gpu("all_gather", "input", input, gpu_);
  const std::size_t slice_bytes = static_cast<std::size_t>(input.numel()) * input.element_size();
  const char* in = static_cast<const char*>(input.data());
  const char* out = static_cast<const char*>(output.data());
  const bool in_place = in == out + static_cast<std::size_t>(rank_) * slice_bytes;
  FT_CHECK(in_place || in + slice_bytes <= out || out + output.span_bytes() <= in,
           "all_gather: the input must be this rank's slice of the output or not overlap it, given ",
           input.describe(), " and ", output.describe());
  if (input.numel() == 0) return std::make_unique<CompletedWork>();
  Launch launch(state_, describe("all_gather", output));
  FT_NCCL_ENQUEUE(launch, ncclAllGather(input.data(), output.data(), static_cast<std::size_t>(input.numel()),
                                        nccl_type(input.dtype()), launch.comm(), launch.stream()));
  return launch.finish();
}

WorkHandle NcclCommunicator::broadcast(const Tensor& data, int root) {
  check_collective_buffer("broadcast", "data", data, true);
  check_on_gpu("broadcast", "data", data, gpu_);
  check_root("broadcast", root, world_size_);
  if (data.numel() == 0) return std::make_unique<CompletedWork>();
  Launch launch(state_, describe("broadcast", data, str("root ", root)));
  FT_NCCL_ENQUEUE(launch, ncclBroadcast(data.data(), data.data(), static_cast<std::size_t>(data.numel()),
                                        nccl_type(data.dtype()), root, launch.comm(), launch.stream()));
  return launch.finish();
}

WorkHandle NcclCommunicator::all_reduce_staged(const Tensor& data, const Tensor& staging, ReduceOp op,
                                               const Stream&) {
  check_staged(data, staging);
  check_on_gpu("all_reduce_staged", "data", data, gpu_);
  if (data.numel() == 0) return std::make_unique<CompletedWork>();
  Launch launch(state_, describe("all_reduce", staging, str(name_of(op), ", staged")));
  const int device = gpu_.index;
  copy_on(staging, data, launch.stream(), device);
  FT_NCCL_ENQUEUE(launch, ncclAllReduce(staging.data(), staging.data(), static_cast<std::size_t>(staging.numel()),
                                        nccl_type(staging.dtype()), nccl_op(op), launch.comm(), launch.stream()));
  return launch.finish([&](const Stream& stream) {
    copy_on(data, staging, static_cast<cudaStream_t>(stream.handle()), device);
  });
}

std::unique_ptr<CommBuffer> NcclCommunicator::allocate_buffer(std::int64_t numel, DType dtype, CommBufferKind kind) {
  FT_CHECK(is_staged(kind), "allocate_buffer: expected the kind nccl_mem or symmetric, given ", name_of(kind));
  FT_CHECK(numel >= 0 && (dtype == DType::f32 || dtype == DType::bf16),
           "allocate_buffer: expected numel >= 0 of fp32 or bf16, given ", numel, " of ", name_of(dtype));
  if (kind == CommBufferKind::symmetric) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    require_runtime_version(NCCL_VERSION(2, 27, 0), "a symmetric communication buffer (ncclCommWindowRegister)");
#else
    FT_THROW(unsupported, "a symmetric communication buffer (ncclCommWindowRegister) needs NCCL 2.27 or newer; "
             "flashtrain was built against NCCL ", version_text(NCCL_VERSION_CODE), " (use nccl_mem or registered)");
#endif
  }
  return std::make_unique<NcclBuffer>(state_, numel, dtype, kind);
}

std::unique_ptr<CommRegistration> NcclCommunicator::register_buffer(const Tensor& data) {
  FT_CHECK(data.defined() && data.is_contiguous(), "register_buffer: expected a contiguous tensor, given ",
           data.defined() ? data.describe() : std::string("undefined"));
  check_on_gpu("register_buffer", "data", data, gpu_);
  return std::make_unique<NcclRegistration>(state_, data);
}

int NcclCommunicator::runtime_version() {
  int version = 0;
  FT_NCCL_CHECK(ncclGetVersion(&version));
  return version;
}

WorkHandle NcclCommunicator::barrier() {
  Launch launch(state_, "barrier");
  FT_NCCL_ENQUEUE(launch, ncclAllReduce(state_->barrier_word, state_->barrier_word, 1, ncclFloat32, ncclSum,
                                        launch.comm(), launch.stream()));
  return launch.finish();
}

}  // namespace ft
