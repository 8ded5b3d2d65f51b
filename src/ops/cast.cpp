// cast.cpp — validation of dtype casts and fills, their CPU kernels (flat loops over contiguous elements) and
// dispatch to the CUDA kernels (cuda/cast.cu).
#include "ops/cast.h"

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/cpu/elem.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_common.h"

namespace ft {

namespace {

constexpr std::initializer_list<DType> kCastTypes = {DType::f32, DType::bf16, DType::f16};

template <class Dst, class Src>
void cast_cpu(Dst* dst /* (n) */, const Src* src /* (n) */, std::int64_t n) {
  FT_OMP_PARALLEL_FOR
  for (std::int64_t i = 0; i < n; ++i) dst[i] = cpu::from_float<Dst>(cpu::load(src[i]));
}

template <class Dst>
void fill_cpu(Dst* dst /* (n) */, Dst value, std::int64_t n) {
  FT_OMP_PARALLEL_FOR
  for (std::int64_t i = 0; i < n; ++i) dst[i] = value;
}

}  // namespace

void cast(const Tensor& dst, const Tensor& src, [[maybe_unused]] const Stream& stream) {
  constexpr const char* op = "cast";
  NvtxRange range(op);
  ops::check_dtype(op, src, "src", kCastTypes);
  ops::check_dtype(op, dst, "dst", kCastTypes);
  ops::check_device(op, dst, "dst", src.device());
  ops::check_shape(op, dst, "dst", src.shape());
  ops::check_contiguous(op, src, "src");
  ops::check_contiguous(op, dst, "dst");
#if FT_HAS_CUDA
  if (src.device().is_cuda()) return gpu::cast(dst, src, stream);
#else
  if (src.device().is_cuda()) ops::no_cuda_build(op, src.device());
#endif
  cpu::with_dtype(dst.dtype(), [&](auto dst_tag) {
    cpu::with_dtype(src.dtype(), [&](auto src_tag) {
      cast_cpu(static_cast<decltype(dst_tag)*>(dst.data()), static_cast<const decltype(src_tag)*>(src.data()),
               src.numel());
    });
  });
}

void fill(const Tensor& dst, double value, [[maybe_unused]] const Stream& stream) {
  constexpr const char* op = "fill";
  NvtxRange range(op);
  ops::check_dtype(op, dst, "dst", kCastTypes);
  ops::check_contiguous(op, dst, "dst");
#if FT_HAS_CUDA
  if (dst.device().is_cuda()) return gpu::fill(dst, value, stream);
#else
  if (dst.device().is_cuda()) ops::no_cuda_build(op, dst.device());
#endif
  cpu::with_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    fill_cpu(static_cast<T*>(dst.data()), cpu::from_float<T>(static_cast<float>(value)), dst.numel());
  });
}

}  // namespace ft
