// skinny_linear.cu — the fused few-row bf16 GEMM of ops/skinny_linear.h, streaming the weights through a
// per-warp shared-memory pipeline (see Note [Streamed few-row GEMM]).
//
// Note [Streamed few-row GEMM]
// At one to eight rows a GEMM reads each weight once and does little else, so its time is the weights' bytes
// over the memory bandwidth plus whatever the kernel leaves exposed: by Little's law ~5 MB must be in flight
// across the GPU (~36 KB per multiprocessor at ~1 us of latency) at every moment, including the kernel's start
// and end. The kernel:
//   grid    one block of 8 warps per multiprocessor (fewer for small N); block b takes a contiguous range of
//           output units, the units spread evenly (the blocks differ by at most one unit, no tail wave).
//           A unit is one weight row (store, residual), a rope pair of adjacent rows, or the rows of W and W3
//           of one swiglu column.
//   steps   a unit's K is cut into steps of 32 lanes x 4 sixteen-byte chunks (2 KB a warp); the block's steps
//           (unit-major) are split evenly over its warps, so a unit may be shared by consecutive warps (split
//           K): each warp reduces its part, and the warp holding the unit's last step adds the parts in warp
//           order after a block barrier — a fixed order, so the result is deterministic.
//   pipeline each warp keeps a ring of `stages` steps in shared memory filled by cp.async (16 bytes a lane,
//           L1 bypassed): every lane reads back only the chunks it copied itself, so a warp needs no barrier;
//           the copy of step s + stages is issued right after step s is consumed, so stages - 1 steps (10 KB
//           a warp at 6 stages, 80 KB a multiprocessor) stay in flight continuously, across unit boundaries;
//           the steps `prefetch` beyond the ring are requested into L2 (prefetch.global.L2, no shared memory),
//           so more DRAM requests are in flight than the ring holds and the ring's copies find L2. On 9.0+
//           devices FT_SKINNY_COPY=bulk fills the ring with bulk copies instead (lane 0 copies each row's
//           contiguous segment of a step; an mbarrier per slot counts its bytes), the same layout and order.
//   overlap  the weights do not depend on the previous kernel: the ring is filled before waiting for it
//           (programmatic dependent launch, dependent_launch.cuh), so a kernel launched to overlap streams
//           its first 96 KB a multiprocessor (all of a small GEMM's share) while its predecessor finishes.
//           The block's shared memory is kept near 110 KB (two blocks fit a multiprocessor) and its
//           registers at 128 a thread, so a block of the next kernel fits beside it.
//   staging  after the wait the block stages x' of its rows (rounded up to kM = 1, 2, 4 or 8, extra rows
//           zero) in shared memory as bf16 — normalised on the way when the RMSNorm is fused (sum of squares
//           in double, as rmsnorm_forward; the norm weight read before the wait) — and the residual of its
//           units, one memory round trip for both. rope_append's angles take a table of the Dh / 2 rotation
//           pairs' (cos, sin) per block: the frequencies (a double pow each) computed before the wait, the
//           sincos at the position while the staging's loads are in flight.
//   epilogue lane m applies row m's epilogue to the unit's sums (butterfly reductions leave them in every lane).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string_view>

#include "ops/cuda/common.cuh"
#include "ops/cuda/decode_ops.h"
#include "ops/cuda/dependent_launch.cuh"

