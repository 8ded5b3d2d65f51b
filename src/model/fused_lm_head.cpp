// fused_lm_head.cpp — the chunk loop of the fused LM head loss: GEMM into the logits tile, cross-entropy with
// its softmax gradient, the two backward GEMMs (see Note [Fused LM head loss]).
#include "model/fused_lm_head.h"

#include <algorithm>

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cross_entropy.h"
#include "ops/linear.h"

namespace ft {

void fused_lm_head_loss(double* loss, const FusedLmHeadLoss& a) {
  NvtxRange range("fused lm_head loss");
  FT_CHECK(loss != nullptr, "fused_lm_head_loss: loss must point to one double, given null");
  FT_CHECK(a.hidden.dim() == 2 && a.weight.dim() == 2 && a.logits.dim() == 2,
           "fused_lm_head_loss: expected hidden (rows, d), weight (V, d) and logits (chunk, V), given ",
           a.hidden.describe(), ", ", a.weight.describe(), " and ", a.logits.describe());
  const std::int64_t rows = a.hidden.size(0), V = a.weight.size(0), chunk = a.logits.size(0);
  FT_CHECK(a.logits.size(1) == V && chunk >= 1 && a.logits.dtype() == DType::f32,
           "fused_lm_head_loss: the logits tile must be fp32 (chunk >= 1, V = ", V, "), given ", a.logits.describe());
  FT_CHECK(a.targets.numel() == rows, "fused_lm_head_loss: expected one target per row of hidden (", rows,
           "), given ", shape_string(a.targets.shape));
  const bool backward = a.dhidden.defined();
  const bool bf16_grad = backward && a.hidden.dtype() != DType::f32;
  if (bf16_grad)
    FT_CHECK(a.dlogits.defined() && a.dlogits.dtype() == a.hidden.dtype() && a.dlogits.shape() == a.logits.shape(),
             "fused_lm_head_loss: a ", name_of(a.hidden.dtype()), " backward needs a dlogits tile of that dtype "
             "and the logits' shape ", shape_string(a.logits.shape()), ", given ",
             a.dlogits.defined() ? a.dlogits.describe() : std::string("none"));
  const LinearOptions lin{a.allow_tf32, a.stream};
  check_cross_entropy_targets(a.targets, V, a.stream);  // once, rather than a synchronising check per chunk
  for (std::int64_t first = 0; first < rows; first += chunk) {
    const std::int64_t c = std::min(chunk, rows - first);
    const Tensor hidden = a.hidden.narrow(0, first, c);  // (c, d)
    const Tensor logits = a.logits.narrow(0, 0, c);      // (c, V) fp32
    const TokenIds targets{a.targets.data + first, {c}, a.targets.device};
    linear_forward(logits, hidden, a.weight, lin);
    // fp32: the gradient overwrites the logits in place; bf16: its own tile, the backward GEMMs' operand.
    const Tensor dlogits = !backward ? Tensor() : bf16_grad ? a.dlogits.narrow(0, 0, c) : logits;
    CrossEntropyOptions ce;
    ce.grad_scale = a.grad_scale;
    ce.mean_rows = rows;
    ce.accumulate_loss = first > 0;
    ce.check_targets = false;
    ce.stream = a.stream;
    cross_entropy_to(loss, logits, targets, dlogits, ce);
    if (!backward) continue;
    linear_backward({a.dhidden.narrow(0, first, c), a.dweight, a.accumulate_dweight || first > 0}, dlogits, hidden,
                    a.weight, lin);
  }
}

}  // namespace ft
