// trainer.h — Trainer: the training-step API over a TransformerLM.
//   forward_backward(inputs, targets)  one micro-batch: gradients of loss / accumulation_steps are written
//                                      (first micro-batch after zero_grads) or added (the others)
//   optimizer_step()                   optional global-norm clipping, then AdamW (optim/adamw.h) with the
//                                      learning rate of the cosine schedule at this step; step += 1. The
//                                      clipping is folded into the update (GradScale): the parameters and
//                                      state are clip-then-AdamW's bit for bit, while the gradients are
//                                      left unclipped (one pass over them fewer)
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
// The whole step without host reads (enqueue_step): forward, backward, clipping and AdamW enqueued with the
// loss and the gradient norm left in device memory (StepSlots) and AdamW's factors read from there — what
// GraphedTrainStep (graphed_step.h) captures in a CUDA graph; bit for bit forward_backward + optimizer_step.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "model/parameters.h"
#include "model/transformer.h"
#include "optim/adamw.h"
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

// Where enqueue_step leaves a step's results and reads its AdamW factors: one StepSlots in the model's
// device memory (host memory on the CPU).
struct StepSlots {
  double loss = 0;              // written: the batch's mean loss
  double grad_sum_squares = 0;  // written: sum of g^2 over every gradient before clipping (norm = its sqrt)
  AdamWFactors adamw;           // read when AdamW runs: the step's factors (Trainer::step_factors)
};

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

  // ft::Error naming what stops this Trainer's step from running without the host (`caller` starts the
  // message): an external optimizer, accumulation_steps > 1, a gradient-ready or backward-start hook
  // (unsupported), micro-batches run since zero_grads() (invalid_argument).
  void check_enqueue_step(std::string_view caller) const;
  // The next step's AdamW factors: the config's with learning_rate(), at step() + 1.
  AdamWFactors step_factors() const;
  // One whole step — forward_backward on (inputs, targets), clipping, AdamW — enqueued on the model's stream:
  // the loss and the squared gradient norm are left in *slots, and AdamW reads slots->adamw when it runs
  // (write step_factors() there first). Nothing waits for the device but the token-id checks
  // (TransformerLM::forward_backward_to). step() stays as it is: count_step() counts the step.
  void enqueue_step(const TokenIds& inputs, const TokenIds& targets, StepSlots* slots);
  // step() += 1, for a step enqueue_step ran or a graph of it replayed.
  void count_step() { ++step_; }

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