namespace ft::gpu {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kChunksPerLane = 4;                   // 16-byte chunks a lane copies per step
constexpr int kStepBytes = 32 * kChunksPerLane * 16;  // a warp's step in the ring
constexpr int kMaxStages = 8;
constexpr int kMinStages = 3;
// Dynamic shared memory a block aims at, so that a block of the next kernel fits beside it (H100/H200: 228 KB a
// multiprocessor, 227 KB a block, 1 KB reserved per block).
constexpr std::int64_t kPairedSharedBytes = 110 * 1024;
constexpr std::int64_t kMaxSharedBytes = 227 * 1024 - 2048;  // less the static shared memory
constexpr std::int64_t kMaxStagedResidualBytes = 16 * 1024;  // wider residuals are read in the epilogue

enum Mode { kStore = 0, kResidual = 1, kSwiglu = 2, kRope = 3 };

struct Args {
  const void* x;  // (M, K) bf16, or fp32 with norm_w
  std::int64_t x_stride;
  const float* norm_w;  // (K) or null
  float eps;
  const bf16* w;   // (N, K)
  const bf16* w3;  // swiglu: (N, K)
  std::int64_t M, N, K;
  void* y;
  std::int64_t y_stride;
  bool y_f32;
  const float* res;  // residual: (M, N)
  std::int64_t res_stride;
  bf16* kc;  // rope: (M, H, capacity, Dh) caches
  bf16* vc;
  std::int64_t kcb, kch, kct, vcb, vch, vct, capacity, Dh, d;
  const std::int32_t* position;
  double theta;
  std::int64_t units;      // output units (see the Note)
  std::int64_t max_units;  // residual: the most units a block takes (the staged residual's width), 0 = not staged
  int steps_per_unit;      // ceil(K / (8 * 32 * chunks per lane per row))
  int stages;              // the ring's depth
  int prefetch;            // steps prefetched into L2 beyond the ring
  bool bulk;               // the ring filled by bulk copies (compute capability 9.0+), not per-lane cp.async
};

// The 8 bf16 of a 16-byte pack as floats (exact: a bf16 is the high half of its float).
__device__ __forceinline__ void unpack8(const uint4& p, float* f) {
  const unsigned words[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(words[i] << 16);
    f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

// w's 8 bf16 dotted with x (8 floats), in element order.
__device__ __forceinline__ float dot8(const uint4& w, const float* x) {
  const unsigned words[4] = {w.x, w.y, w.z, w.w};
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s = fmaf(__uint_as_float(words[i] << 16), x[2 * i], s);
    s = fmaf(__uint_as_float(words[i] & 0xffff0000u), x[2 * i + 1], s);
  }
  return s;
}

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes from global memory into shared memory, asynchronously, through L2 only.
__device__ __forceinline__ void copy16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(__cvta_generic_to_global(src)) : "memory");
}

// Bulk copies (compute capability 9.0+): a contiguous range from global into shared memory by the copy engine
// of the multiprocessor (TMA), completing on an mbarrier; the rest of the kernel never takes this path elsewhere.
__device__ __forceinline__ void barrier_init(unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
#endif
}

__device__ __forceinline__ void barrier_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// The barrier's phase completes once `bytes` have arrived (this thread's arrival included).
__device__ __forceinline__ void barrier_expect(unsigned bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}

__device__ __forceinline__ void copy_bulk(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(bar)
               : "memory");
#endif
}

// Waits until the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void barrier_wait(unsigned bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

// The 128-byte line holding p into L2, without waiting for it.
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(p)));
}

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most `pending` (< kMaxStages) of this thread's copy groups are in flight.
__device__ __forceinline__ void wait_copies(int pending) {
  switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
  }
}

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// (x0, x1) rotated by cs = (cos, sin) with rope.cu's unfused fp32 products, each rounded to bf16.
__device__ __forceinline__ void rotate(float x0, float x1, float2 cs, bf16* out0, bf16* out1) {
  *out0 = __float2bfloat16_rn(__fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y)));
  *out1 = __float2bfloat16_rn(__fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x)));
}

// Row m's epilogue for unit u from its sums v0 (and v1: the unit's second row). r: the staged residual
// (residual mode); rope_append: pos, the position, and cs, the (cos, sin) of each of a head's rotation pairs.
template <int kMode>
__device__ __forceinline__ void epilogue(const Args& a, std::int64_t m, std::int64_t u, float v0, float v1, float r,
                                         std::int64_t pos, const float2* cs) {
  if constexpr (kMode == kStore) {
    if (a.y_f32)
      static_cast<float*>(a.y)[m * a.y_stride + u] = v0;
    else
      static_cast<bf16*>(a.y)[m * a.y_stride + u] = __float2bfloat16_rn(v0);
  } else if constexpr (kMode == kResidual) {
    static_cast<float*>(a.y)[m * a.y_stride + u] = v0 + r;
  } else if constexpr (kMode == kSwiglu) {
    const float x = round_bf16(v0), b = round_bf16(v1);
    static_cast<bf16*>(a.y)[m * a.y_stride + u] = __float2bfloat16_rn(x * (1.0f / (1.0f + expf(-x))) * b);
  } else {
    const std::int64_t n0 = 2 * u, section = n0 / a.d, c = n0 % a.d, h = c / a.Dh, i = c % a.Dh / 2;
    if (section == 0) {
      bf16* y = static_cast<bf16*>(a.y) + m * a.y_stride + c;
      rotate(round_bf16(v0), round_bf16(v1), cs[i], y, y + 1);
    } else if (pos < a.capacity) {
      if (section == 1) {
        bf16* k = a.kc + m * a.kcb + h * a.kch + pos * a.kct + 2 * i;
        rotate(round_bf16(v0), round_bf16(v1), cs[i], k, k + 1);
      } else {
        bf16* v = a.vc + m * a.vcb + h * a.vch + pos * a.vct + 2 * i;
        v[0] = __float2bfloat16_rn(v0);
        v[1] = __float2bfloat16_rn(v1);
      }
    }
  }
}

