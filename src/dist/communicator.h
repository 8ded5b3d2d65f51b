// communicator.h — the collective-communication interface data-parallel code is written against, and the
// checks every backend shares. Backends:
//   SingleProcessCommunicator  world 1: every collective is the identity (no launcher needed)
//   MpiCommunicator            host buffers, nonblocking MPI collectives (dist/mpi/mpi_communicator.h)
//   NcclCommunicator           buffers on this rank's GPU, NCCL on a communication stream ordered after the
//                              compute stream by events (dist/nccl/nccl_communicator.h)
// DistributedContext (dist/context.h) bootstraps them; communicator_for(device) picks one for a buffer.
// Every collective is asynchronous: it is issued at once and returns a Work handle; the buffers must stay
// alive and untouched until wait() returns. All ranks issue the same collectives in the same order (as
// MPI and NCCL require). Buffers are contiguous tensors of fp32 or bf16 (a bf16 reduction rounds to bf16
// after each addition), on the device the backend moves (the CPU for MPI, this rank's GPU for NCCL).
// A collective that does not complete within the backend's timeout ends with ft::Error (kind runtime)
// naming the operation, the rank and the timeout — never a silent hang.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

enum class ReduceOp { sum, average };
const char* name_of(ReduceOp op);  // "sum", "average"

// What a collective past its timeout does: throw ft::Error (runtime) on this rank, or print that error
// and end every rank of the job (MPI_Abort) — the default, since a peer that never joins would leave the
// other ranks blocked in their next collective.
enum class TimeoutAction { throw_error, abort_job };

struct CommunicatorOptions {
  double timeout_seconds = 300;  // per wait(), from the moment it is called
  TimeoutAction on_timeout = TimeoutAction::abort_job;
};

// Where data-parallel code keeps a buffer while it is reduced (Note [Communication buffers]):
//   plain       the caller's own memory, as allocated (in place; no registration)
//   registered  the caller's memory registered with the backend (NCCL: ncclCommRegister), in place
//   nccl_mem    a staging buffer the backend allocates and registers (NCCL: ncclMemAlloc + ncclCommRegister)
//   symmetric   a staging buffer in a symmetric window (NCCL 2.27+: ncclMemAlloc + ncclCommWindowRegister
//               with NCCL_WIN_COLL_SYMMETRIC), whose collectives run NCCL's symmetric kernels over NVLink
enum class CommBufferKind { plain, registered, nccl_mem, symmetric };
const char* name_of(CommBufferKind kind);
CommBufferKind parse_comm_buffer_kind(std::string_view text);  // "plain" | "registered" | "nccl_mem" | "symmetric"
bool is_staged(CommBufferKind kind);                           // nccl_mem, symmetric: a buffer of the backend's

// Memory a backend allocated for collectives (allocate_buffer): (numel) of one dtype on its device, freed
// (and deregistered) on destruction. Its collectives must have completed by then.
class CommBuffer {
 public:
  virtual ~CommBuffer() = default;
  const Tensor& tensor() const { return tensor_; }

 protected:
  Tensor tensor_;
};

// The caller's memory registered with a backend (register_buffer); deregistered on destruction, after its
// collectives have completed. The memory must outlive it.
class CommRegistration {
 public:
  virtual ~CommRegistration() = default;
};

