// peer_communicator.cpp — the copy-engine all-reduce of 2 GPUs: mailboxes exchanged by CUDA IPC, peer copies
// on the communication stream, flags written and awaited by stream memory operations, one small reduction
// kernel; the other collectives forwarded to the fallback communicator.
#include "dist/nccl/peer_communicator.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/cuda_check.h"
#include "core/error.h"
#include "dist/nccl/stream_work.h"
#include "dist/nccl/peer_reduce.h"
#include "ops/cast.h"

namespace ft {

// Note [Copy-engine all-reduce]
// NCCL's kernels move data with SMs: each channel's CTA holds an SM for the whole collective and loads and
// stores through it, beside backward's kernels. Between 2 GPUs of one node the copy engines can move the
// bytes instead. Each rank owns a mailbox (device memory its peer maps through CUDA IPC) and two 32-bit
// flags in it, `arrived` and `free`, which the peer writes with cuStreamWriteValue32 (ordered after the
// copies before it on the stream, with a memory barrier) and this rank awaits with cuStreamWaitValue32 —
// on the GPU, without the host. Collective s (1, 2, ...; both ranks issue the same sequence), on the
// communication stream of rank r, whose half of the n elements is h_r (h_0 = [0, n/2), h_1 = [n/2, n)):
//   1. wait free >= s - 1         the peer has read everything of collective s - 1 from its mailbox
//   2. copy data[h_peer] -> the peer's mailbox[h_peer]                     (copy engine, over NVLink)
//   3. write the peer's arrived = 2s - 1;  wait arrived >= 2s - 1           (the peer's half is here)
//   4. data[h_r] <- (data[h_r] + mailbox[h_r]) * scale                     (the reduction: a small kernel)
//   5. copy data[h_r] -> the peer's mailbox[h_r]                            (the reduced half, back)
//   6. write the peer's arrived = 2s;  wait arrived >= 2s
//   7. copy mailbox[h_peer] -> data[h_peer]                                 (the peer's reduced half)
//   8. write the peer's free = s
// Collectives alternate between two lanes, each with its own stream, flags and mailboxes (s counts a
// lane's collectives), so one collective's copies overlap the reduction of the one before it.
// Steps 2-4 are a reduce-scatter, 5-7 an all-gather; reduce_scatter alone is steps 1-4 (its pieces the
// halves, the peer's piece into the mailbox's start, the sum into the output, one `arrived` of 2s) and 8. Each element is one addition in fp32 (a + b, rounded
// once to the dtype) and a scaling by 1 or 1/2 (exact), so the result is NCCL's bit for bit on 2 ranks.
// The SMs it takes: the reduction kernel's few blocks, for the time they read and write one half.

namespace {

using StreamWaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using StreamWriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// A driver function through the runtime (no link against libcuda): ft::Error (unsupported) when missing.
void* driver_function(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t rc = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
  FT_CHECK_KIND(unsupported, rc == cudaSuccess && found == cudaDriverEntryPointSuccess && fn, "the copy-engine ",
                "all-reduce needs the CUDA driver's ", name, " (stream memory operations), which this driver lacks");
  return fn;
}

constexpr std::size_t kFlagBytes = 256;  // the two flags, then the mailbox (aligned)


}  // namespace

// One instance of the protocol (Note [Copy-engine all-reduce]): its stream, flags, mailboxes and count.
// Collectives alternate between the lanes (the same on both ranks), so one collective's copies run while
// the one before it reduces.
struct PeerLane {
  cudaStream_t stream = nullptr;  // a communication stream (owned)
  char* mine = nullptr;           // this rank's flags + mailbox (cudaMalloc, owned)
  char* peers = nullptr;          // the peer's, mapped (cudaIpcOpenMemHandle)
  std::uint32_t sequence = 0;     // collectives issued on this lane
};

constexpr int kLanes = 2;

struct PeerState {
  int device = 0, rank = 0;
  CommunicatorOptions options;
  cudaStream_t compute = nullptr;  // not owned; nullptr = the legacy default stream
  cudaEvent_t ready = nullptr;     // recorded on the compute stream before each collective (owned)
  PeerLane lanes[kLanes];
  std::size_t issued = 0;          // collectives issued (the next one's lane: issued % kLanes)
  StreamWaitValue32 wait_value = nullptr;
  StreamWriteValue32 write_value = nullptr;

  ~PeerState() {
    CudaDeviceGuard guard(device);
    for (PeerLane& lane : lanes) {
      if (lane.stream) cudaStreamSynchronize(lane.stream);
      if (lane.peers) cudaIpcCloseMemHandle(lane.peers);
      if (lane.mine) cudaFree(lane.mine);
      if (lane.stream) cudaStreamDestroy(lane.stream);
    }
    if (ready) cudaEventDestroy(ready);
  }

