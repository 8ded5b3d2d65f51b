// fused_lm_head.cpp — the chunk loop of the fused LM head loss: GEMM into the logits tile, cross-entropy with
// its softmax gradient, the two backward GEMMs once per group of chunks (see Note [Fused LM head loss]).
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
    FT_CHECK(a.dlogits.defined() && a.dlogits.dtype() == a.hidden.dtype() && a.dlogits.dim() == 2 &&
                 a.dlogits.size(0) >= chunk && a.dlogits.size(0) % chunk == 0 && a.dlogits.size(1) == V,
             "fused_lm_head_loss: a ", name_of(a.hidden.dtype()), " backward needs a dlogits tile of that dtype "
             "and the logits' shape ", shape_string(a.logits.shape()), " or a whole number of them stacked, given ",
             a.dlogits.defined() ? a.dlogits.describe() : std::string("none"));
  // Rows whose backward GEMMs run together: the dlogits tile's (several chunks: see Note [Fused LM head loss]);
  // in fp32 the gradient overwrites the logits tile, one chunk.
  const std::int64_t group = bf16_grad ? a.dlogits.size(0) : chunk;
  const LinearOptions lin{a.allow_tf32, a.stream};
  check_cross_entropy_targets(a.targets, V, a.stream);  // once, rather than a synchronising check per chunk
  for (std::int64_t group_first = 0; group_first < rows; group_first += group) {
    const std::int64_t g = std::min(group, rows - group_first);
    for (std::int64_t first = group_first; first < group_first + g; first += chunk) {
      const std::int64_t c = std::min(chunk, group_first + g - first);
      const Tensor hidden = a.hidden.narrow(0, first, c);  // (c, d)
      const Tensor logits = a.logits.narrow(0, 0, c);      // (c, V) fp32
      const TokenIds targets{a.targets.data + first, {c}, a.targets.device};
      linear_forward(logits, hidden, a.weight, lin);
      // fp32: the gradient overwrites the logits in place; bf16: its rows of the group's tile.
      const Tensor dlogits = !backward ? Tensor() : bf16_grad ? a.dlogits.narrow(0, first - group_first, c) : logits;
      CrossEntropyOptions ce;
      ce.grad_scale = a.grad_scale;
      ce.mean_rows = rows;
      ce.accumulate_loss = first > 0;
      ce.check_targets = false;
      ce.stream = a.stream;
      cross_entropy_to(loss, logits, targets, dlogits, ce);
    }
    if (!backward) continue;
    const Tensor dlogits = bf16_grad ? a.dlogits.narrow(0, 0, g) : a.logits.narrow(0, 0, g);  // (g, V)
    const Tensor hidden = a.hidden.narrow(0, group_first, g);                                 // (g, d)
    linear_backward({a.dhidden.narrow(0, group_first, g), a.dweight, a.accumulate_dweight || group_first > 0},
                    dlogits, hidden, a.weight, lin);
  }
}

}  // namespace ft