// A collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  // True once the collective has completed (and its result is in the output buffer); never blocks, and
  // lets the backend make progress.
  virtual bool is_completed() = 0;
  // Blocks until completion. Past the communicator's timeout: ft::Error (runtime), or the whole job ends
  // (see the backend's options). Calling it again after completion returns at once.
  virtual void wait() = 0;
  // Orders the compute stream after the collective without blocking the host where the backend can (NCCL:
  // the compute stream waits for the collective's completion event, and the timeout is enforced by the next
  // wait() on the communicator, which completes only after this collective); wait() elsewhere.
  virtual void join() { wait(); }
  // The collective's own duration in ms once it has completed (the device time between its start and its
  // end on the communication stream: NCCL); nullopt before completion or from backends that do not time
  // their collectives (MPI, single process — DDP times those on the host).
  virtual std::optional<double> elapsed_ms() { return std::nullopt; }
};
using WorkHandle = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;              // 0 .. world_size - 1
  virtual int world_size() const = 0;
  virtual int local_rank() const = 0;        // rank among the processes of this node (-> GPU index)
  virtual int local_world_size() const = 0;  // processes on this node
  virtual const char* backend() const = 0;   // "single", "mpi", "nccl"

  // data (n) <- the reduction of every rank's data, in place.
  virtual WorkHandle all_reduce(const Tensor& data, ReduceOp op) = 0;
  // all_reduce of data (n, bf16 or fp32), then widened (n, fp32, on data's device, not overlapping it) <-
  // the result: the Work completes once widened holds it (bf16 gradient communication with fp32
  // gradients). NCCL widens on its communication stream right after the reduction, beside the compute
  // stream's work; this default widens when the completion is first observed (is_completed() or wait()),
  // for device buffers on `stream`: the stream data was written on (the single-process identity is given
  // device buffers in a world of one).
  virtual WorkHandle all_reduce_widened(const Tensor& data, ReduceOp op, const Tensor& widened,
                                        const Stream& stream = {});
  // output (n) <- the reduction over ranks of input[rank * n, (rank + 1) * n); input (world * n).
  // input and output must not overlap, and share a dtype.
  virtual WorkHandle reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) = 0;
  // output (world * n) <- every rank's input (n), rank r's at [r * n, (r + 1) * n). input may be that
  // slice of output itself (in place: ZeRO's parameter all-gather).
  virtual WorkHandle all_gather(const Tensor& output, const Tensor& input) = 0;
  // data (n) <- root's data.
  virtual WorkHandle broadcast(const Tensor& data, int root) = 0;
  virtual WorkHandle barrier() = 0;

  // The staged all-reduce of a buffer the caller does not reduce in place: staging (n, bf16 or fp32) <-
  // data (n, fp32), rounded when bf16; staging <- the reduction over ranks; data <- staging, widened. The
  // Work completes once data holds the result. NCCL runs all three on its communication stream (the copies
  // in and out beside the compute stream, by the copy engine when the dtypes match); this default copies
  // in on `stream` (the one data was written on) and then is all_reduce_widened.
  virtual WorkHandle all_reduce_staged(const Tensor& data, const Tensor& staging, ReduceOp op,
                                       const Stream& stream = {});

  // A buffer for collectives of kind nccl_mem or symmetric (n, dtype), on the backend's device. Collective
  // for symmetric (every rank allocates the same sizes in the same order). ft::Error (unsupported) from a
  // backend without such memory (every one but NCCL), or an NCCL too old for the kind (naming its version).
  virtual std::unique_ptr<CommBuffer> allocate_buffer(std::int64_t numel, DType dtype, CommBufferKind kind);
  // Registers the caller's buffer `data` (contiguous, on the backend's device) for zero-copy collectives
  // (NCCL: ncclCommRegister). ft::Error (unsupported) from a backend that registers nothing.
  virtual std::unique_ptr<CommRegistration> register_buffer(const Tensor& data);

  // Device backends (NCCL): the stream every collective orders itself after — the one the buffers are
  // written on (DistributedContext::set_compute_stream). nullopt for host backends.
  virtual std::optional<Stream> compute_stream() const { return std::nullopt; }
};

// A Work that is already complete (the identity collectives, empty buffers).
class CompletedWork final : public Work {
 public:
  bool is_completed() override { return true; }
  void wait() override {}
};

// The argument checks every backend runs (ft::Error naming the operation, what was expected and given).
// `allow_bf16`: bf16 is accepted besides fp32.
void check_collective_buffer(const char* op, const char* role, const Tensor& t, bool allow_bf16);
void check_reduce_scatter(const Tensor& output, const Tensor& input, int world_size);
void check_all_gather(const Tensor& output, const Tensor& input, int world_size);
// all_reduce_widened's `widened`: fp32, contiguous, data's numel and device, disjoint from data.
void check_widened(const Tensor& data, const Tensor& widened);
// all_reduce_staged's buffers: data fp32, staging fp32 or bf16, both contiguous, of one length and device,
// disjoint.
void check_staged(const Tensor& data, const Tensor& staging);
void check_root(const char* op, int root, int world_size);
// "<what> on rank R of W did not complete within the T s timeout: ..." — the timeout error's message.
std::string timeout_message(const std::string& what, int rank, int world_size, double timeout_seconds);

}  // namespace ft
