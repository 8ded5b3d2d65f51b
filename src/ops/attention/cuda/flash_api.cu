// flash_api.cu — cuda_flash_forward / cuda_flash_backward: turn validated attention tensors into the
// kernels' parameter blocks, choose the kernel family (Hopper sm90 or portable sm80, cuda_flash_kernels),
// allocate the backward scratch on the caller's stream (with the fp32 dQ accumulator where the dK/dV
// kernel accumulates dQ), and dispatch on head dim and dtype to the per-head-dim launchers
// (flash_{fwd,bwd}_hdim*.cu). The Hopper kernels' launch sections, block count and addition order come
// from flash_sm90_scheduler.h.
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/buffer.h"
#include "core/cuda_check.h"
#include "core/device.h"
#include "core/error.h"
#include "ops/attention/attention_impls.h"
#include "ops/attention/cuda/flash_api_common.h"
#include "ops/attention/cuda/flash_launch.h"
#include "ops/attention/cuda/flash_sm90_scheduler.h"
#include "ops/attention/cuda/flash_traits.h"

namespace ft::attention_impl {

namespace {

using flash::FlashShape;
using flash::TensorRef;

// (B, H, N, D) view -> element strides of its leading dims.
TensorRef tensor_ref(const Tensor& t) {
  return TensorRef{t.data(), t.stride(0), t.stride(1), t.stride(2)};
}

// The bytes of K and V each query head streams (a GQA group's heads share their kv head's).
std::int64_t kv_bytes_per_query_head(const AttentionShape& s, DType dtype) {
  return 2 * s.len_k * s.head_dim * static_cast<std::int64_t>(size_of(dtype)) / (s.heads_q / s.heads_kv);
}

// The family a call runs (AttentionOptions::kernels), given whether its operands (those of a forward when g
// is null) allow 16-byte accesses; the Hopper kernels also need forward strides (their TMA maps).
FlashKernels choose_kernels(const AttentionTensors& t, const AttentionGrads* g, const AttentionShape& s,
                            bool aligned16, FlashKernels kernels) {
  if (kernels == FlashKernels::sm80) return FlashKernels::sm80;
  const bool layout = aligned16 && all_operands(t, g, forward_strides);
  const int d = static_cast<int>(s.head_dim);
  const bool fits = t.q.dtype() != DType::f32 && flash::has_sm90_kernels(2, d) && layout;
  const bool device = sm90_device(t.q.device().index);
  if (kernels == FlashKernels::sm90) {
    FT_CHECK_KIND(unsupported, device, "flash attention: kernels sm90 need a compute capability 9.0 GPU (H100, H200) ",
                  "and a build for sm_90a (CMAKE_CUDA_ARCHITECTURES with 90a); given ", describe_device(t.q.device()));
    FT_CHECK_KIND(unsupported, fits, "flash attention: kernels sm90 run bf16 or fp16 at head dims ",
                  flash::kSm90HeadDims, g ? " (backward)" : " (forward)",
                  " with 16-byte aligned base pointers and positive 16-byte-multiple strides; given ",
                  name_of(t.q.dtype()), " at head dim ", s.head_dim,
                  layout ? "" : " with unaligned or broadcast operands");
  }
  return fits && device ? FlashKernels::sm90 : FlashKernels::sm80;
}

}  // namespace

FlashKernels cuda_flash_kernels(const AttentionTensors& t, const AttentionGrads* g, const AttentionShape& s,
                                FlashKernels kernels) {
  return choose_kernels(t, g, s, all_operands(t, g, aligned16), kernels);
}

void cuda_flash_forward(const AttentionTensors& t, const AttentionShape& s, const Stream& stream,
                        FlashKernels kernels) {
  check_supported(s);
  CudaDeviceGuard device(t.q.device().index);
  flash::FlashFwdParams p;
  const bool aligned = all_operands<AttentionGrads>(t, nullptr, aligned16);
  p.shape = flash_shape(s, aligned);
  p.shape.sm90 = choose_kernels(t, nullptr, s, aligned, kernels) == FlashKernels::sm90;
  p.q = tensor_ref(t.q);
  p.k = tensor_ref(t.k);
  p.v = tensor_ref(t.v);
  p.o = tensor_ref(t.o);
  p.lse = TensorRef{t.lse.data(), t.lse.stride(0), t.lse.stride(1), t.lse.stride(2)};
  p.sinks = s.has_sinks ? t.sinks.data_as<const float>() : nullptr;
  auto cuda_stream = static_cast<cudaStream_t>(stream.handle());
  Buffer tile_counter;  // one int: the Hopper forward's next query tile (Note [Persistent forward tiles])
  if (p.shape.sm90) {
    const int device = t.q.device().index;
    const std::int64_t kv_bytes = kv_bytes_per_query_head(s, t.q.dtype());
    p.section_heads = flash::sm90_section_heads(kv_bytes, s.batch * s.heads_q, device);
    const int block_m = flash::sm90_fwd_block_m(static_cast<int>(s.head_dim));
    p.blocks = flash::sm90_forward_blocks(s.batch * s.heads_q, s.len_q, block_m, device);
    tile_counter = Buffer(sizeof(int), t.q.device(), "attention.flash.tile_counter", stream);
    FT_CUDA_CHECK(cudaMemsetAsync(tile_counter.data(), 0, sizeof(int), cuda_stream));
    p.tile_counter = static_cast<int*>(tile_counter.data());
  }
  dispatch(t.q.dtype(), s.head_dim, [&](auto type_tag, auto dim) {
    flash::run_flash_fwd<decltype(type_tag), decltype(dim)::value>(p, cuda_stream);
  });
}

void cuda_flash_backward(const AttentionTensors& t, const AttentionGrads& g, const AttentionShape& s,
                         const Stream& stream, bool deterministic, FlashKernels kernels) {
  check_supported(s);
  CudaDeviceGuard device(t.q.device().index);
  flash::FlashBwdParams p;
  const bool aligned = all_operands(t, &g, aligned16);
  p.shape = flash_shape(s, aligned);
  p.shape.sm90 = choose_kernels(t, &g, s, aligned, kernels) == FlashKernels::sm90;
  p.q = tensor_ref(t.q);
  p.k = tensor_ref(t.k);
  p.v = tensor_ref(t.v);
  p.o = tensor_ref(t.o);
  p.d_o = tensor_ref(g.d_o);
  p.lse = TensorRef{t.lse.data(), t.lse.stride(0), t.lse.stride(1), t.lse.stride(2)};
  p.dq = tensor_ref(g.dq);
  p.dk = tensor_ref(g.dk);
  p.dv = tensor_ref(g.dv);
  p.sinks = s.has_sinks ? t.sinks.data_as<const float>() : nullptr;
  p.dsinks = s.has_sinks ? g.dsinks.data_as<float>() : nullptr;

  p.len_q_pad = static_cast<int>((s.len_q + flash::kQueryPad - 1) / flash::kQueryPad * flash::kQueryPad);
  p.pre_blocks = p.len_q_pad / flash::kPreRows;
  const std::size_t rows = static_cast<std::size_t>(s.batch * s.heads_q) * p.len_q_pad;
  const Device device_of = t.q.device();
  const FlashBwdScratch scratch = flash_bwd_scratch(p, rows, s.batch * s.heads_q, s.head_dim, s.has_sinks,
                                                    deterministic, device_of, "attention.flash", stream);
  const bool ordered_dq = deterministic && p.shape.sm90;
  if (p.shape.sm90) {
    const std::int64_t elem = static_cast<std::int64_t>(size_of(t.q.dtype()));
    const std::int64_t qdo_bytes = 2 * s.len_q * (s.head_dim * elem + 4) * (s.heads_q / s.heads_kv);  // Q dO L D
    p.dkdv_section_heads = flash::sm90_section_heads(qdo_bytes, s.batch * s.heads_kv, device_of.index);
  }
  if (ordered_dq) {
    const int block_n = flash::sm90_bwd_block_n(static_cast<int>(s.head_dim));
    p.ascending_heads = flash::sm90_ascending_heads(s.batch * s.heads_kv, s.len_k, block_n);
  }

  auto cuda_stream = static_cast<cudaStream_t>(stream.handle());
  dispatch(t.q.dtype(), s.head_dim, [&](auto type_tag, auto dim) {
    flash::run_flash_bwd<decltype(type_tag), decltype(dim)::value>(p, cuda_stream);
  });
}

}  // namespace ft::attention_impl
