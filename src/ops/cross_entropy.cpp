// cross_entropy.cpp — validation of cross-entropy calls and dispatch to the CPU kernel
// (cpu/cross_entropy.cpp) or the CUDA kernels (cuda/cross_entropy.cu).
#include "ops/cross_entropy.h"

#include <cmath>

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_common.h"

namespace ft {

namespace {

struct Views {
  ops::RowView logits, dlogits;  // dlogits without data when not asked for
};

// Checks a call of `op`, the targets' range included (CUDA: on the device).
Views validate(const char* op, const Tensor& logits, const TokenIds& targets, const Tensor& dlogits,
               const CrossEntropyOptions& options) {
  ops::check_dtype(op, logits, "logits", {DType::f32});
  Views v;
  v.logits = ops::row_view(op, logits, "logits");
  FT_CHECK(v.logits.rows >= 1 && v.logits.cols >= 1, op,
           ": logits must be (rows, vocab) with rows >= 1 and vocab >= 1, given ", shape_string(logits.shape()));
  const Device device = logits.device();
  ops::check_token_ids(op, targets, "targets", device);
  FT_CHECK(targets.numel() == v.logits.rows, op, ": targets must hold one id per row of logits: expected ",
           v.logits.rows, " ids, given shape ", shape_string(targets.shape));
  if (dlogits.defined()) {
    ops::check_dtype(op, dlogits, "dlogits", {DType::f32, DType::bf16});
    ops::check_device(op, dlogits, "dlogits", device);
    ops::check_shape(op, dlogits, "dlogits", logits.shape());
    v.dlogits = ops::row_view(op, dlogits, "dlogits");
    const bool same = dlogits.data() == logits.data() && dlogits.strides() == logits.strides() &&
                      dlogits.dtype() == logits.dtype();
    FT_CHECK(same || dlogits.data() != logits.data(), op,
             ": dlogits may be the logits tensor itself or a separate buffer, but shares logits' memory with "
             "another layout (", dlogits.describe(), " vs ", logits.describe(), ")");
  }
  FT_CHECK(std::isfinite(options.grad_scale), op, ": grad_scale must be finite, given ", options.grad_scale);
#if FT_HAS_CUDA
  if (device.is_cuda()) {
    gpu::check_token_range(op, targets, v.logits.cols, "targets", options.stream);
    return v;
  }
#else
  if (device.is_cuda()) ops::no_cuda_build(op, device);
#endif
  ops::check_token_range(op, targets, v.logits.cols, "targets");
  return v;
}

}  // namespace

double cross_entropy(const Tensor& logits, const TokenIds& targets, const Tensor& dlogits,
                     const CrossEntropyOptions& options) {
  constexpr const char* op = "cross_entropy";
  NvtxRange range(op);
  const Views v = validate(op, logits, targets, dlogits, options);
#if FT_HAS_CUDA
  if (logits.device().is_cuda())
    return gpu::cross_entropy(v.logits, targets.data, v.dlogits, options.grad_scale, logits.device(), options.stream);
#endif
  return cpu::cross_entropy(v.logits, targets.data, v.dlogits, options.grad_scale);
}

void cross_entropy_to(double* loss, const Tensor& logits, const TokenIds& targets, const Tensor& dlogits,
                      const CrossEntropyOptions& options) {
  constexpr const char* op = "cross_entropy_to";
  NvtxRange range(op);
  FT_CHECK(loss != nullptr, op, ": loss must point to one double on the logits' device, given null");
  const Views v = validate(op, logits, targets, dlogits, options);
#if FT_HAS_CUDA
  if (logits.device().is_cuda())
    return gpu::cross_entropy_to(loss, v.logits, targets.data, v.dlogits, options.grad_scale, logits.device(),
                                 options.stream);
#endif
  *loss = cpu::cross_entropy(v.logits, targets.data, v.dlogits, options.grad_scale);
}

}  // namespace ft
