// grad_clip.h — global-norm gradient clipping over a list of gradient tensors (fp32, contiguous):
//   norm = sqrt(sum over all tensors of sum g^2);  if norm > max_norm: g <- g * max_norm / (norm + 1e-6)
// (the reference gradient_clipping; torch.nn.utils.clip_grad_norm_ computes the same factor). The pieces
// are exposed for data-parallel callers, which all-reduce the sum of squares between the two steps.
// Sums are taken in double over fixed-size chunks in a fixed order: deterministic. The tensors of one call
// share a device. Dispatches on it: CPU or CUDA (the sum of squares synchronises the stream).
// The *_to / *_from forms keep the sum of squares where the gradients live instead of reading it back —
// nothing waits for the device, so a CUDA graph can capture a whole clipped step; they give the same
// gradients bit for bit. clip_grad_scale folds the clipping into AdamW instead (optim/adamw.h, GradScale):
// the update reads each gradient scaled as clip_grad_norm_from would leave it, without a pass over memory.
#pragma once

#include <vector>

#include "core/stream.h"
#include "core/tensor.h"
#include "optim/adamw.h"

namespace ft {

// sum over every tensor of sum g^2 (the square of the global norm).
double grad_sum_squares(const std::vector<Tensor>& grads, const Stream& stream = {});
// The factor clipping multiplies gradients by: 1 when norm <= max_norm, else max_norm / (norm + 1e-6).
double clip_factor(double norm, double max_norm);
// t <- t * factor, for every tensor.
void scale_tensors(const std::vector<Tensor>& tensors, double factor, const Stream& stream = {});
// Clips in place and returns the global norm before clipping. max_norm > 0.
double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm, const Stream& stream = {});

// grad_sum_squares left in *total: one double in the gradients' device memory (host memory on the CPU).
// grads: at least one tensor.
void grad_sum_squares_to(double* total, const std::vector<Tensor>& grads, const Stream& stream = {});
// Clips in place by the global norm sqrt(*sum_squares) (grad_sum_squares_to's total, read when the work
// runs), as clip_grad_norm does. A NaN norm, which clip_grad_norm refuses, leaves the gradients as they are
// (the device cannot raise an error; the loss shows it). grads: at least one tensor; max_norm > 0.
void clip_grad_norm_from(const std::vector<Tensor>& grads, const double* sum_squares, double max_norm,
                         const Stream& stream = {});
// The GradScale of clip_grad_norm_from's clipping: sum_squares (not null) read when the update runs,
// max_norm > 0.
GradScale clip_grad_scale(const double* sum_squares, double max_norm);

}  // namespace ft