// The first of the `steps` steps that warp w takes.
__device__ __forceinline__ std::int64_t first_step(int w, std::int64_t steps) { return w * steps / kWarps; }

template <int kM, int kMode, bool kNorm>
__global__ void __launch_bounds__(kThreads, 2) skinny_kernel(Args a) {
  constexpr int kR = kMode == kSwiglu || kMode == kRope ? 2 : 1;  // weight rows a unit
  constexpr int kC = kChunksPerLane / kR;                        // chunks per row a lane copies per step
  constexpr int kHold = kM <= 4 ? 2 : 1;  // fused norm: 4-float packs of each row a thread keeps in registers
  extern __shared__ __align__(16) unsigned char dynamic[];
  __shared__ double scratch[kWarps][kM];
  __shared__ float parts[kWarps][2][kR][kM];  // split units: each warp's part of its first and last unit
  __shared__ alignas(8) std::uint64_t bars[kWarps][kMaxStages];  // bulk copies: one per ring slot
  const std::int64_t K = a.K, chunks = K / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  bf16* xs = reinterpret_cast<bf16*>(dynamic);                          // (kM, K)
  unsigned char* ring = dynamic + kM * K * 2 + warp * a.stages * kStepBytes;  // this warp's (stages, kStepBytes)
  float* res_s = reinterpret_cast<float*>(dynamic + kM * K * 2 + kWarps * a.stages * kStepBytes);  // (kM, max_units)
  // rope_append: per rotation pair i < Dh / 2, its inverse frequency and its (cos, sin) at the position.
  double* inv_freq = reinterpret_cast<double*>(dynamic + kM * K * 2 + kWarps * a.stages * kStepBytes);
  float2* cs = reinterpret_cast<float2*>(inv_freq + a.Dh / 2);

  // This block's units [u0, u1) and this warp's steps [s0, s1) among the block's (unit-major).
  const std::int64_t u0 = blockIdx.x * a.units / gridDim.x, u1 = (blockIdx.x + 1) * a.units / gridDim.x;
  const int sk = a.steps_per_unit;
  const std::int64_t steps = (u1 - u0) * sk, s0 = first_step(warp, steps), s1 = first_step(warp + 1, steps);
  const auto row_of = [&](std::int64_t u, int r) -> const bf16* {
    if constexpr (kMode == kSwiglu) return (r == 0 ? a.w : a.w3) + u * K;
    return a.w + (kR * u + r) * K;
  };
  // A position in the warp's steps: step s is unit `local` (block-local), K step j of it.
  struct Cursor {
    std::int64_t s, local;
    int j, slot;
  };
  const auto advance = [&](Cursor& p) {
    ++p.s;
    p.slot = p.slot + 1 == a.stages ? 0 : p.slot + 1;
    if (++p.j == sk) {
      p.j = 0;
      ++p.local;
    }
  };
  // The next step's chunks of this lane into its ring slot, as one copy group (empty past the warp's steps).
  Cursor next{s0, s0 / sk, static_cast<int>(s0 % sk), 0};
  // Bulk copies (a.bulk): lane 0 copies each row's segment of the step (contiguous in memory and, chunk c * 32
  // + lane at offset (c * 32 + lane) * 16, in the ring) and the slot's barrier counts its bytes.
  const auto bar_of = [&](int slot) { return shared_address(&bars[warp][slot]); };
  if (a.bulk && lane == 0) {
    for (int i = 0; i < a.stages; ++i) barrier_init(bar_of(i));
    barrier_init_fence();
  }
  __syncwarp();
  const auto issue = [&] {
    if (next.s < s1) {
      if (a.bulk) {
        const std::int64_t first = next.j * (32 * kC), count = chunks - first < 32 * kC ? chunks - first : 32 * kC;
        if (lane == 0) {
          const auto bytes = static_cast<unsigned>(count * 16);
          barrier_expect(bar_of(next.slot), kR * bytes);
#pragma unroll
          for (int r = 0; r < kR; ++r)
            copy_bulk(shared_address(ring + next.slot * kStepBytes + r * kC * 512),
                      row_of(u0 + next.local, r) + first * 8, bytes, bar_of(next.slot));
        }
      } else {
        const std::int64_t c0 = next.j * (32 * kC) + lane;
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const bf16* row = row_of(u0 + next.local, r);
#pragma unroll
          for (int c = 0; c < kC; ++c)
            if (c0 + c * 32 < chunks)
              copy16(shared_address(ring + next.slot * kStepBytes + ((r * kC + c) * 32 + lane) * 16),
                     row + (c0 + c * 32) * 8);
        }
      }
    }
    if (!a.bulk) commit_copies();
    advance(next);
  };
  for (int i = 0; i < a.stages; ++i) issue();  // the weights do not depend on the previous kernel
  // The steps `prefetch` ahead of the ring into L2 (16 lanes a 128-byte line each): DRAM requests in flight
  // beyond what the ring holds, without shared memory.
  Cursor far = next;
  const auto prefetch = [&] {
    if (far.s < s1) {
      constexpr int kLines = 16 / kR;  // 128-byte lines of a row's segment of a step
      const std::int64_t c0 = far.j * (32 * kC) + lane % kLines * 8;
      if (lane < 16 && c0 < chunks) prefetch_l2(row_of(u0 + far.local, lane / kLines) + c0 * 8);
    }
    advance(far);
  };
  for (int i = 0; i < a.prefetch; ++i) prefetch();
  float4 g_held[kHold];
  if constexpr (kNorm) {
#pragma unroll
    for (int h = 0; h < kHold; ++h) {
      const std::int64_t k = (threadIdx.x + h * kThreads) * 4;
      g_held[h] = k < K ? *reinterpret_cast<const float4*>(a.norm_w + k) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  // The angles as rope.cu's table computes them (in double, rounded to fp32); the frequencies do not depend on
  // the position, so they are computed while the previous kernel finishes.
  if constexpr (kMode == kRope) {
    for (std::int64_t i = threadIdx.x; i < a.Dh / 2; i += kThreads)
      inv_freq[i] = pow(a.theta, -2.0 * static_cast<double>(i) / static_cast<double>(a.Dh));
  }
  wait_for_previous_grid();
  allow_next_grid();

  // rope_append: the angles at the position, by the threads that wrote the frequencies; called while the
  // staging's loads are in flight.
  std::int64_t pos = 0;
  const auto rope_angles = [&] {
    if constexpr (kMode == kRope) {
      pos = *a.position;
      for (std::int64_t i = threadIdx.x; i < a.Dh / 2; i += kThreads) {
        double sin_a = 0, cos_a = 0;
        sincos(static_cast<double>(pos) * inv_freq[i], &sin_a, &cos_a);
        cs[i] = make_float2(static_cast<float>(cos_a), static_cast<float>(sin_a));
      }
    }
  };

  // Staging: x' of every row and the residual of the block's units, in one memory round trip.
  const std::int64_t nu = u1 - u0;
  float res_held[2];
  if (kMode == kResidual && a.max_units > 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t e = threadIdx.x + h * kThreads, m = e / nu, i = e % nu;
      res_held[h] = m < a.M ? a.res[m * a.res_stride + u0 + i] : 0.f;
    }
  }
  if constexpr (kNorm) {
    float4 v[kM][kHold];
    double ss[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const float* xr = static_cast<const float*>(a.x) + m * a.x_stride;
      ss[m] = 0;
#pragma unroll
      for (int h = 0; h < kHold; ++h) {
        const std::int64_t k = (threadIdx.x + h * kThreads) * 4;
        v[m][h] = m < a.M && k < K ? *reinterpret_cast<const float4*>(xr + k) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
    rope_angles();
    const auto square = [](float4 f) {
      return static_cast<double>(f.x) * f.x + static_cast<double>(f.y) * f.y + static_cast<double>(f.z) * f.z +
             static_cast<double>(f.w) * f.w;
    };
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int h = 0; h < kHold; ++h) ss[m] += square(v[m][h]);
      if (m < a.M) {
        const float* xr = static_cast<const float*>(a.x) + m * a.x_stride;
        for (std::int64_t k = (threadIdx.x + kHold * kThreads) * 4; k < K; k += kThreads * 4)
          ss[m] += square(*reinterpret_cast<const float4*>(xr + k));
      }
      ss[m] = warp_reduce(ss[m], SumOp{});
      if (lane == 0) scratch[warp][m] = ss[m];
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      double total = scratch[0][m];
      for (int w = 1; w < kWarps; ++w) total += scratch[w][m];
      const float s = static_cast<float>(1.0 / sqrt(total / static_cast<double>(K) + a.eps));
      const auto norm = [s](float x, float g) { return __fmul_rn(__fmul_rn(x, s), g); };
      const auto put = [&](std::int64_t k, float4 x, float4 g) {
        auto* out = reinterpret_cast<__nv_bfloat162*>(xs + m * K + k);
        out[0] = __floats2bfloat162_rn(norm(x.x, g.x), norm(x.y, g.y));
        out[1] = __floats2bfloat162_rn(norm(x.z, g.z), norm(x.w, g.w));
      };
#pragma unroll
      for (int h = 0; h < kHold; ++h) {
        const std::int64_t k = (threadIdx.x + h * kThreads) * 4;
        if (k < K) put(k, v[m][h], g_held[h]);
      }
      const float* xr = static_cast<const float*>(a.x) + m * a.x_stride;
      for (std::int64_t k = (threadIdx.x + kHold * kThreads) * 4; k < K; k += kThreads * 4) {
        const float4 x = m < a.M ? *reinterpret_cast<const float4*>(xr + k) : make_float4(0.f, 0.f, 0.f, 0.f);
        put(k, x, *reinterpret_cast<const float4*>(a.norm_w + k));
      }
    }
  } else {
    rope_angles();
    // kM x chunks 16-byte packs, 4 per thread in flight at a time; rows past M zero.
    constexpr int kBatch = 4;
    const std::int64_t packs = kM * chunks;
    for (std::int64_t e0 = threadIdx.x; e0 < packs; e0 += kBatch * kThreads) {
      uint4 p[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const std::int64_t e = e0 + i * kThreads, m = e / chunks, c = e % chunks;
        p[i] = make_uint4(0, 0, 0, 0);
        if (e < packs && m < a.M)
          p[i] = *reinterpret_cast<const uint4*>(static_cast<const bf16*>(a.x) + m * a.x_stride + c * 8);
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const std::int64_t e = e0 + i * kThreads;
        if (e < packs) reinterpret_cast<uint4*>(xs)[e] = p[i];
      }
    }
  }
  if (kMode == kResidual && a.max_units > 0) {  // res_s (kM, max_units): the residual of units u0 + i
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t e = threadIdx.x + h * kThreads;
      if (e < kM * nu) res_s[e / nu * a.max_units + e % nu] = res_held[h];
    }
    for (std::int64_t e = threadIdx.x + 2 * kThreads; e < kM * nu; e += kThreads) {
      const std::int64_t m = e / nu, i = e % nu;
      res_s[m * a.max_units + i] = m < a.M ? a.res[m * a.res_stride + u0 + i] : 0.f;
    }
  }
  const std::int64_t first_unit = s0 / sk;  // block-local
  // Row m's residual of unit `local` (block-local): staged, or from memory when too wide to stage.
  const auto residual = [&](std::int64_t m, std::int64_t local) {
    if constexpr (kMode != kResidual) return 0.f;
    return a.max_units > 0 ? res_s[m * a.max_units + local] : a.res[m * a.res_stride + u0 + local];
  };
  __syncthreads();

  float acc[kR][kM];
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int m = 0; m < kM; ++m) acc[r][m] = 0.f;
  for (Cursor at{s0, s0 / sk, static_cast<int>(s0 % sk), 0}; at.s < s1; advance(at)) {
    if (a.bulk) {  // the slot's (at.s - s0) / stages-th fill has landed
      barrier_wait(bar_of(at.slot), static_cast<unsigned>((at.s - s0) / a.stages) & 1u);
    } else {
      wait_copies(a.stages - 1);  // this step's group has landed
    }
    const std::int64_t c0 = at.j * (32 * kC) + lane;
    const unsigned char* slot = ring + at.slot * kStepBytes;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      if (c0 + c * 32 >= chunks) break;
      uint4 wv[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) wv[r] = *reinterpret_cast<const uint4*>(slot + ((r * kC + c) * 32 + lane) * 16);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        float xf[8];
        unpack8(*reinterpret_cast<const uint4*>(xs + m * K + (c0 + c * 32) * 8), xf);
#pragma unroll
        for (int r = 0; r < kR; ++r) acc[r][m] += dot8(wv[r], xf);
      }
    }
    if (a.bulk) __syncwarp();  // every lane has read the slot before lane 0 refills it
    issue();  // into the slot just read (its chunks are in registers): step at.s + stages
    if (a.prefetch > 0) prefetch();  // step at.s + stages + prefetch
    const bool last_of_unit = at.j == sk - 1;
    if (!last_of_unit && at.s != s1 - 1) continue;
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int m = 0; m < kM; ++m) acc[r][m] = warp_reduce(acc[r][m], SumOp{});
    const bool whole = last_of_unit && at.local * sk >= s0;
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      if (lane != m) continue;
      if (whole) {
        if (m < a.M) epilogue<kMode>(a, m, u0 + at.local, acc[0][m], acc[kR - 1][m], residual(m, at.local), pos, cs);
      } else {
#pragma unroll
        for (int r = 0; r < kR; ++r) parts[warp][at.local == first_unit ? 0 : 1][r][m] = acc[r][m];
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int m = 0; m < kM; ++m) acc[r][m] = 0.f;
  }

  // Split units: the warp holding a unit's last step (the unit is then its first) adds the parts of the warps
  // that share it, in warp order.
  __syncthreads();
  const bool owner = s0 < s1 && first_unit * sk < s0 && (first_unit + 1) * sk <= s1;
  if (!owner || lane >= a.M || lane >= kM) return;
  float v[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) v[r] = 0.f;
  for (int w = 0; w <= warp; ++w) {
    const std::int64_t b = first_step(w, steps), e = first_step(w + 1, steps);
    if (b >= e || e <= first_unit * sk || b >= (first_unit + 1) * sk) continue;  // shares none of the unit
    const int which = b / sk == first_unit ? 0 : 1;
#pragma unroll
    for (int r = 0; r < kR; ++r) v[r] += parts[w][which][r][lane];
  }
  epilogue<kMode>(a, lane, u0 + first_unit, v[0], v[kR - 1], residual(lane, first_unit), pos, cs);
}

