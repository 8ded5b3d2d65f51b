// peer_communicator.h — PeerCommunicator: all-reduce and reduce-scatter between the 2 GPUs of a 2-rank job
// by copy engines over CUDA peer access, with no NCCL kernel (Note [Copy-engine all-reduce]); its other
// collectives go to a fallback communicator (the job's NCCL one). Built with NCCL (this folder), for
// buffers on this rank's GPU.
//   requirements  world size 2, both ranks on one node, peer access between their GPUs
//                 (cudaDeviceCanAccessPeer); anything else is an ft::Error (unsupported) naming it.
//   memory        each rank cudaMallocs two mailboxes of capacity_bytes plus two flags each (one per lane:
//                 the collectives alternate between them), and the ranks exchange their IPC handles
//                 (cudaIpcGetMemHandle) over the bootstrap communicator, so each maps the other's
//                 (cudaIpcOpenMemHandle). An all_reduce, or a reduce_scatter's output, larger than the
//                 capacity is an ft::Error.
//   streams       as NcclCommunicator, with one high-priority communication stream per lane, which first
//                 waits for the compute stream; Work::wait() makes the compute stream wait for the
//                 collective; elapsed_ms() is the collective's device time.
//   failures      a wait() past the timeout throws ft::Error or ends the job (CommunicatorOptions); a peer
//                 that never arrives leaves this rank's communication stream waiting (no abort exists for
//                 it), so the job must end.
// One thread uses it at a time. The header holds no CUDA types.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/device.h"
#include "core/stream.h"
#include "dist/communicator.h"

namespace ft {

struct PeerState;  // the mailboxes, flags, stream and counters (peer_communicator.cpp)
struct PeerLane;   // one stream, flags and mailboxes (peer_communicator.cpp)
class StreamWork;  // dist/nccl/stream_work.h

class PeerCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (2 ranks): checks the requirements, allocates and exchanges the mailboxes.
  // fallback: on the same ranks and GPU (all_gather, broadcast, barrier go to it); it must
  // outlive this communicator.
  PeerCommunicator(Communicator& bootstrap, Communicator& fallback, Device gpu, std::int64_t capacity_bytes,
                   const CommunicatorOptions& options = {}, const Stream& compute_stream = {});
  ~PeerCommunicator() override;
  PeerCommunicator(const PeerCommunicator&) = delete;
  PeerCommunicator& operator=(const PeerCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return 2; }
  int local_rank() const override { return fallback_.local_rank(); }
  int local_world_size() const override { return fallback_.local_world_size(); }
  const char* backend() const override { return "copy_engine"; }
  std::optional<Stream> compute_stream() const override;

  WorkHandle all_reduce(const Tensor& data, ReduceOp op) override;
  // The widening runs on the communication stream right after the reduction.
  WorkHandle all_reduce_widened(const Tensor& data, ReduceOp op, const Tensor& widened,
                                const Stream& stream = {}) override;
  // The copy in, the all-reduce and the widening all run on the communication stream.
  WorkHandle all_reduce_staged(const Tensor& data, const Tensor& staging, ReduceOp op,
                               const Stream& stream = {}) override;
  WorkHandle reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  WorkHandle all_gather(const Tensor& output, const Tensor& input) override;
  WorkHandle broadcast(const Tensor& data, int root) override;
  WorkHandle barrier() override;

  std::int64_t capacity_bytes() const { return capacity_bytes_; }

 private:
  // The all-reduce of data on the next lane; widened (optional): the result widened into it afterwards;
  // stage_in: data is first rounded (or copied) from widened, on the lane's stream.
  WorkHandle enqueue(const Tensor& data, ReduceOp op, const Tensor* widened, bool stage_in);
  // ft::Error unless `input` is on this rank's GPU and `received` (what the peer sends) fits the mailbox.
  void check_fits(const char* op, const Tensor& input, const Tensor& received) const;
  // A Work whose collective is about to be enqueued: the communication stream ordered after the compute
  // stream, the start event recorded (on the current device: the caller's guard).
  std::unique_ptr<StreamWork> begin(std::string what, PeerLane& lane);

  std::shared_ptr<PeerState> state_;
  Communicator& fallback_;
  Device gpu_;
  int rank_ = 0;
  std::int64_t capacity_bytes_ = 0;
};

}  // namespace ft
