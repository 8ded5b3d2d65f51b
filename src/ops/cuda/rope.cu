// rope.cu — CUDA rotary embedding on interleaved pairs, in place. A first kernel fills a (T, Dh/2) table
// of (cos, sin) computed in double and rounded to fp32 (the CPU's table, value for value); the second
// rotates every pair of every (b, h, t) row through the tensor's strides, up to four pairs of several heads a
// thread (see Note [RoPE rotation threads]), with the CPU's unfused fp32 products. With per-token positions the
// row reads the table at its position instead of t (NaN for a position outside [0, T)).
// rope_append's one kernel does the same rotation for q and k at a position read from device memory (each
// thread computing its pair's angle as the table does) and writes k and v into the cache. rope_table fills the
// first kernel's table for positions [0, T) into a caller's tensor (the fused decode GEMM reads it).
#include <cstdint>

#include "core/buffer.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace ft::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int kHeadsPerThread = 8;  // heads a rotating thread takes (see Note [RoPE rotation threads])

// table (T, half) <- (cos, sin) of (offset + t) * theta^(-2i / Dh); sin negated for the inverse.
__global__ void table_kernel(float2* __restrict__ table, std::int64_t T, std::int64_t half, std::int64_t Dh,
                             double theta, std::int64_t offset, bool inverse) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < T * half;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = e / half, i = e % half;
    const double inv_freq = pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(Dh));
    const double angle = static_cast<double>(offset + t) * inv_freq;
    double sin_a = 0, cos_a = 0;
    sincos(angle, &sin_a, &cos_a);
    table[e] = make_float2(static_cast<float>(cos_a), static_cast<float>(inverse ? -sin_a : sin_a));
  }
}

// Note [RoPE rotation threads]
// A thread rotates one pack of kPairs consecutive pairs (kPairs > 1: one access of 2 kPairs elements; 1: element
// accesses, any strides) at one position t of one batch row b, for up to kHeadsPerThread heads: it reads its
// pairs' (cos, sin) from the table once for all those heads (the table, T x Dh/2 x 8 bytes, is twice a bf16
// head's rows: read again for every head it moved more bytes, from L2, than the rotation itself) and issues
// every head's load before the first store. The grid is (position rows, head groups, batch): no integer division
// per element.

// x (B, H, T, Dh) strided, rotated in place; a block of (packs of a row, positions) threads, grid (ceil(T /
// blockDim.y), ceil(H / kHeadsPerThread), B). See Note [RoPE rotation threads].
template <class E, int kPairs>
__global__ void __launch_bounds__(kThreads)
    rotate_kernel(E* __restrict__ x, std::int64_t H, std::int64_t T, std::int64_t half, std::int64_t sb,
                  std::int64_t sh, std::int64_t st, const float2* __restrict__ table,
                  const std::int32_t* __restrict__ positions /* (B, T) or null */) {
  constexpr int N = 2 * kPairs;
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  if (t >= T) return;
  const std::int64_t b = blockIdx.z, h0 = static_cast<std::int64_t>(blockIdx.y) * kHeadsPerThread;
  const std::int64_t pos = positions ? positions[b * T + t] : t;
  const bool valid = pos >= 0 && pos < T;
  const float nan = __int_as_float(0x7fc00000);
  for (std::int64_t i0 = static_cast<std::int64_t>(threadIdx.x) * kPairs; i0 < half;
       i0 += static_cast<std::int64_t>(blockDim.x) * kPairs) {
    const Pack<float2, kPairs> cs = valid ? load_pack<kPairs>(table + pos * half + i0) : Pack<float2, kPairs>{};
    E* row = x + b * sb + t * st + 2 * i0;  // head h0's pairs, (2 kPairs)
    Pack<E, N> p[kHeadsPerThread];
#pragma unroll
    for (int j = 0; j < kHeadsPerThread; ++j) {
      if (h0 + j >= H) break;
      const E* v = row + (h0 + j) * sh;
      if constexpr (kPairs > 1) {
        p[j] = load_pack<N>(v);
      } else {
        p[j].v[0] = v[0];
        p[j].v[1] = v[1];
      }
    }
#pragma unroll
    for (int j = 0; j < kHeadsPerThread; ++j) {
      if (h0 + j >= H) break;
#pragma unroll
      for (int k = 0; k < kPairs; ++k) {
        const float x0 = to_f32(p[j].v[2 * k]), x1 = to_f32(p[j].v[2 * k + 1]);
        const float c = valid ? cs.v[k].x : nan, s = valid ? cs.v[k].y : nan;
        p[j].v[2 * k] = from_f32<E>(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)));
        p[j].v[2 * k + 1] = from_f32<E>(__fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c)));
      }
      E* v = row + (h0 + j) * sh;
      if constexpr (kPairs > 1) {
        store_pack<N>(v, p[j]);
      } else {
        v[0] = p[j].v[0];
        v[1] = p[j].v[1];
      }
    }
  }
}

