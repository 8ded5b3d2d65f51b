// adamw.h — the fused optimiser updates over flat fp32 buffers (parameters, gradients and state in one
// allocation each, or any equally shaped contiguous views of them — a ZeRO-1 shard works the same way):
//   adamw_step  torch.optim.AdamW semantics, one fused pass per element, step t = 1, 2, ...:
//                 p <- p * (1 - lr * wd)                          (decoupled weight decay)
//                 m <- m + (1 - beta1) * (g - m)                   (torch's lerp form)
//                 v <- beta2 * v + (1 - beta2) * g^2
//                 p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//   sgd_step    p <- p - lr * g
// Dispatches on the device: CPU or CUDA (one fused kernel; the CPU's float operations in the CPU's order,
// without FMA contraction).
#pragma once

#include <cstdint>

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// One AdamW step; `step` counts steps including this one (>= 1). params, grads, exp_avg (m) and
// exp_avg_sq (v): fp32, contiguous, one shape.
void adamw_step(const Tensor& params, const Tensor& grads, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamWConfig& config, std::int64_t step, const Stream& stream = {});

// One plain SGD step: params, grads fp32, contiguous, one shape.
void sgd_step(const Tensor& params, const Tensor& grads, double lr, const Stream& stream = {});

}  // namespace ft
