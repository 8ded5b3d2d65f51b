// single_process_communicator.cpp — the identity collectives of a world of one.
#include "dist/single_process_communicator.h"

#include "core/tensor_io.h"

namespace ft {

namespace {
// output <- input unless they are the same memory (then there is nothing to move).
void copy_unless_same(const Tensor& output, const Tensor& input) {
  if (output.data() != input.data() && input.numel() > 0) copy(output, input.reshape(output.shape()));
}
}  // namespace

WorkHandle SingleProcessCommunicator::all_reduce(const Tensor& data, ReduceOp) {
  check_collective_buffer("all_reduce", "data", data, true);
  return std::make_unique<CompletedWork>();
}

WorkHandle SingleProcessCommunicator::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp) {
  check_reduce_scatter(output, input, 1);
  copy_unless_same(output, input);
  return std::make_unique<CompletedWork>();
}

WorkHandle SingleProcessCommunicator::all_gather(const Tensor& output, const Tensor& input) {
  check_all_gather(output, input, 1);
  copy_unless_same(output, input);
  return std::make_unique<CompletedWork>();
}

WorkHandle SingleProcessCommunicator::broadcast(const Tensor& data, int root) {
  check_collective_buffer("broadcast", "data", data, true);
  check_root("broadcast", root, 1);
  return std::make_unique<CompletedWork>();
}

WorkHandle SingleProcessCommunicator::barrier() { return std::make_unique<CompletedWork>(); }

}  // namespace ft