// The ring's depth: FT_SKINNY_STAGES when set (an experiment's override), else as deep as fits beside the
// staged rows in kPairedSharedBytes; at least kMinStages.
int stages_for(std::int64_t staged_bytes) {
  static const int forced = [] {
    const char* value = std::getenv("FT_SKINNY_STAGES");
    return value ? std::atoi(value) : 0;
  }();
  const std::int64_t fit = (kPairedSharedBytes - staged_bytes) / (kWarps * kStepBytes);
  const std::int64_t depth = forced > 0 ? forced : fit;
  const std::int64_t most =
      std::min<std::int64_t>(kMaxStages, (kMaxSharedBytes - staged_bytes) / (kWarps * kStepBytes));
  return static_cast<int>(std::clamp<std::int64_t>(depth, kMinStages, most));
}

// Whether the ring is filled by bulk copies: FT_SKINNY_COPY=bulk (an experiment's switch), on 9.0+ devices.
bool bulk_copies(Device device) {
  static const bool wanted = [] {
    const char* value = std::getenv("FT_SKINNY_COPY");
    return value != nullptr && std::string_view(value) == "bulk";
  }();
  return wanted && supports_dependent_launch(device);
}

// Steps a warp prefetches into L2 beyond its ring: FT_SKINNY_PREFETCH when set (an experiment's override).
int prefetch_steps() {
  static const int steps = [] {
    const char* value = std::getenv("FT_SKINNY_PREFETCH");
    return value ? std::clamp(std::atoi(value), 0, 64) : 8;
  }();
  return steps;
}

