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

double cross_entropy(const Tensor& logits, const TokenIds& targets, const Tensor& dlogits,
                     const CrossEntropyOptions& options) {
  constexpr const char* op = "cross_entropy";
  NvtxRange range(op);
  ops::check_dtype(op, logits, "logits", {DType::f32});
  const ops::RowView lv = ops::row_view(op, logits, "logits");
  FT_CHECK(lv.rows >= 1 && lv.cols >= 1, op, ": logits must be (rows, vocab) with rows >= 1 and vocab >= 1, given ",
           shape_string(logits.shape()));
  const Device device = logits.device();
  ops::check_token_ids(op, targets, "targets", device);
  FT_CHECK(targets.numel() == lv.rows, op, ": targets must hold one id per row of logits: expected ", lv.rows,
           " ids, given shape ", shape_string(targets.shape));
  ops::RowView dv;
  if (dlogits.defined()) {
    ops::check_dtype(op, dlogits, "dlogits", {DType::f32, DType::bf16});
    ops::check_device(op, dlogits, "dlogits", device);
    ops::check_shape(op, dlogits, "dlogits", logits.shape());
    dv = ops::row_view(op, dlogits, "dlogits");
    const bool same = dlogits.data() == logits.data() && dlogits.strides() == logits.strides() &&
                      dlogits.dtype() == logits.dtype();
    FT_CHECK(same || dlogits.data() != logits.data(), op,
             ": dlogits may be the logits tensor itself or a separate buffer, but shares logits' memory with "
             "another layout (", dlogits.describe(), " vs ", logits.describe(), ")");
  }
  FT_CHECK(std::isfinite(options.grad_scale), op, ": grad_scale must be finite, given ", options.grad_scale);
#if FT_HAS_CUDA
  if (device.is_cuda()) {
    gpu::check_token_range(op, targets, lv.cols, "targets", options.stream);
    return gpu::cross_entropy(lv, targets.data, dv, options.grad_scale, device, options.stream);
  }
#else
  if (device.is_cuda()) ops::no_cuda_build(op, device);
#endif
  ops::check_token_range(op, targets, lv.cols, "targets");
  return cpu::cross_entropy(lv, targets.data, dv, options.grad_scale);
}

}  // namespace ft
