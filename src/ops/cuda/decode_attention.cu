// decode_attention.cu — flash-decoding for a few queries per row against a KV cache whose length is read from
// device memory (see ops/decode_attention.h). Grid (splits, Hkv x groups, B), 4 warps per block: a block takes
// up to kDecodeRowsPerBlock query rows of one KV head (its query heads x new positions) and the split's share
// of the keys; each warp walks every 4th key of that share, loading several keys' rows before using them, each
// lane holding kPairs bf16/fp16/fp32 pairs of the head dim, and keeps an online softmax (log2 domain, fp32) per
// row; the warps' states merge in shared memory. With one split the block writes o; with several, each writes
// its (max, sum, accumulator) partial to the workspace, and the last block of the group to arrive (an atomic
// counter it resets) merges the splits in split order and writes o — the same order whichever block is last,
// so the result is deterministic.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "ops/cuda/common.cuh"
#include "ops/cuda/decode_ops.h"
#include "ops/cuda/dependent_launch.cuh"

namespace ft::gpu {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = static_cast<int>(kDecodeRowsPerBlock);
constexpr float kLog2e = 1.4426950408889634f;

struct View4 {
  const void* data;
  std::int64_t b, h, t;  // strides in elements (the last dim is contiguous)
};

struct Params {
  View4 q, k, v;
  void* o;
  std::int64_t ob, oh, ot;
  const float* sinks;  // (Hq) or null
  const std::int32_t* past;
  std::int64_t capacity, Hq, Hkv, Nq, D, groups;
  float scale_log2;  // scale * log2(e)
  std::int64_t window_left, sink_tokens;
  int splits;
  int* counters;   // (B, Hkv * groups)
  float* partial;  // (B, Hkv * groups, splits, kRows, D + 2): accumulator, max, sum
};

// The output of one row from its merged state (log2 domain): acc / sum, with the sink logit (natural units)
// in the denominator.
__device__ __forceinline__ float finish(float acc, float m, float l, const float* sinks, std::int64_t h) {
  if (sinks) {
    const float s2 = sinks[h] * kLog2e;
    const float mx = fmaxf(m, s2);
    const float f = exp2f(m - mx);
    return l > 0 ? acc * f / (l * f + exp2f(s2 - mx)) : 0.0f;
  }
  return l > 0 ? acc / l : 0.0f;
}

template <class E, int kPairs>
__global__ void __launch_bounds__(kThreads) decode_kernel(Params p) {
  constexpr int kDim = 64 * kPairs;                // head dims a warp covers (>= D)
  constexpr int kKeys = kPairs == 1 ? 8 : kPairs == 2 ? 4 : 2;  // keys a warp loads at once
  __shared__ float s_acc[kWarps][kRows][kDim];
  __shared__ float s_m[kWarps][kRows], s_l[kWarps][kRows];
  __shared__ int s_last;

  wait_for_previous_grid();  // everything below depends on the previous kernel (see dependent_launch.cuh)
  allow_next_grid();
  const int split = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t group = blockIdx.y, kvh = group / p.groups, b = blockIdx.z;
  const std::int64_t G = p.Hq / p.Hkv, R = G * p.Nq;
  const std::int64_t r0 = group % p.groups * kRows;
  const int nr = static_cast<int>(R - r0 < kRows ? R - r0 : kRows);
  const std::int64_t Nk_raw = static_cast<std::int64_t>(*p.past) + p.Nq;
  const std::int64_t Nk = Nk_raw < p.capacity ? Nk_raw : p.capacity;
  const std::int64_t off = Nk - p.Nq;  // query i sees keys j <= i + off
  const std::int64_t per = (Nk + p.splits - 1) / p.splits;
  const std::int64_t j0 = split * per, j1 = j0 + per < Nk ? j0 + per : Nk;

  // This lane's head dims: pairs d = 2 (lane + 32 c), c < kPairs, those below D.
  const E* q_base = static_cast<const E*>(p.q.data);
  float2 q[kRows][kPairs];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const std::int64_t rg = r0 + r, h = kvh * G + rg / p.Nq, i = rg % p.Nq;
#pragma unroll
    for (int c = 0; c < kPairs; ++c) {
      const std::int64_t d = 2 * (lane + 32 * c);
      q[r][c] = make_float2(0.f, 0.f);
      if (r < nr && d < p.D) {
        const Pack<E, 2> x = load_pack<2>(q_base + b * p.q.b + h * p.q.h + i * p.q.t + d);
        q[r][c] = make_float2(to_f32(x.v[0]) * p.scale_log2, to_f32(x.v[1]) * p.scale_log2);
      }
    }
  }
  float m[kRows], l[kRows];
  float2 acc[kRows][kPairs];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < kPairs; ++c) acc[r][c] = make_float2(0.f, 0.f);
  }

  const E* k_base = static_cast<const E*>(p.k.data) + b * p.k.b + kvh * p.k.h;
  const E* v_base = static_cast<const E*>(p.v.data) + b * p.v.b + kvh * p.v.h;
  // kKeys keys per warp at a time: all their K and V rows are loaded before any is used, so that many loads
  // are in flight per warp (one key at a time waits a memory latency per key).
  for (std::int64_t jb = j0 + warp; jb < j1; jb += kWarps * kKeys) {
    float2 kf[kKeys][kPairs], vf[kKeys][kPairs];
#pragma unroll
    for (int u = 0; u < kKeys; ++u) {
      const std::int64_t j = jb + u * kWarps;
#pragma unroll
      for (int c = 0; c < kPairs; ++c) {
        const std::int64_t d = 2 * (lane + 32 * c);
        kf[u][c] = vf[u][c] = make_float2(0.f, 0.f);
        if (j < j1 && d < p.D) {
          const Pack<E, 2> kx = load_pack<2>(k_base + j * p.k.t + d), vx = load_pack<2>(v_base + j * p.v.t + d);
          kf[u][c] = make_float2(to_f32(kx.v[0]), to_f32(kx.v[1]));
          vf[u][c] = make_float2(to_f32(vx.v[0]), to_f32(vx.v[1]));
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kKeys; ++u) {
      const std::int64_t j = jb + u * kWarps;
      if (j >= j1) break;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= nr) break;
        const std::int64_t i = (r0 + r) % p.Nq;
        const bool visible = j <= i + off &&
                             (p.window_left < 0 || j >= i + off - p.window_left || j < p.sink_tokens);
        float dot = 0.f;
#pragma unroll
        for (int c = 0; c < kPairs; ++c) dot += q[r][c].x * kf[u][c].x + q[r][c].y * kf[u][c].y;
        dot = warp_reduce(dot, SumOp{});
        if (!visible) continue;
        const float m_new = fmaxf(m[r], dot);
        const float alpha = exp2f(m[r] - m_new), pj = exp2f(dot - m_new);
        m[r] = m_new;
        l[r] = l[r] * alpha + pj;
#pragma unroll
        for (int c = 0; c < kPairs; ++c) {
          acc[r][c].x = acc[r][c].x * alpha + pj * vf[u][c].x;
          acc[r][c].y = acc[r][c].y * alpha + pj * vf[u][c].y;
        }
      }
    }
  }

  // Merge the warps: each warp's state to shared memory, then every thread merges some (row, dim) entries.
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < kPairs; ++c) {
      const int d = 2 * (lane + 32 * c);
      s_acc[warp][r][d] = acc[r][c].x;
      s_acc[warp][r][d + 1] = acc[r][c].y;
    }
    if (lane == 0) {
      s_m[warp][r] = m[r];
      s_l[warp][r] = l[r];
    }
  }
  __syncthreads();
  const std::int64_t D = p.D, slot = (b * p.Hkv * p.groups + group);
  float* partial = p.partial + slot * p.splits * kRows * (D + 2);  // (splits, kRows, D + 2)
  for (int e = threadIdx.x; e < nr * (D + 2); e += kThreads) {
    const int r = e / static_cast<int>(D + 2), d = e % static_cast<int>(D + 2);
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w][r]);
    float acc_r = 0.f, l_r = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = s_m[w][r] == -INFINITY ? 0.f : exp2f(s_m[w][r] - mx);
      l_r += s_l[w][r] * f;
      if (d < D) acc_r += s_acc[w][r][d] * f;
    }
    const std::int64_t rg = r0 + r, h = kvh * G + rg / p.Nq, i = rg % p.Nq;
    if (p.splits == 1) {
      if (d < D) {
        E* o = static_cast<E*>(p.o) + b * p.ob + h * p.oh + i * p.ot + d;
        *o = from_f32<E>(finish(acc_r, mx, l_r, p.sinks, h));
      }
    } else {
      partial[(split * kRows + r) * (D + 2) + d] = d < D ? acc_r : d == D ? mx : l_r;
    }
  }
  if (p.splits == 1) return;

  // The last block of the group merges the splits.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(p.counters + slot, 1) == p.splits - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  for (int e = threadIdx.x; e < nr * D; e += kThreads) {
    const int r = e / static_cast<int>(D), d = e % static_cast<int>(D);
    float mx = -INFINITY;
