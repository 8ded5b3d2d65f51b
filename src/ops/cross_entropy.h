// cross_entropy.h — mean cross-entropy over rows of logits with the softmax backward fused in:
//   loss     = (1 / rows) sum_r [logsumexp(logits[r]) - logits[r, target_r]]
//   dlogits  = (softmax(logits[r]) - onehot(target_r)) * grad_scale / rows
// (rows: the logits' rows, or mean_rows for a chunk of a larger batch, whose shares then add up to its mean).
// logits (rows, vocab) fp32 (leading dims collapse into rows); targets int32 with rows elements;
// dlogits fp32 — it may be the logits tensor itself (overwritten in place, saving a (rows, vocab)
// buffer) — or bf16 (fused cast for a bf16 LM-head backward; then a separate buffer). Numerically stable
// (max subtracted). Targets outside [0, vocab) raise ft::Error naming the target, row and vocabulary.
// The row losses are summed in a fixed order: deterministic. Dispatches on the device: CPU or CUDA (one
// block per row; the returned loss synchronises the stream, as does the target check before the kernels —
// a check that inside a CUDA stream capture, which cannot read back, is skipped: the graph's owner checks
// the ids it stages).
#pragma once

#include "core/stream.h"
#include "core/tensor.h"
#include "ops/token_ids.h"

namespace ft {

struct CrossEntropyOptions {
  double grad_scale = 1.0;  // multiplies dlogits, e.g. 1 / micro_batches for gradient accumulation
  Stream stream;            // CUDA work is ordered on this stream (the returned loss synchronises)
  // The loss sum and dlogits are divided by this many rows instead of the logits' rows: the logits are one
  // chunk of a batch of mean_rows rows (the fused LM head, model/fused_lm_head.h). 0 = the logits' rows.
  std::int64_t mean_rows = 0;
  bool accumulate_loss = false;  // cross_entropy_to only: *loss += this call's share of the mean instead of =
  // false: the caller has checked the targets' range (check_cross_entropy_targets), e.g. once for all chunks
  // of a batch, so this call does not synchronise for it.
  bool check_targets = true;
};

// Throws ft::Error (invalid_argument) naming the first target outside [0, vocab), as the cross-entropy's own
// check does (CUDA: synchronises the stream; skipped inside a stream capture).
void check_cross_entropy_targets(const TokenIds& targets, std::int64_t vocab, const Stream& stream = {});

// Returns the mean loss; writes dlogits unless it is undefined (forward only, e.g. evaluation).
double cross_entropy(const Tensor& logits, const TokenIds& targets, const Tensor& dlogits,
                     const CrossEntropyOptions& options = {});

// cross_entropy without reading the loss back: the mean is left in *loss, one double in the logits' device
// memory (host memory for CPU logits), bit for bit the value cross_entropy returns. Nothing here waits for
// the device but the target check (see above).
void cross_entropy_to(double* loss, const Tensor& logits, const TokenIds& targets, const Tensor& dlogits,
                      const CrossEntropyOptions& options = {});

}  // namespace ft
