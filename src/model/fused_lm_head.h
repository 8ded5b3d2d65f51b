// fused_lm_head.h — the LM head and the mean cross-entropy fused over chunks of rows, so the (rows, V) logits
// are never materialised: memory O(chunk x V) instead of O(rows x V).
//
// Note [Fused LM head loss]
// For each chunk of c rows of the final norm's output (the last chunk may be shorter):
//   logits  (c, V) fp32 = hidden_c @ W^T          linear_forward (bf16 operands, fp32 accumulation in bf16 mode)
//   loss   += sum of the chunk's row losses / rows cross_entropy_to (mean_rows = rows, accumulate_loss)
//   dlogits (c, V) = (softmax - onehot) * grad_scale / rows, written by the same call: fp32 in place over the
//                   logits, or bf16 into its own tile in bf16 mode (the operand the backward GEMMs take)
//   dhidden_c (c, d) fp32 = dlogits @ W;  dW (V, d) fp32 += dlogits^T @ hidden_c   linear_backward
// In bf16 the dlogits tile may hold several chunks' rows (a group): the chunks of a group write their rows of
// it, and the two backward GEMMs run once per group, over all its rows. dW's GEMM reads and writes the whole
// (V, d) fp32 gradient per call whatever its K (the group's rows), so fewer, deeper calls move less memory
// per FLOP; the model sizes the group to the workspace the tiles already overlay (model/transformer.h).
// The ops are the ones the materialised path runs, on the same values, so the loss equals it up to the order
// of the mean's sum and the gradients up to the order of dW's group sums (model/transformer.h).
#pragma once

#include "core/stream.h"
#include "core/tensor.h"
#include "ops/token_ids.h"

namespace ft {

struct FusedLmHeadLoss {
  Tensor hidden;      // (rows, d) fp32 or bf16: the final norm's output
  TokenIds targets;   // (rows) int32 ids on hidden's device
  Tensor weight;      // (V, d) hidden's dtype
  Tensor logits;      // (chunk, V) fp32 workspace; its rows are the chunk size
  Tensor dlogits;     // (k chunk, V) bf16 workspace, k >= 1 chunks a group: needed when hidden is bf16 and
                      // dhidden is defined
  Tensor dhidden;     // (rows, d) fp32, or undefined: the loss only
  Tensor dweight;     // (V, d) fp32: written (or added to) when dhidden is defined
  bool accumulate_dweight = false;
  double grad_scale = 1.0;  // the gradients are those of grad_scale * loss
  bool allow_tf32 = false;  // fp32 GEMMs on CUDA may use TF32
  Stream stream;            // CUDA work is ordered on this stream
};

// *loss <- the mean cross-entropy over the rows (one double in hidden's device memory, host memory on the
// CPU); the gradients as the Note says. Nothing waits for the device but the ops' target checks (which a
// CUDA stream capture skips). Throws ft::Error naming a tensor of the wrong shape, dtype or device.
void fused_lm_head_loss(double* loss, const FusedLmHeadLoss& args);

}  // namespace ft
