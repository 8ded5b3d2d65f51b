// parameter_source.h — ParameterSource: where a TransformerLM's parameters come from and its gradients go
// when they are not held whole by this process (ZeRO-3 / FSDP, dist/fsdp.h). The model is cut into units,
// in forward order, each a contiguous range of the parameter layout:
//   unit 0          token_embeddings
//   unit 1 + l      block l (q_proj .. ln2)
//   unit 1 + L      the head: ln_final, lm_head
// A model built with ModelOptions::parameter_source allocates neither parameters nor gradients: right before
// it reads a unit's parameters (the embedding's forward, each block's forward and backward, the final norm and
// head) it asks the source for them, and right before a unit's backward for where to write its gradients,
// and binds the views it is given (ParameterBuffer::bind) — so the rest of the model reads params_[i] and
// writes grads_[i] as usual. The views stay valid until the model asks for the unit after next (the source
// may keep two units live: one in use, one being prefetched). With a source, backward always overwrites the
// unit's gradient views (BackwardOptions::accumulate is the source's business: it accumulates its shards).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ft {

class ParameterSource {
 public:
  virtual ~ParameterSource() = default;
  // Views of unit u's parameters, in layout order, readable by the model's stream from the call on: linear
  // weights in the compute dtype (bf16 mode: bf16), norm weights and the embedding table in fp32.
  virtual std::vector<Tensor> parameters(std::int64_t unit) = 0;
  // fp32 views, in layout order, that unit u's backward writes its gradients into.
  virtual std::vector<Tensor> gradients(std::int64_t unit) = 0;
};

}  // namespace ft
