// fsdp.h — Fsdp: ZeRO-3 (fully sharded data parallelism) and ZeRO-2 for the TransformerLM over a
// Communicator. Each rank holds only its shard of the fp32 master parameters, their gradients and the AdamW
// state (Note [ZeRO-3 shards], dist/fsdp_plan.h), and is the model's ParameterSource
// (model/parameter_source.h): its gradients are reduce-scattered unit by unit into the gradient shard as soon
// as backward has written them, and
//   stage 3  a unit's parameters are all-gathered into one of two slots right before the model reads them;
//   stage 2  every rank keeps a whole replica of the parameters in their gather dtypes (bf16 mode: the
//            linear weights in bf16, 2 bytes each, not fp32 masters and not gradients): after the step each
//            unit's updated pieces are all-gathered into it, and the next forward waits for a unit's
//            all-gather only when it reaches the unit (Note [ZeRO-2 step]).
//
// Note [ZeRO-3 step]
// Slots: the blocks alternate between slots 0 and 1 (block l: slot l % 2); the embedding and the head,
// the largest units (vocab x d_model) and never in use together, share slot 2 — for the gathered
// parameters and for the gradients alike. Slot 2's gradients live in the gather slot 2's memory, past the
// head's gathered parameters (read while the fused loss writes the head's gradients): the embedding's
// parameters, gathered over them, are read only by the embedding's forward, before the head's gradients are
// written, and gathered again only once the reduce-scatter reading slot 2's gradients is done (joined
// first) — in bf16 mode this saves the head's bf16 size (2 bytes x vocab x d_model) against two slots.
// Forward, unit by unit (embedding, blocks, head): parameters(u) waits for u's all-gather (the compute
// stream waits for it: Work::join, the host runs on) and issues the all-gather of u + 1 into its slot, so
// the next unit's parameters move while this one computes; the all-gather into a slot is ordered after
// every compute-stream op issued so far (the communicator's rule), which includes every read of the unit
// the slot held before. After each step the embedding's all-gather is issued at once. A unit's gather
// dtype: the compute dtype (bf16 mode: each rank casts its fp32 piece to bf16 into its part of the slot
// first, then one in-place all_gather — half the bytes of fp32), except the embedding table, read by the
// embedding's forward in fp32. The norm weights are read in
// fp32 too; in bf16 mode they come from a replicated fp32 copy of every norm vector (a few d_model each),
// refreshed after each step by one all_reduce of the vectors with each rank's owned elements in place and
// zeros elsewhere (x + 0 == x: exact).
// Backward, from the head down: the head and the last block are still gathered from forward; each block is
// gathered again (the all-gather of block l - 1 issued while block l computes; the embedding's backward
// needs no parameters). gradients(u) hands out u's fp32 gradient slot once the reduce-scatter that read it
// before (block l + 2's; the head's, for the embedding) is done (the compute stream waits for it), with the
// padding zeroed. When backward
// reports the unit's last gradient final (gradient_ready, the Trainer's hook), the padded unit gradient is
// reduce-scattered (average) into this rank's gradient shard on the communication stream while the next
// unit's backward computes; later micro-batches of an accumulation reduce into a staging piece and add it.
// bf16 gradient communication (FsdpOptions::bf16_grad_comm): the unit's gradient is rounded to bf16 into a
// bf16 slot and reduce-scattered in bf16 (half the bytes; the sum rounded to bf16 after each addition) into
// a bf16 gradient shard, widened into the fp32 shard once backward's reduce-scatters are done.
// step(lr): waits for the reduce-scatters, takes the global norm across shards (dist/shard_norm.h), and runs
// AdamW over the whole shard with the clip factor folded in (GradScale) — elementwise, so every element's
// update is the single-process one given the same averaged gradient and norm.
// With these, a step computes the update of one process on the global batch up to the rounding of the
// gradient averaging (reduction order) and of the norm's sum.
//
// Note [ZeRO-2 step]
// Gradients and the update as in ZeRO-3. The parameters: a replica of every unit, padded, in its gather
// dtype, laid out unit after unit. refresh() (after each step, and at construction) casts this rank's
// updated piece of each unit into its part of the unit's replica and issues one in-place all_gather per
// unit, all at once, without waiting; parameters(u) makes the compute stream wait for unit u's (Work::join),
// so the all-gathers of later units run while the first units' forward computes. Against ZeRO-1 (whole fp32
// parameters and gradients, state sharded) a rank holds 2 (bf16) or 4 (fp32) bytes per parameter of replica
// instead of 8 of parameters and gradients, and the gradient reduction overlaps backward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/stream.h"
#include "dist/communicator.h"
#include "dist/fsdp_plan.h"
#include "model/config.h"
#include "model/parameter_source.h"
#include "model/parameters.h"
#include "model/trainer.h"
#include "optim/adamw.h"

