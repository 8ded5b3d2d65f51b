// graphed_step.cpp — GraphedTrainStep: checks, staging of the token ids and the step's AdamW factors, the
// warm-up / capture / replay sequence, and the read-back of the step's loss and gradient norm.
#include "model/graphed_step.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/op_common.h"

namespace ft {

namespace {
constexpr const char* kWho = "GraphedTrainStep";
}  // namespace

GraphedTrainStep::GraphedTrainStep(Trainer& trainer)
    : trainer_(trainer), device_(trainer.model().options().device), stream_(trainer.model().options().stream) {
  FT_CHECK_KIND(unsupported, device_.is_cuda(), kWho, ": CUDA graphs need a CUDA device, but the model is on ",
                device_.to_string(), "; train with the Trainer's forward_backward and optimizer_step there");
  FT_CHECK_KIND(unsupported, stream_.handle() != nullptr, kWho,
                ": the model runs on the legacy default stream, which CUDA cannot capture; build it with "
                "ModelOptions::stream set to a stream of its own (Stream::create)");
  trainer_.check_enqueue_step(kWho);
  const ModelOptions& o = trainer_.model().options();
  const auto capacity = static_cast<std::size_t>(o.max_batch * o.max_seq_len);
  ids_ = Buffer(2 * capacity * sizeof(std::int32_t), device_, "graphed step token ids", stream_);
  slots_ = Buffer(sizeof(StepSlots), device_, "graphed step scalars", stream_);
}

void GraphedTrainStep::stage(const TokenIds& inputs, const TokenIds& targets) {
  FT_CHECK(inputs.device.is_cpu() && targets.device.is_cpu(), kWho,
           ": token ids must be in host memory (they are checked there and copied into the graph's device "
           "buffers), given inputs on ", inputs.device.to_string(), " and targets on ", targets.device.to_string());
  ops::check_token_ids(kWho, inputs, "inputs", Device::cpu());
  ops::check_token_ids(kWho, targets, "targets", Device::cpu());
  FT_CHECK(inputs.shape.size() == 2 && targets.shape == inputs.shape, kWho,
           ": inputs and targets must be (B, T) ids of one shape, given ", shape_string(inputs.shape), " and ",
           shape_string(targets.shape));
  if (shape_.empty()) {
    const ModelOptions& o = trainer_.model().options();
    FT_CHECK(inputs.shape[0] >= 1 && inputs.shape[0] <= o.max_batch && inputs.shape[1] >= 1 &&
                 inputs.shape[1] <= o.max_seq_len,
             kWho, ": (B, T) must be within the model's (max_batch, max_seq_len) = (", o.max_batch, ", ",
             o.max_seq_len, "), given ", shape_string(inputs.shape));
  } else {
    FT_CHECK(inputs.shape == shape_, kWho, ": every step must have the batch shape of the first, (B, T) = ",
             shape_string(shape_), ", for which the step is captured; given ", shape_string(inputs.shape),
             " (use another GraphedTrainStep for another shape)");
  }
  const std::int64_t vocab = trainer_.model().config().vocab_size;
  ops::check_token_range(kWho, inputs, vocab, "inputs");
  ops::check_token_range(kWho, targets, vocab, "targets");
  shape_ = inputs.shape;
  const std::int64_t n = inputs.numel();
  host_ids_.resize(static_cast<std::size_t>(2 * n));
  std::copy_n(inputs.data, n, host_ids_.begin());
  std::copy_n(targets.data, n, host_ids_.begin() + n);
  upload(ids_.data(), host_ids_.data(), host_ids_.size() * sizeof(std::int32_t), stream_);
}

void GraphedTrainStep::step(const TokenIds& inputs, const TokenIds& targets) {
  trainer_.check_enqueue_step(kWho);  // hooks may have been set since construction
  stage(inputs, targets);
  const AdamWFactors factors = trainer_.step_factors();
  const double lr = trainer_.learning_rate();
  upload(&slots()->adamw, &factors, sizeof(factors), stream_);

  const auto* ids = static_cast<const std::int32_t*>(ids_.data());
  const TokenIds device_inputs{ids, shape_, device_};
  const TokenIds device_targets{ids + shape_numel(shape_), shape_, device_};
  const auto enqueue = [&] { trainer_.enqueue_step(device_inputs, device_targets, slots()); };
  if (steps_ == 0) {
    wait_for_device(device_);  // all work queued before the first step (initialisation, loading) on any stream
    enqueue();
  } else {
    if (!graph_.captured()) graph_.capture(stream_, enqueue);
    graph_.launch();
  }
  trainer_.count_step();
  ++steps_;
  last_.step = trainer_.step();
  last_.lr = lr;
}

StepSlots GraphedTrainStep::read_slots() const {
  FT_CHECK(steps_ > 0, kWho, ": no step has run yet, so there is no loss or gradient norm to read");
  StepSlots host;
  download(&host, slots_.data(), sizeof(host), stream_);
  return host;
}

double GraphedTrainStep::loss() const { return read_slots().loss; }

StepResult GraphedTrainStep::result() const {
  StepResult r = last_;
  r.grad_norm = std::sqrt(read_slots().grad_sum_squares);
  return r;
}

}  // namespace ft
