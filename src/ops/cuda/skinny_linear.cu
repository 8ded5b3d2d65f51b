// skinny_linear.cu — the fused few-row bf16 GEMM of ops/skinny_linear.h. A block of 8 warps (a few blocks per
// multiprocessor, see Note [Skinny occupancy]; the warps looping over the weight rows) first stages x' of the call's
// rows (rounded up to kM = 1, 2, 4 or 8; extra rows zero) in shared memory as bf16 — normalising fp32 rows on the
// way when the RMSNorm is fused (sum of squares in double, as rmsnorm_forward) — then each warp streams its two
// weight rows in 16-byte non-coherent loads, 4 or 8 chunks in flight per lane, and accumulates kM x 2 fp32 dot
// products; butterfly reductions leave every sum in every lane, and lane m applies the epilogue to row m. Residual
// calls with fewer units than warps share each unit's K among a few warps (Note [Skinny split K]). Each warp first
// prefetches its units' weight rows into L2 (up to kPrefetchBytes a call), so that every byte is requested at the
// start; launched to overlap its predecessor (SkinnyLinearArgs::overlap_launch), it does so before waiting for that
// kernel (dependent_launch.cuh). The rope epilogue reads its angles from the caller's table of (cos, sin) by
// position (SkinnyLinearArgs::rope_table) where it holds the position, and computes them as rope.cu does otherwise.
// Every instance asks for the decode chain's shared-memory carveout (kChainCarveout, dependent_launch.cuh).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/decode_ops.h"
#include "ops/cuda/dependent_launch.cuh"

namespace ft::gpu {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
// See Note [Skinny occupancy]: the blocks of one call per multiprocessor, which the registers are budgeted for
// (__launch_bounds__: 65536 / (kThreads * this) registers a thread).
constexpr int kBlocksPerSm = 2;
// A call prefetches each warp's units into L2 at its start (before its wait when launched to overlap), up to
// about this many bytes of weights in all (beyond it, lines prefetched early would be evicted before their use).
constexpr std::int64_t kPrefetchBytes = 24ll << 20;
// See Note [Skinny split K]: the most warps that share one unit, and the most shared memory a block may take
// with the partial sums it exchanges (beyond it, the call is not split).
constexpr int kMaxSplit = 4;
static_assert(kWarps % kMaxSplit == 0, "a block's warps form whole groups");
constexpr std::int64_t kSplitSharedBytes = 64 * 1024;
constexpr int kStage = 4;   // 16-byte input packs per thread in flight while staging
constexpr std::int64_t kDefaultSharedBytes = 48 * 1024;

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
  const float2* table;      // rope: (table_rows, Dh/2) (cos, sin) by position, or null
  std::int64_t table_rows;  // 0 without a table
  bool overlap;        // launched to overlap its predecessor (dependent_launch.cuh)
  int prefetch_units;  // how many of each warp's units (the first ones) to prefetch into L2 at the start
  int split;           // warps sharing a unit (Note [Skinny split K]): 1, 2 or 4
  int split_steps;     // the most chunk steps of one warp's share: ceil(steps / split)
};

// A named barrier of `warps` warps (ids from 1: 0 is __syncthreads').
__device__ __forceinline__ void group_barrier(int id, int warps) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(warps * 32) : "memory");
}

__device__ __forceinline__ float dot8(const uint4& w, const uint4& x) {
  const auto* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
  const auto* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(wp[i]), b = __bfloat1622float2(xp[i]);
    s = fmaf(a.x, b.x, s);
    s = fmaf(a.y, b.y, s);
  }
  return s;
}

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// The (cos, sin) of RoPE pair i at `position`, as rope.cu's table computes them (in double, rounded to fp32).
__device__ __forceinline__ float2 angle_of(double theta, std::int64_t position, std::int64_t i, std::int64_t Dh) {
  const double inv_freq = pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(Dh));
  double sin_a = 0, cos_a = 0;
  sincos(static_cast<double>(position) * inv_freq, &sin_a, &cos_a);
  return make_float2(static_cast<float>(cos_a), static_cast<float>(sin_a));
}

