// zero_transformer.h — the ZeRO-1 optimizer (dist/zero_optimizer.h) as the engine Trainer's optimizer:
//   add_transformer_group(zero, model, config)  one parameter group of every parameter of the model, with
//                                               the TrainerConfig's AdamW hyperparameters; returns its index
//   attach(zero, trainer)                       the trainer's external optimizer step (the Trainer needs
//                                               TrainerConfig::external_optimizer): every group's lr is set
//                                               to the schedule's rate for the step, then zero.step() runs
//                                               (clipping with ZeroOptions::max_grad_norm, not the Trainer's)
// A ZeRO step: trainer.forward_backward(...) per micro-batch; (owner_broadcast: ddp.synchronize());
// trainer.optimizer_step(); trainer.zero_grads().
#pragma once

#include <cstddef>

#include "dist/zero_optimizer.h"
#include "model/trainer.h"
#include "model/transformer.h"

namespace ft {

std::size_t add_transformer_group(ZeroOptimizer& zero, const TransformerLM& model, const TrainerConfig& config);
void attach(ZeroOptimizer& zero, Trainer& trainer);

}  // namespace ft
