// decode_attention.cu — flash-decoding for a few queries per row against a KV cache whose length is read from
// device memory (see ops/decode_attention.h). Grid (splits, Hkv x groups, B), 8 warps per block: a block takes
// up to kDecodeRowsPerBlock query rows of one KV head (its query heads x new positions) and the split's share of
// the keys, in tiles of up to kDecodeKeysPerSplit keys staged in shared memory (see Note [Decode attention
// tiles]). With one split the block writes o; with several, each writes its (max, sum, accumulator) partial to
// the workspace, and the last block of the group to arrive (an atomic counter it resets) merges the splits in
// split order and writes o — the same order whichever block is last, so the result is deterministic. The
// block's work is decode::attend (decode_attention_block.cuh), which skinny_ffn's chained kernel also runs, its
// wait for the previous kernel there a grid barrier (Note [Skinny FFN barrier] in skinny_linear.cu).
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
//
// Note [Decode attention projection]
// decode_attention_projected folds the output projection y = residual + o' W^T into the attention, saving the
// decode step a kernel (its launch, ramp and tail, and the wait for the attention's last block). Its grid is
// (slices, KV heads x groups, B): block (s, g, b) attends for group g of row b over all its keys (one split), as
// decode_attention's block does, and then multiplies its o' (its heads' nr x D outputs, rounded to bf16 as o is
// written) by the matching nr x D columns of W's rows of slice s. Every block of a head repeats the attention
// (a few hundred keys from L2, in parallel), so that W's rows are spread over about two blocks a
// multiprocessor, each copying its slice (at most kSliceBytes) into shared memory with cp.async before the
// programmatic-dependent-launch wait, beside the cached keys: the projection's weights arrive while the
// previous kernel finishes. A block writes its fp32 dot products (one per W row, a row's chunks added in a
// fixed order) to the workspace; the last block of slice s and row b to arrive (an atomic counter it resets)
// adds the KV heads' products in head order to the residual and writes y — the same order whichever block
// arrives last, so the result is deterministic (not the bits of skinny_linear's sum over all columns at once).
// Block s == 0 of each group also writes o.
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
#include "ops/cuda/decode_attention_block.cuh"
#include "ops/cuda/decode_ops.h"
#include "ops/cuda/dependent_launch.cuh"

namespace ft::gpu {

namespace {

using namespace decode;

// The decode attention's kernel: one block of attend (decode_attention_block.cuh) a block.
template <class E, int kPairs, int kVec, bool kProject>
__global__ void __launch_bounds__(kThreads, 2) decode_kernel(Params p) {
  extern __shared__ float4 dynamic[];
  attend<E, kPairs, kVec, kProject>(p, blockIdx, gridDim, reinterpret_cast<unsigned char*>(dynamic), [] {
    wait_for_previous_grid();
    allow_next_grid();
  });
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

// Once per kernel and device: shared memory past the default 48 KB (up to the tiles' most, and a slice of W when
// projecting); the chain's carveout (dependent_launch.cuh).
template <class Kernel>
void prepare(Kernel kernel, bool project, Device device) {
  if (!first_time(reinterpret_cast<const void*>(kernel), device)) return;
  // The largest a call asks for: tiles or merge, q and the scores (and the slice).
  const int most = static_cast<int>(100 * 1024 + (project ? kSliceBytes : 0));
  FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
  FT_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                     cudaFuncAttributePreferredSharedMemoryCarveout, kChainCarveout));
}

}  // namespace

int multiprocessors(Device device) { return device_attribute(cudaDevAttrMultiProcessorCount, device); }

ProjectionSlices projection_slices(std::int64_t batch, std::int64_t heads_q, std::int64_t heads_kv,
                                   std::int64_t head_dim, std::int64_t out_features, Device device) {
  if (out_features <= 0) return {1, 0};
  const std::int64_t G = heads_q / heads_kv, blocks = std::max<std::int64_t>(1, batch * heads_kv * ceil_div(G, kRows));
  const std::int64_t width_bytes = std::min<std::int64_t>(G, kRows) * head_dim * 2;  // a block's part of a W row
  // About two blocks a multiprocessor, and slices within kSliceBytes.
  std::int64_t count = std::max<std::int64_t>(1, 2 * multiprocessors(device) / blocks);
  count = std::clamp<std::int64_t>(std::max(count, ceil_div(out_features * width_bytes, kSliceBytes)), 1, out_features);
  const std::int64_t rows = ceil_div(out_features, count);
  return {ceil_div(out_features, rows), rows};
}

bool supports_dependent_launch(Device device) {
  return device_attribute(cudaDevAttrComputeCapabilityMajor, device) >= 9;
}

void use_chain_carveout(const void* kernel, Device device) {
  if (!first_time(kernel, device)) return;
  FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, kChainCarveout));
}