// (x0, x1) rotated by cs = (cos, sin) with rope.cu's unfused fp32 products, each rounded to bf16.
__device__ __forceinline__ void rotate(float x0, float x1, float2 cs, bf16* out0, bf16* out1) {
  *out0 = __float2bfloat16_rn(__fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y)));
  *out1 = __float2bfloat16_rn(__fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x)));
}

// The (cos, sin) the rope epilogue of output columns n0, n0 + 1 uses at position pos (q and k columns; (1, 0) for
// v): from the caller's table where it holds the position, computed otherwise.
__device__ __forceinline__ float2 rope_angle(const Args& a, std::int64_t pos, std::int64_t n0) {
  if (n0 >= 2 * a.d) return make_float2(1.f, 0.f);
  const std::int64_t i = n0 % a.d % a.Dh / 2;
  if (pos >= 0 && pos < a.table_rows) return a.table[pos * (a.Dh / 2) + i];
  return angle_of(a.theta, pos, i, a.Dh);
}

// Row m's epilogue for output column n0 (and n1: the second column, == n0 when there is none).
// cs, pos: rope_append's (cos, sin) for the columns (rope_angle) and the position; unused by the other modes.
template <int kMode>
__device__ __forceinline__ void epilogue(const Args& a, std::int64_t m, std::int64_t n0, std::int64_t n1, float v0,
                                         float v1, float2 cs, std::int64_t pos) {
  if constexpr (kMode == kStore) {
    if (a.y_f32) {
      float* y = static_cast<float*>(a.y) + m * a.y_stride;
      y[n0] = v0;
      if (n1 != n0) y[n1] = v1;
    } else {
      bf16* y = static_cast<bf16*>(a.y) + m * a.y_stride;
      y[n0] = __float2bfloat16_rn(v0);
      if (n1 != n0) y[n1] = __float2bfloat16_rn(v1);
    }
  } else if constexpr (kMode == kResidual) {
    float* y = static_cast<float*>(a.y) + m * a.y_stride;
    const float* r = a.res + m * a.res_stride;
    const float r0 = r[n0], r1 = r[n1];
    y[n0] = v0 + r0;
    if (n1 != n0) y[n1] = v1 + r1;
  } else if constexpr (kMode == kSwiglu) {
    const float x = round_bf16(v0), b = round_bf16(v1);
    static_cast<bf16*>(a.y)[m * a.y_stride + n0] = __float2bfloat16_rn(x * (1.0f / (1.0f + expf(-x))) * b);
  } else {
    const std::int64_t section = n0 / a.d, c = n0 % a.d, h = c / a.Dh, i = c % a.Dh / 2;
    if (section == 0) {
      bf16* y = static_cast<bf16*>(a.y) + m * a.y_stride + c;
      rotate(round_bf16(v0), round_bf16(v1), cs, y, y + 1);
    } else if (pos < a.capacity) {
      if (section == 1) {
        bf16* k = a.kc + m * a.kcb + h * a.kch + pos * a.kct + 2 * i;
        rotate(round_bf16(v0), round_bf16(v1), cs, k, k + 1);
      } else {
        bf16* v = a.vc + m * a.vcb + h * a.vch + pos * a.vct + 2 * i;
        v[0] = __float2bfloat16_rn(v0);
        v[1] = __float2bfloat16_rn(v1);
      }
    }
  }
}

