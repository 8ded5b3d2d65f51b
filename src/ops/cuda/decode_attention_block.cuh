// decode_attention_block.cuh — internal (CUDA): the decode attention's block (Note [Decode attention tiles], Note
// [Decode attention projection]) as a device function, run by decode_attention.cu's kernel and by skinny_linear.cu's
// chained decode kernel (Note [Skinny FFN barrier]), and the plan of a call (its arguments, grid and shared memory),
// made by decode_attention.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/dependent_launch.cuh"
#include "ops/decode_attention.h"

namespace ft::gpu::decode {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = static_cast<int>(kDecodeRowsPerBlock);
constexpr float kLog2e = 1.4426950408889634f;
constexpr std::int64_t kTileBytes = 72 * 1024;  // K and V tiles of a block (the keys per tile follow)
// The most bytes of W a projecting block stages (Note [Decode attention projection]).
constexpr std::int64_t kSliceBytes = 32 * 1024;

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
  // The projection (Note [Decode attention projection]): y (B, N) = res + o' W^T, W (N, Hq D) bf16 in slices
  // of slice_rows rows.
  const __nv_bfloat16* w;
  std::int64_t n_out;
  const float* res;
  float* y;
  std::int64_t res_stride, y_stride;
  int slice_rows, slices;
  int* slice_counters;  // (B, slices)
  float* products;      // (B, Hkv * groups, N)
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
// kProject: with the output projection (Note [Decode attention projection]; E bf16, kVec 16, one split).
// block: this block's (split or slice, group, row) in a grid of `grid` (decode_attention's grid; see plan);
// dynamic: the block's dynamic shared memory (plan's smem bytes, 16-byte aligned); wait: between what does not
// depend on the previous work (the position, the cached keys, W's slice) and what does.
template <class E, int kPairs, int kVec, bool kProject, class Wait>
__device__ __forceinline__ void attend(const Params& p, uint3 block, uint3 grid, unsigned char* dynamic, Wait wait) {
  constexpr int kPer = kVec / static_cast<int>(sizeof(E));  // elements per vector
  __shared__ float s_max[kWarps][kRows], s_l[kWarps][kRows];
  __shared__ int s_last;
  const std::int64_t D = p.D, T = p.tile;
  float* q_s = reinterpret_cast<float*>(dynamic);  // (kRows, D), scaled to the log2 domain
  float* scores = q_s + kRows * D;                 // (kRows, T)
  unsigned char* k_s = reinterpret_cast<unsigned char*>(scores + kRows * T);  // (T, pitch) bytes
  unsigned char* v_s = k_s + T * p.pitch;                                    // (T, pitch) bytes
  float* merge = reinterpret_cast<float*>(k_s);  // (kWarps, kRows, D), over the tiles once they are done
  // kProject: the slice's W rows (rows, nr D) bf16 past the tiles and the merge; o' (kRows, D) over q_s.
  const std::int64_t tile_bytes = 2 * T * p.pitch, merge_bytes = kWarps * kRows * D * 4;
  unsigned char* w_s = k_s + (tile_bytes > merge_bytes ? tile_bytes : merge_bytes);
  float* o_s = q_s;

  const int split = kProject ? 0 : static_cast<int>(block.x), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t group = block.y, kvh = group / p.groups, b = block.z;
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
  // kProject: this block's W rows [n_begin, n_end), the columns of its heads (row r: head kvh G + r0 + r, as
  // Nq = 1), 16-byte chunks; waited for with the first tile.
  const std::int64_t n_begin = kProject ? block.x * static_cast<std::int64_t>(p.slice_rows) : 0;
  const std::int64_t n_end = kProject ? (n_begin + p.slice_rows < p.n_out ? n_begin + p.slice_rows : p.n_out) : 0;
  const int w_rows = static_cast<int>(n_end - n_begin), w_chunks = nr * static_cast<int>(D) / 8;
  if constexpr (kProject) {
    const __nv_bfloat16* w_base = p.w + n_begin * p.Hq * D + (kvh * G + r0) * D;
    const std::int64_t w_stride = p.Hq * D;
    for (int e = threadIdx.x; e < w_rows * w_chunks; e += kThreads) {
      const int row = e / w_chunks, c = e - row * w_chunks;
      copy_async<16>(w_s + static_cast<std::int64_t>(e) * 16, w_base + row * w_stride + c * 8);
    }
  }
  std::int64_t t1 = j0 + T < j1 ? j0 + T : j1;
  stage(j0, j0, cached < t1 ? cached : t1);  // the cached keys of the first tile: independent of the previous kernel
  wait();  // q and the new keys come from the previous work

  const E* q_base = static_cast<const E*>(p.q.data);
  const int d32 = static_cast<int>(D);
  for (int e = threadIdx.x; e < kRows * d32; e += kThreads) {
    const int r = e / d32, d = e - r * d32;
    if (r >= nr) {
      q_s[e] = 0.f;
      continue;
    }
    const std::int64_t rg = r0 + r, h = kvh * G + rg / p.Nq, i = rg % p.Nq;
    // From L2 (ld.global.cg): in the chained kernel, q was written by other blocks of the same kernel.
    q_s[e] = to_f32(__ldcg(q_base + b * p.q.b + h * p.q.h + i * p.q.t + d)) * p.scale_log2;
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
        const E out = from_f32<E>(finish(acc_r, mx, l_r, p.sinks, h));
        if (!kProject || block.x == 0) static_cast<E*>(p.o)[b * p.ob + h * p.oh + i * p.ot + d] = out;
        if constexpr (kProject) o_s[r * D + d] = to_f32(out);
      }
    } else {
      partial[(split * kRows + r) * (D + 2) + d] = d < D ? acc_r : d == D ? mx : l_r;
    }
  }
  if constexpr (kProject) {
    // Row n of the slice: the dot product of its nr D columns with o', `lanes` lanes a row, each adding its chunks
    // c = sub, sub + lanes, ... in order, then a butterfly over the row's lanes.
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    int lanes = 1;
    while (lanes < w_chunks && lanes < 32) lanes *= 2;
    const int per_warp = 32 / lanes, sub = lane % lanes;
    float* products = p.products + (b * grid.y + group) * p.n_out;
    for (int base = warp * per_warp; base < w_rows; base += kWarps * per_warp) {  // warp-uniform bounds
      const int row = base + lane / lanes;
      float sum = 0.f;
      if (row < w_rows) {
        for (int c = sub; c < w_chunks; c += lanes) {
          const uint4 wv = *reinterpret_cast<const uint4*>(w_s + (static_cast<std::int64_t>(row) * w_chunks + c) * 16);
          const auto* wp = reinterpret_cast<const __nv_bfloat162*>(&wv);
          const float* of = o_s + c * 8;
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const float2 wf = __bfloat1622float2(wp[u]);
            sum = fmaf(wf.x, of[2 * u], sum);
            sum = fmaf(wf.y, of[2 * u + 1], sum);
          }
        }
      }
      for (int offset = lanes / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      if (row < w_rows && sub == 0) products[n_begin + row] = sum;
    }
    // The last block of the slice adds the groups' products in group order to the residual. Thread 0's arrival
    // releases the block's products (ordered before it by the __syncthreads) and, for the last, acquires the
    // others'.
    __syncthreads();
    int* counter = p.slice_counters + b * p.slices + block.x;
    if (threadIdx.x == 0)
      s_last = add_acq_rel(reinterpret_cast<unsigned*>(counter), 1u) == grid.y - 1;
    __syncthreads();
    if (!s_last) return;
    const float* all = p.products + b * grid.y * p.n_out;
    for (std::int64_t n = n_begin + threadIdx.x; n < n_end; n += kThreads) {
      float sum = 0.f;
#pragma unroll 16
      for (unsigned g = 0; g < grid.y; ++g) sum += __ldcg(all + g * p.n_out + n);
      p.y[b * p.y_stride + n] = __ldcg(p.res + b * p.res_stride + n) + sum;
    }
    if (threadIdx.x == 0) *counter = 0;  // ready for the next call (or graph replay)
    return;
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

// A call's kernel arguments, grid and dynamic shared memory; pairs: head-dim pairs a lane accumulates (kPairs);
// wide: 16-byte copies (kVec 16), else 4.
struct Plan {
  Params params;
  dim3 grid;
  std::size_t smem;
  int pairs;
  bool wide;
};

// The plan of a validated call (decode_attention.cu): with a projection, its slices as the grid's x.
Plan plan(const DecodeAttentionTensors& t, const DecodeProjection* projection, int splits, double scale,
          std::int64_t window_left, std::int64_t sink_tokens);

}  // namespace ft::gpu::decode