  PeerLane& next_lane() { return lanes[issued++ % kLanes]; }

  static CUdeviceptr arrived(char* base) { return reinterpret_cast<CUdeviceptr>(base); }
  static CUdeviceptr freed(char* base) { return reinterpret_cast<CUdeviceptr>(base + sizeof(std::uint32_t)); }
  char* mailbox(char* base) const { return base + kFlagBytes; }

  void wait_at_least(const PeerLane& lane, CUdeviceptr flag, std::uint32_t value) {
    FT_CHECK_KIND(device, wait_value(lane.stream, flag, value, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS,
                  "cuStreamWaitValue32 failed on ", Device::cuda(device).to_string());
  }
  void write(const PeerLane& lane, CUdeviceptr flag, std::uint32_t value) {
    FT_CHECK_KIND(device, write_value(lane.stream, flag, value, CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS,
                  "cuStreamWriteValue32 failed on ", Device::cuda(device).to_string());
  }

  [[noreturn]] void fail(const std::string& message) {
    if (options.on_timeout == TimeoutAction::abort_job) {
      std::fprintf(stderr, "flashtrain: error: %s; ending every rank\n", message.c_str());
      std::fflush(stderr);
      end_job();
    }
    FT_THROW(runtime, message);
  }
};

namespace {

// A collective on the communication stream (StreamWork).
class PeerWork final : public StreamWork {
 public:
  PeerWork(std::shared_ptr<PeerState> state, std::string what)
      : StreamWork(std::move(what), state->device, state->compute, state->options.timeout_seconds),
        state_(std::move(state)) {}

 private:
  [[noreturn]] void time_out(const std::string& message) override { state_->fail(message); }
  int rank() const override { return state_->rank; }
  int world() const override { return 2; }

  std::shared_ptr<PeerState> state_;
};

float scale_of(ReduceOp op) { return op == ReduceOp::average ? 0.5f : 1.0f; }

void copy_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes > 0) FT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

}  // namespace

PeerCommunicator::PeerCommunicator(Communicator& bootstrap, Communicator& fallback, Device gpu,
                                   std::int64_t capacity_bytes, const CommunicatorOptions& options,
                                   const Stream& compute_stream)
    : state_(std::make_shared<PeerState>()), fallback_(fallback), gpu_(gpu), rank_(bootstrap.rank()),
      capacity_bytes_(capacity_bytes) {
  FT_CHECK_KIND(unsupported, bootstrap.world_size() == 2, "the copy-engine all-reduce runs between 2 GPUs: it needs "
                "a world of 2 ranks, given ", bootstrap.world_size());
  FT_CHECK_KIND(unsupported, bootstrap.local_world_size() == 2, "the copy-engine all-reduce needs both ranks on one "
                "node (CUDA peer access), given ", bootstrap.local_world_size(), " rank(s) on this node");
  FT_CHECK(fallback.world_size() == 2 && fallback.rank() == rank_, "PeerCommunicator: the fallback communicator must "
           "span the same 2 ranks, given rank ", fallback.rank(), " of ", fallback.world_size());
  FT_CHECK(gpu.is_cuda(), "PeerCommunicator: expected a GPU (cuda:N), given ", gpu.to_string());
  FT_CHECK(capacity_bytes >= 0, "PeerCommunicator: capacity_bytes must be >= 0, given ", capacity_bytes);
  FT_CHECK(options.timeout_seconds > 0, "PeerCommunicator: timeout_seconds must be > 0, given ",
           options.timeout_seconds);
  FT_CHECK(compute_stream.handle() == nullptr || compute_stream.device() == gpu,
           "PeerCommunicator: the compute stream must be on ", gpu.to_string(), ", given one on ",
           compute_stream.device().to_string());
  PeerState& s = *state_;
  s.device = gpu.index;
  s.rank = rank_;
  s.options = options;
  s.compute = static_cast<cudaStream_t>(compute_stream.handle());
  CudaDeviceGuard guard(gpu.index);

  // Both ranks learn each other's GPU and whether each can reach the other before anything is allocated,
  // so a refusal is the same on both ranks (no rank is left waiting in the exchange below).
  std::int32_t mine_info[2] = {gpu.index, 0};   // device, can reach the peer (filled below)
  std::int32_t all_info[4] = {0, 0, 0, 0};      // (2 ranks, 2)
  const auto gather_ints = [&](std::int32_t* in, std::int32_t* out) {
    // 2 int32 as 4 bf16 elements: moved bit for bit.
    bootstrap.all_gather(Tensor(out, DType::bf16, Device::cpu(), {8}), Tensor(in, DType::bf16, Device::cpu(), {4}))
        ->wait();
  };
  gather_ints(mine_info, all_info);
  const int peer_device = all_info[2 * (1 - rank_)];
  int can_access = 0;
  if (peer_device != gpu.index) FT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can_access, gpu.index, peer_device));
  mine_info[1] = can_access;
  gather_ints(mine_info, all_info);
  FT_CHECK_KIND(unsupported, all_info[1] && all_info[3], "the copy-engine all-reduce needs CUDA peer access "
                "between the ranks' GPUs (cuda:", all_info[0], " and cuda:", all_info[2], "), which this machine ",
                "does not give (cudaDeviceCanAccessPeer: rank 0 ", all_info[1] ? "yes" : "no", ", rank 1 ",
                all_info[3] ? "yes" : "no", "); use NCCL");