namespace ft {

struct FsdpOptions {
  int stage = 3;                          // 3: parameters gathered per unit; 2: a replica refreshed per step
  Precision precision = Precision::fp32;  // bf16: linear weights gathered in bf16
  AdamWConfig adamw;                      // lr is set by each step()
  double max_grad_norm = 0;               // > 0: clip the global norm (across shards) to it
  std::uint64_t seed = 0;                 // parameter initialisation (model/init.h), shard by shard
  bool bf16_grad_comm = false;            // reduce-scatter the gradients in bf16 (fp32: exact averaging)
  Device device = Device::cpu();          // where the shards live: the CPU (host communicator) or this rank's GPU
  Stream stream;                          // the model's stream
};

// Bytes this rank holds for ZeRO-3, by purpose.
struct FsdpMemory {
  std::size_t parameters = 0;       // fp32 master shard (+ bf16 mode's replicated norm vectors)
  std::size_t gradients = 0;        // fp32 gradient shard (+ bf16 communication's bf16 shard, the accumulation
                                    // staging pieces once used)
  std::size_t optimizer_state = 0;  // AdamW m and v shards
  std::size_t communication = 0;    // the three gather slots (stage 3), the three gradient slots (+ bf16)
  std::size_t replica = 0;          // stage 2: the whole parameters in their gather dtypes
};

class Fsdp final : public ParameterSource {
 public:
  // Allocates this rank's shards and slots and initialises its shard of the parameters (bit for bit the
  // elements a single-process model with options.seed starts from). ft::Error when the world exceeds a unit
  // or the stage is not 2 or 3.
  Fsdp(Communicator& comm, const ModelConfig& config, const FsdpOptions& options);
  ~Fsdp() override;
  Fsdp(const Fsdp&) = delete;
  Fsdp& operator=(const Fsdp&) = delete;

  std::vector<Tensor> parameters(std::int64_t unit) override;
  std::vector<Tensor> gradients(std::int64_t unit) override;
  // Backward reports parameter `index` final; once a unit's every parameter is, its reduce-scatter starts.
  // first_micro_batch: the first of an accumulation (the gradient shard is overwritten, else added to).
  void gradient_ready(std::size_t index, bool first_micro_batch);
  // After the last micro-batch's backward: AdamW with learning rate lr over the shard, clipped to
  // max_grad_norm; returns the global gradient norm before clipping. Collective.
  double step(double lr);

  // out (numel, fp32, on the shards' device) <- the whole parameter buffer. Collective.
  void gather_parameters(const Tensor& out);
  // visit(unit's parameters: (numel) fp32 on the shards' device) for each unit in layout order, gathered one
  // at a time into a staging buffer of the largest unit. Collective.
  void for_each_gathered_unit(const std::function<void(const Tensor&)>& visit);

