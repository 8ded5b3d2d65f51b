// optimizer_update.h — the arguments of the fused optimiser-update kernels (cpu/optimizer.cpp,
// cuda/optimizer.cu) that the optimiser API (optim/adamw.h) computes: AdamW's per-step factors and the
// scale each gradient is read with.
#pragma once

namespace ft {

// The fp32 factors of one AdamW step, as the update kernels use them.
struct AdamWFactors {
  float decay = 1;                  // 1 - lr * wd
  float beta2 = 0;
  float one_minus_beta1 = 0;        // 1 - beta1
  float one_minus_beta2 = 0;        // 1 - beta2
  float step_size = 0;              // lr / (1 - beta1^t)
  float bias_correction2_sqrt = 1;  // sqrt(1 - beta2^t)
  float eps = 0;
};

// What the update multiplies each gradient by before using it: `factor`, or, when sum_squares is set, the
// clipping factor of the global norm sqrt(*sum_squares) (optim/grad_clip.h's grad_sum_squares_to total,
// read when the update runs): max_norm / (norm + eps), rounded to fp32, when norm > max_norm, else 1 (also
// for a NaN norm, as clip_grad_norm_from leaves the gradients). The default changes nothing.
struct GradScale {
  double factor = 1.0;                  // finite and >= 0 (0: an infinite norm's clipping); with sum_squares, 1
  const double* sum_squares = nullptr;  // one double in the parameters' device memory (host memory on the CPU)
  double max_norm = 0;                  // > 0 with sum_squares
  double eps = 0;                       // >= 0: the clipping's guard in max_norm / (norm + eps)
};

}  // namespace ft
