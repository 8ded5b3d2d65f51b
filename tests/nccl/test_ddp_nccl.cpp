// test_ddp_nccl.cpp — DDP and ZeRO-1 on 2 GPUs over NCCL (2 ranks under mpirun, rank r on cuda:r): a small
// TransformerLM (fp32, naive attention: true fp32 GEMMs without TF32), each rank starting from its own
// initialisation and training on its half of a batch of 4 sequences, holds after 3 AdamW steps parameters
// that are bit-identical on both ranks and match one process trained on the whole batch on the same GPU
// to fp32 round-off — for every DDP strategy (bucket caps below one parameter, between, above the whole
// model; 2 accumulation micro-batches), with bf16 communication (to bf16 precision), and for both ZeRO-1
// modes with a global-norm clip that acts (the reference clips with the Trainer's own clipping); every
// communication buffer kind, tuned communicator and the copy-engine transport, with bf16 rounding on the
// model's or the communication stream, takes plain DDP's steps bit for bit.
// The steps, batch, AdamW settings and parameter check are nccl_training.h's.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor_io.h"
#include "cpu/test_model_util.h"
#include "dist/ddp_transformer.h"
#include "dist/zero_transformer.h"
#include "model/token_staging.h"
#include "nccl/nccl_test_util.h"
#include "nccl/nccl_training.h"

