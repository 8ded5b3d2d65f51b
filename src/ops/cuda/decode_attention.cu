// decode_attention.cu — flash-decoding for a few queries per row against a KV cache whose length is read from
// device memory (see ops/decode_attention.h). Grid (splits, Hkv x groups, B), 8 warps per block: a block takes
// up to kDecodeRowsPerBlock query rows of one KV head (its query heads x new positions) and the split's share of
// the keys, in tiles of up to kDecodeKeysPerSplit keys staged in shared memory (see Note [Decode attention
// tiles]). With one split the block writes o; with several, each writes its (max, sum, accumulator) partial to
// the workspace, and the last block of the group to arrive (an atomic counter it resets) merges the splits in
// split order and writes o — the same order whichever block is last, so the result is deterministic.
//
// Note [Decode attention tiles]
// A decode step's attention reads a short cache (a few hundred keys) once: its cost is memory round trips, not
// bandwidth. The block copies a tile's K and V rows into shared memory with cp.async, 16 bytes a copy where
// every row starts 16-byte aligned (the generator's caches) and 4 otherwise (any even-strided layout), the rows
// of keys cached before this step (positions < *past) before waiting for the previous kernel (programmatic
// dependent launch: they do not depend on it), the new queries' own keys after. Then:
//   scores   lane = key: each warp takes 32 keys at a time, a lane the dot products of its key row (rows padded
//            to an odd number of copy vectors: conflict-free) with every query row (broadcast from shared
//            memory), in the log2 domain;
//   softmax  the tile's maximum per row over the block (warp maxima in shared memory, combined in warp order);
//            the running maximum is the same in every thread, so the warps' states need no rescaling to merge;
//   values   warp w takes keys w, w + 8, ..., a lane 2 kPairs head dims of o, accumulating p * v in fp32;
//   merge    the warps' accumulators and sums, added in warp order in shared memory (over the tile buffers).
// One memory round trip after the wait (q and the new keys), one tile for the generator's caches.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <type_traits>
#include <utility>

#include "ops/cuda/common.cuh"
#include "ops/cuda/decode_ops.h"
#include "ops/cuda/dependent_launch.cuh"

