// adamw.h — the optimiser updates (AdamW, SGD) over flat fp32 buffers (parameters, gradients and state in one
// allocation each, or any equally shaped contiguous views of them — a ZeRO-1 shard works the same way):
//   adamw_step  torch.optim.AdamW semantics, one fused pass per element, step t = 1, 2, ...:
//                 p <- p * (1 - lr * wd)                          (decoupled weight decay)
//                 m <- m + (1 - beta1) * (g - m)                   (torch's lerp form)
//                 v <- beta2 * v + (1 - beta2) * g^2
//                 p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//   sgd_step    p <- p - lr * g
// The per-step factors (AdamWFactors, ops/optimizer_update.h) are computed once on the host in double and
// rounded to fp32, as torch does; adamw_step_from reads them from memory when the update runs instead of
// taking them at the call, so a captured CUDA graph can replay one step for every t (the host rewrites the
// factors between launches).
// Global-norm clipping can be folded into the update (GradScale): each gradient is read as g * factor, in
// fp32 as scaling it in place rounds, so the update is bit for bit clip-then-step's, while the gradients
// themselves are left unscaled and the pass over memory that scaling in place costs is saved.
// Dispatches on the device to the kernels of ops/cpu/optimizer.cpp and ops/cuda/optimizer.cu: CPU or CUDA
// (one fused kernel; the CPU's float operations in the CPU's order, without FMA contraction).
#pragma once

#include <cstdint>

#include "core/stream.h"
#include "core/tensor.h"
#include "ops/optimizer_update.h"

namespace ft {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// The factors of step `step` (>= 1, counting this one); ft::Error for a malformed config or step.
AdamWFactors adamw_factors(const AdamWConfig& config, std::int64_t step);

// One AdamW step; `step` counts steps including this one (>= 1). params, grads, exp_avg (m) and
// exp_avg_sq (v): fp32, contiguous, one shape.
// grad_scale: see GradScale.
void adamw_step(const Tensor& params, const Tensor& grads, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamWConfig& config, std::int64_t step, const Stream& stream = {},
                const GradScale& grad_scale = {});

// adamw_step with its factors read when the update runs: `factors` points to one AdamWFactors in the
// parameters' device memory (host memory for CPU tensors). Given adamw_factors(config, step), the result is
// adamw_step's bit for bit.
void adamw_step_from(const Tensor& params, const Tensor& grads, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const AdamWFactors* factors, const Stream& stream = {}, const GradScale& grad_scale = {});

// One plain SGD step: params, grads fp32, contiguous, one shape.
void sgd_step(const Tensor& params, const Tensor& grads, double lr, const Stream& stream = {});

}  // namespace ft