namespace ft::test {
namespace {

ModelConfig config() {
  ModelConfig c = model_config("tiny");
  c.d_model = 32;
  c.d_ff = 64;
  c.num_heads = 2;
  c.context_length = kSeq;
  c.validate();
  return c;
}

ModelOptions options(std::uint64_t seed) {
  ModelOptions o = tiny_options(Precision::fp32, AttentionImpl::naive, kBatch, kSeq);
  o.device = gpu();
  o.seed = seed;
  return o;
}

struct Reference {
  std::vector<double> params;
  bool clipped = false;  // some step's gradient norm exceeded the clip
};

// One process, the whole batch, on this rank's GPU.
Reference train_reference(double clip) {
  TransformerLM model(config(), options(1234));
  Trainer trainer(model, trainer_config(1, clip, false));
  TokenStaging staging(gpu(), kBatch, kSeq);
  Reference ref;
  for (int s = 0; s < kSteps; ++s) {
    const auto [inputs, targets] = staging.place(rows(s, 0, kBatch, config().vocab_size));
    trainer.forward_backward(inputs, targets);
    ref.clipped = trainer.optimizer_step().grad_norm > clip || ref.clipped;
    trainer.zero_grads();
  }
  ref.params = read_as_double(model.parameters().flat());
  return ref;
}

struct RunOptions {
  std::optional<DdpOptions> ddp;  // none: ZeRO reduce_scatter alone
  Communicator* comm = nullptr;   // DDP's; null: the job's NCCL communicator
  std::optional<ZeroMode> zero;
  std::int64_t accumulation = 1;
  double clip = 0;
};

// This rank's half of every batch, over NCCL; the rank's own initialisation (seed + rank) is replaced by
// rank 0's at construction.
std::vector<double> train_data_parallel(const RunOptions& run) {
  const int rank = context().rank();
  Communicator& comm = run.comm ? *run.comm : context().communicator_for(gpu());
  TransformerLM model(config(), options(1234 + static_cast<std::uint64_t>(rank)));
  Trainer trainer(model, trainer_config(run.accumulation, run.clip, run.zero.has_value()));
  std::optional<DistributedDataParallel> ddp;
  if (run.ddp) {
    ddp.emplace(comm, ddp_model(model), *run.ddp);
    attach(*ddp, trainer);
  }
  std::optional<ZeroOptimizer> zero;
  if (run.zero) {
    zero.emplace(comm, ddp_model(model),
                 ZeroOptions{.mode = *run.zero, .max_grad_norm = run.clip, .broadcast_parameters = !ddp});
    add_transformer_group(*zero, model, trainer.config());
    attach(*zero, trainer);
  }
  TokenStaging staging(gpu(), kBatch, kSeq);
  const std::int64_t local = kBatch / 2, micro = local / run.accumulation;
  for (int s = 0; s < kSteps; ++s) {
    for (std::int64_t m = 0; m < run.accumulation; ++m) {
      const auto [inputs, targets] = staging.place(rows(s, rank * local + m * micro, micro, config().vocab_size));
      trainer.forward_backward(inputs, targets);
    }
    if (ddp) ddp->synchronize();
    trainer.optimizer_step();
    trainer.zero_grads();
  }
  trainer.set_gradient_ready_hook({});
  return read_as_double(model.parameters().flat());
}

DdpOptions ddp_options(DdpStrategy strategy, double bucket_bytes = 0, bool bf16 = false) {
  DdpOptions o;
  o.strategy = strategy;
  if (strategy == DdpStrategy::bucketed) o.bucket_size_mb = bucket_bytes / (1024.0 * 1024.0);
  o.bf16_communication = bf16;
  return o;
}

TEST(DdpNccl, EveryStrategyMatchesOneProcessOnTheWholeBatch) {
  const Reference reference = train_reference(0);
  struct Case {
    const char* name;
    DdpOptions ddp;
    std::int64_t accumulation;
  };
  const std::vector<Case> cases = {
      {"naive", ddp_options(DdpStrategy::naive), 1},
      {"flat", ddp_options(DdpStrategy::flat), 1},
      {"overlapped", ddp_options(DdpStrategy::overlapped), 1},
      {"bucketed 1 B", ddp_options(DdpStrategy::bucketed, 1), 1},
      {"bucketed 16 KiB", ddp_options(DdpStrategy::bucketed, 16384), 1},
      {"bucketed 16 MiB", ddp_options(DdpStrategy::bucketed, 1 << 24), 1},
      {"bucketed 16 KiB, 2 micro-batches", ddp_options(DdpStrategy::bucketed, 16384), 2},
      {"overlapped, 2 micro-batches", ddp_options(DdpStrategy::overlapped), 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_matches(train_data_parallel({.ddp = c.ddp, .accumulation = c.accumulation}), reference.params, 2e-5);
  }
}

TEST(DdpNccl, Bf16CommunicationMatchesToBf16Precision) {
  const Reference reference = train_reference(0);
  // Gradients rounded to bf16 (relative 2^-9, twice: before and after the sum) move each AdamW step by
  // about lr x 2^-8 at most: 3 steps stay well inside 5e-4.
  for (DdpStrategy strategy : {DdpStrategy::flat, DdpStrategy::bucketed}) {
    SCOPED_TRACE(name_of(strategy));
    expect_matches(train_data_parallel({.ddp = ddp_options(strategy, 16384, true)}), reference.params, 5e-4);
  }
}

// Every way of reaching NCCL takes plain DDP's steps bit for bit: on 2 ranks each averaged element is one
// addition (commutative) and a halving (exact), whichever algorithm, kernel or buffer NCCL uses, and the
// staging copies and bf16 roundings are those of the plain path.
TEST(DdpNccl, BuffersAndTunedCommunicatorsTakePlainDdpsStepsBitForBit) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 communication" : "fp32 communication");
    const std::vector<double> plain = train_data_parallel({.ddp = ddp_options(DdpStrategy::bucketed, 16384, bf16)});
    for (CommBufferKind kind : {CommBufferKind::registered, CommBufferKind::nccl_mem, CommBufferKind::symmetric}) {
      SCOPED_TRACE(name_of(kind));
      DdpOptions o = ddp_options(DdpStrategy::bucketed, 16384, bf16);
      o.buffer = kind;
      EXPECT_EQ(train_data_parallel({.ddp = o}), plain);
    }
    for (const NcclTuning& tuning : {NcclTuning{.max_ctas = 2}, NcclTuning{.min_ctas = 1, .max_ctas = 4},
                                     NcclTuning{.cta_policy = CtaPolicy::efficiency},
                                     NcclTuning{.cta_policy = CtaPolicy::zero}}) {
      SCOPED_TRACE(tuning.describe());
      const std::unique_ptr<Communicator> tuned = context().make_device_communicator(tuning);
      EXPECT_EQ(train_data_parallel({.ddp = ddp_options(DdpStrategy::bucketed, 16384, bf16), .comm = tuned.get()}),
                plain);
      DdpOptions o = ddp_options(DdpStrategy::bucketed, 16384, bf16);
      o.buffer = CommBufferKind::symmetric;
      EXPECT_EQ(train_data_parallel({.ddp = o, .comm = tuned.get()}), plain) << "symmetric buffers";
    }
    for (DdpStrategy strategy : {DdpStrategy::flat, DdpStrategy::bucketed}) {
      SCOPED_TRACE(str("copy engine, ", name_of(strategy)));
      DdpOptions o = ddp_options(strategy, 16384, bf16);
      // Mailboxes larger than the whole small model (the flat strategy's one bucket).
      const std::unique_ptr<Communicator> peer = context().make_copy_engine_communicator(std::int64_t{64} << 20);
      EXPECT_EQ(train_data_parallel({.ddp = o, .comm = peer.get()}), plain);
      o.round_on_comm_stream = true;
      EXPECT_EQ(train_data_parallel({.ddp = o, .comm = peer.get()}), plain) << "rounded on the lanes' streams";
    }
    DdpOptions rounded = ddp_options(DdpStrategy::bucketed, 16384, bf16);
    rounded.round_on_comm_stream = true;
    EXPECT_EQ(train_data_parallel({.ddp = rounded}), plain) << "rounded on NCCL's stream";
  }
}

TEST(DdpNccl, ZeroModesMatchOneProcessWithClipping) {
  const Reference reference = train_reference(kClip);
  ASSERT_TRUE(reference.clipped) << "no step clipped: the test would not see clipping across shards";
  {
    SCOPED_TRACE("owner_broadcast over bucketed DDP");
    expect_matches(train_data_parallel({.ddp = ddp_options(DdpStrategy::bucketed, 16384),
                                        .zero = ZeroMode::owner_broadcast,
                                        .clip = kClip}),
                   reference.params, 2e-5);
  }
  {
    SCOPED_TRACE("reduce_scatter");
    expect_matches(train_data_parallel({.zero = ZeroMode::reduce_scatter, .clip = kClip}), reference.params, 2e-5);
  }
}

}  // namespace
}  // namespace ft::test