namespace ft::gpu {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = static_cast<int>(kDecodeRowsPerBlock);
constexpr float kLog2e = 1.4426950408889634f;
constexpr std::int64_t kTileBytes = 72 * 1024;  // K and V tiles of a block (the keys per tile follow)

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
  int tile;        // keys per tile, a multiple of 32
  int pitch;       // bytes between staged key rows: D * sizeof(E) padded to an odd number of vectors
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

// kVec bytes (4 or 16) from global into shared memory, asynchronously.
template <int kVec>
__device__ __forceinline__ void copy_async(void* dst, const void* src) {
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if constexpr (kVec == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(__cvta_generic_to_global(src)) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(__cvta_generic_to_global(src)) : "memory");
}

// The kVec / sizeof(E) elements of a staged vector (kVec-aligned in shared memory) as floats.
template <class E, int kVec>
__device__ __forceinline__ void unpack(const unsigned char* p, float* f) {
  constexpr int kWords = kVec / 4;
  unsigned w[kWords];
  if constexpr (kVec == 16) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else {
    w[0] = *reinterpret_cast<const unsigned*>(p);
  }
#pragma unroll
  for (int i = 0; i < kWords; ++i) {
    if constexpr (sizeof(E) == 4) {
      f[i] = __uint_as_float(w[i]);
    } else {
      const Pack<E, 2> x = *reinterpret_cast<const Pack<E, 2>*>(&w[i]);
      f[2 * i] = to_f32(x.v[0]);
      f[2 * i + 1] = to_f32(x.v[1]);
    }
  }
}

// Elements 2i, 2i + 1 of a staged row (4-byte aligned) as floats.
template <class E>
__device__ __forceinline__ float2 pair_at(const unsigned char* row, std::int64_t i) {
  if constexpr (sizeof(E) == 4) {
    const auto* f = reinterpret_cast<const float*>(row) + 2 * i;
    return make_float2(f[0], f[1]);
  } else {
    const Pack<E, 2> x = *reinterpret_cast<const Pack<E, 2>*>(row + 4 * i);
    return make_float2(to_f32(x.v[0]), to_f32(x.v[1]));
  }
}

// kVec: the bytes of one copy and one read of a staged key row, 16 where every row starts 16-byte aligned.
template <class E, int kPairs, int kVec>
__global__ void __launch_bounds__(kThreads, 2) decode_kernel(Params p) {
  constexpr int kPer = kVec / static_cast<int>(sizeof(E));  // elements per vector
  extern __shared__ float4 dynamic[];
  __shared__ float s_max[kWarps][kRows], s_l[kWarps][kRows];
  __shared__ int s_last;
  const std::int64_t D = p.D, T = p.tile;
  float* q_s = reinterpret_cast<float*>(dynamic);  // (kRows, D), scaled to the log2 domain
  float* scores = q_s + kRows * D;                 // (kRows, T)
  unsigned char* k_s = reinterpret_cast<unsigned char*>(scores + kRows * T);  // (T, pitch) bytes
  unsigned char* v_s = k_s + T * p.pitch;                                    // (T, pitch) bytes
  float* merge = reinterpret_cast<float*>(k_s);  // (kWarps, kRows, D), over the tiles once they are done

  const int split = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t group = blockIdx.y, kvh = group / p.groups, b = blockIdx.z;
  const std::int64_t G = p.Hq / p.Hkv, R = G * p.Nq;
  const std::int64_t r0 = group % p.groups * kRows;
  const int nr = static_cast<int>(R - r0 < kRows ? R - r0 : kRows);
  // *past was written before the previous kernel (the step's position; see DecodeAttentionOptions::overlap_launch).
  const std::int64_t past = *p.past, Nk_raw = past + p.Nq;
  const std::int64_t Nk = Nk_raw < p.capacity ? Nk_raw : p.capacity;
  const std::int64_t off = Nk - p.Nq;  // query i sees keys j <= i + off
  const std::int64_t per = (Nk + p.splits - 1) / p.splits;
  const std::int64_t j0 = split * per, j1 = j0 + per < Nk ? j0 + per : Nk;
  const std::int64_t cached = past < j1 ? past : j1;  // keys below it were in the cache before this step

  const unsigned char* k_base = static_cast<const unsigned char*>(p.k.data) + (b * p.k.b + kvh * p.k.h) * sizeof(E);
  const unsigned char* v_base = static_cast<const unsigned char*>(p.v.data) + (b * p.v.b + kvh * p.v.h) * sizeof(E);
  const int vecs = static_cast<int>(D * sizeof(E) / kVec);  // vectors a row (D is even)
  // Rows [a, e) of the tile starting at key t0 into shared memory (K and V), kVec bytes a copy.
  const auto stage = [&](std::int64_t t0, std::int64_t a, std::int64_t e) {
    const int per_pass = kThreads / vecs, rows = static_cast<int>(e - a);
    if (static_cast<int>(threadIdx.x) >= per_pass * vecs) return;
    const int vec = static_cast<int>(threadIdx.x) % vecs;
    const auto e_bytes = static_cast<std::int64_t>(sizeof(E));
    const std::int64_t k_step = p.k.t * e_bytes, v_step = p.v.t * e_bytes;  // bytes between key rows
    for (int i = static_cast<int>(threadIdx.x) / vecs; i < rows; i += per_pass) {
      const std::int64_t j = a + i;
      copy_async<kVec>(k_s + (j - t0) * p.pitch + vec * kVec, k_base + j * k_step + vec * kVec);
      copy_async<kVec>(v_s + (j - t0) * p.pitch + vec * kVec, v_base + j * v_step + vec * kVec);
    }
  };
  std::int64_t t1 = j0 + T < j1 ? j0 + T : j1;
  stage(j0, j0, cached < t1 ? cached : t1);  // the cached keys of the first tile: independent of the previous kernel
  wait_for_previous_grid();  // q and the new keys come from the previous kernel (see dependent_launch.cuh)
  allow_next_grid();

  const E* q_base = static_cast<const E*>(p.q.data);
  const int d32 = static_cast<int>(D);
  for (int e = threadIdx.x; e < kRows * d32; e += kThreads) {
    const int r = e / d32, d = e - r * d32;
    if (r >= nr) {
      q_s[e] = 0.f;
      continue;
    }
    const std::int64_t rg = r0 + r, h = kvh * G + rg / p.Nq, i = rg % p.Nq;
    q_s[e] = to_f32(q_base[b * p.q.b + h * p.q.h + i * p.q.t + d]) * p.scale_log2;
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
  for (std::int64_t t0 = j0; t0 < j1; t0 = t1, t1 = t0 + T < j1 ? t0 + T : j1) {
    if (t0 == j0)
      stage(t0, cached > t0 ? cached : t0, t1);  // the new keys of the first tile
    else
      stage(t0, t0, t1);
    asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
    __syncthreads();

    // Scores: lane = key.
    float mx[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) mx[r] = -INFINITY;
    for (std::int64_t g = warp * 32; g < t1 - t0; g += kWarps * 32) {
      const std::int64_t j = t0 + g + lane;
      if (j < t1) {
        const unsigned char* row = k_s + (g + lane) * p.pitch;
        float dot[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) dot[r] = 0.f;
#pragma unroll 2
        for (int v = 0; v < vecs; ++v) {
          float kf[kPer];
          unpack<E, kVec>(row + v * kVec, kf);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            if (r >= nr) break;
            const float* qr = q_s + r * D + v * kPer;
#pragma unroll
            for (int e = 0; e < kPer; ++e) dot[r] = fmaf(qr[e], kf[e], dot[r]);
          }
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (r >= nr) break;
          const std::int64_t i = (r0 + r) % p.Nq;
          const bool visible =
              j <= i + off && (p.window_left < 0 || j >= i + off - p.window_left || j < p.sink_tokens);
          const float s = visible ? dot[r] : -INFINITY;
          scores[r * T + g + lane] = s;
          mx[r] = fmaxf(mx[r], s);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      mx[r] = warp_reduce(mx[r], MaxOp{});
      if (lane == 0) s_max[warp][r] = mx[r];
    }
    __syncthreads();

    // The running maximum (the same in every thread), then p * v: warp w takes keys t0 + w, t0 + w + 8, ...
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= nr) break;
      float tile_max = s_max[0][r];
      for (int w = 1; w < kWarps; ++w) tile_max = fmaxf(tile_max, s_max[w][r]);
      const float m_new = fmaxf(m[r], tile_max);
      if (m_new == -INFINITY) continue;  // nothing visible yet
      const float alpha = exp2f(m[r] - m_new);
      m[r] = m_new;
      l[r] *= alpha;
#pragma unroll
      for (int c = 0; c < kPairs; ++c) {
        acc[r][c].x *= alpha;
        acc[r][c].y *= alpha;
      }
    }
    for (std::int64_t jj = warp; jj < t1 - t0; jj += kWarps) {
      const unsigned char* row = v_s + jj * p.pitch;
      float2 vf[kPairs];
#pragma unroll
      for (int c = 0; c < kPairs; ++c) {
        const std::int64_t i = lane + 32 * c;
        vf[c] = 2 * i < D ? pair_at<E>(row, i) : make_float2(0.f, 0.f);
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= nr) break;
        const float s = scores[r * T + jj];
        if (s == -INFINITY) continue;
        const float pj = exp2f(s - m[r]);
        l[r] += pj;
#pragma unroll
        for (int c = 0; c < kPairs; ++c) {
          acc[r][c].x = fmaf(pj, vf[c].x, acc[r][c].x);
          acc[r][c].y = fmaf(pj, vf[c].y, acc[r][c].y);
        }
      }
    }
    __syncthreads();  // the tile's buffers are free again
  }

