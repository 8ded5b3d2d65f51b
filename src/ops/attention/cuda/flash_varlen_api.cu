// flash_varlen_api.cu — cuda_flash_varlen_forward / cuda_flash_varlen_backward: the flash kernels over
// packed sequences (ops/attention_varlen.h). Fills the parameter blocks as a batch of the sequences with
// their cumulative lengths (See Note [Packed sequences] in flash_varlen.cuh), chooses the kernel family,
// allocates the backward scratch per sequence on the caller's stream and dispatches on head dim and dtype
// to the per-head-dim launchers shared with the dense calls (flash_{fwd,bwd}_hdim*.cu).
#include <algorithm>
#include <cstdint>

#include "core/buffer.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/attention/attention_impls.h"
#include "ops/attention/cuda/flash_api_common.h"
#include "ops/attention/cuda/flash_launch.h"
#include "ops/attention/cuda/flash_varlen.cuh"

namespace ft::attention_impl {

namespace {

using flash::TensorRef;

// A packed (total, H, D) operand: sequence rows at row_stride, heads at head_stride, no batch stride.
TensorRef packed_ref(const Tensor& t) { return TensorRef{t.data(), 0, t.stride(1), t.stride(0)}; }

// L (Hq, total_q) fp32.
TensorRef packed_lse_ref(const Tensor& lse) { return TensorRef{lse.data(), 0, lse.stride(0), lse.stride(1)}; }

// The dense shape the kernels' grids are sized by: the largest lengths (at least 1, so that every grid has
// a block; blocks past a sequence's end return at once).
AttentionShape grid_shape(const VarlenAttentionShape& s) {
  AttentionShape a;
  a.batch = s.batch;
  a.heads_q = s.heads_q;
  a.heads_kv = s.heads_kv;
  a.len_q = std::max<std::int64_t>(1, s.max_seqlen_q);
  a.len_k = std::max<std::int64_t>(1, s.max_seqlen_k);
  a.head_dim = s.head_dim;
  a.scale = s.scale;
  a.window_left = s.window_left;
  a.window_right = s.window_right;
  a.sink_tokens = s.sink_tokens;
  a.has_sinks = s.has_sinks;
  return a;
}

void check_varlen_supported(const VarlenAttentionShape& s) {
  check_supported(grid_shape(s));
  constexpr std::int64_t kMaxTotal = std::int64_t{1} << 30;
  FT_CHECK_KIND(unsupported, s.total_q < kMaxTotal && s.total_k < kMaxTotal,
                "flash attention over packed sequences (CUDA): total lengths must be < 2^30, given total_q = ",
                s.total_q, ", total_k = ", s.total_k);
}

// The kernels' shape of a varlen call (Note [Packed sequences]).
flash::FlashShape varlen_flash_shape(const VarlenAttentionTensors& t, const VarlenAttentionShape& s, bool vec16) {
  flash::FlashShape f = flash_shape(grid_shape(s), vec16);
  f.cu_seqlens_q = t.cu_seqlens_q.data;
  f.cu_seqlens_k = t.cu_seqlens_k.data;
  return f;
}

// Every tile operand of the call allows 16-byte accesses: q, k, v and o for a forward (g null); q, k, v,
// d_o and the gradients for a backward.
bool varlen_aligned16(const VarlenAttentionTensors& t, const VarlenAttentionGrads* g) {
  const bool inputs = aligned16(t.q) && aligned16(t.k) && aligned16(t.v);
  if (!g) return inputs && aligned16(t.o);
  return inputs && aligned16(g->d_o) && aligned16(g->dq) && aligned16(g->dk) && aligned16(g->dv);
}

// The family a varlen call runs (AttentionOptions::kernels): the portable kernels; the Hopper kernels do not
// take packed sequences.
FlashKernels choose_varlen_kernels(FlashKernels kernels) {
  FT_CHECK_KIND(unsupported, kernels != FlashKernels::sm90,
                "flash attention over packed sequences: kernels sm90 do not take packed sequences; given kernels "
                "sm90, expected sm80 or auto");
  return FlashKernels::sm80;
}

}  // namespace

void cuda_flash_varlen_forward(const VarlenAttentionTensors& t, const VarlenAttentionShape& s, const Stream& stream,
                               FlashKernels kernels) {
  check_varlen_supported(s);
  if (s.batch == 0) return;
  CudaDeviceGuard device(t.q.device().index);
  flash::FlashFwdParams p;
  p.shape = varlen_flash_shape(t, s, varlen_aligned16(t, nullptr));
  p.shape.sm90 = choose_varlen_kernels(kernels) == FlashKernels::sm90;
  p.q = packed_ref(t.q);
  p.k = packed_ref(t.k);
  p.v = packed_ref(t.v);
  p.o = packed_ref(t.o);
  p.lse = packed_lse_ref(t.lse);
  p.sinks = s.has_sinks ? t.sinks.data_as<const float>() : nullptr;
  auto cuda_stream = static_cast<cudaStream_t>(stream.handle());
  dispatch(t.q.dtype(), s.head_dim, [&](auto type_tag, auto dim) {
    flash::run_flash_fwd<decltype(type_tag), decltype(dim)::value>(p, cuda_stream);
  });
}

void cuda_flash_varlen_backward(const VarlenAttentionTensors& t, const VarlenAttentionGrads& g,
                                const VarlenAttentionShape& s, const Stream& stream, bool deterministic,
                                FlashKernels kernels) {
  check_varlen_supported(s);
  if (s.batch == 0) return;
  CudaDeviceGuard device(t.q.device().index);
  flash::FlashBwdParams p;
  p.shape = varlen_flash_shape(t, s, varlen_aligned16(t, &g));
  p.shape.sm90 = choose_varlen_kernels(kernels) == FlashKernels::sm90;
  p.q = packed_ref(t.q);
  p.k = packed_ref(t.k);
  p.v = packed_ref(t.v);
  p.o = packed_ref(t.o);
  p.d_o = packed_ref(g.d_o);
  p.lse = packed_lse_ref(t.lse);
  p.dq = packed_ref(g.dq);
  p.dk = packed_ref(g.dk);
  p.dv = packed_ref(g.dv);
  p.sinks = s.has_sinks ? t.sinks.data_as<const float>() : nullptr;
  p.dsinks = s.has_sinks ? g.dsinks.data_as<float>() : nullptr;

  // Scratch per query head, each sequence's rows padded (varlen_scratch_row); the pre-pass's blocks count
  // those of the largest sequence.
  p.len_q_pad = (p.shape.len_q + flash::kQueryPad - 1) / flash::kQueryPad * flash::kQueryPad;
  p.pre_blocks = p.len_q_pad / flash::kPreRows;
  p.scratch_head_rows = flash::varlen_scratch_rows(p.shape.batch, static_cast<int>(s.total_q));
  const auto rows = static_cast<std::size_t>(s.heads_q * p.scratch_head_rows);
  const Device device_of = t.q.device();
  Buffer dsum(rows * sizeof(float), device_of, "attention.flash_varlen.dsum", stream);          // (Hq, rows)
  Buffer lse_log2(rows * sizeof(float), device_of, "attention.flash_varlen.lse_log2", stream);  // (Hq, rows)
  Buffer sink_partials;  // (B * Hq, pre_blocks)
  if (s.has_sinks)
    sink_partials = Buffer(static_cast<std::size_t>(s.batch * s.heads_q) * p.pre_blocks * sizeof(float), device_of,
                           "attention.flash_varlen.sink_partials", stream);
  Buffer dq_accum;  // (Hq, rows, D) fp32
  if (!deterministic)
    dq_accum = Buffer(rows * static_cast<std::size_t>(s.head_dim) * sizeof(float), device_of,
                      "attention.flash_varlen.dq_accum", stream);
  p.dsum = static_cast<float*>(dsum.data());
  p.lse_log2 = static_cast<float*>(lse_log2.data());
  p.sink_partials = static_cast<float*>(sink_partials.data());
  p.deterministic = deterministic;
  p.dq_accum = static_cast<float*>(dq_accum.data());

  auto cuda_stream = static_cast<cudaStream_t>(stream.handle());
  dispatch(t.q.dtype(), s.head_dim, [&](auto type_tag, auto dim) {
    flash::run_flash_bwd<decltype(type_tag), decltype(dim)::value>(p, cuda_stream);
  });
}

}  // namespace ft::attention_impl
