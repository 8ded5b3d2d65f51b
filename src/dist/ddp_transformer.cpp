// ddp_transformer.cpp — the TransformerLM's view for DDP and the Trainer hook.
#include "dist/ddp_transformer.h"

namespace ft {

DdpModel ddp_model(const TransformerLM& model) {
  DdpModel m;
  m.parameters = model.parameters().flat();
  m.gradients = model.gradients().flat();
  for (const ParameterInfo& info : model.layout().tensors()) m.tensors.push_back({info.name, info.offset, info.numel, true});
  m.ready_order = model.gradient_ready_order();
  m.stream = model.options().stream;
  return m;
}

void attach(DistributedDataParallel& ddp, Trainer& trainer) {
  trainer.set_gradient_ready_hook([&ddp](const ParameterInfo& info, const Tensor&, const MicroBatch& micro) {
    ddp.gradient_ready(info.index, micro.last);
  });
}

}  // namespace ft
