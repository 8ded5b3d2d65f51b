// test_fsdp_nccl.cpp — ZeRO-2 and ZeRO-3 (dist/fsdp.h) on 2 GPUs over NCCL (2 ranks under mpirun, rank r on
// cuda:r): a small TransformerLM (naive attention: true fp32 GEMMs without TF32), each rank training on its
// half of a batch of 4 sequences with its shards of the parameters (ZeRO-3), gradients and AdamW state,
// matches one process trained on the whole batch on the same GPU after 3 AdamW steps with a clip that acts —
// fp32 (also with 2 accumulation micro-batches) to fp32 round-off, gradients reduce-scattered in bf16 to
// bf16 precision, bf16 mode (also with 2 micro-batches) to its GEMMs' precision; activation offloading changes
// no bit of a ZeRO-3 run. The gathered parameters are bit-identical on both ranks
// (every rank gathers the same shards). The copy engine's reduce-scatter takes NCCL's ZeRO-2/3 steps bit for
// bit. The steps, batch, AdamW settings and parameter check are nccl_training.h's.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/tensor_io.h"
#include "cpu/test_model_util.h"
#include "dist/fsdp.h"
#include "model/token_staging.h"
#include "nccl/nccl_test_util.h"
#include "nccl/nccl_training.h"

namespace ft::test {
namespace {

ModelConfig config(std::int64_t layers = 2) {
  ModelConfig c = model_config("tiny");
  c.num_layers = layers;
  c.d_model = 32;
  c.d_ff = 64;
  c.num_heads = 2;
  c.vocab_size = 97;  // odd: every unit is padded
  c.context_length = kSeq;
  c.validate();
  return c;
}

ModelOptions options(Precision precision) {
  ModelOptions o = tiny_options(precision, AttentionImpl::naive, kBatch, kSeq);
  o.device = gpu();
  return o;
}

// One process, the whole batch, on this rank's GPU; the parameters after the steps.
std::vector<double> train_reference(Precision precision) {
  TransformerLM model(config(), options(precision));
  Trainer trainer(model, trainer_config(1, kClip, false));
  TokenStaging staging(gpu(), kBatch, kSeq);
  bool clipped = false;
  for (int s = 0; s < kSteps; ++s) {
    const auto [inputs, targets] = staging.place(rows(s, 0, kBatch, config().vocab_size));
    trainer.forward_backward(inputs, targets);
    clipped = trainer.optimizer_step().grad_norm > kClip || clipped;
    trainer.zero_grads();
  }
  EXPECT_TRUE(clipped) << "no step clipped: the test would not see clipping across shards";
  return read_as_double(model.parameters().flat());
}

// The sharded model's shape and memory options beside config()'s.
struct ModelMemory {
  std::int64_t layers = 2;
  Recompute recompute = Recompute::none;
  bool offload_activations = false;
};

// This rank's half of every batch, sharded over NCCL; the whole parameters gathered after the steps.
std::vector<double> train_sharded(int stage, Precision precision, std::int64_t accumulation, bool bf16_grad_comm,
                                  const ModelMemory& memory = {}, Communicator* over = nullptr) {
  const int rank = context().rank();
  Communicator& comm = over ? *over : context().communicator_for(gpu());
  const TrainerConfig tc = trainer_config(accumulation, kClip, true);
  FsdpOptions fo;
  fo.stage = stage;
  fo.precision = precision;
  fo.adamw = tc.adamw;
  fo.max_grad_norm = kClip;
  fo.seed = options(precision).seed;
  fo.bf16_grad_comm = bf16_grad_comm;
  fo.device = gpu();
  Fsdp fsdp(comm, config(memory.layers), fo);
  ModelOptions o = options(precision);
  o.parameter_source = &fsdp;
  o.recompute = memory.recompute;
  o.offload_activations = memory.offload_activations;
  TransformerLM model(config(memory.layers), o);
  Trainer trainer(model, tc);
  attach(fsdp, trainer);
  TokenStaging staging(gpu(), kBatch, kSeq);
  const std::int64_t local = kBatch / 2, micro = local / accumulation;
  for (int s = 0; s < kSteps; ++s) {
    for (std::int64_t m = 0; m < accumulation; ++m) {
      const auto [inputs, targets] = staging.place(rows(s, rank * local + m * micro, micro, config().vocab_size));
      trainer.forward_backward(inputs, targets);
    }
    trainer.optimizer_step();
    trainer.zero_grads();
  }
  trainer.set_gradient_ready_hook({});
  const OwnedTensor whole({fsdp.layout().numel()}, DType::f32, gpu(), "test parameters");
  fsdp.gather_parameters(whole);
  return read_as_double(whole);
}

TEST(FsdpNccl, Fp32MatchesOneProcessOnTheWholeBatch) {
  const std::vector<double> reference = train_reference(Precision::fp32);
  for (int stage : {2, 3})
    for (std::int64_t accumulation : {1, 2}) {
      SCOPED_TRACE("ZeRO-" + std::to_string(stage) + ", " + std::to_string(accumulation) + " micro-batch(es)");
      expect_matches(train_sharded(stage, Precision::fp32, accumulation, false), reference, 2e-5);
    }
}

TEST(FsdpNccl, Bf16GradientsMatchToBf16Precision) {
  const std::vector<double> reference = train_reference(Precision::fp32);
  // Gradients rounded to bf16 (relative 2^-9, before and after the sum) move each step by about lr x 2^-8.
  for (int stage : {2, 3}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(stage));
    expect_matches(train_sharded(stage, Precision::fp32, 1, true), reference, 5e-4);
  }
}

TEST(FsdpNccl, Bf16ModeMatchesOneProcess) {
  const std::vector<double> reference = train_reference(Precision::bf16);
  // The same bf16 casts of the same weights; the GEMMs of 4 rows and of 2 may accumulate in another order.
  // Two micro-batches: the second's embedding gather waits for the first's reduce-scatter of the gradients
  // it overlays (Note [ZeRO-3 step]).
  for (int stage : {2, 3})
    for (std::int64_t accumulation : {1, 2}) {
      SCOPED_TRACE("ZeRO-" + std::to_string(stage) + ", " + std::to_string(accumulation) + " micro-batch(es)");
      expect_matches(train_sharded(stage, Precision::bf16, accumulation, false), reference, 5e-3);
    }
}

// Activation offloading under ZeRO-3 over NCCL (five blocks, four units through pinned host memory on the
// copy stream): every recompute policy gives the parameters of the run without it bit for bit.
TEST(FsdpNccl, OffloadedActivationsChangeNoBit) {
  for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::selective_qkv, Recompute::full}) {
    SCOPED_TRACE(name_of(recompute));
    const std::vector<double> kept = train_sharded(3, Precision::bf16, 2, false, {.layers = 5, .recompute = recompute});
    const std::vector<double> offloaded =
        train_sharded(3, Precision::bf16, 2, false, {.layers = 5, .recompute = recompute, .offload_activations = true});
    EXPECT_EQ(offloaded, kept);
  }
}

// The copy engine's reduce-scatter (dist/nccl/peer_communicator.h; its all-gathers go to NCCL) takes NCCL's
// ZeRO-2/3 steps bit for bit: on 2 ranks each element of a reduced piece is one addition and an exact halving.
TEST(FsdpNccl, CopyEngineReduceScatterTakesNcclsStepsBitForBit) {
  const std::unique_ptr<Communicator> peer = context().make_copy_engine_communicator(std::int64_t{16} << 20);
  for (int stage : {2, 3})
    for (bool bf16_grad_comm : {false, true}) {
      SCOPED_TRACE("ZeRO-" + std::to_string(stage) + (bf16_grad_comm ? ", bf16 gradients" : ""));
      EXPECT_EQ(train_sharded(stage, Precision::fp32, 2, bf16_grad_comm, {}, peer.get()),
                train_sharded(stage, Precision::fp32, 2, bf16_grad_comm));
    }
}

}  // namespace
}  // namespace ft::test
