// embedding.h — token embedding lookup and its backward:
//   forward   out (B, T, d) = weight (vocab, d)[ids (B, T)]
//   backward  dweight (vocab, d) (+)= scatter-add of dout (B, T, d) rows by id — deterministic: each
//             dweight element sums its rows in position order whatever the thread count.
// ids may have any shape S; out and dout are S + (d). fp32 throughout (the residual stream and master
// weights are fp32 in every precision mode). Ids outside [0, vocab) raise ft::Error naming the id, its
// position and the vocabulary size, before anything is written (on CUDA the check synchronises the
// stream; inside a CUDA stream capture, which cannot read back, it is skipped: the graph's owner checks the
// ids it stages). Dispatches on the device: CPU (OpenMP) or CUDA (the same summation order, bit for bit).
#pragma once

#include "core/stream.h"
#include "core/tensor.h"
#include "ops/token_ids.h"

namespace ft {

// out <- weight[ids].
void embedding_forward(const Tensor& out, const TokenIds& ids, const Tensor& weight, const Stream& stream = {});

// dweight (+)= scatter-add of dout by ids; accumulate = false overwrites dweight (rows no id hits become 0).
void embedding_backward(const Tensor& dweight, const TokenIds& ids, const Tensor& dout, bool accumulate,
                        const Stream& stream = {});

}  // namespace ft