template <int kM, int kMode, bool kNorm>
void launch(Args a, int sms, bool overlap, cudaStream_t stream) {
  constexpr int kR = kMode == kSwiglu || kMode == kRope ? 2 : 1;
  a.units = kMode == kRope ? a.N / 2 : a.N;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(sms, a.units));
  const std::int64_t per_block = ceil_div(a.units, blocks);
  a.max_units = kMode == kResidual && kM * per_block * 4 <= kMaxStagedResidualBytes ? per_block : 0;
  a.steps_per_unit = static_cast<int>(ceil_div(a.K / 8, 32 * (kChunksPerLane / kR)));
  const std::int64_t staged =
      kM * a.K * 2 + ceil_div(kM * a.max_units * 4, 16) * 16 + (kMode == kRope ? a.Dh / 2 * 16 : 0);
  a.stages = stages_for(staged);
  a.prefetch = prefetch_steps();
  const std::int64_t smem = staged + static_cast<std::int64_t>(kWarps) * a.stages * kStepBytes;
  const auto kernel = skinny_kernel<kM, kMode, kNorm>;
  // Once per kernel and device: room for the largest block, and all shared memory, no larger L1 (a block of
  // the neighbouring kernels fits beside this one's only when their carveouts agree).
  static std::mutex mutex;
  static std::set<int> prepared;
  int device = 0;
  FT_CUDA_CHECK(cudaGetDevice(&device));
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (prepared.insert(device).second) {
      FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kMaxSharedBytes)));
      FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared));
    }
  }
  launch_kernel(kernel, blocks, kThreads, static_cast<std::size_t>(smem), stream, overlap, a);
}