  // Merge the warps (their states share the running maximum): accumulators and sums added in warp order.
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < kPairs; ++c) {
      const std::int64_t d = 2 * (lane + 32 * c);
      if (d < D) {
        merge[(warp * kRows + r) * D + d] = acc[r][c].x;
        merge[(warp * kRows + r) * D + d + 1] = acc[r][c].y;
      }
    }
    if (lane == 0) s_l[warp][r] = l[r];
  }
  __syncthreads();
  const std::int64_t slot = (b * p.Hkv * p.groups + group);
  float* partial = p.partial + slot * p.splits * kRows * (D + 2);  // (splits, kRows, D + 2)
  for (int e = threadIdx.x; e < nr * (D + 2); e += kThreads) {
    const int r = e / static_cast<int>(D + 2), d = e % static_cast<int>(D + 2);
    float acc_r = 0.f, l_r = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      l_r += s_l[w][r];
      if (d < D) acc_r += merge[(w * kRows + r) * D + d];
    }
    // m[r] is indexed by a runtime row here: read it back from the block maxima's owner, thread-uniform.
    float mx = -INFINITY;
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr)
      if (rr == r) mx = m[rr];
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

// Whether (kernel, device) is seen here for the first time.
bool first_time(const void* kernel, Device device) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> seen;
  std::lock_guard<std::mutex> lock(mutex);
  return seen.insert({kernel, device.index}).second;
}