  const FsdpPlan& plan() const { return plan_; }
  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  std::int64_t steps() const { return step_; }
  FsdpMemory memory() const;
  // What memory() reports (before any accumulation staging) on a rank of a world of `world` with these
  // options, computed without allocating: memory planning.
  static FsdpMemory planned_memory(const ModelConfig& config, const FsdpOptions& options, int world);
  Communicator& communicator() { return comm_; }
  // This rank's shards, (plan().shard_numel()) fp32 each: checkpoints save and restore them.
  const Tensor& master() const { return master_.tensor(); }
  const Tensor& exp_avg() const { return exp_avg_.tensor(); }
  const Tensor& exp_avg_sq() const { return exp_avg_sq_.tensor(); }
  // A resumed run's steps taken (AdamW's bias correction continues from there); the shards are restored
  // through master() / exp_avg() / exp_avg_sq(), then refresh() makes the gathered state agree.
  void restore_step(std::int64_t step) { step_ = step; }
  // After the master shard changed: stage 3 forgets the gathered units, stage 2 issues the all-gathers of
  // the replica; bf16 mode refreshes the replicated norm vectors. Collective.
  void refresh();

 private:
  enum class Phase { forward, backward };
  DType gather_dtype(std::size_t unit) const;
  Tensor piece(const Tensor& shard, std::size_t unit) const;  // (piece) unit's piece of a shard
  // (padded) where unit u's parameters are gathered, in its gather dtype: its slot (stage 3) or its region
  // of the replica (stage 2).
  Tensor unit_memory(std::size_t unit) const;
  int slot_of(std::size_t unit) const;  // 0, 1: blocks; 2: the embedding and the head
  void issue_gather(std::size_t unit);
  // The communicator's collectives (reduce_scatter averages), or in a world of one copies on the model's
  // stream (null: nothing to wait for).
  WorkHandle all_gather(const Tensor& output, const Tensor& input);
  WorkHandle reduce_scatter(const Tensor& output, const Tensor& input);
  static void wait(const WorkHandle& work);
  void launch_reduce_scatter(std::size_t unit, bool first_micro_batch);
  void refresh_norms();
  void wait_reduce_scatters();
  void widen_gradients();  // bf16 communication: the bf16 shard into the fp32 one, once every piece is in

  Communicator& comm_;
  ModelConfig config_;
  ParameterLayout layout_;
  FsdpOptions options_;
  FsdpPlan plan_;
  OwnedTensor master_, grads_, exp_avg_, exp_avg_sq_;  // (shard_numel) fp32 each
  OwnedTensor grads16_;                                // bf16 communication: (shard_numel) bf16
  OwnedTensor staging_, staging16_;                    // (largest piece) fp32 and bf16, accumulation only
  Buffer gather_slots_[3];                             // stage 3: unit u's parameters in slot_of(u)
  Buffer replica_;                                     // stage 2: every unit, padded, in its gather dtype
  std::vector<std::size_t> replica_offset_;            // stage 2: (units) bytes where each unit starts
  OwnedTensor grad_slot_memory_[3];                    // slots 0, 1 (and stage 2's slot 2): the gradient slots
  Tensor grad_slots_[3];                               // (padded) fp32, unit u's gradients in slot_of(u)
  OwnedTensor grad_slots16_[3];                        // bf16 communication: the same, rounded to bf16
  OwnedTensor norms_;                                  // bf16 mode: every norm vector, fp32, replicated
  std::vector<std::int64_t> norm_offset_;              // (parameters) where a norm starts in norms_; -1 else
  std::int64_t resident_[3] = {-1, -1, -1};            // stage 3: the unit each slot holds (or is receiving)
  std::vector<WorkHandle> gathering_;                  // (units) each unit's all-gather, until joined
  WorkHandle reducing_[3];                             // the reduce-scatter reading each gradient slot
  std::vector<std::size_t> reported_;                  // (units) parameters reported final this backward
  Phase phase_ = Phase::forward;
  bool widen_pending_ = false;  // bf16 communication: grads16_ holds pieces not yet widened into grads_
  std::int64_t step_ = 0;
};

// The Trainer's external optimizer step and gradient hook (the Trainer needs external_optimizer): every step
// runs fsdp.step(schedule's lr); backward reports each gradient to fsdp.gradient_ready.
void attach(Fsdp& fsdp, Trainer& trainer);

}  // namespace ft
