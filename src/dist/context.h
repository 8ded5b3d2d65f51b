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
// Where NCCL plugs in (next): a `Communicator& device_communicator()` created on first use: it picks GPU
// local_rank(), creates the NCCL unique id on rank 0 and broadcasts it over host_communicator()
// (broadcast of its 128 bytes viewed as fp32), calls ncclCommInitRank, and issues every collective on a
// dedicated CUDA stream ordered after the model's stream by events (Work::wait() makes the model's stream
// wait for the collective; the timeout polls ncclCommGetAsyncError / the event and ends with ncclCommAbort
// plus MPI_Abort). DDP code is unchanged: it takes any Communicator.
#pragma once

#include <memory>
#include <string_view>

#include "dist/communicator.h"

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

 private:
  bool uses_mpi_ = false;
  bool owns_mpi_ = false;  // this context initialised MPI and finalises it
  std::unique_ptr<Communicator> host_;
};

}  // namespace ft
