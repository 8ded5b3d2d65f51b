// graphed_step.h — GraphedTrainStep: a Trainer's whole training step (forward, backward, global-norm
// clipping, AdamW at the scheduled learning rate) captured once in a CUDA graph and replayed: one launch
// per step instead of hundreds of kernel launches — the native answer to the launch overhead that
// torch.compile / torch.cuda.graphs remove.
//   step 1        runs Trainer::enqueue_step eagerly (a warm-up: cuBLASLt's heuristic cache, kernel loading)
//   step 2        captures enqueue_step on the model's stream into a graph, then launches it
//   steps 3, ...  launch the graph again
// Results are forward_backward + optimizer_step's bit for bit (the same kernels in the same order). Before
// each launch the host checks the token ids, computes the step's learning rate and AdamW factors as the
// eager Trainer does, and copies ids and factors into fixed device buffers in stream order; the loss and the
// gradient norm stay in device memory until asked for (loss(), result() wait for the step). The Trainer's
// step() counts the steps, so checkpoints (exp_avg, exp_avg_sq) and restore_step work as before.
// Memory: everything the step reads or writes lives at a fixed address — parameters, gradients, AdamW
// state, the model's activation and workspace arenas (the bf16 weight slots included: the weights' casts
// are ordinary kernels on the stream), this object's id and scalar buffers — and the temporaries the ops
// allocate on the stream during the step (the GEMM workspace, attention and norm partials, the loss's row
// buffer) become graph memory nodes, which the graph keeps at fixed addresses until it is destroyed (they
// do not show in the Allocator's statistics after the capture).
// Needs a CUDA device, the model on a stream of its own (ModelOptions::stream = Stream::create(...): CUDA
// cannot capture the legacy default stream), accumulation_steps 1, no gradient-ready or backward-start
// hook, the Trainer's own AdamW (no external optimizer) and the same (B, T) every step; ft::Error names the
// one that is not met.
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "model/cuda_graph.h"
#include "model/trainer.h"

namespace ft {

class GraphedTrainStep {
 public:
  // Checks that the trainer's step can be graphed and allocates the id and scalar buffers on the model's
  // device; the trainer, its model and the model's stream must outlive this object.
  explicit GraphedTrainStep(Trainer& trainer);
  GraphedTrainStep(const GraphedTrainStep&) = delete;
  GraphedTrainStep& operator=(const GraphedTrainStep&) = delete;

  // One training step on (inputs, targets): (B, T) int32 ids in host memory, the (B, T) of the first step
  // every time. Returns once the step is enqueued, without waiting for the device; trainer.step() counts it.
  void step(const TokenIds& inputs, const TokenIds& targets);

  // The last step's values, read back from the device (waits for the step to finish).
  double loss() const;
  StepResult result() const;  // its step number, learning rate and gradient norm before clipping
  bool graphed() const { return graph_.captured(); }  // true once the graph is captured

 private:
  void stage(const TokenIds& inputs, const TokenIds& targets);  // checks the ids, copies them to ids_
  StepSlots* slots() const { return static_cast<StepSlots*>(slots_.data()); }
  StepSlots read_slots() const;

  Trainer& trainer_;
  Device device_;
  Stream stream_;                   // the model's
  Shape shape_;                     // (B, T) fixed by the first step
  std::vector<std::int32_t> host_ids_;  // (2, B, T) inputs then targets, staged for the copy
  Buffer ids_;                      // (2, max_batch * max_seq_len) int32 on the device, the graph's input
  Buffer slots_;                    // one StepSlots on the device
  std::int64_t steps_ = 0;          // steps run through this object
  StepResult last_;                 // step and lr of the last step (its grad norm is read on demand)
  CudaGraph graph_;
};

}  // namespace ft
