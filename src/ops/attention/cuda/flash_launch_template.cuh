// flash_launch_template.cuh — internal (CUDA builds only): the definitions behind flash_launch.h.
// Each launcher picks the Hopper kernels where FlashShape::sm90 says so (16-bit inputs at the head dims of
// has_sm90_kernels) or the sm80 ones, the masked or unmasked kernel (causal / window /
// sink tokens, or none), raises the dynamic shared-memory limit where the traits need more than 48 KB, and
// checks every launch.
// Included only by the per-head-dim instantiation files.
#pragma once

#include <type_traits>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/attention/cuda/flash_bwd_sm80_kernel.cuh"
#include "ops/attention/cuda/flash_bwd_sm90_kernel.cuh"
#include "ops/attention/cuda/flash_bwd_sm90_split_kernel.cuh"
#include "ops/attention/cuda/flash_fwd_sm80_kernel.cuh"
#include "ops/attention/cuda/flash_launch.h"
#include "ops/attention/cuda/flash_tma.h"

namespace ft::flash {

namespace detail {

template <class Kernel, class... Params>
void launch(Kernel kernel, dim3 grid, int threads, int smem_bytes, cudaStream_t stream, const Params&... p) {
  if (smem_bytes > 48 * 1024)
    FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  kernel<<<grid, threads, smem_bytes, stream>>>(p...);
  FT_CUDA_CHECK_LAUNCH();
}

// TMA maps of a query-shaped (q, o, d_o, dq) or key-shaped (k, v) operand for boxes of box_rows rows.
template <class T>
constexpr TmaElem tma_elem() {
  return std::is_same_v<T, __nv_bfloat16> ? TmaElem::bf16 : TmaElem::fp16;
}
// Packed sequences map as one batch of all their rows (See Note [Packed sequences] in flash_varlen.cuh).
template <class T, int D>
TmaTensor query_map(const TensorRef& t, const FlashShape& s, int box_rows) {
  if (s.cu_seqlens_q) return make_tma_tensor(t, tma_elem<T>(), 1, s.heads_q, s.total_q, D, box_rows);
  return make_tma_tensor(t, tma_elem<T>(), s.batch, s.heads_q, s.len_q, D, box_rows);
}
template <class T, int D>
TmaTensor key_map(const TensorRef& t, const FlashShape& s, int box_rows) {
  if (s.cu_seqlens_k) return make_tma_tensor(t, tma_elem<T>(), 1, s.heads_kv, s.total_k, D, box_rows);
  return make_tma_tensor(t, tma_elem<T>(), s.batch, s.heads_kv, s.len_k, D, box_rows);
}
// The fp32 dq_accum (B, Hq, len_q_pad, D) for reductions of (box_rows, 32-float) boxes; rows past len_q are
// outside the map, so TMA never adds into them. Packed sequences: (Hq, scratch_head_rows, D), whose rows
// past a sequence's end are its own padding rows, never read.
template <int D>
TmaTensor dq_accum_map(const FlashBwdParams& p, int box_rows) {
  const FlashShape& s = p.shape;
  if (s.cu_seqlens_q) {
    const std::int64_t head_stride = p.scratch_head_rows * D;
    const TensorRef accum{p.dq_accum, 0, head_stride, D};
    return make_tma_tensor(accum, TmaElem::fp32, 1, s.heads_q, static_cast<int>(p.scratch_head_rows), D, box_rows);
  }
  const std::int64_t head_stride = static_cast<std::int64_t>(p.len_q_pad) * D;
  const TensorRef accum{p.dq_accum, head_stride * s.heads_q, head_stride, D};
  return make_tma_tensor(accum, TmaElem::fp32, s.batch, s.heads_q, s.len_q, D, box_rows);
}

inline unsigned ceil_div(int a, int b) { return static_cast<unsigned>((a + b - 1) / b); }

// Grids are (batch x heads, tiles): tiles go in the y dimension, limited to 65535 blocks.
inline dim3 tile_grid(int heads, int len, int tile) {
  const unsigned tiles = ceil_div(len, tile);
  FT_CHECK_KIND(unsupported, tiles <= 65535, "flash attention: ", tiles, " tiles of ", tile,
                " rows exceed the 65535 blocks of a grid's y dimension (sequence length ", len, ")");
  return dim3(static_cast<unsigned>(heads), tiles);
}

}  // namespace detail

// The atomic backward's fp32 dQ accumulator, zeroed by the pre-pass, converted to dq after the kernel that
// adds into it (flash_bwd_atomic.cuh).
template <class T, int D>
void convert_dq_accum(const FlashBwdParams& p, cudaStream_t stream) {
  const FlashShape& s = p.shape;
  detail::launch(flash_bwd_dq_convert_kernel<T, D>, detail::tile_grid(s.batch * s.heads_q, s.len_q, kConvertRows),
                 kConvertThreads, 0, stream, p);
}

// The Hopper forward.
template <class T, int D>
void run_flash_fwd_sm90(const FlashFwdParams& p, cudaStream_t stream) {
  const FlashShape& s = p.shape;
  using Tr = sm90::FwdTraits<T, D>;
  const dim3 grid(static_cast<unsigned>(p.blocks));
  sm90::FwdTmaMaps maps;
  maps.q = detail::query_map<T, D>(p.q, s, Tr::kBlockM);
  maps.k = detail::key_map<T, D>(p.k, s, Tr::kBlockN);
  maps.v = detail::key_map<T, D>(p.v, s, Tr::kBlockN);
  auto run = [&](auto kernel) { detail::launch(kernel, grid, Tr::kThreads, Tr::kSmemBytes, stream, p, maps); };
  if (s.has_mask)
    run(sm90::flash_fwd_sm90_kernel<T, D, true>);
  else
    run(sm90::flash_fwd_sm90_kernel<T, D, false>);
}

template <class T, int D>
void run_flash_fwd(const FlashFwdParams& p, cudaStream_t stream) {
  const FlashShape& s = p.shape;
  if constexpr (has_sm90_kernels(sizeof(T), D)) {
    if (s.sm90) {
      run_flash_fwd_sm90<T, D>(p, stream);
      return;
    }
  }
  using Tr = FwdKernelTraits<T, D>;
  const dim3 grid = detail::tile_grid(s.batch * s.heads_q, s.len_q, Tr::kBlockM);
  if (s.has_mask)
    detail::launch(flash_fwd_kernel<T, D, true>, grid, Tr::kThreads, Tr::kSmemBytes, stream, p);
  else
    detail::launch(flash_fwd_kernel<T, D, false>, grid, Tr::kThreads, Tr::kSmemBytes, stream, p);
}

// The Hopper backward's TMA maps of q, d_o (boxes of query_box rows), k and v (key_box rows).
template <class T, int D>
sm90::BwdTmaMaps bwd_tma_maps(const FlashBwdParams& p, int query_box, int key_box) {
  sm90::BwdTmaMaps maps;
  maps.q = detail::query_map<T, D>(p.q, p.shape, query_box);
  maps.d_o = detail::query_map<T, D>(p.d_o, p.shape, query_box);
  maps.k = detail::key_map<T, D>(p.k, p.shape, key_box);
  maps.v = detail::key_map<T, D>(p.v, p.shape, key_box);
  return maps;
}

// The Hopper backward kernel of head dim D: the one whose warpgroups split the head dim where its tiles
// say so (d=256), else the one whose warpgroups own 64 keys each.
template <class T, int D>
using Sm90BwdTraits =
    std::conditional_t<sm90_bwd_tiles(D).split_d, sm90::BwdSplitTraits<T, D>, sm90::BwdKvTraits<T, D>>;
template <class T, int D, bool kHasMask, bool kOrderedDq>
constexpr auto sm90_bwd_kernel() {
  if constexpr (sm90_bwd_tiles(D).split_d)
    return sm90::flash_bwd_sm90_split_kernel<T, D, kHasMask, kOrderedDq>;
  else
    return sm90::flash_bwd_sm90_kernel<T, D, kHasMask, kOrderedDq>;
}

// The Hopper backward after the pre-pass: the kernel accumulating dQ (its additions ordered in the
// deterministic mode), then the convert kernel.
template <class T, int D>
void run_flash_bwd_sm90(const FlashBwdParams& p, cudaStream_t stream) {
  const FlashShape& s = p.shape;
  using Tr = Sm90BwdTraits<T, D>;
  sm90::BwdTmaMaps maps = bwd_tma_maps<T, D>(p, Tr::kBlockM, Tr::kBlockN);
  maps.dq_accum = detail::dq_accum_map<D>(p, sm90::kDqBoxRows);
  // Packed sequences: y over every sequence's key tiles, x and z over the kv heads (See Note [Packed-sequence
  // tiles] in flash_sm90_scheduler.cuh).
  const dim3 grid =
      s.cu_seqlens_k
          ? sm90::section_grid(dim3(static_cast<unsigned>(p.dkdv_section_heads),
                                    static_cast<unsigned>(p.varlen_grid_key_tiles)),
                               s.heads_kv)
          : sm90::section_grid(detail::tile_grid(p.dkdv_section_heads, s.len_k, Tr::kBlockN), s.batch * s.heads_kv);
  auto run = [&](auto kernel) { detail::launch(kernel, grid, Tr::kThreads, Tr::kSmemBytes, stream, p, maps); };
  if (s.has_mask && p.deterministic)
    run(sm90_bwd_kernel<T, D, true, true>());
  else if (s.has_mask)
    run(sm90_bwd_kernel<T, D, true, false>());
  else if (p.deterministic)
    run(sm90_bwd_kernel<T, D, false, true>());
  else
    run(sm90_bwd_kernel<T, D, false, false>());
  convert_dq_accum<T, D>(p, stream);
}

template <class T, int D>
void run_flash_bwd(const FlashBwdParams& p, cudaStream_t stream) {
  const FlashShape& s = p.shape;
  detail::launch(flash_bwd_pre_kernel<T, D>, detail::tile_grid(s.batch * s.heads_q, p.len_q_pad, kPreRows),
                 kPreThreads, 0, stream, p);
  if (p.sinks) run_flash_bwd_sink(p, stream);

  if constexpr (has_sm90_kernels(sizeof(T), D)) {
    if (s.sm90) {
      run_flash_bwd_sm90<T, D>(p, stream);
      return;
    }
  }
  if (!p.deterministic) {
    using Tr = BwdKvTraits<T, D, true>;
    const dim3 kv_grid = detail::tile_grid(s.batch * s.heads_kv, s.len_k, Tr::kN);
    if (s.has_mask)
      detail::launch(flash_bwd_dkdv_dq_atomic_kernel<T, D, true>, kv_grid, Tr::kThreads, Tr::kSmemBytes, stream, p);
    else
      detail::launch(flash_bwd_dkdv_dq_atomic_kernel<T, D, false>, kv_grid, Tr::kThreads, Tr::kSmemBytes, stream, p);
    convert_dq_accum<T, D>(p, stream);
    return;
  }

  using KvTr = BwdKvTraits<T, D, false>;
  using DqTr = BwdDqTraits<T, D>;
  const dim3 kv_grid = detail::tile_grid(s.batch * s.heads_kv, s.len_k, KvTr::kN);
  const dim3 dq_grid = detail::tile_grid(s.batch * s.heads_q, s.len_q, DqTr::kM);
  if (s.has_mask) {
    detail::launch(flash_bwd_dkdv_kernel<T, D, true>, kv_grid, KvTr::kThreads, KvTr::kSmemBytes, stream, p);
    detail::launch(flash_bwd_dq_kernel<T, D, true>, dq_grid, DqTr::kThreads, DqTr::kSmemBytes, stream, p);
  } else {
    detail::launch(flash_bwd_dkdv_kernel<T, D, false>, kv_grid, KvTr::kThreads, KvTr::kSmemBytes, stream, p);
    detail::launch(flash_bwd_dq_kernel<T, D, false>, dq_grid, DqTr::kThreads, DqTr::kSmemBytes, stream, p);
  }
}

}  // namespace ft::flash