// Note [Skinny occupancy]
// A call's grid holds kBlocksPerSm blocks per multiprocessor (fewer where the units run out), its warps sharing the
// units (two weight rows) out as evenly as they divide, and __launch_bounds__ budgets the registers for those
// blocks: at 2, 128 registers a thread, 8 chunks a row per lane in flight for up to 2 rows. A kernel launched to
// overlap its predecessor then becomes resident only where that one's blocks have exited, so its prefetch before
// the wait helps in the tail. Budgets for 4 blocks (64 registers, 4 chunks a row in flight), whether to fit the
// next call's blocks beside this one's or to give every warp of the xl decode's QKV, output projection and w2
// calls one unit, were slower on the xl decode: docs/perf-notes.md, "KV-cache decode".
//
// Note [Skinny split K]
// A call with fewer units than the grid's warps (xl's output projection and w2: 800 units for 2112 warps at two
// blocks per multiprocessor) would leave warps, and at 100 blocks multiprocessors, idle. Such calls give a unit
// to a group of `split` warps of one block instead: lane l's chunk steps j (its chunk at column l * 8 + 256 j; K /
// 256 of them, rounded up) are dealt out in contiguous ranges, warp `part` of the group taking
// [steps part / split, steps (part + 1) / split). Part 0 accumulates its own range as before; the others store
// each chunk's dot product (per row and lane) in shared memory, and after a barrier of the group part 0 adds them
// in step order to its sums — the same additions in the same order as one warp alone, so the same bits — then
// reduces and applies the epilogue. A second barrier frees the partials for the group's next unit. Only the
// residual epilogue (the output projection and w2 of a decode step) splits: the others keep the registers the
// split's bookkeeping would take.
template <int kM, int kMode, bool kNorm>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) skinny_kernel(Args a) {
  // 16-byte weight chunks per lane in flight, per row: 8 (a whole 2048-column row per round trip) where the
  // registers allow, 4 with the accumulators of more rows.
  constexpr int kUnroll = kM <= 2 ? 8 : 4;
  extern __shared__ __align__(16) unsigned char staged[];
  __shared__ double scratch[32];
  bf16* xs = reinterpret_cast<bf16*>(staged);  // (kM, K)
  const std::int64_t K = a.K;
  const int lane = threadIdx.x % 32;
  const std::int64_t units = kMode == kSwiglu ? a.N : (a.N + 1) / 2;
  // This warp's group and part of it (Note [Skinny split K]), and its share of each row: columns from k_begin (this
  // lane's first chunk) to k_end.
  const int split = kMode == kResidual ? a.split : 1;  // a constant 1 for the epilogues that do not split
  const int groups = kWarps / split, part = threadIdx.x / 32 % split, group = threadIdx.x / 32 / split;
  const std::int64_t steps = (K + 255) / 256;
  const std::int64_t k_begin = split == 1 ? lane * 8 : steps * part / split * 256 + lane * 8;
  const std::int64_t k_end = split == 1 ? K : std::min(K, steps * (part + 1) / split * 256);
  // (groups, split - 1, kM, 2, split_steps, 32) fp32 after x': the dot products of parts 1.. for part 0.
  float* partials = reinterpret_cast<float*>(xs + kM * K);
  const auto partial = [&](int p, int m, int r, int jj) -> float& {
    return partials[((((group * (split - 1) + p - 1) * kM + m) * 2 + r) * a.split_steps + jj) * 32 + lane];
  };
  const auto rows_of = [&](std::int64_t unit, std::int64_t& n0, std::int64_t& n1, const bf16*& wa, const bf16*& wb) {
    if constexpr (kMode == kSwiglu) {
      n0 = n1 = unit;
      wa = a.w + n0 * K;
      wb = a.w3 + n0 * K;
    } else {
      n0 = 2 * unit;
      n1 = n0 + 1 < a.N ? n0 + 1 : n0;
      wa = a.w + n0 * K;
      wb = a.w + n1 * K;
    }
  };
  // kUnroll 16-byte chunks of each of the rows from column k0, 256 apart (zeros from k_end).
  const auto load_chunks = [&](const bf16* wa, const bf16* wb, std::int64_t k0, uint4* va, uint4* vb) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t k = k0 + u * 32 * 8;
      va[u] = vb[u] = make_uint4(0, 0, 0, 0);
      if (k < k_end) {
        va[u] = __ldg(reinterpret_cast<const uint4*>(wa + k));
        vb[u] = __ldg(reinterpret_cast<const uint4*>(wb + k));
      }
    }
  };
  // The first chunks of this warp's first unit go into registers, the rest of its share and its share of its
  // next prefetch_units - 1 units into L2, before the wait (they do not depend on the previous kernel: on their
  // way while it finishes) and the staging below, so that the weights' memory latency overlaps them and every
  // byte is requested in the first round trip (the later chunks then come from L2).
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * groups + group;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * groups;
  uint4 va[kUnroll], vb[kUnroll];
  if (first < units) {
    std::int64_t n0 = 0, n1 = 0;
    const bf16 *wa = nullptr, *wb = nullptr;
    rows_of(first, n0, n1, wa, wb);
    load_chunks(wa, wb, k_begin, va, vb);
    const std::int64_t line0 = k_begin - lane * 8 + lane * 64;  // one 128-byte line (64 elements) a lane
    std::int64_t unit = first, k_from = line0 + 32 * 8 * kUnroll;  // the first unit: past the chunks' columns
    for (int t = 0; t < a.prefetch_units && unit < units; ++t, unit += stride, k_from = line0) {
      rows_of(unit, n0, n1, wa, wb);
      for (std::int64_t k = k_from; k < k_end; k += 32 * 64) {
        prefetch_l2(wa + k);
        prefetch_l2(wb + k);
      }
    }
  }
  // rope_append: the position (written before the previous kernel, see SkinnyLinearArgs::overlap_launch) and
  // lane j's angle of this warp's j-th unit (from the table, else computed), before the wait and once per warp in
  // parallel, not once per unit in turn.
  std::int64_t pos = 0;
  float2 lane_cs = make_float2(1.f, 0.f);
  if constexpr (kMode == kRope) {
    pos = *a.position;
    const std::int64_t unit = first + lane * stride;
    if (unit < units) lane_cs = rope_angle(a, pos, 2 * unit);
  }
  wait_for_previous_grid();
  allow_next_grid();

  // Stage x' of every row, kStage 16-byte packs per thread loaded before any is used: one memory round trip
  // per kStage x 1024 (fp32) or 8192 (bf16) columns, not one per 256.
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    bf16* row = xs + m * K;
    if (m >= a.M) {
      for (std::int64_t k = threadIdx.x * 8; k < K; k += kThreads * 8)
        *reinterpret_cast<uint4*>(row + k) = make_uint4(0, 0, 0, 0);
      continue;
    }
    if constexpr (kNorm) {
      const float* xr = static_cast<const float*>(a.x) + m * a.x_stride;
      const auto load4 = [K](const float* p, std::int64_t k) {
        return k < K ? *reinterpret_cast<const float4*>(p + k) : make_float4(0.f, 0.f, 0.f, 0.f);
      };
      // kStage packs of x (and of the norm weights) per thread and pass (4096 columns): the first pass's stay in
      // registers for the normalisation, so that for K <= kPass (xl: 1600) x is read once, with no second
      // dependent round trip after the reduction; later passes are read again. The sum of squares adds in the
      // same order either way (a thread's columns in order: the zeros past K add nothing).
      constexpr std::int64_t kPass = kThreads * 4 * kStage;
      const std::int64_t k_first = threadIdx.x * 4;
      const auto add_squares = [](double& ss, const float4* v) {
#pragma unroll
        for (int u = 0; u < kStage; ++u)
          ss += static_cast<double>(v[u].x) * v[u].x + static_cast<double>(v[u].y) * v[u].y +
                static_cast<double>(v[u].z) * v[u].z + static_cast<double>(v[u].w) * v[u].w;
      };
      float4 v[kStage], g[kStage];  // the first pass's
#pragma unroll
      for (int u = 0; u < kStage; ++u) {
        v[u] = load4(xr, k_first + u * kThreads * 4);
        g[u] = load4(a.norm_w, k_first + u * kThreads * 4);
      }
      double ss = 0;
      add_squares(ss, v);
      for (std::int64_t k0 = k_first + kPass; k0 < K; k0 += kPass) {
        float4 w[kStage];
#pragma unroll
        for (int u = 0; u < kStage; ++u) w[u] = load4(xr, k0 + u * kThreads * 4);
        add_squares(ss, w);
      }
      ss = block_reduce(ss, SumOp{}, scratch);
      const float s = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(K) + a.eps));
      const auto norm = [s](float x, float w) { return __fmul_rn(__fmul_rn(x, s), w); };
      const auto write = [&](std::int64_t k0, const float4* v, const float4* g) {
#pragma unroll
        for (int u = 0; u < kStage; ++u) {
          const std::int64_t k = k0 + u * kThreads * 4;
          if (k >= K) break;
          auto* out = reinterpret_cast<__nv_bfloat162*>(row + k);
          out[0] = __floats2bfloat162_rn(norm(v[u].x, g[u].x), norm(v[u].y, g[u].y));
          out[1] = __floats2bfloat162_rn(norm(v[u].z, g[u].z), norm(v[u].w, g[u].w));
        }
      };
      write(k_first, v, g);
      for (std::int64_t k0 = k_first + kPass; k0 < K; k0 += kPass) {
        float4 w[kStage], h[kStage];
#pragma unroll
        for (int u = 0; u < kStage; ++u) {
          w[u] = load4(xr, k0 + u * kThreads * 4);
          h[u] = load4(a.norm_w, k0 + u * kThreads * 4);
        }
        write(k0, w, h);
      }
    } else {
      const bf16* xr = static_cast<const bf16*>(a.x) + m * a.x_stride;
      for (std::int64_t k0 = threadIdx.x * 8; k0 < K; k0 += kThreads * 8 * kStage) {
        uint4 v[kStage];
#pragma unroll
        for (int u = 0; u < kStage; ++u) {
          const std::int64_t k = k0 + u * kThreads * 8;
          if (k < K) v[u] = *reinterpret_cast<const uint4*>(xr + k);
        }
#pragma unroll
        for (int u = 0; u < kStage; ++u) {
          const std::int64_t k = k0 + u * kThreads * 8;
          if (k < K) *reinterpret_cast<uint4*>(row + k) = v[u];
        }
      }
    }
  }
  __syncthreads();

  // Each group takes units (two weight rows) blockIdx.x * groups + group, then every gridDim.x * groups-th: few
  // enough blocks that staging x' stays cheap beside the weights, enough to keep the memory system busy.
  for (std::int64_t unit = first; unit < units; unit += stride) {
    std::int64_t n0 = 0, n1 = 0;
    const bf16 *wa = nullptr, *wb = nullptr;
    rows_of(unit, n0, n1, wa, wb);
    float acc0[kM], acc1[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) acc0[m] = acc1[m] = 0.f;
    for (std::int64_t k0 = k_begin; k0 < k_end; k0 += 32 * 8 * kUnroll) {
      if (unit != first || k0 != k_begin) load_chunks(wa, wb, k0, va, vb);  // the first are loaded above
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int64_t k = k0 + u * 32 * 8;
        if (k >= k_end) break;
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          const uint4 xv = *reinterpret_cast<const uint4*>(xs + m * K + k);
          const float d0 = dot8(va[u], xv), d1 = dot8(vb[u], xv);
          if (part == 0) {
            acc0[m] += d0;
            acc1[m] += d1;
          } else {
            const int jj = static_cast<int>((k - k_begin) / 256);
            partial(part, m, 0, jj) = d0;
            partial(part, m, 1, jj) = d1;
          }
        }
      }
    }
    if (split > 1) {
      group_barrier(1 + group, split);
      if (part == 0) {
        for (int p = 1; p < split; ++p) {  // the other parts' dot products, in step order
          const std::int64_t j_begin = steps * p / split, j_end = steps * (p + 1) / split;
          for (std::int64_t j = j_begin; j < j_end && lane * 8 + j * 256 < K; ++j) {
#pragma unroll
            for (int m = 0; m < kM; ++m) {
              acc0[m] += partial(p, m, 0, static_cast<int>(j - j_begin));
              acc1[m] += partial(p, m, 1, static_cast<int>(j - j_begin));
            }
          }
        }
      }
      group_barrier(1 + group, split);  // the partials are read: free for the group's next unit
      if (part != 0) continue;
    }
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      acc0[m] = warp_reduce(acc0[m], SumOp{});
      acc1[m] = warp_reduce(acc1[m], SumOp{});
    }
    float2 cs = make_float2(1.f, 0.f);
    if constexpr (kMode == kRope) {
      const std::int64_t t = (unit - first) / stride;  // this unit's place among the warp's (the same in every lane)
      cs = t < 32 ? make_float2(__shfl_sync(0xffffffffu, lane_cs.x, static_cast<int>(t)),
                                __shfl_sync(0xffffffffu, lane_cs.y, static_cast<int>(t)))
                  : rope_angle(a, pos, n0);
    }
