// ddp_transformer.h — DistributedDataParallel for the engine's TransformerLM and Trainer:
//   ddp_model(model)    the DdpModel view: flat fp32 parameters and gradients, every parameter's slice
//                       (all trainable; clear requires_grad to freeze one), the model's ready order, stream
//   attach(ddp, trainer)  the trainer's gradient-ready hook reports each gradient to ddp with
//                       MicroBatch::last, so only the last micro-batch of an accumulation communicates
// A data-parallel step: trainer.forward_backward(...) per micro-batch; ddp.synchronize();
// trainer.optimizer_step(); trainer.zero_grads(). (The Trainer's AdamW updates every parameter: freezing
// needs an optimizer that skips frozen slices.)
#pragma once

#include "dist/ddp.h"
#include "model/trainer.h"
#include "model/transformer.h"

namespace ft {

DdpModel ddp_model(const TransformerLM& model);
void attach(DistributedDataParallel& ddp, Trainer& trainer);

}  // namespace ft
