// adamw.cpp — validation of optimiser-update calls, AdamW's per-step factors, and dispatch to the CPU
// kernels (ops/cpu/optimizer.cpp) or the CUDA kernels (ops/cuda/optimizer.cu).
#include "optim/adamw.h"

#include <cmath>

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_common.h"

namespace ft {

namespace {

// Checks t: fp32, contiguous, on ref's device with ref's shape.
void like_params(const char* op, const Tensor& t, const char* name, const Tensor& ref) {
  ops::check_dtype(op, t, name, {DType::f32});
  ops::check_device(op, t, name, ref.device());
  ops::check_shape(op, t, name, ref.shape());
  ops::check_contiguous(op, t, name);
}

// Checks the four AdamW buffers against params.
void check_adamw_tensors(const char* op, const Tensor& params, const Tensor& grads, const Tensor& exp_avg,
                         const Tensor& exp_avg_sq) {
  ops::check_dtype(op, params, "params", {DType::f32});
  ops::check_contiguous(op, params, "params");
  like_params(op, grads, "grads", params);
  like_params(op, exp_avg, "exp_avg", params);
  like_params(op, exp_avg_sq, "exp_avg_sq", params);
}

void check_grad_scale(const char* op, const GradScale& s) {
  if (s.sum_squares == nullptr) {
    FT_CHECK(std::isfinite(s.factor) && s.factor >= 0, op,
             ": the gradient scale factor must be finite and >= 0, given ", s.factor);
    return;
  }
  FT_CHECK(s.factor == 1.0, op, ": a gradient scale takes a factor or a sum of squares to clip by, given both (factor ",
           s.factor, ")");
  FT_CHECK(std::isfinite(s.max_norm) && s.max_norm > 0, op, ": clipping by a sum of squares needs max_norm > 0, given ",
           s.max_norm);
  FT_CHECK(std::isfinite(s.eps) && s.eps >= 0, op, ": the clipping's eps must be finite and >= 0, given ", s.eps);
}

// The CPU's gradient factor: GradScale's, with the sum of squares read now (the update runs now).
float cpu_grad_factor(const GradScale& s) {
  if (s.sum_squares == nullptr) return static_cast<float>(s.factor);
  const double norm = std::sqrt(*s.sum_squares);
  return norm > s.max_norm ? static_cast<float>(s.max_norm / (norm + s.eps)) : 1.0f;
}

// The update with factors given by value (factors) or read when it runs (from, when not null).
void run_adamw(const char* op, const Tensor& params, const Tensor& grads, const Tensor& exp_avg,
               const Tensor& exp_avg_sq, const AdamWFactors& factors, const AdamWFactors* from,
               const GradScale& grad_scale, [[maybe_unused]] const Stream& stream) {
  check_grad_scale(op, grad_scale);
#if FT_HAS_CUDA
  if (params.device().is_cuda())
    return gpu::adamw_step(params.data_as<float>(), grads.data_as<float>(), exp_avg.data_as<float>(),
                           exp_avg_sq.data_as<float>(), params.numel(), factors, from, grad_scale, params.device(),
                           stream);
#else
  if (params.device().is_cuda()) ops::no_cuda_build(op, params.device());
#endif
  cpu::adamw_step(params.data_as<float>(), grads.data_as<float>(), exp_avg.data_as<float>(),
                  exp_avg_sq.data_as<float>(), params.numel(), from ? *from : factors, cpu_grad_factor(grad_scale));
}

}  // namespace

AdamWFactors adamw_factors(const AdamWConfig& c, std::int64_t step) {
  constexpr const char* op = "adamw_step";
  FT_CHECK(step >= 1, op, ": step counts steps including this one: expected >= 1, given ", step);
  FT_CHECK(std::isfinite(c.lr) && c.lr >= 0, op, ": lr must be finite and >= 0, given ", c.lr);
  FT_CHECK(c.beta1 >= 0 && c.beta1 < 1, op, ": beta1 must be in [0, 1), given ", c.beta1);
  FT_CHECK(c.beta2 >= 0 && c.beta2 < 1, op, ": beta2 must be in [0, 1), given ", c.beta2);
  FT_CHECK(c.eps > 0, op, ": eps must be > 0, given ", c.eps);
  FT_CHECK(std::isfinite(c.weight_decay) && c.weight_decay >= 0, op, ": weight_decay must be finite and >= 0, given ",
           c.weight_decay);
  // In double, as torch computes them on the host, then rounded once.
  const auto t = static_cast<double>(step);
  AdamWFactors f;
  f.decay = static_cast<float>(1.0 - c.lr * c.weight_decay);
  f.beta2 = static_cast<float>(c.beta2);
  f.one_minus_beta1 = static_cast<float>(1.0 - c.beta1);
  f.one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
  f.step_size = static_cast<float>(c.lr / (1.0 - std::pow(c.beta1, t)));
  f.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(c.beta2, t)));
  f.eps = static_cast<float>(c.eps);
  return f;
}

void adamw_step(const Tensor& params, const Tensor& grads, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamWConfig& c, std::int64_t step, const Stream& stream, const GradScale& grad_scale) {
  constexpr const char* op = "adamw_step";
  NvtxRange range(op);
  check_adamw_tensors(op, params, grads, exp_avg, exp_avg_sq);
  run_adamw(op, params, grads, exp_avg, exp_avg_sq, adamw_factors(c, step), nullptr, grad_scale, stream);
}

void adamw_step_from(const Tensor& params, const Tensor& grads, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const AdamWFactors* factors, const Stream& stream, const GradScale& grad_scale) {
  constexpr const char* op = "adamw_step_from";
  NvtxRange range(op);
  check_adamw_tensors(op, params, grads, exp_avg, exp_avg_sq);
  FT_CHECK(factors != nullptr, op, ": factors must point to the step's AdamWFactors, given null");
  run_adamw(op, params, grads, exp_avg, exp_avg_sq, AdamWFactors{}, factors, grad_scale, stream);
}

void sgd_step(const Tensor& params, const Tensor& grads, double lr, [[maybe_unused]] const Stream& stream) {
  constexpr const char* op = "sgd_step";
  NvtxRange range(op);
  ops::check_dtype(op, params, "params", {DType::f32});
  ops::check_contiguous(op, params, "params");
  like_params(op, grads, "grads", params);
  FT_CHECK(std::isfinite(lr) && lr >= 0, op, ": lr must be finite and >= 0, given ", lr);
#if FT_HAS_CUDA
  if (params.device().is_cuda())
    return gpu::sgd_step(params.data_as<float>(), grads.data_as<float>(), params.numel(), lr, params.device(), stream);
#else
  if (params.device().is_cuda()) ops::no_cuda_build(op, params.device());
#endif
  cpu::sgd_step(params.data_as<float>(), grads.data_as<float>(), params.numel(), lr);
}

}  // namespace ft
