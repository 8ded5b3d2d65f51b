// single_process_communicator.h — the world-1 Communicator: every collective is the identity (all_reduce
// sum or average of one rank's data is that data; reduce_scatter and all_gather copy input to output when
// they differ), completed before it returns. Lets data-parallel code run as a plain process, on any device.
#pragma once

#include "dist/communicator.h"

namespace ft {

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world_size() const override { return 1; }
  const char* backend() const override { return "single"; }

  WorkHandle all_reduce(const Tensor& data, ReduceOp op) override;
  WorkHandle reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  WorkHandle all_gather(const Tensor& output, const Tensor& input) override;
  WorkHandle broadcast(const Tensor& data, int root) override;
  WorkHandle barrier() override;
};

}  // namespace ft