#pragma unroll 8
    for (int s = 0; s < p.splits; ++s) mx = fmaxf(mx, __ldcg(partial + (s * kRows + r) * (D + 2) + D));
    float acc_r = 0.f, l_r = 0.f;
#pragma unroll 8
    for (int s = 0; s < p.splits; ++s) {
      const float* part = partial + (s * kRows + r) * (D + 2);
      const float ms = __ldcg(part + D);
      const float f = ms == -INFINITY ? 0.f : exp2f(ms - mx);
      l_r += __ldcg(part + D + 1) * f;
      acc_r += __ldcg(part + d) * f;
    }
    const std::int64_t rg = r0 + r, h = kvh * G + rg / p.Nq, i = rg % p.Nq;
    E* o = static_cast<E*>(p.o) + b * p.ob + h * p.oh + i * p.ot + d;
    *o = from_f32<E>(finish(acc_r, mx, l_r, p.sinks, h));
  }
  if (threadIdx.x == 0) p.counters[slot] = 0;  // ready for the next call (or graph replay)
}

__global__ void advance_kernel(std::int32_t* position, std::int32_t by) { *position += by; }

View4 view(const Tensor& t) { return {t.data(), t.stride(0), t.stride(1), t.stride(2)}; }

}  // namespace

namespace {

// A device attribute, asked once per device.
int device_attribute(cudaDeviceAttr attribute, Device device) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, int> known;
  std::lock_guard<std::mutex> lock(mutex);
  const std::pair<int, int> key{static_cast<int>(attribute), device.index};
  const auto found = known.find(key);
  if (found != known.end()) return found->second;
  int value = 0;
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, device.index));
  known.emplace(key, value);
  return value;
}

}  // namespace

