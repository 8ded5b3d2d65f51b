// ddp.cpp — gradient averaging over ranks: bucket bookkeeping per step, launches, waits, bf16 staging.
#include "dist/ddp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include "core/error.h"
#include "ops/cast.h"

namespace ft {

const char* name_of(DdpStrategy strategy) {
  switch (strategy) {
    case DdpStrategy::naive: return "naive";
    case DdpStrategy::flat: return "flat";
    case DdpStrategy::overlapped: return "overlapped";
    case DdpStrategy::bucketed: return "bucketed";
  }
  return "?";
}

std::vector<std::string> ddp_strategy_names() { return {"naive", "flat", "overlapped", "bucketed"}; }

DdpStrategy parse_ddp_strategy(std::string_view text) {
  for (DdpStrategy s : {DdpStrategy::naive, DdpStrategy::flat, DdpStrategy::overlapped, DdpStrategy::bucketed})
    if (text == name_of(s)) return s;
  FT_THROW(invalid_argument, "unknown DDP strategy '", text, "': expected naive, flat, overlapped or bucketed");
}

namespace {

// The bucket cap in bytes each strategy plans with.
std::int64_t cap_bytes(const DdpOptions& options) {
  switch (options.strategy) {
    case DdpStrategy::naive:
    case DdpStrategy::overlapped: return 0;
    case DdpStrategy::flat: return kUnlimitedBucketBytes;
    case DdpStrategy::bucketed: break;
  }
  FT_CHECK(std::isfinite(options.bucket_size_mb) && options.bucket_size_mb > 0,
           "DDP: bucket_size_mb must be > 0, given ", options.bucket_size_mb);
  return static_cast<std::int64_t>(options.bucket_size_mb * 1024.0 * 1024.0);
}

double host_now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check_flat(const char* who, const char* role, const Tensor& t) {
  FT_CHECK(t.defined() && t.dtype() == DType::f32 && t.is_contiguous() && t.dim() == 1, who, ": the ", role,
           " must be one contiguous fp32 vector, given ", t.defined() ? t.describe() : std::string("undefined"));
}

}  // namespace

BucketPlan plan_ddp_buckets(const DdpModel& model, const DdpOptions& options) {
  return plan_buckets(model.tensors, model.ready_order, cap_bytes(options), sizeof(float));
}

std::int64_t largest_bucket_bytes(const DdpModel& model, const DdpOptions& options) {
  std::int64_t largest = 0;
  for (const Bucket& b : plan_ddp_buckets(model, options).buckets) largest = std::max(largest, b.numel);
  return largest * static_cast<std::int64_t>(options.bf16_communication ? size_of(DType::bf16) : sizeof(float));
}

void check_stream_order(const char* who, const Communicator& comm, const DdpModel& model) {
  const std::optional<Stream> ordered_after = comm.compute_stream();
  if (!ordered_after) return;  // host collectives: issued after the host has finished the gradients
  FT_CHECK(ordered_after->handle() == model.stream.handle(), who, ": the ", comm.backend(),
           " communicator orders its collectives after stream ", ordered_after->handle(),
           " but the model runs on stream ", model.stream.handle(),
           ": give the model DistributedContext::model_stream() (or set_compute_stream to the model's stream)");
}

void check_flat_buffers(const char* who, const DdpModel& model) {
  check_flat(who, "parameter buffer", model.parameters);
  check_flat(who, "gradient buffer", model.gradients);
  FT_CHECK(model.parameters.numel() == model.gradients.numel() && model.parameters.device() == model.gradients.device(),
           who, ": parameters and gradients must share a length and device, given ", model.parameters.describe(),
           " and ", model.gradients.describe());
}

DistributedDataParallel::DistributedDataParallel(Communicator& comm, DdpModel model, const DdpOptions& options)
    : comm_(comm), model_(std::move(model)), options_(options) {
  check_flat_buffers("DDP", model_);
  check_stream_order("DDP", comm_, model_);
  for (const DdpParameter& p : model_.tensors)
    FT_CHECK(p.offset + p.numel <= model_.gradients.numel(), "DDP: parameter ", p.name, " [", p.offset, ", ",
             p.offset + p.numel, ") lies outside the flat buffers of ", model_.gradients.numel(), " elements");
  plan_ = plan_ddp_buckets(model_, options_);
  members_.resize(plan_.buckets.size());
  for (std::size_t b = 0; b < plan_.buckets.size(); ++b) members_[b] = plan_.buckets[b].parameters.size();
  const std::int64_t numel = model_.gradients.numel();
  if (is_staged(options_.buffer)) {
    comm_buffer_ = comm_.allocate_buffer(numel, options_.bf16_communication ? DType::bf16 : DType::f32, options_.buffer);
    staged_ = comm_buffer_->tensor();
  } else if (options_.bf16_communication) {
    staging_ = OwnedTensor({numel}, DType::bf16, model_.gradients.device(), "DDP bf16 gradient staging", model_.stream);
    staged_ = staging_;
  }
  if (options_.buffer == CommBufferKind::registered)
    registration_ = comm_.register_buffer(options_.bf16_communication ? staged_ : model_.gradients);
  reset_step();
  if (options_.broadcast_parameters) comm_.broadcast(model_.parameters, 0)->wait();
}

bool DistributedDataParallel::reduces_during_backward() const {
  return options_.strategy == DdpStrategy::overlapped || options_.strategy == DdpStrategy::bucketed;
}

void DistributedDataParallel::reset_step() {
  pending_ = members_;
  reported_.assign(model_.tensors.size(), false);
  works_.clear();
  works_.resize(plan_.buckets.size());
  issued_ms_.assign(plan_.buckets.size(), 0.0);
  completed_ms_.assign(plan_.buckets.size(), -1.0);
  next_launch_ = 0;
  oldest_in_flight_ = 0;
}

void DistributedDataParallel::launch(std::size_t bucket) {
  const Bucket& b = plan_.buckets[bucket];
  const Tensor grads = model_.gradients.narrow(0, b.offset, b.numel);  // (numel) fp32, in place
  const Tensor staged = staged_.defined() ? staged_.narrow(0, b.offset, b.numel) : Tensor();  // (numel) bf16/fp32
  const bool staged_by_comm = is_staged(options_.buffer) || (staged.defined() && options_.round_on_comm_stream);
  if (staged.defined() && !staged_by_comm)
    cast(staged, grads, model_.stream);  // a device communicator orders itself after it (check_stream_order)
  issued_ms_[bucket] = host_now_ms();
  if (staged_by_comm) {
    works_[bucket] = comm_.all_reduce_staged(grads, staged, ReduceOp::average, model_.stream);
  } else if (staged.defined()) {
    works_[bucket] = comm_.all_reduce_widened(staged, ReduceOp::average, grads, model_.stream);
  } else {
    works_[bucket] = comm_.all_reduce(grads, ReduceOp::average);
  }
}

void DistributedDataParallel::observe_completion(std::size_t bucket) {
  if (completed_ms_[bucket] < 0) completed_ms_[bucket] = host_now_ms();
}

void DistributedDataParallel::launch_ready_buckets() {
  while (next_launch_ < plan_.buckets.size() && pending_[next_launch_] == 0) launch(next_launch_++);
  // Let the backend progress what is in flight (MPI moves nonblocking collectives only inside MPI calls).
  while (oldest_in_flight_ < next_launch_ && works_[oldest_in_flight_]->is_completed())
    observe_completion(oldest_in_flight_++);
}

std::optional<double> DistributedDataParallel::step_comm_ms() {
  // The host clock times host collectives, and those of a world of one (identities, complete at issue).
  const bool host_timed = model_.gradients.device().is_cpu() || comm_.world_size() == 1;
  double total = 0, previous_end = 0;  // host clock: the previous collective's observed completion
  for (std::size_t b = 0; b < plan_.buckets.size(); ++b) {
    if (const std::optional<double> ms = works_[b]->elapsed_ms()) {  // NCCL: device time
      total += *ms;
      continue;
    }
    if (!host_timed) return std::nullopt;
    total += completed_ms_[b] - std::max(issued_ms_[b], previous_end);
    previous_end = completed_ms_[b];
  }
  return total;
}

void DistributedDataParallel::gradient_ready(std::size_t index, bool last_micro_batch) {
  FT_CHECK(index < model_.tensors.size(), "DDP: gradient_ready for parameter ", index, ", but the model has ",
           model_.tensors.size());
  if (!last_micro_batch || !reduces_during_backward()) return;
  const std::size_t bucket = plan_.bucket_of[index];
  if (bucket == BucketPlan::kNoBucket) return;  // frozen
  FT_CHECK_KIND(runtime, !reported_[index], "DDP: parameter ", model_.tensors[index].name,
                " was reported ready twice in one step; report each gradient once, when it is final");
  reported_[index] = true;
  --pending_[bucket];
  launch_ready_buckets();
}

std::string DistributedDataParallel::unreported_parameters() const {
  std::string names;
  for (std::size_t i = 0; i < model_.tensors.size(); ++i)
    if (model_.tensors[i].requires_grad && !reported_[i]) names += (names.empty() ? "" : ", ") + model_.tensors[i].name;
  return names;
}

void DistributedDataParallel::synchronize() {
  const std::size_t n = plan_.buckets.size();
  if (options_.strategy == DdpStrategy::naive) {
    for (std::size_t b = 0; b < n; ++b) {
      launch(b);
      works_[b]->wait();
      observe_completion(b);
    }
  } else if (options_.strategy == DdpStrategy::flat) {
    for (std::size_t b = 0; b < n; ++b) launch(b);
  } else {
    FT_CHECK_KIND(runtime, next_launch_ == n, "DDP (", name_of(options_.strategy),
                  "): synchronize() before every trainable gradient was reported ready on the last micro-batch; "
                  "missing: ", unreported_parameters());
  }
  for (std::size_t b = 0; b < n; ++b) {
    works_[b]->wait();
    observe_completion(b);
  }
  comm_ms_ = step_comm_ms();
  reset_step();
}

}  // namespace ft
