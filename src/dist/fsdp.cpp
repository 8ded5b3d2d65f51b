// fsdp.cpp — ZeRO-3 and ZeRO-2: shard initialisation, the unit all-gathers (stage 3 with prefetch into two
// slots, stage 2 into the replica after each step), the gradient reduce-scatters, the sharded AdamW step,
// and the replicated norm vectors of bf16 mode. See Notes [ZeRO-3 step] and [ZeRO-2 step] (dist/fsdp.h).
#include "dist/fsdp.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/nvtx.h"
#include "dist/shard_norm.h"
#include "model/init.h"
#include "ops/cast.h"
#include "ops/residual.h"
#include "optim/grad_clip.h"

namespace ft {

namespace {

DType unit_gather_dtype(std::size_t unit, Precision precision) {
  return unit == 0 || precision == Precision::fp32 ? DType::f32 : DType::bf16;
}

int unit_slot(std::size_t unit, std::size_t units) {
  return unit == 0 || unit + 1 == units ? 2 : static_cast<int>((unit - 1) % 2);
}

// The sizes of the three slots, each for the largest of its units: gathered parameters (stage 3) in bytes,
// gradients in elements. Stage 3's slot 2 holds its gradients too, from grad2_offset on (see Note [ZeRO-3
// step]): its gather_bytes cover both, and no gradient slot 2 of its own is allocated.
struct SlotSizes {
  std::size_t gather_bytes[3] = {0, 0, 0};
  std::int64_t grad_numel[3] = {0, 0, 0};
  std::size_t grad2_offset = 0;  // stage 3: bytes into gather slot 2
};

SlotSizes slot_sizes(const FsdpPlan& plan, Precision precision, int stage) {
  SlotSizes sizes;
  const std::size_t units = plan.units().size();
  for (std::size_t u = 0; u < units; ++u) {
    const std::int64_t padded = plan.units()[u].padded();
    const int s = unit_slot(u, units);
    sizes.gather_bytes[s] =
        std::max(sizes.gather_bytes[s], static_cast<std::size_t>(padded) * size_of(unit_gather_dtype(u, precision)));
    sizes.grad_numel[s] = std::max(sizes.grad_numel[s], padded);
  }
  if (stage == 3 && units > 1) {
    const std::size_t head = units - 1;  // gathered while its gradients are written
    const std::size_t head_bytes =
        static_cast<std::size_t>(plan.units()[head].padded()) * size_of(unit_gather_dtype(head, precision));
    sizes.grad2_offset = (head_bytes + 255) / 256 * 256;
    sizes.gather_bytes[2] = std::max(sizes.gather_bytes[2],
                                     sizes.grad2_offset + static_cast<std::size_t>(sizes.grad_numel[2]) * 4);
  }
  return sizes;
}

// The fp32 gradient slot s's own elements (stage 3's slot 2 has none: it lives in gather slot 2).
std::int64_t own_grad_numel(const SlotSizes& sizes, int s, int stage) {
  return stage == 3 && s == 2 ? 0 : sizes.grad_numel[s];
}

// Stage 2's replica: where each unit starts (bytes, 16-aligned), and the total.
std::vector<std::size_t> replica_offsets(const FsdpPlan& plan, Precision precision, std::size_t* total) {
  std::vector<std::size_t> offsets;
  std::size_t bytes = 0;
  for (std::size_t u = 0; u < plan.units().size(); ++u) {
    offsets.push_back(bytes);
    bytes += static_cast<std::size_t>(plan.units()[u].padded()) * size_of(unit_gather_dtype(u, precision));
    bytes = (bytes + 15) / 16 * 16;
  }
  *total = bytes;
  return offsets;
}

std::int64_t norm_numel(const ParameterLayout& layout) {
  std::int64_t n = 0;
  for (const ParameterInfo& info : layout.tensors())
    if (info.kind == ParameterKind::norm) n += info.numel;
  return n;
}

}  // namespace

FsdpMemory Fsdp::planned_memory(const ModelConfig& config, const FsdpOptions& options, int world) {
  const ParameterLayout layout(config);
  const FsdpPlan plan(layout, world);
  const auto S = static_cast<std::size_t>(plan.shard_numel());
  FsdpMemory m;
  m.parameters = 4 * S + (options.precision == Precision::bf16 ? 4 * static_cast<std::size_t>(norm_numel(layout)) : 0);
  m.gradients = 4 * S + (options.bf16_grad_comm ? 2 * S : 0);
  m.optimizer_state = 8 * S;
  const SlotSizes sizes = slot_sizes(plan, options.precision, options.stage);
  for (int s = 0; s < 3; ++s) {
    if (options.stage == 3) m.communication += sizes.gather_bytes[s];
    m.communication += static_cast<std::size_t>(own_grad_numel(sizes, s, options.stage)) * 4 +
                       static_cast<std::size_t>(sizes.grad_numel[s]) * (options.bf16_grad_comm ? 2 : 0);
  }
  if (options.stage == 2) replica_offsets(plan, options.precision, &m.replica);
  return m;
}

Fsdp::Fsdp(Communicator& comm, const ModelConfig& config, const FsdpOptions& options)
    : comm_(comm), config_(config), layout_(config), options_(options), plan_(layout_, comm.world_size()) {
  FT_CHECK(options_.stage == 2 || options_.stage == 3, "Fsdp: the ZeRO stage must be 2 or 3, given ",
           options_.stage);
  const Device device = options_.device;
  const Stream& stream = options_.stream;
  const std::int64_t S = plan_.shard_numel();
  master_ = OwnedTensor({S}, DType::f32, device, "parameters", stream);
  grads_ = OwnedTensor({S}, DType::f32, device, "gradients", stream);
  exp_avg_ = OwnedTensor({S}, DType::f32, device, "optimizer state exp_avg", stream);
  exp_avg_sq_ = OwnedTensor({S}, DType::f32, device, "optimizer state exp_avg_sq", stream);
  for (const OwnedTensor* t : {&master_, &grads_, &exp_avg_, &exp_avg_sq_}) fill(*t, 0.0, stream);

  const SlotSizes sizes = slot_sizes(plan_, options_.precision, options_.stage);
  for (int s = 0; s < 3; ++s) {
    const std::int64_t n = sizes.grad_numel[s];
    if (n == 0) continue;  // a model of one block leaves slot 1 unused
    if (options_.stage == 3) gather_slots_[s] = Buffer(sizes.gather_bytes[s], device, "fsdp gather slot", stream);
    if (own_grad_numel(sizes, s, options_.stage) > 0) {
      grad_slot_memory_[s] = OwnedTensor({n}, DType::f32, device, "fsdp gradient slot", stream);
      grad_slots_[s] = grad_slot_memory_[s];
    } else {
      grad_slots_[s] = Tensor(static_cast<char*>(gather_slots_[s].data()) + sizes.grad2_offset, DType::f32, device, {n});
    }
    if (options_.bf16_grad_comm) grad_slots16_[s] = OwnedTensor({n}, DType::bf16, device, "fsdp gradient slot", stream);
  }
  if (options_.bf16_grad_comm) grads16_ = OwnedTensor({S}, DType::bf16, device, "gradients", stream);
  if (options_.stage == 2) {
    std::size_t bytes = 0;
    replica_offset_ = replica_offsets(plan_, options_.precision, &bytes);
    replica_ = Buffer(bytes, device, "parameters", stream);
  }
  reported_.assign(plan_.units().size(), 0);
  gathering_.resize(plan_.units().size());

  const int rank = comm_.rank();
  for (std::size_t u = 0; u < plan_.units().size(); ++u) {
    const ShardRange owned = plan_.owned(u, rank);
    if (owned.numel > 0)
      init_parameters_range(layout_, master_->narrow(0, plan_.units()[u].shard_offset, owned.numel), owned.offset,
                            options_.seed, stream);
  }
  norm_offset_.assign(layout_.size(), -1);
  if (options_.precision == Precision::bf16) {
    std::int64_t n = 0;
    for (const ParameterInfo& info : layout_.tensors())
      if (info.kind == ParameterKind::norm) {
        norm_offset_[info.index] = n;
        n += info.numel;
      }
    norms_ = OwnedTensor({n}, DType::f32, device, "parameters", stream);
  }
  refresh();
}

Fsdp::~Fsdp() {
  // Collectives still in flight read or write the slots: let them finish before the memory goes.
  for (WorkHandle& work : gathering_)
    if (work) work->wait();
  for (WorkHandle& work : reducing_)
    if (work) work->wait();
}

DType Fsdp::gather_dtype(std::size_t unit) const { return unit_gather_dtype(unit, options_.precision); }

Tensor Fsdp::piece(const Tensor& shard, std::size_t unit) const {
  const FsdpUnit& u = plan_.units()[unit];
  return shard.narrow(0, u.shard_offset, u.piece);
}

int Fsdp::slot_of(std::size_t unit) const { return unit_slot(unit, plan_.units().size()); }

// A world of one moves nothing: its collectives are copies, made here on the model's stream (in order with
// the compute) rather than by the identity communicator's synchronous copies.
WorkHandle Fsdp::all_gather(const Tensor& output, const Tensor& input) {
  if (comm_.world_size() > 1) return comm_.all_gather(output, input);
  if (output.data() != input.data()) cast(output, input, options_.stream);
  return nullptr;
}

WorkHandle Fsdp::reduce_scatter(const Tensor& output, const Tensor& input) {
  if (comm_.world_size() > 1) return comm_.reduce_scatter(output, input, ReduceOp::average);
  cast(output, input, options_.stream);
  return nullptr;
}

void Fsdp::wait(const WorkHandle& work) {
  if (work) work->wait();
}

Tensor Fsdp::unit_memory(std::size_t unit) const {
  char* base = options_.stage == 3 ? static_cast<char*>(gather_slots_[slot_of(unit)].data())
                                   : static_cast<char*>(replica_.data()) + replica_offset_[unit];
  return Tensor(base, gather_dtype(unit), options_.device, {plan_.units()[unit].padded()});
}

void Fsdp::issue_gather(std::size_t unit) {
  if (options_.stage == 3) {
    const int s = slot_of(unit);
    if (resident_[s] == static_cast<std::int64_t>(unit)) return;
    resident_[s] = static_cast<std::int64_t>(unit);
    // The embedding's gather overlays slot 2's gradients, which the last reduce-scatter may still read.
    if (s == 2 && reducing_[2]) {
      reducing_[2]->join();
      reducing_[2].reset();
    }
  }
  const FsdpUnit& u = plan_.units()[unit];
  const Tensor whole = unit_memory(unit);    // (padded) the whole unit
  const Tensor mine = piece(master_, unit);  // (piece) fp32
  if (whole.dtype() == DType::f32) {
    gathering_[unit] = all_gather(whole, mine);
  } else {
    const Tensor part = whole.narrow(0, comm_.rank() * u.piece, u.piece);  // (piece) this rank's part
    cast(part, mine, options_.stream);
    gathering_[unit] = all_gather(whole, part);
  }
}

std::vector<Tensor> Fsdp::parameters(std::int64_t unit) {
  const auto units = static_cast<std::int64_t>(plan_.units().size());
  FT_CHECK(unit >= 0 && unit < units, "Fsdp: unit must be in [0, ", units, "), given ", unit);
  if (unit == 0) phase_ = Phase::forward;
  const auto u = static_cast<std::size_t>(unit);
  if (options_.stage == 3) issue_gather(u);
  if (gathering_[u]) {
    gathering_[u]->join();
    gathering_[u].reset();
  }
  // Stage 3: prefetch the unit the model reads next into the other slot (the embedding's backward reads none).
  const std::int64_t next = phase_ == Phase::forward ? unit + 1 : unit - 1;
  if (options_.stage == 3 && next >= 1 && next < units) issue_gather(static_cast<std::size_t>(next));

  const FsdpUnit& info = plan_.units()[u];
  const DType dtype = gather_dtype(u);
  const Tensor memory = unit_memory(u);  // (padded)
  std::vector<Tensor> views;
  for (std::size_t p = info.first_parameter; p < info.first_parameter + info.parameters; ++p) {
    const ParameterInfo& param = layout_[p];
    if (norm_offset_[p] >= 0) {
      views.emplace_back(static_cast<float*>(norms_->data()) + norm_offset_[p], DType::f32, options_.device,
                         param.shape);
      continue;
    }
    const auto at_element = static_cast<std::size_t>(param.offset - info.offset);
    char* at = static_cast<char*>(memory.data()) + at_element * size_of(dtype);
    views.emplace_back(at, dtype, options_.device, param.shape);
  }
  return views;
}

std::vector<Tensor> Fsdp::gradients(std::int64_t unit) {
  const auto units = static_cast<std::int64_t>(plan_.units().size());
  FT_CHECK(unit >= 0 && unit < units, "Fsdp: unit must be in [0, ", units, "), given ", unit);
  phase_ = Phase::backward;
  const auto u = static_cast<std::size_t>(unit);
  const int s = slot_of(u);
  if (reducing_[s]) {  // the reduce-scatter of the slot's previous unit still reads it
    reducing_[s]->join();
    reducing_[s].reset();
  }
  const FsdpUnit& info = plan_.units()[u];
  const Tensor slot = grad_slots_[s].narrow(0, 0, info.padded());  // (padded) fp32
  if (info.padded() > info.numel) fill(slot.narrow(0, info.numel, info.padded() - info.numel), 0.0, options_.stream);
  std::vector<Tensor> views;
  for (std::size_t p = info.first_parameter; p < info.first_parameter + info.parameters; ++p) {
    const ParameterInfo& param = layout_[p];
    views.emplace_back(static_cast<float*>(slot.data()) + (param.offset - info.offset), DType::f32, options_.device,
                       param.shape);
  }
  return views;
}

void Fsdp::gradient_ready(std::size_t index, bool first_micro_batch) {
  FT_CHECK(index < layout_.size(), "Fsdp: parameter ", index, " does not exist (", layout_.size(), " parameters)");
  const std::size_t u = plan_.unit_of(index);
  if (++reported_[u] < plan_.units()[u].parameters) return;
  reported_[u] = 0;
  launch_reduce_scatter(u, first_micro_batch);
}

void Fsdp::launch_reduce_scatter(std::size_t unit, bool first_micro_batch) {
  const int s = slot_of(unit);
  const FsdpUnit& u = plan_.units()[unit];
  const bool bf16 = options_.bf16_grad_comm;
  Tensor input = grad_slots_[s].narrow(0, 0, u.padded());  // (padded) fp32
  if (bf16) {
    const Tensor rounded = grad_slots16_[s]->narrow(0, 0, u.padded());  // (padded) bf16
    cast(rounded, input, options_.stream);
    input = rounded;
  }
  if (first_micro_batch) {
    reducing_[s] = reduce_scatter(piece(bf16 ? grads16_ : grads_, unit), input);
    widen_pending_ = bf16;
    return;
  }
  if (widen_pending_) widen_gradients();  // the first micro-batch's pieces, before adding to them
  const std::int64_t largest = plan_.max_padded() / plan_.world();
  if (!staging_.defined()) staging_ = OwnedTensor({largest}, DType::f32, options_.device, "gradients", options_.stream);
  if (bf16 && !staging16_.defined())
    staging16_ = OwnedTensor({largest}, DType::bf16, options_.device, "gradients", options_.stream);
  const Tensor partial = staging_->narrow(0, 0, u.piece);  // (piece) fp32: this micro-batch's averaged piece
  if (bf16) {
    const Tensor partial16 = staging16_->narrow(0, 0, u.piece);  // (piece) bf16
    wait(reduce_scatter(partial16, input));
    cast(partial, partial16, options_.stream);
  } else {
    wait(reduce_scatter(partial, input));
  }
  residual_add(piece(grads_, unit), partial, options_.stream);
}

void Fsdp::widen_gradients() {
  wait_reduce_scatters();
  cast(grads_, grads16_, options_.stream);
  widen_pending_ = false;
}

void Fsdp::wait_reduce_scatters() {
  for (WorkHandle& work : reducing_)
    if (work) {
      work->wait();
      work.reset();
    }
}

double Fsdp::step(double lr) {
  NvtxRange range("fsdp optimizer step");
  wait_reduce_scatters();
  if (widen_pending_) widen_gradients();
  for (std::size_t u = 0; u < reported_.size(); ++u)
    FT_CHECK_KIND(runtime, reported_[u] == 0, "Fsdp::step: backward reported ", reported_[u], " of the ",
                  plan_.units()[u].parameters, " gradients of unit ", u, "; it must report every one");
  const double norm = global_norm(comm_, grad_sum_squares({grads_}, options_.stream), options_.device, options_.stream);
  const double clip = options_.max_grad_norm > 0 ? clip_factor(norm, options_.max_grad_norm) : 1.0;
  AdamWConfig config = options_.adamw;
  config.lr = lr;
  ++step_;
  adamw_step(master_, grads_, exp_avg_, exp_avg_sq_, config, step_, options_.stream, GradScale{.factor = clip});
  refresh();
  return norm;
}

void Fsdp::refresh() {
  for (WorkHandle& work : gathering_)  // a gather still in flight writes memory about to be rewritten
    if (work) {
      work->join();
      work.reset();
    }
  // The norms' small all-reduce, which the host waits for, goes first: queued behind the gathers on the
  // communication stream it would wait for them (ZeRO-3: the embedding's, milliseconds), and the host with it.
  if (options_.precision == Precision::bf16) refresh_norms();
  if (options_.stage == 3) {  // the gathered units are stale now; the next forward starts with the embedding
    std::fill(std::begin(resident_), std::end(resident_), -1);
    issue_gather(0);
  } else {
    for (std::size_t u = 0; u < plan_.units().size(); ++u) issue_gather(u);
  }
}

void Fsdp::refresh_norms() {
  fill(norms_, 0.0, options_.stream);
  for (const ParameterInfo& param : layout_.tensors()) {
    if (norm_offset_[param.index] < 0) continue;
    const std::size_t u = plan_.unit_of(param.index);
    const FsdpUnit& unit = plan_.units()[u];
    const ShardRange owned = plan_.owned(u, comm_.rank());
    const std::int64_t lo = std::max(owned.offset, param.offset);
    const std::int64_t hi = std::min(owned.offset + owned.numel, param.offset + param.numel);
    if (lo >= hi) continue;
    cast(norms_->narrow(0, norm_offset_[param.index] + (lo - param.offset), hi - lo),
         master_->narrow(0, unit.shard_offset + (lo - owned.offset), hi - lo), options_.stream);
  }
  comm_.all_reduce(norms_, ReduceOp::sum)->wait();
}

void Fsdp::gather_parameters(const Tensor& out) {
  FT_CHECK(out.dtype() == DType::f32 && out.is_contiguous() && out.numel() == layout_.numel() &&
               out.device() == options_.device,
           "Fsdp::gather_parameters: expected a contiguous fp32 vector of ", layout_.numel(), " elements on ",
           options_.device.to_string(), ", given ", out.describe());
  std::int64_t offset = 0;
  for_each_gathered_unit([&](const Tensor& unit) {
    cast(out.narrow(0, offset, unit.numel()), unit, options_.stream);
    offset += unit.numel();
  });
}

void Fsdp::for_each_gathered_unit(const std::function<void(const Tensor&)>& visit) {
  const OwnedTensor whole({plan_.max_padded()}, DType::f32, options_.device, "fsdp gather staging", options_.stream);
  for (std::size_t u = 0; u < plan_.units().size(); ++u) {
    const FsdpUnit& unit = plan_.units()[u];
    wait(all_gather(whole->narrow(0, 0, unit.padded()), piece(master_, u)));
    visit(whole->narrow(0, 0, unit.numel));
  }
}

FsdpMemory Fsdp::memory() const {
  const auto bytes = [](const OwnedTensor& t) {
    return t.defined() ? static_cast<std::size_t>(t->numel()) * t->element_size() : std::size_t{0};
  };
  FsdpMemory m;
  m.parameters = bytes(master_) + bytes(norms_);
  m.gradients = bytes(grads_) + bytes(grads16_) + bytes(staging_) + bytes(staging16_);
  m.optimizer_state = bytes(exp_avg_) + bytes(exp_avg_sq_);
  for (int s = 0; s < 3; ++s)
    m.communication += gather_slots_[s].bytes() + bytes(grad_slot_memory_[s]) + bytes(grad_slots16_[s]);
  m.replica = replica_.bytes();
  return m;
}

void attach(Fsdp& fsdp, Trainer& trainer) {
  FT_CHECK(trainer.config().external_optimizer,
           "attach(Fsdp, Trainer): the Trainer must be built with TrainerConfig::external_optimizer = true "
           "(ZeRO-3 holds the AdamW state in shards)");
  FT_CHECK(trainer.model().options().parameter_source == &fsdp,
           "attach(Fsdp, Trainer): the Trainer's model must take its parameters from this Fsdp "
           "(ModelOptions::parameter_source)");
  trainer.set_optimizer_step([&fsdp](double lr) { return fsdp.step(lr); },
                             [&fsdp] { return fsdp.memory().optimizer_state; });
  trainer.set_gradient_ready_hook([&fsdp](const ParameterInfo& info, const Tensor&, const MicroBatch& micro) {
    fsdp.gradient_ready(info.index, micro.index == 0);
  });
}

}  // namespace ft