// Once per kernel and device: shared memory past the default 48 KB (up to the tiles' most); the chain's
// carveout (dependent_launch.cuh).
template <class Kernel>
void prepare(Kernel kernel, Device device) {
  if (!first_time(reinterpret_cast<const void*>(kernel), device)) return;
  constexpr int kMostBytes = 100 * 1024;  // the largest a call asks for: tiles or merge, q and the scores
  FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMostBytes));
  FT_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                     cudaFuncAttributePreferredSharedMemoryCarveout, kChainCarveout));
}

}  // namespace

int multiprocessors(Device device) { return device_attribute(cudaDevAttrMultiProcessorCount, device); }

bool supports_dependent_launch(Device device) {
  return device_attribute(cudaDevAttrComputeCapabilityMajor, device) >= 9;
}

void use_chain_carveout(const void* kernel, Device device) {
  if (!first_time(kernel, device)) return;
  FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, kChainCarveout));
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
    // 16-byte copies and reads where every key and value row starts 16-byte aligned; rows padded so that
    // lanes reading the same offset of consecutive rows hit distinct banks (a pitch of an odd number of
    // vectors).
    const std::int64_t row_bytes = D * static_cast<std::int64_t>(sizeof(E));
    const auto aligned16 = [&](const Tensor& x) {
      const auto e = static_cast<std::int64_t>(sizeof(E));
      return reinterpret_cast<std::uintptr_t>(x.data()) % 16 == 0 && x.stride(0) * e % 16 == 0 &&
             x.stride(1) * e % 16 == 0 && x.stride(2) * e % 16 == 0;
    };
    const bool wide = row_bytes % 16 == 0 && aligned16(t.k) && aligned16(t.v);
    const std::int64_t vec = wide ? 16 : 4;
    p.pitch = static_cast<int>(row_bytes + (row_bytes / vec % 2 == 0 ? vec : 2 * vec));
    const std::int64_t fit = kTileBytes / (2 * p.pitch) / 32 * 32;
    p.tile = static_cast<int>(std::clamp<std::int64_t>(fit, 32, kDecodeKeysPerSplit));
    const std::int64_t tiles = 2 * static_cast<std::int64_t>(p.tile) * p.pitch, merge = kWarps * kRows * D * 4;
    const auto smem = static_cast<std::size_t>((kRows * D + kRows * p.tile) * 4 + std::max(tiles, merge));
    const cudaStream_t s = cuda_stream(stream);
    const bool pdl = overlap && supports_dependent_launch(t.q.device());
    const auto run = [&](auto kernel) {
      prepare(kernel, t.q.device());
      launch_kernel(kernel, grid, kThreads, smem, s, pdl, p);
    };
    const auto by_dim = [&](auto vec_tag) {
      constexpr int kVec = decltype(vec_tag)::value;
      if (D <= 64)
        run(decode_kernel<E, 1, kVec>);
      else if (D <= 128)
        run(decode_kernel<E, 2, kVec>);
      else if (D <= 192)
        run(decode_kernel<E, 3, kVec>);
      else
        run(decode_kernel<E, 4, kVec>);
    };
    wide ? by_dim(std::integral_constant<int, 16>{}) : by_dim(std::integral_constant<int, 4>{});
  });
  FT_CUDA_CHECK_LAUNCH();
}

void advance_position(std::int32_t* position, std::int32_t by, Device device, const Stream& stream) {
  CudaDeviceGuard guard(device.index);
  advance_kernel<<<1, 1, 0, cuda_stream(stream)>>>(position, by);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::gpu
