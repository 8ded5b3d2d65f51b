// grad_clip.cpp — global-norm gradient clipping: validation and dispatch to the CPU sums and scaling
// (cpu/optimizer.cpp) or the CUDA ones (cuda/optimizer.cu).
#include "optim/grad_clip.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_common.h"

namespace ft {

namespace {

constexpr double kClipEps = 1e-6;  // the reference's guard in max_norm / (norm + eps)

// Checks every tensor: fp32, contiguous, on the device of the first; returns that device (cpu for none).
Device validate(const char* op, const std::vector<Tensor>& tensors) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = "tensor " + std::to_string(i);
    ops::check_dtype(op, tensors[i], name.c_str(), {DType::f32});
    ops::check_contiguous(op, tensors[i], name.c_str());
    ops::check_device(op, tensors[i], name.c_str(), tensors.front().device());
  }
  const Device device = tensors.empty() ? Device::cpu() : tensors.front().device();
#if !FT_HAS_CUDA
  if (device.is_cuda()) ops::no_cuda_build(op, device);
#endif
  return device;
}

// validate, for the forms that keep a scalar where the tensors live (so they need at least one tensor).
Device validate_in_place(const char* op, const std::vector<Tensor>& tensors, const void* scalar,
                         const char* scalar_name) {
  FT_CHECK(!tensors.empty(), op, ": needs at least one gradient tensor, given none");
  FT_CHECK(scalar != nullptr, op, ": ", scalar_name, " must point to one double on the gradients' device, given null");
  return validate(op, tensors);
}

}  // namespace

double grad_sum_squares(const std::vector<Tensor>& grads, const Stream& stream) {
  constexpr const char* op = "grad_sum_squares";
  NvtxRange range(op);
#if FT_HAS_CUDA
  if (validate(op, grads).is_cuda()) return gpu::sum_squares(grads, stream);
#else
  validate(op, grads);
#endif
  double total = 0;
  for (const Tensor& g : grads) total += cpu::sum_squares(g.data_as<float>(), g.numel());
  return total;
}

double clip_factor(double norm, double max_norm) {
  FT_CHECK(max_norm > 0, "clip_factor: max_norm must be > 0, given ", max_norm);
  FT_CHECK(norm >= 0, "clip_factor: norm must be >= 0, given ", norm);
  return norm > max_norm ? max_norm / (norm + kClipEps) : 1.0;
}

void scale_tensors(const std::vector<Tensor>& tensors, double factor, const Stream& stream) {
  constexpr const char* op = "scale_tensors";
  NvtxRange range(op);
  [[maybe_unused]] const Device device = validate(op, tensors);
  FT_CHECK(std::isfinite(factor), op, ": factor must be finite, given ", factor);
#if FT_HAS_CUDA
  if (device.is_cuda()) {
    for (const Tensor& t : tensors) gpu::scale(t.data_as<float>(), t.numel(), factor, device, stream);
    return;
  }
#endif
  for (const Tensor& t : tensors) cpu::scale(t.data_as<float>(), t.numel(), factor);
}

double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm, const Stream& stream) {
  FT_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, given ", max_norm);
  const double norm = std::sqrt(grad_sum_squares(grads, stream));
  const double factor = clip_factor(norm, max_norm);
  if (factor < 1.0) scale_tensors(grads, factor, stream);
  return norm;
}

void grad_sum_squares_to(double* total, const std::vector<Tensor>& grads, const Stream& stream) {
  constexpr const char* op = "grad_sum_squares_to";
  NvtxRange range(op);
#if FT_HAS_CUDA
  if (validate_in_place(op, grads, total, "total").is_cuda()) return gpu::sum_squares_to(total, grads, stream);
#else
  validate_in_place(op, grads, total, "total");
#endif
  *total = grad_sum_squares(grads, stream);
}

void clip_grad_norm_from(const std::vector<Tensor>& grads, const double* sum_squares, double max_norm,
                         const Stream& stream) {
  constexpr const char* op = "clip_grad_norm_from";
  NvtxRange range(op);
  FT_CHECK(max_norm > 0, op, ": max_norm must be > 0, given ", max_norm);
#if FT_HAS_CUDA
  if (validate_in_place(op, grads, sum_squares, "sum_squares").is_cuda())
    return gpu::clip_scale(grads, sum_squares, max_norm, kClipEps, stream);
#else
  validate_in_place(op, grads, sum_squares, "sum_squares");
#endif
  const double norm = std::sqrt(*sum_squares);
  if (norm > max_norm) scale_tensors(grads, clip_factor(norm, max_norm), stream);
}

GradScale clip_grad_scale(const double* sum_squares, double max_norm) {
  constexpr const char* op = "clip_grad_scale";
  FT_CHECK(sum_squares != nullptr, op, ": sum_squares must point to one double on the gradients' device, given null");
  FT_CHECK(max_norm > 0, op, ": max_norm must be > 0, given ", max_norm);
  GradScale scale;
  scale.sum_squares = sum_squares;
  scale.max_norm = max_norm;
  scale.eps = kClipEps;
  return scale;
}

}  // namespace ft
