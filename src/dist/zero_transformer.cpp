// zero_transformer.cpp — the TransformerLM's parameter group for ZeRO-1 and the Trainer's external step.
#include "dist/zero_transformer.h"

#include <vector>

#include "core/error.h"

namespace ft {

std::size_t add_transformer_group(ZeroOptimizer& zero, const TransformerLM& model, const TrainerConfig& config) {
  std::vector<std::size_t> parameters;  // (num parameter tensors) every index, in layout order
  for (const ParameterInfo& info : model.layout().tensors()) parameters.push_back(info.index);
  return zero.add_parameter_group(std::move(parameters), config.adamw);
}

void attach(ZeroOptimizer& zero, Trainer& trainer) {
  FT_CHECK(trainer.config().external_optimizer,
           "attach(ZeroOptimizer, Trainer): the Trainer must be built with TrainerConfig::external_optimizer = true "
           "(otherwise it allocates and steps its own AdamW state)");
  trainer.set_optimizer_step(
      [&zero](double lr) {
        for (std::size_t g = 0; g < zero.plan().num_groups(); ++g) zero.group_config(g).lr = lr;
        return zero.step().grad_norm;
      },
      [&zero] { return zero.state_bytes(); });
}

}  // namespace ft
