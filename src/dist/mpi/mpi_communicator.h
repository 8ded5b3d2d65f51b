// mpi_communicator.h — MpiCommunicator: the Communicator over MPI for host (CPU) buffers, built when CMake
// finds MPI (FT_HAS_MPI=1; this folder is left out of the library otherwise). Each collective is one or a
// few nonblocking MPI calls (MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast,
// MPI_Ibarrier); Work::wait() polls MPI_Testall until completion or the timeout (CommunicatorOptions).
//   average  MPI has no averaging op: the sum, then each element divided by world_size at completion
//   bf16     summed by a user-defined MPI op in fp32, rounded to bf16 after every addition
//   > 2^31 elements: all_reduce and broadcast are split into several MPI calls under one Work
// MPI must be initialised (DistributedContext does it) and stay so until the communicator is destroyed.
// The header holds no MPI types: the MPI state lives behind a pointer.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace ft {

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates MPI_COMM_WORLD (its collectives never match another communicator's), with errors returned
  // instead of aborting, and finds this node's ranks (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED).
  explicit MpiCommunicator(const CommunicatorOptions& options = {});
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int local_rank() const override { return local_rank_; }
  int local_world_size() const override { return local_world_size_; }
  const char* backend() const override { return "mpi"; }
  const CommunicatorOptions& options() const { return options_; }

  WorkHandle all_reduce(const Tensor& data, ReduceOp op) override;
  WorkHandle reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  WorkHandle all_gather(const Tensor& output, const Tensor& input) override;
  WorkHandle broadcast(const Tensor& data, int root) override;
  WorkHandle barrier() override;

 private:
  struct State;  // the MPI communicator and the bf16 sum op
  std::unique_ptr<State> state_;
  CommunicatorOptions options_;
  int rank_ = 0, world_size_ = 1, local_rank_ = 0, local_world_size_ = 1;
};

}  // namespace ft
