// zero_optimizer.h — ZeroOptimizer: ZeRO-1 optimizer-state sharding over a Communicator, for any model
// whose parameters and gradients are flat buffers (the DdpModel view: TransformerLM, the tests' toy model).
// Each rank holds the optimizer state (AdamW m and v; SGD has none) of its own shard only — a contiguous
// range of the flat buffer (dist/zero_shard_plan.h) — and after every step() the ranks hold the same
// parameters again. Parameter groups carry their own hyperparameters and step count (as torch's param
// groups and per-parameter `step` do); a group added during training joins at its own step 1.
// Modes (ZeroOptions::mode, by name through parse_zero_mode):
//   owner_broadcast  (the assignment's) gradients already averaged by DDP, any strategy: call
//                    ddp.synchronize() before step(). Each rank updates its range of the parameters, then
//                    every owner broadcasts its range (world broadcasts, all issued before any wait).
//   reduce_scatter   (ZeRO-1 proper; no DDP) step() reduce-scatters the local gradients: each rank receives
//                    the average of its range only (into a gradient shard of range numel); the rank updates
//                    it; one in-place all_gather of the parameter buffer makes every rank whole again.
//                    The tail (numel % world elements, owned by the last rank) is one small all_reduce
//                    and one broadcast. No more bytes than DDP's all-reduce (docs/zero.md).
// Global-norm clipping (max_grad_norm > 0): every rank sums the squares of its owned, grouped, averaged
// gradients, the partial sums are all-gathered (a double sent as two floats: hi + lo, so the sum keeps
// double precision), and the rank's update applies clip_factor(norm): AdamW reads each owned gradient as
// g * factor (GradScale, optim/adamw.h: the parameters and state are clip-then-step's bit for bit, and no
// pass over the gradients scales them), SGD scales its owned gradients in place first. The norm covers
// the grouped parameters (those the optimizer updates), as torch's clip_grad_norm_ over them.
// Devices: as DDP's (dist/ddp.h), the flat buffers live on the CPU (host communicator) or a CUDA device
// (NCCL); gradients, parameters and state never go through the host. The host sees only the norm's
// scalars: this rank's sum of squares (the device reduction's result), written into a device buffer by
// a fill kernel, and the 2 x world gathered floats it reads back to form the clip factor (one host
// synchronisation per step, as the single-process Trainer's clipping has).
// Parameters in no group are never updated. After step(): in owner_broadcast mode the model's gradient
// buffer holds the averaged gradients (with SGD, scaled by the clip factor in this rank's range only); in
// reduce_scatter mode it holds this rank's local gradients (tail averaged).
// Use:
//   ZeroOptimizer zero(comm, model_view, options);        // broadcasts rank 0's parameters
//   zero.add_parameter_group({0, 1, 2}, adamw_config);    // any time, on every rank alike
//   per step: backward; (owner_broadcast: ddp.synchronize()); zero.step();
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/buffer.h"
#include "dist/communicator.h"
#include "dist/ddp.h"
#include "dist/zero_shard_plan.h"
#include "optim/adamw.h"

namespace ft {

enum class ZeroMode { owner_broadcast, reduce_scatter };
const char* name_of(ZeroMode mode);
ZeroMode parse_zero_mode(std::string_view text);  // "owner_broadcast" | "reduce_scatter"

enum class OptimizerKind { adamw, sgd };
const char* name_of(OptimizerKind kind);

struct ZeroOptions {
  ZeroMode mode = ZeroMode::reduce_scatter;
  OptimizerKind optimizer = OptimizerKind::adamw;
  double max_grad_norm = 0;          // > 0: clip the global gradient norm of the grouped parameters to it
  bool broadcast_parameters = true;  // rank 0's parameters to every rank at construction (DDP already
                                     // does it: false avoids the second broadcast in owner_broadcast mode)
};

struct ZeroStepResult {
  double grad_norm = 0;  // global norm of the grouped, averaged gradients before clipping
};

class ZeroOptimizer {
 public:
  // model.ready_order is not used. Broadcasts the parameters (ZeroOptions::broadcast_parameters).
  ZeroOptimizer(Communicator& comm, DdpModel model, const ZeroOptions& options = {});

  // Every rank adds the same groups in the same order. parameters: indices into model.tensors, each in no
  // other group and trainable. config: adamw uses every field; sgd uses lr (weight_decay must be 0:
  // sgd_step has none). Allocates this rank's state for the group (zeros). Returns the group's index.
  std::size_t add_parameter_group(std::vector<std::size_t> parameters, const AdamWConfig& config);
  // A group's hyperparameters; change them between steps (a learning-rate schedule).
  AdamWConfig& group_config(std::size_t group);
  std::int64_t group_step(std::size_t group) const;  // steps this group has taken

  // After backward (and ddp.synchronize() in owner_broadcast mode): communicates, clips, updates this
  // rank's shard of every group, and leaves every rank with the same parameters.
  ZeroStepResult step();

  const ShardPlan& plan() const { return plan_; }
  const ZeroOptions& options() const { return options_; }
  ShardRange owned_range() const { return plan_.range(comm_.rank()); }
  std::size_t state_bytes() const;           // this rank's optimizer state (m and v of every group)
  std::size_t gradient_shard_bytes() const;  // reduce_scatter mode's averaged-gradient shard

 private:
  struct Group {
    AdamWConfig config;
    std::int64_t step = 0;
    OwnedTensor exp_avg;     // (state_numel) fp32, this rank's runs back to back; adamw only
    OwnedTensor exp_avg_sq;  // (state_numel) fp32
  };

  Tensor owned_gradient(const ShardRun& run) const;  // (run.numel) fp32: the averaged gradient of a run
  void reduce_gradients();
  // The global norm of the owned, grouped, averaged gradients (every rank's partial sums gathered).
  double global_grad_norm();
  // Updates this rank's runs, each gradient read as g * clip (SGD: scaled in place first).
  void update_owned_parameters(double clip);
  void share_parameters();

  Communicator& comm_;
  DdpModel model_;
  ZeroOptions options_;
  ShardPlan plan_;
  std::vector<Group> groups_;
  OwnedTensor gradient_shard_;  // (owned numel) fp32, reduce_scatter mode only
};

}  // namespace ft
