// trainer.h — Trainer: the training-step API over a TransformerLM.
//   forward_backward(inputs, targets)  one micro-batch: gradients of loss / accumulation_steps are written
//                                      (first micro-batch after zero_grads) or added (the others)
//   optimizer_step()                   optional global-norm clipping, then AdamW (ops/adamw.h) with the
//                                      learning rate of the cosine schedule at this step; step += 1
//   zero_grads()                       the next micro-batch overwrites the gradients instead of adding
//                                      (no pass over memory, like torch's zero_grad(set_to_none=True))
// A gradient-ready hook (set_gradient_ready_hook) is called during every backward as each parameter's
// gradient becomes final for that micro-batch (TransformerLM::gradient_ready_order()); MicroBatch says
// whether it is the last micro-batch before the optimizer step (when data-parallel code reduces).
// External optimizer (TrainerConfig::external_optimizer, e.g. ZeRO-1: dist/zero_transformer.h): the Trainer
// allocates no AdamW state; set_optimizer_step() gives the step, which optimizer_step() calls with the
// schedule's learning rate instead of clipping + AdamW (the step clips, if it should, and returns the global
// gradient norm before clipping). exp_avg() / exp_avg_sq() then throw ft::Error (unsupported): the state
// lives in the external optimizer.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "model/parameters.h"
#include "model/transformer.h"
#include "ops/adamw.h"
#include "optim/lr_schedule.h"

namespace ft {

struct TrainerConfig {
  AdamWConfig adamw;                       // adamw.lr is used when there is no schedule
  std::optional<CosineSchedule> schedule;  // learning rate per step (iteration = steps taken so far)
  double max_grad_norm = 0;                // > 0: clip the global gradient norm to it
  std::int64_t accumulation_steps = 1;     // micro-batches per optimizer step (loss scaled by 1 / this)
  bool external_optimizer = false;         // no AdamW state here; set_optimizer_step() supplies the step
                                           // (max_grad_norm is then the external optimizer's business)
};

// An external optimizer step: takes the learning rate, returns the global gradient norm before clipping.
using TrainerOptimizerStep = std::function<double(double lr)>;

struct MicroBatch {
  std::int64_t index = 0;  // 0-based within the current accumulation
  bool last = false;       // index == accumulation_steps - 1
};

using TrainerGradientHook = std::function<void(const ParameterInfo& info, const Tensor& grad, const MicroBatch& micro)>;

struct StepResult {
  std::int64_t step = 0;  // steps taken, including this one
  double lr = 0;          // learning rate used
  double grad_norm = 0;   // global gradient norm before clipping
};

class Trainer {
 public:
  // Allocates the AdamW state (exp_avg, exp_avg_sq: fp32, the parameter layout, zero-filled), unless
  // config.external_optimizer.
  Trainer(TransformerLM& model, const TrainerConfig& config);

  // One micro-batch; returns its (unscaled) mean loss.
  double forward_backward(const TokenIds& inputs, const TokenIds& targets);
  StepResult optimizer_step();
  void zero_grads();
  // External optimizer only (ft::Error otherwise): optimizer_step() calls step(learning_rate()) in place
  // of clipping + AdamW; memory().optimizer_state is state_bytes().
  void set_optimizer_step(TrainerOptimizerStep step, std::function<std::size_t()> state_bytes);
  void set_gradient_ready_hook(TrainerGradientHook hook) { hook_ = std::move(hook); }
  // Called in each micro-batch between its forward and its backward (memory profiles mark phases with it).
  void set_backward_start_hook(std::function<void()> hook) { backward_start_hook_ = std::move(hook); }

  std::int64_t step() const { return step_; }
  // Sets the steps taken so far (a resumed run: AdamW's bias correction and the schedule continue from
  // there); the optimizer state itself is restored through exp_avg() / exp_avg_sq().
  void restore_step(std::int64_t step);
  double learning_rate() const;  // the rate the next optimizer_step uses
  const TrainerConfig& config() const { return config_; }
  TransformerLM& model() { return model_; }
  // The AdamW state; ft::Error (unsupported) with an external optimizer, which holds its own.
  const ParameterBuffer& exp_avg() const;
  const ParameterBuffer& exp_avg_sq() const;
  MemoryReport memory() const;  // the model's, plus the optimizer state

 private:
  TransformerLM& model_;
  TrainerConfig config_;
  ParameterBuffer exp_avg_;     // (numel) fp32 AdamW m
  ParameterBuffer exp_avg_sq_;  // (numel) fp32 AdamW v
  TrainerOptimizerStep external_step_;                // external optimizer only
  std::function<std::size_t()> external_state_bytes_;  // external optimizer only
  TrainerGradientHook hook_;
  std::function<void()> backward_start_hook_;
  std::int64_t step_ = 0;
  std::int64_t micro_batches_ = 0;  // since the last zero_grads
};

}  // namespace ft
