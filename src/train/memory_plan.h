// memory_plan.h — the device bytes one rank holds for a training step, by purpose, predicted for a model
// shape, its options (precision, batch and context capacity, and whatever else shapes the activations), a
// world size and a ZeRO stage, without allocating anything: a shape that needs several GPUs can be planned
// on any machine before it runs. `flashtrain memory` prints it beside the allocator's measured peak.
//   parameters       fp32 masters: whole (stages 0, 1), this rank's shard (2, 3; bf16 mode adds the
//                    replicated fp32 norm vectors), plus stage 2's replica in the compute dtype
//   gradients        fp32: whole (0), whole + ZeRO-1's averaged shard (1), the shard (2, 3; + a bf16 shard
//                    with bf16 gradient reduction)
//   optimizer_state  AdamW m and v: whole (0) or this rank's shard (1-3; ZeRO-1's last rank holds the tail)
//   activations      the model's arena (TransformerLM::planned_memory)
//   workspace        the model's workspace arena, and the largest temporary the step's ops allocate beside it:
//                    (rows, d) fp32 (the attention backward's dQ accumulator, or a split-K GEMM's product)
//   communication    DDP's bf16 staging copy (stage 0, bf16 gradients, several ranks); ZeRO-2/3's gather and
//                    gradient slots (dist/fsdp.h)
//   offloaded        pinned host memory (not device bytes, not in total()): the blocks' saved activations
//                    with ModelOptions::offload_activations (TransformerLM::planned_memory)
// The allocator counts communication buffers as workspace.
#pragma once

#include <cstddef>

#include "model/config.h"
#include "model/transformer.h"

namespace ft {

struct MemoryPlanInput {
  ModelConfig model;
  ModelOptions options;  // as the run builds the model (its parameter_source is ignored)
  int world = 1;
  int stage = 0;  // 0: DDP (a single process: plain), 1: ZeRO-1 reduce_scatter, 2, 3: dist/fsdp.h
  bool bf16_grad_comm = false;
};

struct MemoryPlan {
  std::size_t parameters = 0, gradients = 0, optimizer_state = 0, activations = 0, workspace = 0,
              communication = 0;
  std::size_t offloaded = 0;  // host
  std::size_t total() const {
    return parameters + gradients + optimizer_state + activations + workspace + communication;
  }
};

// The rank with the most bytes' figures. ft::Error for a stage outside 0-3, a world < 1, or a model a
// ZeRO-2/3 world does not fit (a unit smaller than the world).
MemoryPlan plan_training_memory(const MemoryPlanInput& input);

}  // namespace ft
