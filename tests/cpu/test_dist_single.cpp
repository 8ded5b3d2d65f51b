// test_dist_single.cpp — the single-process communicator (world 1: identity collectives) and DDP on top
// of it: every strategy leaves the gradients as they are (the average over one rank), bf16 communication
// rounds them to bf16, a missing gradient report is an error, strategy names parse; a TransformerLM
// trained through DDP + Trainer without a launcher matches plain training bit for bit.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/tensor_io.h"
#include "cpu/test_model_util.h"
#include "dist/context.h"
#include "dist/ddp_transformer.h"
#include "dist/single_process_communicator.h"
#include "mpi/toy_model.h"

namespace ft::test {
namespace {

Tensor view(std::vector<float>& v) { return Tensor(v.data(), DType::f32, Device::cpu(), {static_cast<std::int64_t>(v.size())}); }

TEST(DistSingle, CollectivesAreTheIdentity) {
  SingleProcessCommunicator comm;
  EXPECT_EQ(comm.world_size(), 1);
  EXPECT_EQ(comm.rank(), 0);
  std::vector<float> a = {1, 2, 3}, out(3, 0.0f);
  WorkHandle w = comm.all_reduce(view(a), ReduceOp::average);
  EXPECT_TRUE(w->is_completed());
  w->wait();
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3}));
  comm.reduce_scatter(view(out), view(a), ReduceOp::sum)->wait();
  EXPECT_EQ(out, a);
  std::vector<float> gathered(3, 0.0f);
  comm.all_gather(view(gathered), view(a))->wait();
  EXPECT_EQ(gathered, a);
  comm.broadcast(view(a), 0)->wait();
  comm.barrier()->wait();
  EXPECT_THROW(comm.broadcast(view(a), 1), Error);
  std::vector<float> four(4);
  EXPECT_THROW(comm.all_gather(view(four), view(a)), Error);
  EXPECT_THROW(comm.reduce_scatter(view(a), view(a), ReduceOp::sum), Error);  // overlapping
  // Widened: the identity's result, in fp32.
  std::vector<bf16> halves = {to_bf16(1.5f), to_bf16(-2.25f), to_bf16(1e-3f)};
  std::vector<float> widened(3, 0.0f);
  WorkHandle wide = comm.all_reduce_widened(Tensor(halves.data(), DType::bf16, Device::cpu(), {3}), ReduceOp::average,
                                            view(widened));
  EXPECT_TRUE(wide->is_completed());
  EXPECT_EQ(widened, (std::vector<float>{1.5f, -2.25f, to_float(to_bf16(1e-3f))}));
}

TEST(DistSingle, ContextWithoutLauncherIsAWorldOfOne) {
  DistributedOptions options;
  options.backend = DistributedBackend::single;
  DistributedContext context(options);
  EXPECT_EQ(context.world_size(), 1);
  EXPECT_FALSE(context.uses_mpi());
  EXPECT_STREQ(context.host_communicator().backend(), "single");
  EXPECT_EQ(parse_distributed_backend("auto"), DistributedBackend::automatic);
  EXPECT_THROW(parse_distributed_backend("gloo"), Error);
}

TEST(DistSingle, StrategyNamesRoundTrip) {
  for (const std::string& name : ddp_strategy_names()) EXPECT_EQ(name_of(parse_ddp_strategy(name)), name);
  EXPECT_THROW(parse_ddp_strategy("zero"), Error);
}

TEST(DistSingle, DdpLeavesGradientsOrRoundsThemToBf16) {
  const ToyData data = toy_data(8, 3);
  for (const std::string& name : ddp_strategy_names()) {
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(name + (bf16 ? " bf16" : " fp32"));
      SingleProcessCommunicator comm;
      ToyModel model(5);
      DdpOptions options;
      options.strategy = parse_ddp_strategy(name);
      options.bucket_size_mb = 100.0 / (1024 * 1024);
      options.bf16_communication = bf16;
      DistributedDataParallel ddp(comm, model.ddp_model(), options);
      model.forward_backward(data, 1.0, false, [&](std::size_t i) { ddp.gradient_ready(i, true); });
      const std::vector<float> local = model.grads();
      ddp.synchronize();
      for (std::size_t i = 0; i < local.size(); ++i)
        ASSERT_EQ(model.grads()[i], bf16 ? to_float(to_bf16(local[i])) : local[i]) << i;
    }
  }
}

TEST(DistSingle, MissingGradientReportIsAnError) {
  SingleProcessCommunicator comm;
  ToyModel model(5);
  DdpOptions options;
  options.strategy = DdpStrategy::overlapped;
  DistributedDataParallel ddp(comm, model.ddp_model(), options);
  model.forward_backward(toy_data(4, 3), 1.0, false, [&](std::size_t i) {
    if (i != ToyModel::mid) ddp.gradient_ready(i, true);
  });
  try {
    ddp.synchronize();
    FAIL() << "synchronize() accepted a step without mid.weight's gradient";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::runtime);
    EXPECT_NE(e.message().find("missing: mid.weight"), std::string::npos) << e.message();
  }
  EXPECT_THROW(ddp.gradient_ready(99, true), Error);
}

TEST(DistSingle, TransformerThroughDdpMatchesPlainTraining) {
  const ModelConfig config = model_config("tiny");
  const TokenBatch batch = cycle_batch(2, 16, config.vocab_size, 11, 9);
  TrainerConfig trainer_config;
  trainer_config.adamw.lr = 1e-2;
  trainer_config.accumulation_steps = 2;
  const auto train = [&](bool with_ddp) {
    TransformerLM model(config, tiny_options(Precision::fp32, AttentionImpl::flash, 1, 16));
    Trainer trainer(model, trainer_config);
    SingleProcessCommunicator comm;
    DistributedDataParallel ddp(comm, ddp_model(model), DdpOptions{});
    if (with_ddp) attach(ddp, trainer);
    for (int step = 0; step < 2; ++step) {
      for (std::int64_t m = 0; m < 2; ++m) {
        const TokenIds in{batch.inputs.data() + m * 16, {1, 16}, Device::cpu()};
        const TokenIds target{batch.targets.data() + m * 16, {1, 16}, Device::cpu()};
        trainer.forward_backward(in, target);
      }
      if (with_ddp) ddp.synchronize();
      trainer.optimizer_step();
      trainer.zero_grads();
    }
    return read_as_double(model.parameters().flat());
  };
  EXPECT_EQ(train(true), train(false));
}

}  // namespace
}  // namespace ft::test
