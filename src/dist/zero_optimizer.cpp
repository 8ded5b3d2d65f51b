// zero_optimizer.cpp — the sharded optimizer step: gradient reduction (reduce_scatter mode), the norm over
// shards, the update of this rank's runs, and the parameter exchange of either mode.
#include "dist/zero_optimizer.h"

#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/nvtx.h"
#include "dist/shard_norm.h"
#include "ops/cast.h"
#include "optim/grad_clip.h"

namespace ft {

const char* name_of(ZeroMode mode) {
  switch (mode) {
    case ZeroMode::owner_broadcast: return "owner_broadcast";
    case ZeroMode::reduce_scatter: return "reduce_scatter";
  }
  return "?";
}

ZeroMode parse_zero_mode(std::string_view text) {
  for (ZeroMode m : {ZeroMode::owner_broadcast, ZeroMode::reduce_scatter})
    if (text == name_of(m)) return m;
  FT_THROW(invalid_argument, "unknown ZeRO mode '", text, "': expected owner_broadcast or reduce_scatter");
}

const char* name_of(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::adamw: return "adamw";
    case OptimizerKind::sgd: return "sgd";
  }
  return "?";
}

namespace {

void wait_all(std::vector<WorkHandle>& works) {
  for (WorkHandle& w : works) w->wait();
  works.clear();
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(Communicator& comm, DdpModel model, const ZeroOptions& options)
    : comm_(comm),
      model_(std::move(model)),
      options_(options),
      plan_(model_.tensors, model_.parameters.defined() ? model_.parameters.numel() : 0, comm.world_size()) {
  check_flat_buffers("ZeroOptimizer", model_);
  check_stream_order("ZeroOptimizer", comm_, model_);
  FT_CHECK(std::isfinite(options_.max_grad_norm) && options_.max_grad_norm >= 0,
           "ZeroOptimizer: max_grad_norm must be >= 0 (0 = no clipping), given ", options_.max_grad_norm);
  const ShardRange owned = owned_range();
  if (options_.mode == ZeroMode::reduce_scatter && owned.numel > 0)
    gradient_shard_ = OwnedTensor({owned.numel}, DType::f32, model_.gradients.device(), "gradients",
                                  model_.stream);
  if (options_.broadcast_parameters) comm_.broadcast(model_.parameters, 0)->wait();
}

std::size_t ZeroOptimizer::add_parameter_group(std::vector<std::size_t> parameters, const AdamWConfig& config) {
  FT_CHECK(options_.optimizer != OptimizerKind::sgd || config.weight_decay == 0,
           "ZeroOptimizer: sgd groups take no weight decay (sgd_step has none), given weight_decay ",
           config.weight_decay);
  const std::size_t g = plan_.add_group(std::move(parameters));
  Group group;
  group.config = config;
  const std::int64_t n = plan_.state_numel(comm_.rank(), g);
  if (options_.optimizer == OptimizerKind::adamw && n > 0) {
    const Device device = model_.parameters.device();
    const std::string tag = "optimizer state (zero group " + std::to_string(g) + ")";
    group.exp_avg = OwnedTensor({n}, DType::f32, device, tag + " exp_avg", model_.stream);
    group.exp_avg_sq = OwnedTensor({n}, DType::f32, device, tag + " exp_avg_sq", model_.stream);
    fill(group.exp_avg, 0.0, model_.stream);
    fill(group.exp_avg_sq, 0.0, model_.stream);
  }
  groups_.push_back(std::move(group));
  return g;
}

AdamWConfig& ZeroOptimizer::group_config(std::size_t group) {
  FT_CHECK(group < groups_.size(), "ZeroOptimizer: group ", group, " does not exist (", groups_.size(), " groups)");
  return groups_[group].config;
}

std::int64_t ZeroOptimizer::group_step(std::size_t group) const {
  FT_CHECK(group < groups_.size(), "ZeroOptimizer: group ", group, " does not exist (", groups_.size(), " groups)");
  return groups_[group].step;
}

std::size_t ZeroOptimizer::state_bytes() const {
  std::size_t bytes = 0;
  for (const Group& g : groups_)
    if (g.exp_avg.defined()) bytes += g.exp_avg->span_bytes() + g.exp_avg_sq->span_bytes();
  return bytes;
}

std::size_t ZeroOptimizer::gradient_shard_bytes() const {
  return gradient_shard_.defined() ? gradient_shard_->span_bytes() : 0;
}

Tensor ZeroOptimizer::owned_gradient(const ShardRun& run) const {
  if (options_.mode == ZeroMode::owner_broadcast) return model_.gradients.narrow(0, run.offset, run.numel);
  return gradient_shard_->narrow(0, run.offset - owned_range().offset, run.numel);
}

void ZeroOptimizer::reduce_gradients() {
  const std::int64_t block = plan_.block_numel();
  const ShardRange tail = plan_.tail();
  std::vector<WorkHandle> works;
  if (block > 0)
    works.push_back(comm_.reduce_scatter(gradient_shard_->narrow(0, 0, block),
                                         model_.gradients.narrow(0, 0, plan_.prefix().numel), ReduceOp::average));
  if (tail.numel > 0)
    works.push_back(comm_.all_reduce(model_.gradients.narrow(0, tail.offset, tail.numel), ReduceOp::average));
  wait_all(works);
  if (tail.numel > 0 && comm_.rank() == comm_.world_size() - 1)  // the last rank owns the tail
    cast(gradient_shard_->narrow(0, block, tail.numel), model_.gradients.narrow(0, tail.offset, tail.numel),
         model_.stream);
}

double ZeroOptimizer::global_grad_norm() {
  std::vector<Tensor> owned;  // this rank's averaged gradients of every group's runs
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (const ShardRun& run : plan_.runs(comm_.rank(), g)) owned.push_back(owned_gradient(run));
  return global_norm(comm_, grad_sum_squares(owned, model_.stream), model_.gradients.device(), model_.stream);
}

void ZeroOptimizer::update_owned_parameters(double clip) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    Group& group = groups_[g];
    ++group.step;  // on every rank, owner of runs of this group or not: steps agree
    for (const ShardRun& run : plan_.runs(comm_.rank(), g)) {
      const Tensor params = model_.parameters.narrow(0, run.offset, run.numel);  // (run) fp32, in place
      const Tensor grads = owned_gradient(run);                                   // (run) fp32
      if (options_.optimizer == OptimizerKind::sgd) {
        if (clip < 1) scale_tensors({grads}, clip, model_.stream);
        sgd_step(params, grads, group.config.lr, model_.stream);
        continue;
      }
      adamw_step(params, grads, group.exp_avg->narrow(0, run.state_offset, run.numel),
                 group.exp_avg_sq->narrow(0, run.state_offset, run.numel), group.config, group.step, model_.stream,
                 GradScale{.factor = clip});
    }
  }
}

