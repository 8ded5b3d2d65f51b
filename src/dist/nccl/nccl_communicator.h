// nccl_communicator.h — NcclCommunicator: the Communicator over NCCL for buffers on this rank's GPU, built
// when CMake finds CUDA and NCCL (FT_HAS_NCCL=1; this folder is left out of the library otherwise).
// DistributedContext::device_communicator() makes the job's one; tests and tools may make more.
//   streams   every collective runs on the communicator's own CUDA stream (non-blocking, highest priority,
//             created here), which first waits for an event recorded on the compute stream — the stream the model's
//             kernels run on — so it sees everything queued there before the call (the gradients it
//             reduces). The Work holds an event recorded after the collective.
//   Work      is_completed() queries that event (and ncclCommGetAsyncError); wait() polls it until done,
//             then makes the compute stream wait for it (cudaStreamWaitEvent), so kernels queued there
//             afterwards see the result; on return the result is also visible to the host.
//   failures  a wait() past CommunicatorOptions::timeout_seconds, or an NCCL error (ncclCommGetAsyncError,
//             described by ncclGetErrorString and ncclGetLastError), aborts the NCCL communicator
//             (ncclCommAbort: kernels stuck on a peer end) and then, as the options say, throws ft::Error
//             (runtime; timeout_message() for a timeout) or prints the error and ends the job (MPI_Abort,
//             or exit status 1 without MPI). An aborted communicator refuses further collectives.
//   NCCL      runs in its nonblocking mode (ncclConfig_t::blocking = 0): no NCCL call can block the host
//             indefinitely (e.g. connecting to a peer that never comes); init and each enqueue are polled
//             until ready, bounded by the same timeout.
//   tuning    NcclTuning (dist/nccl_tuning.h): the communicator's CTA limits and policy, set in its
//             ncclConfig_t; a policy this NCCL (ncclGetVersion, at run time) lacks is an ft::Error naming both
//             versions.
//   memory    allocate_buffer: ncclMemAlloc, then ncclCommRegister (nccl_mem) or ncclCommWindowRegister with
//             NCCL_WIN_COLL_SYMMETRIC (symmetric; NCCL 2.27+ at build and run time, else ft::Error naming the
//             version); register_buffer: ncclCommRegister of the caller's memory. A registration NCCL refuses
//             is an ft::Error (unsupported) with NCCL's reason; the communicator stays usable.
//             See Note [Communication buffers].
//   buffers   contiguous fp32 or bf16 (reduce_scatter: fp32) on this rank's GPU; average is ncclAvg;
//             all_gather may be in place; barrier is an all-reduce of one float the communicator owns.
//             Empty buffers complete at once without calling NCCL (every rank passes the same shapes).
// One thread uses a communicator and its Works at a time. The header holds no CUDA or NCCL types.
#pragma once

#include <memory>

#include "core/device.h"
#include "core/stream.h"
#include "dist/communicator.h"
#include "dist/nccl_tuning.h"

namespace ft {

struct NcclState;  // the NCCL communicator, streams and events (nccl_communicator.cpp)

class NcclCommunicator final : public Communicator {
 public:
  // Joins every rank of `bootstrap` (collective over it) in one NCCL communicator driving `gpu` on this
  // rank: rank 0 draws the NCCL unique id and broadcasts it over `bootstrap` (not in a world of one),
  // then every rank calls ncclCommInitRankConfig, polled until ready or past the timeout. rank(),
  // world_size(), local_rank() and local_world_size() are bootstrap's. compute_stream: on `gpu`; the
  // default, a default-constructed Stream, is gpu's legacy default stream.
  NcclCommunicator(Communicator& bootstrap, Device gpu, const CommunicatorOptions& options = {},
                   const Stream& compute_stream = {}, const NcclTuning& tuning = {});
  // Lets issued collectives finish (bounded by the timeout), then ncclCommFinalize and ncclCommDestroy;
  // ncclCommAbort when they do not finish in time.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int local_rank() const override { return local_rank_; }
  int local_world_size() const override { return local_world_size_; }
  const char* backend() const override { return "nccl"; }

  // The stream collectives order themselves after (see above); for collectives issued after the call.
  void set_compute_stream(const Stream& stream);
  std::optional<Stream> compute_stream() const override;

  WorkHandle all_reduce(const Tensor& data, ReduceOp op) override;
  // The widening runs on the communication stream right after the reduction (see Communicator), which
  // is ordered after the compute stream: `stream` is not used.
  WorkHandle all_reduce_widened(const Tensor& data, ReduceOp op, const Tensor& widened,
                                const Stream& stream = {}) override;
  WorkHandle reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  WorkHandle all_gather(const Tensor& output, const Tensor& input) override;
  WorkHandle broadcast(const Tensor& data, int root) override;
  WorkHandle barrier() override;
  WorkHandle all_reduce_staged(const Tensor& data, const Tensor& staging, ReduceOp op,
                               const Stream& stream = {}) override;
  std::unique_ptr<CommBuffer> allocate_buffer(std::int64_t numel, DType dtype, CommBufferKind kind) override;
  std::unique_ptr<CommRegistration> register_buffer(const Tensor& data) override;

  const NcclTuning& tuning() const { return tuning_; }
  // The NCCL library's version at run time (ncclGetVersion: e.g. 22809 for 2.28.9).
  static int runtime_version();

  // Ends the NCCL communicator at once (ncclCommAbort), without waiting for its collectives; later
  // collectives throw ft::Error. For a rank whose peer has aborted (after a failure): destroying would
  // wait for collectives that peer will never join. Idempotent.
  void abort();
  bool aborted() const;

 private:
  std::shared_ptr<NcclState> state_;  // shared with the Works in flight
  Device gpu_;
  NcclTuning tuning_;
  int rank_ = 0, world_size_ = 1, local_rank_ = 0, local_world_size_ = 1;
};

}  // namespace ft