// The (cos, sin) of pair i at position `position`, as table_kernel computes it.
__device__ __forceinline__ float2 angle_of(double theta, std::int64_t position, std::int64_t i, std::int64_t Dh) {
  const double inv_freq = pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(Dh));
  double sin_a = 0, cos_a = 0;
  sincos(static_cast<double>(position) * inv_freq, &sin_a, &cos_a);
  return make_float2(static_cast<float>(cos_a), static_cast<float>(sin_a));
}

// Strides of a (B, H, T, Dh) view, in elements.
struct Strides4 {
  std::int64_t b, h, t;
};

// One thread per pair of (B, Hq + 2 Hkv, T, half): the first Hq heads rotate q in place, the next Hkv rotate
// k into the cache at *position + t, the last Hkv copy v there.
template <class E>
__global__ void rope_append_kernel(E* q, Strides4 qs, const E* k, Strides4 ks, const E* v, Strides4 vs, E* kc,
                                   Strides4 kcs, E* vc, Strides4 vcs, const std::int32_t* __restrict__ position,
                                   std::int64_t capacity, std::int64_t Hq, std::int64_t Hkv, std::int64_t T,
                                   std::int64_t half, double theta) {
  const std::int64_t heads = Hq + 2 * Hkv, pairs = heads * T * half;
  const std::int64_t b = blockIdx.y;
  const std::int64_t p0 = *position;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < pairs;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = e % half, t = e / half % T, h = e / (half * T);
    const std::int64_t pos = p0 + t;
    if (h < Hq) {
      E* x = q + b * qs.b + h * qs.h + t * qs.t + 2 * i;
      const float2 cs = angle_of(theta, pos, i, 2 * half);
      const float x0 = to_f32(x[0]), x1 = to_f32(x[1]);
      x[0] = from_f32<E>(__fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y)));
      x[1] = from_f32<E>(__fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x)));
      continue;
    }
    if (pos >= capacity) continue;
    if (h < Hq + Hkv) {
      const std::int64_t hk = h - Hq;
      const E* x = k + b * ks.b + hk * ks.h + t * ks.t + 2 * i;
      E* y = kc + b * kcs.b + hk * kcs.h + pos * kcs.t + 2 * i;
      const float2 cs = angle_of(theta, pos, i, 2 * half);
      const float x0 = to_f32(x[0]), x1 = to_f32(x[1]);
      y[0] = from_f32<E>(__fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y)));
      y[1] = from_f32<E>(__fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x)));
    } else {
      const std::int64_t hv = h - Hq - Hkv;
      const E* x = v + b * vs.b + hv * vs.h + t * vs.t + 2 * i;
      E* y = vc + b * vcs.b + hv * vcs.h + pos * vcs.t + 2 * i;
      y[0] = x[0];
      y[1] = x[1];
    }
  }
}

Strides4 strides4(const Tensor& x) { return {x.stride(0), x.stride(1), x.stride(2)}; }

constexpr std::int64_t kMaxGridYZ = 65535;  // CUDA's bound on a grid's y and z

}  // namespace