template <int kMode, bool kNorm>
void launch_rows(const Args& a, int sms, bool overlap, cudaStream_t stream) {
  if (a.M <= 1)
    launch<1, kMode, kNorm>(a, sms, overlap, stream);
  else if (a.M <= 2)
    launch<2, kMode, kNorm>(a, sms, overlap, stream);
  else if (a.M <= 4)
    launch<4, kMode, kNorm>(a, sms, overlap, stream);
  else
    launch<8, kMode, kNorm>(a, sms, overlap, stream);
}

}  // namespace

void skinny_linear(const SkinnyLinearArgs& s) {
  Args a{};
  const bool norm = s.norm_weight.defined();
  a.x = s.x.data();
  a.x_stride = s.x.stride(0);
  a.norm_w = norm ? s.norm_weight.data_as<float>() : nullptr;
  a.eps = s.norm_eps;
  a.w = static_cast<const bf16*>(s.w.data());
  a.w3 = s.w3.defined() ? static_cast<const bf16*>(s.w3.data()) : nullptr;
  a.M = s.x.size(0);
  a.N = s.w.size(0);
  a.K = s.x.size(1);
  a.y = s.y.data();
  a.y_stride = s.y.stride(0);
  a.y_f32 = s.y.dtype() == DType::f32;
  if (s.residual.defined()) {
    a.res = s.residual.data_as<float>();
    a.res_stride = s.residual.stride(0);
  }
  if (s.epilogue == SkinnyEpilogue::rope_append) {
    a.kc = static_cast<bf16*>(s.k_cache.data());
    a.vc = static_cast<bf16*>(s.v_cache.data());
    a.kcb = s.k_cache.stride(0);
    a.kch = s.k_cache.stride(1);
    a.kct = s.k_cache.stride(2);
    a.vcb = s.v_cache.stride(0);
    a.vch = s.v_cache.stride(1);
    a.vct = s.v_cache.stride(2);
    a.capacity = s.k_cache.size(2);
    a.Dh = s.k_cache.size(3);
    a.d = a.N / 3;
    a.position = s.position;
    a.theta = s.rope_theta;
  }
  if (a.M * a.N == 0) return;
  CudaDeviceGuard guard(s.x.device().index);
  const cudaStream_t stream = cuda_stream(s.stream);
  const int sms = multiprocessors(s.x.device());
  const bool overlap = s.overlap_launch && supports_dependent_launch(s.x.device());
  a.bulk = bulk_copies(s.x.device());
  switch (s.epilogue) {
    case SkinnyEpilogue::store:
      norm ? launch_rows<kStore, true>(a, sms, overlap, stream) : launch_rows<kStore, false>(a, sms, overlap, stream);
      break;
    case SkinnyEpilogue::residual: launch_rows<kResidual, false>(a, sms, overlap, stream); break;
    case SkinnyEpilogue::swiglu:
      norm ? launch_rows<kSwiglu, true>(a, sms, overlap, stream) : launch_rows<kSwiglu, false>(a, sms, overlap, stream);
      break;
    case SkinnyEpilogue::rope_append:
      norm ? launch_rows<kRope, true>(a, sms, overlap, stream) : launch_rows<kRope, false>(a, sms, overlap, stream);
      break;
  }
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::gpu
