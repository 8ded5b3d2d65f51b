// flash_varlen_api.cu — cuda_flash_varlen_forward / cuda_flash_varlen_backward: the flash kernels over
// packed sequences (ops/attention_varlen.h). Fills the parameter blocks as a batch of the sequences with
// their cumulative lengths (See Note [Packed sequences] in flash_varlen.cuh), chooses the kernel family,
// allocates the backward scratch per sequence on the caller's stream and dispatches on head dim and dtype
// to the per-head-dim launchers shared with the dense calls (flash_{fwd,bwd}_hdim*.cu).
#include <algorithm>
#include <cstdint>
#include <string>

#include "core/buffer.h"
#include "core/cuda_check.h"
#include "core/device.h"
#include "core/error.h"
#include "ops/attention/attention_impls.h"
#include "ops/attention/cuda/flash_api_common.h"
#include "ops/attention/cuda/flash_launch.h"
#include "ops/attention/cuda/flash_sm90_scheduler.h"
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

// The Hopper backward's grid key tiles: a bound on the key tiles of every sequence (Note [Packed-sequence
// tiles]), at most the 65535 of a grid's y dimension.
std::int64_t sm90_grid_key_tiles(const VarlenAttentionShape& s) {
  const int block_n = flash::sm90_bwd_block_n(static_cast<int>(s.head_dim));
  return (s.total_k + block_n - 1) / block_n + s.batch;
}
constexpr std::int64_t kMaxGridY = 65535;

// The family a varlen call runs (AttentionOptions::kernels; the backward's when g is given), as for dense
// calls: Hopper where it can run (16-bit inputs at its head dims, 16-byte aligned operands with forward
// strides, a compute capability 9.0 GPU and a build for sm_90a), sm80 otherwise. Calls without query or key
// rows have nothing for the Hopper kernels' TMA maps to describe and run sm80 (whose blocks all return at
// once), as does a backward whose key tiles pass a grid's 65535 (sm80's grid spans the longest sequence).
FlashKernels choose_varlen_kernels(const VarlenAttentionTensors& t, const VarlenAttentionGrads* g,
                                   const VarlenAttentionShape& s, bool aligned, FlashKernels kernels) {
  if (kernels == FlashKernels::sm80) return FlashKernels::sm80;
  const bool grid = !g || sm90_grid_key_tiles(s) <= kMaxGridY;
  const bool layout = aligned && all_operands(t, g, forward_strides);
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
    FT_CHECK_KIND(unsupported, grid, "flash attention over packed sequences: the sm90 backward's grid holds at most ",
                  kMaxGridY, " key tiles; given ", sm90_grid_key_tiles(s), " (total_k = ", s.total_k, ", B = ", s.batch,
                  "): use kernels sm80 or auto");
  }
  const bool rows = s.total_q > 0 && s.total_k > 0;
  return fits && device && rows && grid ? FlashKernels::sm90 : FlashKernels::sm80;
}

inline constexpr int kScanThreads = 1024;

// offsets[b] = the tiles of `tile` rows of the sequences before b, for the (batch + 1) cumulative lengths
// cu: a block-wide prefix sum, kScanThreads sequences at a time. See Note [Packed-sequence tiles].
__global__ void __launch_bounds__(kScanThreads)
    varlen_tile_offsets_kernel(const int* cu, int batch, int tile, int* offsets) {
  __shared__ int warp_total[kScanThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) offsets[0] = 0;
  int carry = 0;
  for (int base = 0; base < batch; base += kScanThreads) {
    const int b = base + static_cast<int>(threadIdx.x);
    int x = b < batch ? (cu[b + 1] - cu[b] + tile - 1) / tile : 0;
    for (int d = 1; d < 32; d *= 2) {  // inclusive scan over the warp
      const int y = __shfl_up_sync(0xffffffffu, x, d);
      if (lane >= d) x += y;
    }
    if (lane == 31) warp_total[warp] = x;
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kScanThreads / 32; ++w) {
      before += w < warp ? warp_total[w] : 0;
      total += warp_total[w];
    }
    if (b < batch) offsets[b + 1] = carry + before + x;
    carry += total;
    __syncthreads();  // warp_total is rewritten by the next chunk
  }
}

// A (batch + 1) int buffer on the stream holding varlen_tile_offsets_kernel's prefix of the sequences of cu.
Buffer tile_offsets(const int* cu, int batch, int tile, Device device, const char* tag, const Stream& stream) {
  Buffer offsets(static_cast<std::size_t>(batch + 1) * sizeof(int), device, tag, stream);
  varlen_tile_offsets_kernel<<<1, kScanThreads, 0, static_cast<cudaStream_t>(stream.handle())>>>(
      cu, batch, tile, static_cast<int*>(offsets.data()));
  FT_CUDA_CHECK_LAUNCH();
  return offsets;
}

}  // namespace

