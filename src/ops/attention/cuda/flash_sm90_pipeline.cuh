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

// Waits for two mbarriers at once: both tests are issued before either result is branched on, so their
// latencies overlap (two mbar_wait calls take one after the other).
__device__ __forceinline__ void mbar_wait_both(std::uint64_t* bar_a, std::uint32_t parity_a, std::uint64_t* bar_b,
                                               std::uint32_t parity_b) {
#if FT_SM90_DEVICE
  asm volatile(
      "{\n.reg .pred done_a, done_b;\nretry:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done_a, [%0], %1;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done_b, [%2], %3;\n"
      "and.pred done_a, done_a, done_b;\n"
      "@!done_a bra retry;\n}\n" ::"r"(smem_u32(bar_a)),
      "r"(parity_a), "r"(smem_u32(bar_b)), "r"(parity_b)
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

// Box at `at` -> shared memory `smem` (1024-byte aligned, swizzled as the map says); its bytes count
// towards the phase of `bar`. Rows outside the tensor arrive as zeros.
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

// A (ROWS, D) 16-bit tile at (row0, head, batch) -> the sw128 tile `smem` (D / 64 panels of ROWS rows),
// one box per panel; the map's boxes are (ROWS, 64).
template <class T, int ROWS, int D>
__device__ __forceinline__ void tma_load_tile(T* smem, const TmaTensor& t, int row0, int head, int batch,
                                              std::uint64_t* bar) {
#pragma unroll
  for (int pn = 0; pn < D / kPanel; ++pn)
    tma_load(smem + pn * ROWS * kPanel, t, tma_coords(t, pn * kPanel, row0, head, batch), bar);
}

// `bytes` (a multiple of 16) of contiguous global memory -> shared memory, both 16-byte aligned;
// completes `bytes` of the phase of `bar`.
__device__ __forceinline__ void bulk_load(void* smem, const void* gmem, int bytes, std::uint64_t* bar) {
#if FT_SM90_DEVICE
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(smem)),
               "l"(gmem), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
#endif
}

// Shared memory `smem` -> the box at `at`; rows outside the tensor are not written. The writes of
// `smem` must be fenced (fence_proxy_async) and synchronised before; tma_store_wait_all before reuse.
__device__ __forceinline__ void tma_store(const TmaTensor& t, const TmaCoords& at, const void* smem) {
#if FT_SM90_DEVICE
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                   reinterpret_cast<std::uint64_t>(&t.map)),
               "r"(at.c[0]), "r"(at.c[1]), "r"(at.c[2]), "r"(at.c[3]), "r"(smem_u32(smem))
               : "memory");
#endif
}
// Shared memory `smem` (fp32, laid out as the map's boxes) is added into the box at `at`, element by
// element in L2 (other blocks may add into the same box); rows outside the tensor are skipped. Fenced
// and synchronised as tma_store; bulk_commit closes the group, and bulk_wait_read<0> must pass before
// `smem` is written again.
__device__ __forceinline__ void tma_reduce_add(const TmaTensor& t, const TmaCoords& at, const void* smem) {
#if FT_SM90_DEVICE
  asm volatile(
      "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
          reinterpret_cast<std::uint64_t>(&t.map)),
      "r"(at.c[0]), "r"(at.c[1]), "r"(at.c[2]), "r"(at.c[3]), "r"(smem_u32(smem))
      : "memory");
#endif
}
__device__ __forceinline__ void bulk_commit() {
#if FT_SM90_DEVICE
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most N of this thread's committed bulk groups still read their shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
#if FT_SM90_DEVICE
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}
// Waits until every TMA store and reduction this thread issued has completed.
__device__ __forceinline__ void tma_store_wait_all() {
#if FT_SM90_DEVICE
  asm volatile("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}

// ---- counters between blocks (See Note [Ordered dQ additions] in flash_sm90_scheduler.cuh) ----

// Spins until *counter (global) reads `value` with acquire semantics at GPU scope; bulk copies this
// thread issues afterwards are ordered after the read. With kBackoff, between reads that miss it sleeps,
// 32 ns and doubling up to kCounterMaxSleepNs, so that a long wait does not send the L2 a 4-byte load per
// round trip; without, it reads again at once (Sm90BwdTiles::counter_backoff says which a head dim takes).
inline constexpr unsigned kCounterMaxSleepNs = 256;
template <bool kBackoff>
__device__ __forceinline__ void counter_wait_eq(const int* counter, int value) {
#if FT_SM90_DEVICE
  if constexpr (kBackoff) {
    unsigned sleep_ns = 32;
    for (;;) {
      int seen;
      asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
      if (seen == value) break;
      __nanosleep(sleep_ns);
      sleep_ns = sleep_ns < kCounterMaxSleepNs ? 2 * sleep_ns : kCounterMaxSleepNs;
    }
  } else {
    int seen;
    do {
      asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen != value);
  }
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}
// Adds 1 to *counter with release semantics at GPU scope, after this thread's completed bulk copies
// (tma_store_wait_all) as well as its ordinary writes.
__device__ __forceinline__ void counter_release_increment(int* counter) {
#if FT_SM90_DEVICE
  asm volatile("fence.proxy.async.global;\nred.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
#endif
}

// ---- warpgroups ----

// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at barrier `id` without waiting: `threads` counts these arrivals and the waiting threads'.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Registers per consumer thread (a multiple of 8) of a block of `threads` (one block per SM; the producer
// warpgroup first) whose producer drops to producer_regs: the launch gives every thread 65536 / threads
// (rounded down to 8; ptxas takes all that __launch_bounds__ allows in these kernels), and
// setmaxnreg.inc waits until the block has the registers the consumers ask for, so they may take only
// what the producer gives back. Asking more hangs the block (a producer at 32 beside 2 consumers at 240
// did).
constexpr int consumer_registers(int threads, int producer_regs) {
  const int launch = 65536 / threads / 8 * 8;
  const int regs = launch + (launch - producer_regs) * 128 / (threads - 128);
  return (regs > 256 ? 256 : regs) / 8 * 8;
}
static_assert(consumer_registers(384, 24) == 240 && consumer_registers(384, 32) == 232 &&
              consumer_registers(512, 24) == 160);

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

}  // namespace ft::flash::sm90
