// grad_clip.h — global-norm gradient clipping over a list of gradient tensors (fp32, contiguous):
//   norm = sqrt(sum over all tensors of sum g^2);  if norm > max_norm: g <- g * max_norm / (norm + 1e-6)
// (the reference gradient_clipping; torch.nn.utils.clip_grad_norm_ computes the same factor). The pieces
// are exposed for data-parallel callers, which all-reduce the sum of squares between the two steps.
// Sums are taken in double over fixed-size chunks in a fixed order: deterministic. The tensors of one call
// share a device. Dispatches on it: CPU or CUDA (the sum of squares synchronises the stream).
#pragma once

#include <vector>

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

// sum over every tensor of sum g^2 (the square of the global norm).
double grad_sum_squares(const std::vector<Tensor>& grads, const Stream& stream = {});
// The factor clipping multiplies gradients by: 1 when norm <= max_norm, else max_norm / (norm + 1e-6).
double clip_factor(double norm, double max_norm);
// t <- t * factor, for every tensor.
void scale_tensors(const std::vector<Tensor>& tensors, double factor, const Stream& stream = {});
// Clips in place and returns the global norm before clipping. max_norm > 0.
double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm, const Stream& stream = {});

}  // namespace ft
