// trainer.cpp — micro-batch accumulation, clipping, the AdamW step (or an external optimizer's), the
// learning-rate schedule, and the whole step enqueued without host reads.
#include "model/trainer.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cast.h"
#include "optim/grad_clip.h"

namespace ft {

Trainer::Trainer(TransformerLM& model, const TrainerConfig& config) : model_(model), config_(config) {
  FT_CHECK_KIND(invalid_argument, model_.options().training,
                "Trainer: the model was built for inference (ModelOptions::training = false) and holds no "
                "gradients; build it with training = true to train it");
  FT_CHECK(config_.accumulation_steps >= 1, "Trainer: accumulation_steps must be >= 1, given ",
           config_.accumulation_steps);
  FT_CHECK(config_.max_grad_norm >= 0, "Trainer: max_grad_norm must be >= 0 (0 = no clipping), given ",
           config_.max_grad_norm);
  if (config_.schedule) ft::learning_rate(*config_.schedule, 0);  // validates the schedule
  if (config_.external_optimizer) return;
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
  StepResult result;
  result.lr = learning_rate();
  if (config_.external_optimizer) {
    FT_CHECK(external_step_ != nullptr,
             "Trainer: external_optimizer is set but no step was given; call set_optimizer_step() first");
    result.grad_norm = external_step_(result.lr);
    ++step_;
    result.step = step_;
    return result;
  }
  const Stream& stream = model_.options().stream;
  result.grad_norm = std::sqrt(grad_sum_squares({model_.gradients().flat()}, stream));
  GradScale clip;  // clipping folded into the update: the gradients stay as backward left them
  if (config_.max_grad_norm > 0) clip.factor = clip_factor(result.grad_norm, config_.max_grad_norm);
  AdamWConfig adamw = config_.adamw;
  adamw.lr = result.lr;
  adamw_step(model_.parameters().flat(), model_.gradients().flat(), exp_avg_.flat(), exp_avg_sq_.flat(), adamw,
             step_ + 1, stream, clip);
  ++step_;
  result.step = step_;
  return result;
}

void Trainer::zero_grads() { micro_batches_ = 0; }

void Trainer::check_enqueue_step(std::string_view caller) const {
  FT_CHECK_KIND(unsupported, !config_.external_optimizer, caller,
                ": the step runs the Trainer's own AdamW, but this Trainer has an external optimizer (e.g. ZeRO-1), "
                "whose step reads back to the host");
  FT_CHECK_KIND(unsupported, config_.accumulation_steps == 1, caller,
                ": the step runs one batch, but accumulation_steps is ", config_.accumulation_steps,
                " (gradient accumulation is not supported here: use a larger batch)");
  FT_CHECK_KIND(unsupported, hook_ == nullptr, caller,
                ": a gradient-ready hook is set (data-parallel training, DDP); host callbacks cannot run in a step "
                "that runs without the host");
  FT_CHECK_KIND(unsupported, backward_start_hook_ == nullptr, caller,
                ": a backward-start hook is set (memory profile phases); host callbacks cannot run in a step that "
                "runs without the host");
  FT_CHECK(micro_batches_ == 0, caller, ": ", micro_batches_,
           " micro-batch(es) have run since the last zero_grads(), but the step computes its own gradients; call "
           "zero_grads() first");
}

AdamWFactors Trainer::step_factors() const {
  AdamWConfig adamw = config_.adamw;
  adamw.lr = learning_rate();
  return adamw_factors(adamw, step_ + 1);
}

void Trainer::enqueue_step(const TokenIds& inputs, const TokenIds& targets, StepSlots* slots) {
  check_enqueue_step("Trainer::enqueue_step");
  FT_CHECK(slots != nullptr, "Trainer::enqueue_step: slots must point to one StepSlots on the model's device, given "
           "null");
  model_.forward_backward_to(&slots->loss, inputs, targets);
  NvtxRange range("optimizer step");
  const Stream& stream = model_.options().stream;
  const std::vector<Tensor> grads = {model_.gradients().flat()};
  grad_sum_squares_to(&slots->grad_sum_squares, grads, stream);
  const GradScale clip =
      config_.max_grad_norm > 0 ? clip_grad_scale(&slots->grad_sum_squares, config_.max_grad_norm) : GradScale{};
  adamw_step_from(model_.parameters().flat(), grads.front(), exp_avg_.flat(), exp_avg_sq_.flat(), &slots->adamw,
                  stream, clip);
}

void Trainer::set_optimizer_step(TrainerOptimizerStep step, std::function<std::size_t()> state_bytes) {
  FT_CHECK(config_.external_optimizer,
           "Trainer: set_optimizer_step needs TrainerConfig::external_optimizer = true "
           "(this Trainer runs its own AdamW)");
  FT_CHECK(step != nullptr && state_bytes != nullptr,
           "Trainer: set_optimizer_step needs a step and a state_bytes function");
  external_step_ = std::move(step);
  external_state_bytes_ = std::move(state_bytes);
}

const ParameterBuffer& Trainer::exp_avg() const {
  FT_CHECK_KIND(unsupported, !config_.external_optimizer,
                "Trainer: exp_avg() is the Trainer's own AdamW state, but this Trainer has an external optimizer "
                "(which holds the state)");
  return exp_avg_;
}

const ParameterBuffer& Trainer::exp_avg_sq() const {
  FT_CHECK_KIND(unsupported, !config_.external_optimizer,
                "Trainer: exp_avg_sq() is the Trainer's own AdamW state, but this Trainer has an external optimizer "
                "(which holds the state)");
  return exp_avg_sq_;
}

void Trainer::restore_step(std::int64_t step) {
  FT_CHECK(step >= 0, "Trainer: restore_step needs a step >= 0, given ", step);
  step_ = step;
  micro_batches_ = 0;
}

MemoryReport Trainer::memory() const {
  MemoryReport m = model_.memory();
  if (config_.external_optimizer)
    m.optimizer_state = external_state_bytes_ ? external_state_bytes_() : 0;
  else
    m.optimizer_state = exp_avg_.bytes() + exp_avg_sq_.bytes();
  return m;
}

}  // namespace ft
