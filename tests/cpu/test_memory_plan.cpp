// test_memory_plan.cpp — train/memory_plan.h on the 8B shape (planned without allocating anything): every
// ZeRO stage's parameters, gradients and optimizer state per rank from the shard arithmetic (ZeRO-3's
// shard is the per-unit padded pieces, ZeRO-1's last rank holds the tail), sharding saves what it should,
// recomputation shrinks the activations, offloading moves the blocks' saved activations to the host, the
// workspace counts the step's largest op temporary, and bad stages, worlds and oversized worlds are refused.
#include <gtest/gtest.h>

#include "core/error.h"
#include "dist/fsdp_plan.h"
#include "model/parameters.h"
#include "train/memory_plan.h"

namespace ft::test {
namespace {

MemoryPlanInput input_8b(int stage, Recompute recompute = Recompute::full) {
  MemoryPlanInput in;
  in.model = model_config("8b");
  in.options.precision = Precision::bf16;
  in.options.max_batch = 1;
  in.options.recompute = recompute;
  in.world = 2;
  in.stage = stage;
  return in;
}

TEST(MemoryPlan, ShardsThe8bShapeByStage) {
  const ParameterLayout layout(model_config("8b"));
  const auto P = static_cast<std::size_t>(layout.numel());
  const auto S = static_cast<std::size_t>(FsdpPlan(layout, 2).shard_numel());
  EXPECT_GE(2 * S, P);
  EXPECT_LT(2 * S, P + 2 * 40);  // at most one padding element per unit and rank

  const MemoryPlan ddp = plan_training_memory(input_8b(0));
  EXPECT_EQ(ddp.parameters, 4 * P);
  EXPECT_EQ(ddp.gradients, 4 * P);
  EXPECT_EQ(ddp.optimizer_state, 8 * P);
  EXPECT_EQ(ddp.communication, 0u);

  const MemoryPlan zero1 = plan_training_memory(input_8b(1));
  const std::size_t owned = P - P / 2;  // the last rank: its half and the odd element
  EXPECT_EQ(zero1.gradients, 4 * P + 4 * owned);
  EXPECT_EQ(zero1.optimizer_state, 8 * owned);

  const MemoryPlan zero3 = plan_training_memory(input_8b(3));
  const std::size_t norms = 4 * static_cast<std::size_t>((2 * 34 + 1) * 4096);  // bf16 mode: fp32 norm copies
  EXPECT_EQ(zero3.parameters, 4 * S + norms);
  EXPECT_EQ(zero3.gradients, 4 * S);
  EXPECT_EQ(zero3.optimizer_state, 8 * S);
  EXPECT_GT(zero3.communication, 0u);
  EXPECT_EQ(zero3.activations, ddp.activations);
  const auto states = [](const MemoryPlan& p) { return p.parameters + p.gradients + p.optimizer_state; };
  EXPECT_LT(2 * states(zero3), states(ddp) + 4 * S);  // half, but for the replicated norm vectors

  const MemoryPlan zero2 = plan_training_memory(input_8b(2));
  EXPECT_EQ(zero2.gradients, 4 * S);
  EXPECT_GE(zero2.parameters, 4 * S + 2 * P);  // the shard and the bf16 replica (the embedding's in fp32)

  EXPECT_LT(zero3.activations, plan_training_memory(input_8b(3, Recompute::none)).activations);
}

// Offloading (see Note [Activation offloading]): units 0 .. L - 2 (x_l, attn.o, attn.lse) go to the host, the
// device keeps a ring of two units (x_L in it); selective-qkv keeps q, k, v per block too: more on the host,
// and the device's ring grows by two blocks' qkv while the shared recomputation slots lose one.
TEST(MemoryPlan, OffloadingMovesTheBlocksUnitsToTheHost) {
  const std::size_t rows = 32768, d = 4096, H = 32, L = 34;  // every size a multiple of the arena's alignment
  const std::size_t x = rows * d * 4, o = rows * d * 2, lse = rows * H * 4, qkv = rows * 3 * d * 2;
  MemoryPlanInput in = input_8b(3, Recompute::selective);
  const MemoryPlan kept = plan_training_memory(in);
  in.options.offload_activations = true;
  const MemoryPlan offloaded = plan_training_memory(in);
  EXPECT_EQ(kept.offloaded, 0u);
  EXPECT_EQ(offloaded.offloaded, (L - 1) * (x + o + lse));
  EXPECT_EQ(kept.activations - offloaded.activations, (L + 1) * x + L * (o + lse) - 2 * (x + o + lse));
  EXPECT_EQ(offloaded.workspace, kept.workspace);
  EXPECT_EQ(offloaded.communication, kept.communication);

  in.options.recompute = Recompute::selective_qkv;
  const MemoryPlan qkv_kept = plan_training_memory(in);
  EXPECT_EQ(qkv_kept.offloaded, (L - 1) * (x + qkv + o + lse));
  EXPECT_EQ(qkv_kept.activations, offloaded.activations + 2 * qkv - qkv);
}

// The workspace: the model's arena and the step's largest op temporary, (rows, d) fp32 (the attention
// backward's dQ accumulator, or the product of an accumulating GEMM that splits K), whatever the stage.
TEST(MemoryPlan, WorkspaceCountsTheLargestOpTemporary) {
  const MemoryPlanInput in = input_8b(0);
  const std::size_t temporary = std::size_t{32768} * 4096 * 4;
  EXPECT_EQ(plan_training_memory(in).workspace,
            TransformerLM::planned_memory(in.model, in.options).workspace + temporary);
  MemoryPlanInput shorter = in;
  shorter.options.max_seq_len = 1024;
  shorter.options.max_batch = 3;
  EXPECT_EQ(plan_training_memory(shorter).workspace,
            TransformerLM::planned_memory(shorter.model, shorter.options).workspace + std::size_t{3 * 1024} * 4096 * 4);
}

TEST(MemoryPlan, RefusesBadInputs) {
  MemoryPlanInput in = input_8b(4);
  EXPECT_THROW(plan_training_memory(in), Error);
  in.stage = 3;
  in.world = 0;
  EXPECT_THROW(plan_training_memory(in), Error);
  in.model = model_config("tiny");
  in.model.vocab_size = 5;
  in.model.d_model = 8;
  in.model.num_heads = 2;
  in.options.max_batch = 1;
  in.world = 1000;  // more ranks than the embedding's 40 elements
  EXPECT_THROW(plan_training_memory(in), Error);
}

}  // namespace
}  // namespace ft::test