namespace decode {

Plan plan(const DecodeAttentionTensors& t, const DecodeProjection* projection, int splits, double scale,
          std::int64_t window_left, std::int64_t sink_tokens) {
  const std::int64_t B = t.q.size(0), Hq = t.q.size(1), Nq = t.q.size(2), D = t.q.size(3), Hkv = t.k.size(1);
  const std::int64_t groups = ceil_div(Hq / Hkv * Nq, kRows);
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
  if (t.workspace) {
    p.counters = static_cast<int*>(t.workspace);
    p.partial = reinterpret_cast<float*>(static_cast<char*>(t.workspace) +
                                         static_cast<std::size_t>(B * Hkv * groups) * sizeof(float) * 2);
  }
  ProjectionSlices slices{1, 0};
  if (projection) {
    const std::int64_t N = projection->w.size(0);
    slices = projection_slices(B, Hq, Hkv, D, N, t.q.device());
    p.w = static_cast<const __nv_bfloat16*>(projection->w.data());
    p.n_out = N;
    p.res = projection->residual.data_as<float>();
    p.y = projection->y.data_as<float>();
    p.res_stride = projection->residual.stride(0);
    p.y_stride = projection->y.stride(0);
    p.slice_rows = static_cast<int>(slices.rows);
    p.slices = static_cast<int>(slices.count);
    // The workspace's layout: decode_projection_workspace_bytes.
    p.slice_counters = static_cast<int*>(projection->workspace);
    p.products = reinterpret_cast<float*>(static_cast<char*>(projection->workspace) +
                                          (B * slices.count * 4 + 15) / 16 * 16);
  }
  // 16-byte copies and reads where every key and value row starts 16-byte aligned; rows padded so that lanes
  // reading the same offset of consecutive rows hit distinct banks (a pitch of an odd number of vectors).
  const auto e = static_cast<std::int64_t>(t.q.element_size());
  const std::int64_t row_bytes = D * e;
  const auto aligned16 = [&](const Tensor& x) {
    return reinterpret_cast<std::uintptr_t>(x.data()) % 16 == 0 && x.stride(0) * e % 16 == 0 &&
           x.stride(1) * e % 16 == 0 && x.stride(2) * e % 16 == 0;
  };
  const bool wide = row_bytes % 16 == 0 && aligned16(t.k) && aligned16(t.v);
  const std::int64_t vec = wide ? 16 : 4;
  p.pitch = static_cast<int>(row_bytes + (row_bytes / vec % 2 == 0 ? vec : 2 * vec));
  const std::int64_t fit = kTileBytes / (2 * p.pitch) / 32 * 32;
  p.tile = static_cast<int>(std::clamp<std::int64_t>(fit, 32, kDecodeKeysPerSplit));
  const std::int64_t tiles = 2 * static_cast<std::int64_t>(p.tile) * p.pitch, merge = kWarps * kRows * D * 4;
  const std::int64_t slice = slices.rows * std::min<std::int64_t>(Hq / Hkv, kRows) * D * 2;  // W's bytes a block
  Plan out;
  out.params = p;
  out.grid = dim3(static_cast<unsigned>(projection ? slices.count : splits), static_cast<unsigned>(Hkv * groups),
                  static_cast<unsigned>(B));
  out.smem = static_cast<std::size_t>((kRows * D + kRows * p.tile) * 4 + std::max(tiles, merge) + slice);
  out.pairs = static_cast<int>(ceil_div(D, 64));
  out.wide = wide;
  return out;
}

}  // namespace decode

void decode_attention(const DecodeAttentionTensors& t, const DecodeProjection* projection, int splits, double scale,
                      std::int64_t window_left, std::int64_t sink_tokens, bool overlap, const Stream& stream) {
  if (t.q.numel() == 0) return;
  const Plan pl = plan(t, projection, splits, scale, window_left, sink_tokens);
  CudaDeviceGuard guard(t.q.device().index);
  with_cuda_dtype(t.q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const cudaStream_t s = cuda_stream(stream);
    const bool pdl = overlap && supports_dependent_launch(t.q.device());
    const auto run = [&](auto kernel) {
      prepare(kernel, projection != nullptr, t.q.device());
      launch_kernel(kernel, pl.grid, kThreads, pl.smem, s, pdl, pl.params);
    };
    const auto by_dim = [&](auto vec_tag, auto project_tag) {
      constexpr int kVec = decltype(vec_tag)::value;
      constexpr bool kProject = decltype(project_tag)::value;
      if (pl.pairs == 1)
        run(decode_kernel<E, 1, kVec, kProject>);
      else if (pl.pairs == 2)
        run(decode_kernel<E, 2, kVec, kProject>);
      else if (pl.pairs == 3)
        run(decode_kernel<E, 3, kVec, kProject>);
      else
        run(decode_kernel<E, 4, kVec, kProject>);
    };
    using Off = std::integral_constant<bool, false>;
    if (projection) {
      // Validated: bf16 and 16-byte aligned rows.
      if constexpr (std::is_same_v<E, __nv_bfloat16>)
        by_dim(std::integral_constant<int, 16>{}, std::integral_constant<bool, true>{});
    } else if (pl.wide) {
      by_dim(std::integral_constant<int, 16>{}, Off{});
    } else {
      by_dim(std::integral_constant<int, 4>{}, Off{});
    }
  });
  FT_CUDA_CHECK_LAUNCH();
}

void advance_position(std::int32_t* position, std::int32_t by, Device device, const Stream& stream) {
  CudaDeviceGuard guard(device.index);
  advance_kernel<<<1, 1, 0, cuda_stream(stream)>>>(position, by);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::gpu