void cuda_flash_varlen_forward(const VarlenAttentionTensors& t, const VarlenAttentionShape& s, const Stream& stream,
                               FlashKernels kernels) {
  check_varlen_supported(s);
  if (s.batch == 0) return;
  CudaDeviceGuard device(t.q.device().index);
  flash::FlashFwdParams p;
  const bool aligned = all_operands<VarlenAttentionGrads>(t, nullptr, aligned16);
  p.shape = varlen_flash_shape(t, s, aligned);
  p.shape.sm90 = choose_varlen_kernels(t, nullptr, s, aligned, kernels) == FlashKernels::sm90;
  p.q = packed_ref(t.q);
  p.k = packed_ref(t.k);
  p.v = packed_ref(t.v);
  p.o = packed_ref(t.o);
  p.lse = packed_lse_ref(t.lse);
  p.sinks = s.has_sinks ? t.sinks.data_as<const float>() : nullptr;
  auto cuda_stream = static_cast<cudaStream_t>(stream.handle());
  // The Hopper forward's tile counter and per-sequence tile prefix (Notes [Persistent forward tiles] and
  // [Packed-sequence tiles]): its blocks are sized by a bound on the tiles, H_q (total_q / block_m + B).
  Buffer tile_counter, query_tiles;
  if (p.shape.sm90) {
    const int device_index = t.q.device().index;
    const std::int64_t kv_bytes =
        2 * s.max_seqlen_k * s.head_dim * static_cast<std::int64_t>(size_of(t.q.dtype())) / (s.heads_q / s.heads_kv);
    p.section_heads = flash::sm90_section_heads(kv_bytes, s.heads_q, device_index);
    const int block_m = flash::sm90_fwd_block_m(static_cast<int>(s.head_dim));
    p.blocks = flash::sm90_forward_blocks(s.heads_q, s.total_q + s.batch * block_m, block_m, device_index);
    p.shape.total_q = static_cast<int>(s.total_q);
    p.shape.total_k = static_cast<int>(s.total_k);
    tile_counter = Buffer(sizeof(int), t.q.device(), "attention.flash_varlen.tile_counter", stream);
    FT_CUDA_CHECK(cudaMemsetAsync(tile_counter.data(), 0, sizeof(int), cuda_stream));
    p.tile_counter = static_cast<int*>(tile_counter.data());
    query_tiles = tile_offsets(p.shape.cu_seqlens_q, p.shape.batch, block_m, t.q.device(),
                               "attention.flash_varlen.query_tiles", stream);
    p.varlen_tiles = static_cast<const int*>(query_tiles.data());
  }
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
  const bool aligned = all_operands(t, &g, aligned16);
  p.shape = varlen_flash_shape(t, s, aligned);
  p.shape.sm90 = choose_varlen_kernels(t, &g, s, aligned, kernels) == FlashKernels::sm90;
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
  const FlashBwdScratch scratch = flash_bwd_scratch(p, rows, s.batch * s.heads_q, s.head_dim, s.has_sinks,
                                                    deterministic, device_of, "attention.flash_varlen", stream);
  const bool ordered_dq = deterministic && p.shape.sm90;

  // The Hopper kernel's launch sections over the kv heads, addition order and per-sequence key tiles (Notes
  // [L2 head sections], [Ordered dQ additions] and [Packed-sequence tiles]).
  Buffer key_tiles;
  if (p.shape.sm90) {
    const int block_n = flash::sm90_bwd_block_n(static_cast<int>(s.head_dim));
    const std::int64_t elem = static_cast<std::int64_t>(size_of(t.q.dtype()));
    const std::int64_t qdo_bytes = 2 * s.max_seqlen_q * (s.head_dim * elem + 4) * (s.heads_q / s.heads_kv);
    p.dkdv_section_heads = flash::sm90_section_heads(qdo_bytes, s.heads_kv, device_of.index);
    if (ordered_dq) p.ascending_heads = flash::sm90_ascending_heads(s.heads_kv, s.max_seqlen_k, block_n);
    p.shape.total_q = static_cast<int>(s.total_q);
    p.shape.total_k = static_cast<int>(s.total_k);
    p.varlen_grid_key_tiles = static_cast<int>(sm90_grid_key_tiles(s));
    key_tiles = tile_offsets(p.shape.cu_seqlens_k, p.shape.batch, block_n, device_of,
                             "attention.flash_varlen.key_tiles", stream);
    p.varlen_key_tiles = static_cast<const int*>(key_tiles.data());
  }

  auto cuda_stream = static_cast<cudaStream_t>(stream.handle());
  dispatch(t.q.dtype(), s.head_dim, [&](auto type_tag, auto dim) {
    flash::run_flash_bwd<decltype(type_tag), decltype(dim)::value>(p, cuda_stream);
  });
}

}  // namespace ft::attention_impl
