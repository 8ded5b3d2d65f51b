// trainer.cpp — micro-batch accumulation, clipping, the AdamW step and the learning-rate schedule.
#include "model/trainer.h"

#include <cmath>

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cast.h"
#include "optim/grad_clip.h"

namespace ft {

Trainer::Trainer(TransformerLM& model, const TrainerConfig& config) : model_(model), config_(config) {
  FT_CHECK(config_.accumulation_steps >= 1, "Trainer: accumulation_steps must be >= 1, given ",
           config_.accumulation_steps);
  FT_CHECK(config_.max_grad_norm >= 0, "Trainer: max_grad_norm must be >= 0 (0 = no clipping), given ",
           config_.max_grad_norm);
  if (config_.schedule) ft::learning_rate(*config_.schedule, 0);  // validates the schedule
  const Device device = model_.options().device;
  exp_avg_ = ParameterBuffer(model_.layout(), DType::f32, device, "optimizer state (exp_avg)", model_.options().stream);
  exp_avg_sq_ =
      ParameterBuffer(model_.layout(), DType::f32, device, "optimizer state (exp_avg_sq)", model_.options().stream);
  fill(exp_avg_.flat(), 0.0, model_.options().stream);
  fill(exp_avg_sq_.flat(), 0.0, model_.options().stream);
}

double Trainer::forward_backward(const TokenIds& inputs, const TokenIds& targets) {
  FT_CHECK(micro_batches_ < config_.accumulation_steps, "Trainer: ", micro_batches_,
           " micro-batches have run since the last zero_grads, but accumulation_steps is ", config_.accumulation_steps,
           "; call optimizer_step() and zero_grads() first");
  const MicroBatch micro{micro_batches_, micro_batches_ == config_.accumulation_steps - 1};
  BackwardOptions options;
  options.loss_scale = 1.0 / static_cast<double>(config_.accumulation_steps);
  options.accumulate = micro_batches_ > 0;
  if (hook_)
    options.on_gradient_ready = [&](const ParameterInfo& info, const Tensor& grad) { hook_(info, grad, micro); };
  options.on_backward_start = backward_start_hook_;
  const double loss = model_.forward_backward(inputs, targets, options);
  ++micro_batches_;
  return loss;
}

double Trainer::learning_rate() const {
  return config_.schedule ? ft::learning_rate(*config_.schedule, step_) : config_.adamw.lr;
}

StepResult Trainer::optimizer_step() {
  NvtxRange range("optimizer step");
  FT_CHECK(micro_batches_ > 0,
           "Trainer: optimizer_step() needs gradients, but no micro-batch has run since "
           "the last zero_grads()");
  const Stream& stream = model_.options().stream;
  StepResult result;
  if (config_.max_grad_norm > 0)
    result.grad_norm = clip_grad_norm({model_.gradients().flat()}, config_.max_grad_norm, stream);
  else
    result.grad_norm = std::sqrt(grad_sum_squares({model_.gradients().flat()}, stream));
  AdamWConfig adamw = config_.adamw;
  adamw.lr = learning_rate();
  adamw_step(model_.parameters().flat(), model_.gradients().flat(), exp_avg_.flat(), exp_avg_sq_.flat(), adamw,
             step_ + 1, stream);
  ++step_;
  result.step = step_;
  result.lr = adamw.lr;
  return result;
}

void Trainer::zero_grads() { micro_batches_ = 0; }

void Trainer::restore_step(std::int64_t step) {
  FT_CHECK(step >= 0, "Trainer: restore_step needs a step >= 0, given ", step);
  step_ = step;
  micro_batches_ = 0;
}

MemoryReport Trainer::memory() const {
  MemoryReport m = model_.memory();
  m.optimizer_state = exp_avg_.bytes() + exp_avg_sq_.bytes();
  return m;
}

}  // namespace ft