int multiprocessors(Device device) { return device_attribute(cudaDevAttrMultiProcessorCount, device); }

bool supports_dependent_launch(Device device) {
  return device_attribute(cudaDevAttrComputeCapabilityMajor, device) >= 9;
}

void decode_attention(const DecodeAttentionTensors& t, int splits, double scale, std::int64_t window_left,
                      std::int64_t sink_tokens, bool overlap, const Stream& stream) {
  const std::int64_t B = t.q.size(0), Hq = t.q.size(1), Nq = t.q.size(2), D = t.q.size(3), Hkv = t.k.size(1);
  const std::int64_t groups = ceil_div(Hq / Hkv * Nq, kRows);
  if (B * Hq * Nq * D == 0) return;
  Params p{};
  p.q = view(t.q);
  p.k = view(t.k);
  p.v = view(t.v);
  p.o = t.o.data();
  p.ob = t.o.stride(0);
  p.oh = t.o.stride(1);
  p.ot = t.o.stride(2);
  p.sinks = t.sinks.defined() ? t.sinks.data_as<float>() : nullptr;
  p.past = t.past;
  p.capacity = t.k.size(2);
  p.Hq = Hq;
  p.Hkv = Hkv;
  p.Nq = Nq;
  p.D = D;
  p.groups = groups;
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  p.window_left = window_left;
  p.sink_tokens = sink_tokens;
  p.splits = splits;
  p.counters = static_cast<int*>(t.workspace);
  p.partial = reinterpret_cast<float*>(static_cast<char*>(t.workspace) +
                                       static_cast<std::size_t>(B * Hkv * groups) * sizeof(float) * 2);
  CudaDeviceGuard guard(t.q.device().index);
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(Hkv * groups), static_cast<unsigned>(B));
  with_cuda_dtype(t.q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const cudaStream_t s = cuda_stream(stream);
    const bool pdl = overlap && supports_dependent_launch(t.q.device());
    if (D <= 64)
      launch_kernel(decode_kernel<E, 1>, grid, kThreads, 0, s, pdl, p);
    else if (D <= 128)
      launch_kernel(decode_kernel<E, 2>, grid, kThreads, 0, s, pdl, p);
    else if (D <= 192)
      launch_kernel(decode_kernel<E, 3>, grid, kThreads, 0, s, pdl, p);
    else
      launch_kernel(decode_kernel<E, 4>, grid, kThreads, 0, s, pdl, p);
  });
  FT_CUDA_CHECK_LAUNCH();
}

void advance_position(std::int32_t* position, std::int32_t by, Device device, const Stream& stream) {
  CudaDeviceGuard guard(device.index);
  advance_kernel<<<1, 1, 0, cuda_stream(stream)>>>(position, by);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::gpu
