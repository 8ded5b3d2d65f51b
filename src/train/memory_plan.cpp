// memory_plan.cpp — the predicted bytes per rank, from the model's arena plans, the ZeRO-1 shard plan and
// ZeRO-2/3's planned memory.
#include "train/memory_plan.h"

#include "core/error.h"
#include "dist/fsdp.h"
#include "dist/zero_shard_plan.h"
#include "model/parameters.h"

namespace ft {

namespace {

// Stands for the Fsdp while planning: the model only tests whether it has a source; never asked for views.
class PlanningSource final : public ParameterSource {
 public:
  std::vector<Tensor> parameters(std::int64_t) override { FT_THROW(runtime, "memory planning reads no parameters"); }
  std::vector<Tensor> gradients(std::int64_t) override { FT_THROW(runtime, "memory planning writes no gradients"); }
};

// The largest temporary the step's ops allocate on the stream beside the model's arenas, (rows, d) fp32: the
// flash attention backward's dQ accumulator, or the product of the in-place accumulating GEMM (the w1 input
// gradient added to w3's) when its algorithm splits K (see Note [GEMM epilogue addend] in ops/linear.cpp).
// They are never live at once, and whether a GEMM splits K is cuBLASLt's choice on the GPU: counted always.
std::size_t largest_op_temporary(const MemoryPlanInput& in) {
  const std::int64_t T = in.options.max_seq_len > 0 ? in.options.max_seq_len : in.model.context_length;
  return static_cast<std::size_t>(in.options.max_batch * T * in.model.d_model) * sizeof(float);
}

}  // namespace

MemoryPlan plan_training_memory(const MemoryPlanInput& in) {
  FT_CHECK(in.stage >= 0 && in.stage <= 3, "memory plan: the ZeRO stage must be 0, 1, 2 or 3, given ", in.stage);
  FT_CHECK(in.world >= 1, "memory plan: the world size must be >= 1, given ", in.world);
  const ParameterLayout layout(in.model);
  const auto P = static_cast<std::size_t>(layout.numel());
  PlanningSource source;
  ModelOptions options = in.options;
  options.parameter_source = in.stage >= 2 ? &source : nullptr;
  const MemoryReport model = TransformerLM::planned_memory(in.model, options);
  MemoryPlan m;
  m.activations = model.activations;
  m.workspace = model.workspace + largest_op_temporary(in);
  m.offloaded = model.offloaded;
  if (in.stage <= 1) {
    m.parameters = 4 * P;
    m.gradients = 4 * P;
    m.optimizer_state = 8 * P;
  }
  if (in.stage == 0 && in.world > 1 && in.bf16_grad_comm) m.communication = 2 * P;
  if (in.stage == 1) {
    std::vector<DdpParameter> parameters;
    for (const ParameterInfo& info : layout.tensors()) parameters.push_back({info.name, info.offset, info.numel, true});
    const ShardPlan plan(std::move(parameters), layout.numel(), in.world);
    const auto owned = static_cast<std::size_t>(plan.range(in.world - 1).numel);  // the last rank's: the most
    m.gradients += 4 * owned;
    m.optimizer_state = 8 * owned;
  }
  if (in.stage >= 2) {
    FsdpOptions fsdp;
    fsdp.stage = in.stage;
    fsdp.precision = in.options.precision;
    fsdp.bf16_grad_comm = in.bf16_grad_comm;
    const FsdpMemory f = Fsdp::planned_memory(in.model, fsdp, in.world);
    m.parameters = f.parameters + f.replica;
    m.gradients = f.gradients;
    m.optimizer_state = f.optimizer_state;
    m.communication = f.communication;
  }
  return m;
}

}  // namespace ft