#pragma unroll
    for (int m = 0; m < kM; ++m)
      if (lane == m && m < a.M) epilogue<kMode>(a, m, n0, n1, acc0[m], acc1[m], cs, pos);
  }
}

template <int kM, int kMode, bool kNorm>
void launch(Args a, Device device, int sms, cudaStream_t stream) {
  const std::int64_t units = kMode == kSwiglu ? a.N : (a.N + 1) / 2;
  const std::int64_t warps = static_cast<std::int64_t>(kBlocksPerSm) * sms * kWarps;  // the grid's most
  const std::int64_t steps = ceil_div(a.K, std::int64_t{256}), staged = kM * a.K * sizeof(bf16);
  // The partials' bytes a block needs with `split` warps a unit (Note [Skinny split K]).
  const auto partial_bytes = [&](std::int64_t split) {
    return kWarps / split * (split - 1) * kM * 2 * ceil_div(steps, split) * 32 * std::int64_t{sizeof(float)};
  };
  // Split while the units of all groups fit the grid at once, every part keeps two chunk steps or more and the
  // partials fit kSplitSharedBytes beside x'.
  a.split = 1;
  while (kMode == kResidual && a.split < kMaxSplit && units * 2 * a.split <= warps && steps >= 4 * a.split &&
         staged + partial_bytes(2 * a.split) <= kSplitSharedBytes)
    a.split *= 2;
  a.split_steps = static_cast<int>(ceil_div(steps, std::int64_t{a.split}));
  const std::int64_t groups = kWarps / a.split;
  // The whole grid (fewer blocks only where the units run out): every multiprocessor then streams about the
  // same share of the weights, whose bytes the prefetch below requests at the start, and a group takes
  // per_group or per_group - 1 units. (Equal units for every group instead would leave, e.g. for xl's QKV,
  // 150 blocks: 18 multiprocessors with twice the others' weights.)
  const std::int64_t per_group = ceil_div(units, warps / a.split);  // the most units of a group
  const auto blocks = static_cast<unsigned>(std::min(warps / kWarps, ceil_div(units, groups)));
  // Units of all groups prefetched per round: as many rounds as kPrefetchBytes holds, at least the first.
  const std::int64_t round_bytes = static_cast<std::int64_t>(blocks) * groups * 2 * a.K * sizeof(bf16);
  a.prefetch_units = static_cast<int>(std::clamp<std::int64_t>(kPrefetchBytes / round_bytes, 1, per_group));
  const auto smem = static_cast<std::size_t>(staged + (a.split > 1 ? partial_bytes(a.split) : 0));
  if (smem > static_cast<std::size_t>(kDefaultSharedBytes))
    FT_CUDA_CHECK(cudaFuncSetAttribute(skinny_kernel<kM, kMode, kNorm>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  use_chain_carveout(reinterpret_cast<const void*>(skinny_kernel<kM, kMode, kNorm>), device);
  launch_kernel(skinny_kernel<kM, kMode, kNorm>, blocks, kThreads, smem, stream, a.overlap, a);
}

template <int kMode, bool kNorm>
void launch_rows(const Args& a, Device device, int sms, cudaStream_t stream) {
  if (a.M <= 1)
    launch<1, kMode, kNorm>(a, device, sms, stream);
  else if (a.M <= 2)
    launch<2, kMode, kNorm>(a, device, sms, stream);
  else if (a.M <= 4)
    launch<4, kMode, kNorm>(a, device, sms, stream);
  else
    launch<8, kMode, kNorm>(a, device, sms, stream);
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
    if (s.rope_table.defined()) {
      a.table = static_cast<const float2*>(s.rope_table.data());
      a.table_rows = s.rope_table.size(0);
    }
  }
  if (a.M * a.N == 0) return;
  CudaDeviceGuard guard(s.x.device().index);
  const cudaStream_t stream = cuda_stream(s.stream);
  const Device device = s.x.device();
  const int sms = multiprocessors(device);
  a.overlap = s.overlap_launch && supports_dependent_launch(device);
  switch (s.epilogue) {
    case SkinnyEpilogue::store:
      norm ? launch_rows<kStore, true>(a, device, sms, stream) : launch_rows<kStore, false>(a, device, sms, stream);
      break;
    case SkinnyEpilogue::residual: launch_rows<kResidual, false>(a, device, sms, stream); break;
    case SkinnyEpilogue::swiglu:
      norm ? launch_rows<kSwiglu, true>(a, device, sms, stream) : launch_rows<kSwiglu, false>(a, device, sms, stream);
      break;
    case SkinnyEpilogue::rope_append:
      norm ? launch_rows<kRope, true>(a, device, sms, stream) : launch_rows<kRope, false>(a, device, sms, stream);
      break;
  }
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::gpu
