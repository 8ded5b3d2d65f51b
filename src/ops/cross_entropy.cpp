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

// Checks every target in [0, vocab) (CUDA: on the device).
void check_range(const char* op, const TokenIds& targets, std::int64_t vocab, const Stream& stream) {
#if FT_HAS_CUDA
  if (targets.device.is_cuda()) return gpu::check_token_range(op, targets, vocab, "targets", stream);
#else
  (void)stream;
#endif
  ops::check_token_range(op, targets, vocab, "targets");
}

// Checks a call of `op`, the targets' range included unless options say the caller checked it.
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
  FT_CHECK(options.mean_rows == 0 || options.mean_rows >= v.logits.rows, op,
           ": mean_rows must be 0 (the logits' rows) or at least the logits' ", v.logits.rows, " rows, given ",
           options.mean_rows);
#if !FT_HAS_CUDA
  if (device.is_cuda()) ops::no_cuda_build(op, device);
#endif
  if (options.check_targets) check_range(op, targets, v.logits.cols, options.stream);
  return v;
}

}  // namespace

void check_cross_entropy_targets(const TokenIds& targets, std::int64_t vocab, const Stream& stream) {
  constexpr const char* op = "cross_entropy";
  FT_CHECK(vocab >= 1, op, ": vocab must be >= 1, given ", vocab);
  ops::check_token_ids(op, targets, "targets", targets.device);
#if !FT_HAS_CUDA
  if (targets.device.is_cuda()) ops::no_cuda_build(op, targets.device);
#endif
  check_range(op, targets, vocab, stream);
}

double cross_entropy(const Tensor& logits, const TokenIds& targets, const Tensor& dlogits,
                     const CrossEntropyOptions& options) {
  constexpr const char* op = "cross_entropy";
  NvtxRange range(op);
  FT_CHECK(!options.accumulate_loss, op, ": accumulate_loss needs a loss in memory to add to: use cross_entropy_to");
  const Views v = validate(op, logits, targets, dlogits, options);
  const double divisor = static_cast<double>(options.mean_rows ? options.mean_rows : v.logits.rows);
#if FT_HAS_CUDA
  if (logits.device().is_cuda())
    return gpu::cross_entropy(v.logits, targets.data, v.dlogits, options.grad_scale, divisor, logits.device(),
                              options.stream);
#endif
  return cpu::cross_entropy(v.logits, targets.data, v.dlogits, options.grad_scale, divisor);
}

void cross_entropy_to(double* loss, const Tensor& logits, const TokenIds& targets, const Tensor& dlogits,
                      const CrossEntropyOptions& options) {
  constexpr const char* op = "cross_entropy_to";
  NvtxRange range(op);
  FT_CHECK(loss != nullptr, op, ": loss must point to one double on the logits' device, given null");
  const Views v = validate(op, logits, targets, dlogits, options);
  const double divisor = static_cast<double>(options.mean_rows ? options.mean_rows : v.logits.rows);
#if FT_HAS_CUDA
  if (logits.device().is_cuda())
    return gpu::cross_entropy_to(loss, v.logits, targets.data, v.dlogits, options.grad_scale, divisor,
                                 options.accumulate_loss, logits.device(), options.stream);
#endif
  const double mean = cpu::cross_entropy(v.logits, targets.data, v.dlogits, options.grad_scale, divisor);
  *loss = options.accumulate_loss ? *loss + mean : mean;
}

}  // namespace ft
