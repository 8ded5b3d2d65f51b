// test_dist_stream_order.cpp — DDP and ZeroOptimizer refuse a device communicator that orders its
// collectives after another stream than the model's (its gradients could be reduced before backward has
// written them), and accept the model's own stream. A world-1 communicator stands in for NCCL by
// reporting a compute stream (an opaque handle: nothing is launched on it).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "dist/ddp.h"
#include "dist/single_process_communicator.h"
#include "dist/zero_optimizer.h"

namespace ft {
namespace {

// World 1, identity collectives, but orders "device" collectives after `stream`.
class OrderedCommunicator final : public Communicator {
 public:
  explicit OrderedCommunicator(Stream stream) : stream_(std::move(stream)) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world_size() const override { return 1; }
  const char* backend() const override { return "ordered"; }
  WorkHandle all_reduce(const Tensor& data, ReduceOp op) override { return single_.all_reduce(data, op); }
  WorkHandle reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    return single_.reduce_scatter(output, input, op);
  }
  WorkHandle all_gather(const Tensor& output, const Tensor& input) override {
    return single_.all_gather(output, input);
  }
  WorkHandle broadcast(const Tensor& data, int root) override { return single_.broadcast(data, root); }
  WorkHandle barrier() override { return single_.barrier(); }
  std::optional<Stream> compute_stream() const override { return stream_; }

 private:
  Stream stream_;
  SingleProcessCommunicator single_;
};

struct ToyModel {
  std::vector<float> params = std::vector<float>(6, 1.0f);  // (6) two parameters of 3
  std::vector<float> grads = std::vector<float>(6, 0.0f);   // (6)
  DdpModel view(const Stream& stream) {
    DdpModel m;
    m.parameters = Tensor(params.data(), DType::f32, Device::cpu(), {6});
    m.gradients = Tensor(grads.data(), DType::f32, Device::cpu(), {6});
    m.tensors = {{"a", 0, 3, true}, {"b", 3, 3, true}};
    m.ready_order = {1, 0};
    m.stream = stream;
    return m;
  }
};

int g_stream_tag = 0;  // its address serves as a stream handle that is not the default one

TEST(DistStreamOrder, DdpAndZeroRefuseAModelOnAnotherStream) {
  OrderedCommunicator comm(Stream::wrap(&g_stream_tag, Device::cpu()));
  ToyModel toy;
  try {
    DistributedDataParallel ddp(comm, toy.view(Stream()));
    FAIL() << "DDP accepted a model on the default stream";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("DDP: the ordered communicator orders its collectives after stream"),
              std::string::npos) << e.message();
    EXPECT_NE(e.message().find("model_stream()"), std::string::npos) << e.message();
  }
  EXPECT_THROW(ZeroOptimizer(comm, toy.view(Stream())), Error);
}

TEST(DistStreamOrder, DdpAndZeroAcceptTheModelsOwnStream) {
  const Stream model_stream = Stream::wrap(&g_stream_tag, Device::cpu());
  OrderedCommunicator comm(model_stream);
  ToyModel toy;
  EXPECT_NO_THROW(DistributedDataParallel(comm, toy.view(model_stream)));
  EXPECT_NO_THROW(ZeroOptimizer(comm, toy.view(model_stream)));
  SingleProcessCommunicator host;  // host backends order nothing: any stream is fine
  EXPECT_NO_THROW(DistributedDataParallel(host, toy.view(model_stream)));
}

}  // namespace
}  // namespace ft