  s.wait_value = reinterpret_cast<StreamWaitValue32>(driver_function("cuStreamWaitValue32"));
  s.write_value = reinterpret_cast<StreamWriteValue32>(driver_function("cuStreamWriteValue32"));
  int lowest_priority = 0, highest_priority = 0;
  FT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest_priority, &highest_priority));
  FT_CUDA_CHECK(cudaEventCreateWithFlags(&s.ready, cudaEventDisableTiming));
  cudaIpcMemHandle_t handles[kLanes][2]{};  // (lane, rank), 64 bytes each
  for (int l = 0; l < kLanes; ++l) {
    PeerLane& lane = s.lanes[l];
    FT_CUDA_CHECK(cudaStreamCreateWithPriority(&lane.stream, cudaStreamNonBlocking, highest_priority));
    FT_CUDA_CHECK(cudaMalloc(&lane.mine, kFlagBytes + static_cast<std::size_t>(capacity_bytes)));
    FT_CUDA_CHECK(cudaMemset(lane.mine, 0, kFlagBytes));
    cudaIpcMemHandle_t handle{};
    FT_CUDA_CHECK(cudaIpcGetMemHandle(&handle, lane.mine));
    static_assert(sizeof(handle) % 2 == 0);
    const std::int64_t halves = static_cast<std::int64_t>(sizeof(handle) / 2);
    bootstrap.all_gather(Tensor(handles[l], DType::bf16, Device::cpu(), {2 * halves}),
                         Tensor(&handle, DType::bf16, Device::cpu(), {halves}))
        ->wait();
  }
  FT_CUDA_CHECK(cudaDeviceSynchronize());  // the flags are zero before the peer may write them
  for (int l = 0; l < kLanes; ++l)
    FT_CUDA_CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&s.lanes[l].peers), handles[l][1 - rank_],
                                       cudaIpcMemLazyEnablePeerAccess));
  bootstrap.barrier()->wait();  // both mapped and zeroed before either issues a collective
}

PeerCommunicator::~PeerCommunicator() = default;  // PeerState's destructor waits for the stream

std::optional<Stream> PeerCommunicator::compute_stream() const { return Stream::wrap(state_->compute, gpu_); }

void PeerCommunicator::check_fits(const char* op, const Tensor& input, const Tensor& received) const {
  FT_CHECK(input.device() == gpu_, op, ": the copy-engine communicator moves buffers on ", gpu_.to_string(),
           " (this rank's GPU), given ", input.describe());
  const std::size_t bytes = received.span_bytes();
  FT_CHECK(static_cast<std::int64_t>(bytes) <= capacity_bytes_, op, ": ", received.describe(), " (", bytes,
           " bytes) exceeds the copy-engine communicator's mailbox of ", capacity_bytes_, " bytes");
}

std::unique_ptr<StreamWork> PeerCommunicator::begin(std::string what, PeerLane& lane) {
  PeerState& s = *state_;
  auto work = std::make_unique<PeerWork>(state_, std::move(what));
  FT_CUDA_CHECK(cudaEventRecord(s.ready, s.compute));
  FT_CUDA_CHECK(cudaStreamWaitEvent(lane.stream, s.ready, 0));
  FT_CUDA_CHECK(cudaEventRecord(work->start(), lane.stream));
  return work;
}

