// context.h — DistributedContext: the job's bootstrap. Finds out whether this process is one rank of an
// MPI job (mpirun / srun set the launcher's environment), initialises and finalises MPI when so, and owns
// the job's communicators. A plain run (no launcher) is a world of one that needs no MPI at all.
//   backend auto  MPI when started by an MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set) or
//                 when the caller already initialised MPI; the single-process communicator otherwise
//   backend mpi   MPI even without a launcher (a singleton MPI job of one rank)
//   backend single  world of one, MPI untouched
// MPI is initialised with MPI_THREAD_SERIALIZED (dist/mpi/mpi_runtime.h says why) and finalised by the
// destructor — after the communicators, which must not outlive the context — unless the caller had
// initialised it. A build without MPI (FT_HAS_MPI=0) started by a launcher throws ft::Error (unsupported)
// rather than silently running N independent copies.
//
// GPU buffers move over NCCL (dist/nccl/nccl_communicator.h), in builds where CMake found CUDA and NCCL
// (FT_HAS_NCCL=1). device_communicator() creates the job's NCCL communicator on first use: every rank
// drives GPU local_rank() (one process per GPU: ft::Error when the node runs more ranks than this process
// sees GPUs), makes it the current device (cudaSetDevice), rank 0 draws the NCCL unique id and broadcasts
// its 128 bytes over host_communicator() (no broadcast in a world of one), and every rank calls
// ncclCommInitRankConfig (nonblocking, polled under the communicator's timeout). Its collectives run on
// their own CUDA stream, after the work queued so far on the compute stream (set_compute_stream: the
// stream the model's kernels run on, ModelOptions::stream — model_stream() gives the model one; the legacy
// default stream unless set); Work::wait() makes the compute stream wait for the collective.
// communicator_for(device) picks the communicator for a buffer's device, and data_parallel_communicator
// adds the identity for a world of one, so data-parallel code (DDP, ZeRO) is written once against
// Communicator. The NCCL communicator is destroyed before MPI finalises.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/device.h"
#include "core/stream.h"
#include "dist/communicator.h"
#include "dist/nccl_tuning.h"

namespace ft {

enum class DistributedBackend { automatic, mpi, single };
DistributedBackend parse_distributed_backend(std::string_view text);  // "auto" | "mpi" | "single"

struct DistributedOptions {
  DistributedBackend backend = DistributedBackend::automatic;
  CommunicatorOptions communicator;  // timeout and what a timeout does
};

// True when the environment says an MPI launcher started this process.
bool launched_by_mpi();

class DistributedContext {
 public:
  explicit DistributedContext(const DistributedOptions& options = {});
  ~DistributedContext();
  DistributedContext(const DistributedContext&) = delete;
  DistributedContext& operator=(const DistributedContext&) = delete;

  int rank() const { return host_->rank(); }
  int world_size() const { return host_->world_size(); }
  int local_rank() const { return host_->local_rank(); }
  int local_world_size() const { return host_->local_world_size(); }
  bool uses_mpi() const { return uses_mpi_; }

  // Moves host buffers: MPI, or the single-process communicator in a world of one.
  Communicator& host_communicator() { return *host_; }

  // The GPU this rank drives: cuda:local_rank(). ft::Error (unsupported) in a build without CUDA, when no
  // GPU is visible, or when this node runs more ranks (local_world_size()) than this process sees GPUs.
  Device local_gpu() const;
  // Moves GPU buffers on local_gpu(): the NCCL communicator (backend "nccl"), created by the first call —
  // collective: every rank makes it, in the same order relative to its other collectives. It takes the
  // context's CommunicatorOptions (timeout, what a timeout does). ft::Error (unsupported) in a build
  // without NCCL or without a usable GPU (see local_gpu()).
  Communicator& device_communicator();
  // Another NCCL communicator over every rank on local_gpu(), with its own CTA limits and policy
  // (dist/nccl_tuning.h), ordered after the compute stream as the device communicator is — e.g. for DDP's
  // gradient buckets alone. Collective (every rank, in the same order). The caller owns it; it must be
  // destroyed before the context. ft::Error as device_communicator(), and for a tuning this NCCL lacks.
  std::unique_ptr<Communicator> make_device_communicator(const NcclTuning& tuning);
  // The copy-engine communicator of a 2-GPU job (dist/nccl/peer_communicator.h: all_reduce by peer copies
  // through mailboxes of capacity_bytes, everything else over device_communicator()), ordered after the
  // compute stream. Collective. The caller owns it; it must be destroyed before the context. ft::Error
  // (unsupported) without NCCL, for a world other than 2, ranks on two nodes or GPUs without peer access.
  std::unique_ptr<Communicator> make_copy_engine_communicator(std::int64_t capacity_bytes);
  // The communicator that moves buffers on `device`: host_communicator() for the CPU,
  // device_communicator() for local_gpu(); ft::Error for another GPU (invalid_argument) and for any GPU in
  // a build without NCCL (unsupported).
  Communicator& communicator_for(const Device& device);
  // What data-parallel code (DDP, ZeRO) reduces a model's buffers on `device` over: communicator_for(device)
  // with several ranks; in a world of one the single-process communicator, whose collectives are the
  // identity on any device (no MPI or NCCL needed).
  Communicator& data_parallel_communicator(const Device& device);
  // The stream the model's kernels run on (ModelOptions::stream), on local_gpu(): every GPU collective
  // first waits for the work queued on it so far (the gradients it reduces), and Work::wait() makes it wait
  // for the collective. Default: the legacy default stream (a default-constructed Stream). Takes effect for
  // collectives issued after the call, whether or not the device communicator exists yet.
  void set_compute_stream(const Stream& stream);
  // Ends the whole job after this rank failed: prints "flashtrain: error: rank R of W: <message>; ending
  // every rank" to stderr (flushing stdout and stderr first), aborts the NCCL communicator (kernels waiting
  // on a peer end) and calls MPI_Abort, so every rank exits within moments with this rank's message shown,
  // instead of the others waiting out their timeout in the next collective and this rank blocking in
  // MPI_Finalize. Exit status `code`. Without MPI (a world of one) it exits this process.
  [[noreturn]] void abort_job(const std::string& message, int code = 2);
  // The stream a data-parallel model on `device` should run on (ModelOptions::stream): on a GPU a
  // non-blocking stream owned by the context, created on first use and made the compute stream — the
  // legacy default stream would serialise the model's kernels with NCCL's; on the CPU the default Stream.
  Stream model_stream(const Device& device);

 private:
  bool uses_mpi_ = false;
  bool owns_mpi_ = false;  // this context initialised MPI and finalises it
  CommunicatorOptions communicator_options_;
  Stream compute_stream_;                // not owned
  Stream model_stream_;                  // owned, model_stream() on a GPU
  std::unique_ptr<Communicator> host_;
  std::unique_ptr<Communicator> device_;  // NCCL, created by device_communicator()
  std::unique_ptr<Communicator> identity_;  // single process, created by data_parallel_communicator()
};

}  // namespace ft