void rope_append(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache,
                 const std::int32_t* position, double theta, const Stream& stream) {
  const std::int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), half = q.size(3) / 2, Hkv = k.size(1);
  const std::int64_t pairs = (Hq + 2 * Hkv) * T * half;
  if (B * pairs == 0) return;
  CudaDeviceGuard guard(q.device().index);
  const dim3 grid(static_cast<unsigned>(ceil_div(pairs, kThreads)), static_cast<unsigned>(B));
  with_cuda_dtype(q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    rope_append_kernel<E><<<grid, kThreads, 0, cuda_stream(stream)>>>(
        static_cast<E*>(q.data()), strides4(q), static_cast<const E*>(k.data()), strides4(k),
        static_cast<const E*>(v.data()), strides4(v), static_cast<E*>(k_cache.data()), strides4(k_cache),
        static_cast<E*>(v_cache.data()), strides4(v_cache), position, k_cache.size(2), Hq, Hkv, T, half, theta);
  });
  FT_CUDA_CHECK_LAUNCH();
}

void rope_table(const Tensor& table, double theta, const Stream& stream) {
  const std::int64_t T = table.size(0), half = table.size(1);
  if (T == 0) return;
  CudaDeviceGuard guard(table.device().index);
  table_kernel<<<grid_for(T * half, kThreads), kThreads, 0, cuda_stream(stream)>>>(
      static_cast<float2*>(table.data()), T, half, 2 * half, theta, 0, false);
  FT_CUDA_CHECK_LAUNCH();
}

void rope(const Tensor& x, double theta, std::int64_t position_offset, const std::int32_t* positions, bool inverse,
          const Stream& stream) {
  const std::int64_t B = x.size(0), H = x.size(1), T = x.size(2), Dh = x.size(3), half = Dh / 2;
  if (B * H * T * half == 0) return;
  const Device device = x.device();
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  Buffer table(static_cast<std::size_t>(T * half) * sizeof(float2), device, "rope table", stream);  // (T, half)
  auto* tp = static_cast<float2*>(table.data());
  table_kernel<<<grid_for(T * half, kThreads), kThreads, 0, s>>>(tp, T, half, Dh, theta, position_offset, inverse);
  FT_CUDA_CHECK_LAUNCH();
  const std::int64_t sb = x.stride(0), sh = x.stride(1), st = x.stride(2);
  const std::int64_t head_groups = ceil_div(H, kHeadsPerThread);
  FT_CHECK(B <= kMaxGridYZ && head_groups <= kMaxGridYZ, "rope (CUDA): at most ", kMaxGridYZ, " batch rows and ",
           kMaxGridYZ * kHeadsPerThread, " heads, given ", B, " and ", H);
  with_cuda_dtype(x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    auto* xp = static_cast<E*>(x.data());
    // Pairs a thread takes: the largest of 4, 2, 1 whose packs every stride and the address allow.
    const auto fits = [&](std::int64_t pairs) {
      const std::int64_t n = 2 * pairs;
      return half % pairs == 0 && (B == 1 || sb % n == 0) && (H == 1 || sh % n == 0) && (T == 1 || st % n == 0) &&
             pack_aligned(xp, static_cast<int>(n), sizeof(E));
    };
    const auto launch = [&](auto pairs_tag) {
      constexpr int kPairs = decltype(pairs_tag)::value;
      const std::int64_t packs = half / kPairs;  // a row's packs
      const int tx = static_cast<int>(packs < kThreads ? packs : kThreads), ty = kThreads / tx;
      const dim3 grid(static_cast<unsigned>(ceil_div(T, ty)), static_cast<unsigned>(head_groups),
                      static_cast<unsigned>(B));
      rotate_kernel<E, kPairs><<<grid, dim3(tx, ty), 0, s>>>(xp, H, T, half, sb, sh, st, tp, positions);
    };
    if (fits(4))
      launch(std::integral_constant<int, 4>{});
    else if (fits(2))
      launch(std::integral_constant<int, 2>{});
    else
      launch(std::integral_constant<int, 1>{});
  });
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::gpu