WorkHandle PeerCommunicator::enqueue(const Tensor& data, ReduceOp op, const Tensor* widened, bool stage_in) {
  check_collective_buffer("all_reduce", "data", data, true);
  check_fits("all_reduce", data, data);
  if (data.numel() == 0) return std::make_unique<CompletedWork>();
  PeerState& s = *state_;
  CudaDeviceGuard guard(s.device);
  PeerLane& lane = s.next_lane();
  std::unique_ptr<StreamWork> work = begin(str("all_reduce (copy engine, ", name_of(data.dtype()), ", ",
                                               data.numel(), " elements)"), lane);

  const std::uint32_t seq = ++lane.sequence;
  // The halves meet at a multiple of 8 elements, so both start 16-byte aligned in the mailboxes (the
  // reduction's vector loads).
  const std::int64_t n = data.numel(), split = n / 2 / 8 * 8;
  const std::size_t element = data.element_size();
  // [begin, end) of rank r's half, in bytes.
  const auto begin = [&](int r) { return static_cast<std::size_t>(r == 0 ? 0 : split) * element; };
  const auto length = [&](int r) { return static_cast<std::size_t>(r == 0 ? split : n - split) * element; };
  const int me = rank_, peer = 1 - rank_;
  char* base = static_cast<char*>(data.data());
  char* my_mailbox = s.mailbox(lane.mine);
  char* peer_mailbox = s.mailbox(lane.peers);
  const cudaStream_t stream = lane.stream;
  if (stage_in) cast(data, *widened, Stream::wrap(stream, gpu_));  // the bucket rounded (or copied) in

  s.wait_at_least(lane, PeerState::freed(lane.mine), seq - 1);                                  // 1
  copy_device(peer_mailbox + begin(peer), base + begin(peer), length(peer), stream);            // 2
  s.write(lane, PeerState::arrived(lane.peers), 2 * seq - 1);                                   // 3
  s.wait_at_least(lane, PeerState::arrived(lane.mine), 2 * seq - 1);
  gpu::peer_reduce(base + begin(me), base + begin(me), my_mailbox + begin(me),
                   static_cast<std::int64_t>(length(me) / element), data.dtype(), scale_of(op), stream);  // 4
  copy_device(peer_mailbox + begin(me), base + begin(me), length(me), stream);                  // 5
  s.write(lane, PeerState::arrived(lane.peers), 2 * seq);                                       // 6
  s.wait_at_least(lane, PeerState::arrived(lane.mine), 2 * seq);
  copy_device(base + begin(peer), my_mailbox + begin(peer), length(peer), stream);              // 7
  s.write(lane, PeerState::freed(lane.peers), seq);                                             // 8
  if (widened) cast(*widened, data, Stream::wrap(stream, gpu_));
  FT_CUDA_CHECK(cudaEventRecord(work->done(), stream));
  return work;
}

WorkHandle PeerCommunicator::all_reduce(const Tensor& data, ReduceOp op) {
  return enqueue(data, op, nullptr, false);
}

WorkHandle PeerCommunicator::all_reduce_staged(const Tensor& data, const Tensor& staging, ReduceOp op,
                                               const Stream&) {
  check_staged(data, staging);
  return enqueue(staging, op, &data, true);
}

WorkHandle PeerCommunicator::all_reduce_widened(const Tensor& data, ReduceOp op, const Tensor& widened,
                                                const Stream&) {
  check_collective_buffer("all_reduce", "data", data, true);
  check_widened(data, widened);
  return enqueue(data, op, &widened, false);
}

WorkHandle PeerCommunicator::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_reduce_scatter(output, input, 2);
  check_fits("reduce_scatter", input, output);
  if (output.numel() == 0) return std::make_unique<CompletedWork>();
  const std::size_t bytes = output.span_bytes();
  PeerState& s = *state_;
  CudaDeviceGuard guard(s.device);
  PeerLane& lane = s.next_lane();
  std::unique_ptr<StreamWork> work = begin(str("reduce_scatter (copy engine, ", name_of(input.dtype()), ", ",
                                               input.numel(), " elements)"), lane);
  // Note [Copy-engine all-reduce]'s steps 1-4 with the halves the ranks' pieces of the input, the reduced
  // piece written to output, then step 8.
  const std::uint32_t seq = ++lane.sequence;
  const int peer = 1 - rank_;
  const char* in = static_cast<const char*>(input.data());
  s.wait_at_least(lane, PeerState::freed(lane.mine), seq - 1);
  copy_device(s.mailbox(lane.peers), in + static_cast<std::size_t>(peer) * bytes, bytes, lane.stream);
  s.write(lane, PeerState::arrived(lane.peers), 2 * seq);
  s.wait_at_least(lane, PeerState::arrived(lane.mine), 2 * seq);
  gpu::peer_reduce(output.data(), in + static_cast<std::size_t>(rank_) * bytes, s.mailbox(lane.mine), output.numel(),
                   output.dtype(), scale_of(op), lane.stream);
  s.write(lane, PeerState::freed(lane.peers), seq);
  FT_CUDA_CHECK(cudaEventRecord(work->done(), lane.stream));
  return work;
}

WorkHandle PeerCommunicator::all_gather(const Tensor& output, const Tensor& input) {
  return fallback_.all_gather(output, input);
}

WorkHandle PeerCommunicator::broadcast(const Tensor& data, int root) { return fallback_.broadcast(data, root); }

WorkHandle PeerCommunicator::barrier() { return fallback_.barrier(); }

}  // namespace ft