void ZeroOptimizer::share_parameters() {
  std::vector<WorkHandle> works;
  if (options_.mode == ZeroMode::owner_broadcast) {
    for (int r = 0; r < comm_.world_size(); ++r) {
      const ShardRange range = plan_.range(r);
      if (range.numel > 0) works.push_back(comm_.broadcast(model_.parameters.narrow(0, range.offset, range.numel), r));
    }
  } else {
    const std::int64_t block = plan_.block_numel();
    const ShardRange tail = plan_.tail();
    if (block > 0)
      works.push_back(comm_.all_gather(model_.parameters.narrow(0, 0, plan_.prefix().numel),
                                       model_.parameters.narrow(0, block * comm_.rank(), block)));
    if (tail.numel > 0)
      works.push_back(comm_.broadcast(model_.parameters.narrow(0, tail.offset, tail.numel), comm_.world_size() - 1));
  }
  wait_all(works);
}

ZeroStepResult ZeroOptimizer::step() {
  NvtxRange range("zero optimizer step");
  if (options_.mode == ZeroMode::reduce_scatter) reduce_gradients();
  ZeroStepResult result;
  result.grad_norm = global_grad_norm();
  update_owned_parameters(options_.max_grad_norm > 0 ? clip_factor(result.grad_norm, options_.max_grad_norm) : 1.0);
  share_parameters();
  return result;
}

}  // namespace ft
