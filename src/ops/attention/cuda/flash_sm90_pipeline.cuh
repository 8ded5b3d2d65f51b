// flash_sm90_pipeline.cuh — internal (CUDA builds only): the Hopper (sm_90a) instructions of a
// warp-specialised kernel: TMA tile copies between global memory and 128-byte-swizzled shared memory
// (cp.async.bulk.tensor, described by a TmaTensor from flash_tma.h), the shared-memory mbarriers that
// tell consumers a copy has landed and the producer that a buffer is free, register reallocation
// between warpgroups (setmaxnreg) and named barriers for one warpgroup.
#pragma once

#include <cstdint>

#include "ops/attention/cuda/flash_sm90_ptx.cuh"
#include "ops/attention/cuda/flash_tma.h"

namespace ft::flash::sm90 {

// ---- mbarriers (one 64-bit word of shared memory each) ----

__device__ __forceinline__ void mbar_init(std::uint64_t* bar, int arrivals) {
#if FT_SM90_DEVICE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(arrivals) : "memory");
#endif
}
// Makes initialised mbarriers visible to the async proxy (TMA); a block barrier must follow.
__device__ __forceinline__ void mbar_init_fence() {
#if FT_SM90_DEVICE
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// One arrival that also announces `bytes` more bytes of TMA traffic completing this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
#if FT_SM90_DEVICE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(std::uint64_t* bar) {
#if FT_SM90_DEVICE
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
#endif
}
// Waits until the phase of parity `parity` has completed. A fresh barrier counts its phase "before
// the first" (parity 1) as completed, so producers start waiting for free buffers at parity 1.
__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, std::uint32_t parity) {
#if FT_SM90_DEVICE
  asm volatile(
      "{\n.reg .pred done;\nretry:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra retry;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
#endif
}

// A ring of buffers walked in order: slot and the parity of the current pass over the ring.
template <int STAGES>
struct RingPosition {
  int slot = 0;
  std::uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++slot == STAGES) {
      slot = 0;
      phase ^= 1;
    }
  }
};

// ---- TMA ----

// Coordinates of the box at (col, row, head, batch) of a (B, H, N, D) tensor in the map's dim order.
struct TmaCoords {
  int c[4];
};
__device__ __forceinline__ TmaCoords tma_coords(const TmaTensor& t, int col, int row, int head, int batch) {
  TmaCoords r{{col, 0, 0, 0}};
#pragma unroll
  for (int d = 1; d < 4; ++d) r.c[d] = t.dim_of_row == d ? row : t.dim_of_head == d ? head : batch;
  return r;
}

__device__ __forceinline__ void tma_prefetch_map(const TmaTensor& t) {
#if FT_SM90_DEVICE
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(&t.map)) : "memory");
#endif
}

// Box at `at` -> shared memory `smem` (1024-byte aligned, swizzled as the map says); completes `bytes`
// of the phase of `bar`. Rows outside the tensor arrive as zeros.
__device__ __forceinline__ void tma_load(void* smem, const TmaTensor& t, const TmaCoords& at, std::uint64_t* bar) {
#if FT_SM90_DEVICE
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];\n" ::"r"(smem_u32(smem)),
      "l"(reinterpret_cast<std::uint64_t>(&t.map)), "r"(at.c[0]), "r"(at.c[1]), "r"(at.c[2]), "r"(at.c[3]),
      "r"(smem_u32(bar))
      : "memory");
#endif
}

// Shared memory `smem` -> the box at `at`; rows outside the tensor are not written. The writes of
// `smem` must be fenced (fence_proxy_async) and synchronised before; tma_store_wait before reuse.
__device__ __forceinline__ void tma_store(const TmaTensor& t, const TmaCoords& at, const void* smem) {
#if FT_SM90_DEVICE
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                   reinterpret_cast<std::uint64_t>(&t.map)),
               "r"(at.c[0]), "r"(at.c[1]), "r"(at.c[2]), "r"(at.c[3]), "r"(smem_u32(smem))
               : "memory");
#endif
}
// Waits until every TMA store this thread issued has completed.
__device__ __forceinline__ void tma_store_wait_all() {
#if FT_SM90_DEVICE
  asm volatile("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}

// ---- warpgroups ----

// Every warp of a warpgroup executes these: the warpgroup's per-thread register limit becomes N.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
#if FT_SM90_DEVICE
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
#if FT_SM90_DEVICE
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace ft::flash::sm90
