// argmax.cu — argmax_rows: one block per row: each thread scans a strided share of the columns (several loads in
// flight) keeping the largest value and its lowest index, then a block reduction over (value, index) pairs in a
// fixed order. greedy_next: see Note [Greedy next].
//
// Note [Greedy next]
// A greedy decode step's tail in one kernel (ops/argmax.h): grid (parts, rows), a block the largest logit of one
// part of a row's columns, every load of it in one round trip (xl's vocabulary: 13 parts of 3866 columns a row).
// A block leaves its (value, index) in the workspace and counts itself in its row's counter; the row's last block
// takes the best of the parts (the larger value, else the lower index: a total order, so the result is the same
// whichever block is last), writes the id and its history row, copies the id's embedding row into x and counts
// the row done; the last row's block advances the position (every row's block has read it by then) and the
// counters are left zero for the next call (or graph replay).
#include <algorithm>
#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/decode_ops.h"
#include "ops/cuda/dependent_launch.cuh"

namespace ft::gpu {

namespace {

constexpr int kThreads = 1024;
constexpr int kLoads = 8;

struct Best {
  float value;
  std::int32_t index;
};

// The larger value, or the lower index of equal ones.
__device__ __forceinline__ Best better(Best a, Best b) {
  return b.value > a.value || (b.value == a.value && b.index < a.index) ? b : a;
}

// This thread's best of row's columns [c0, c1) (its share: c0 + threadIdx.x, kThreads apart), kLoads values loaded
// before any is compared: one memory round trip per kLoads x kThreads columns. end: the index of "none".
template <int kThreads, int kLoads>
__device__ __forceinline__ Best scan(const float* row, std::int64_t c0, std::int64_t c1, std::int64_t end) {
  Best best{-INFINITY, static_cast<std::int32_t>(end)};
  for (std::int64_t c = c0 + threadIdx.x; c < c1; c += kThreads * kLoads) {
    float v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const std::int64_t cu = c + u * kThreads;
      v[u] = cu < c1 ? row[cu] : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const std::int64_t cu = c + u * kThreads;
      if (cu < c1) best = better(best, Best{v[u], static_cast<std::int32_t>(cu)});
    }
  }
  return best;
}

// The best over the warp, in every lane.
__device__ __forceinline__ Best warp_best(Best best) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const Best other{__shfl_xor_sync(0xffffffffu, best.value, offset), __shfl_xor_sync(0xffffffffu, best.index, offset)};
    best = better(best, other);
  }
  return best;
}

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(std::int32_t* __restrict__ out, std::int32_t* __restrict__ history,
                  const std::int32_t* __restrict__ position, const float* __restrict__ logits, std::int64_t cols,
                  std::int64_t row_stride) {
  __shared__ Best scratch[kThreads / 32];
  Best best = warp_best(scan<kThreads, kLoads>(logits + blockIdx.x * row_stride, 0, cols, cols));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) scratch[warp] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) best = better(best, scratch[w]);
    // A row of -inf (or NaN) only: the first column, as std::max_element gives.
    const std::int32_t index = best.index < cols ? best.index : 0;
    out[blockIdx.x] = index;
    if (history) history[static_cast<std::int64_t>(*position) * gridDim.x + blockIdx.x] = index;
  }
}

constexpr int kNextThreads = 256;
constexpr int kNextLoads = 16;    // columns a thread loads before comparing any
constexpr int kMostParts = 32;    // blocks a row (a warp merges them)

struct NextArgs {
  std::int32_t* ids;
  std::int32_t* history;
  std::int32_t* position;
  const float* logits;
  std::int64_t cols, row_stride, chunk;  // chunk: columns a part
  const float* embedding;
  std::int64_t embedding_stride, d;
  float* x;
  std::int64_t x_stride;
  int* counters;  // (rows + 1): parts done per row, then rows done
  Best* partial;  // (rows, parts)
};

__global__ void __launch_bounds__(kNextThreads) greedy_next_kernel(NextArgs a) {
  __shared__ Best scratch[kNextThreads / 32];
  __shared__ int s_last;
  __shared__ std::int32_t s_id;
  const int part = blockIdx.x, parts = gridDim.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const std::int64_t row = blockIdx.y, rows = gridDim.y;
  // The logits come from the previous kernel (dependent_launch.cuh). The next kernel is not let in early: a decode
  // step's first kernel reads the position, which this one advances, before its own wait.
  wait_for_previous_grid();
  const std::int64_t c0 = part * a.chunk, c1 = c0 + a.chunk < a.cols ? c0 + a.chunk : a.cols;
  Best best = warp_best(scan<kNextThreads, kNextLoads>(a.logits + row * a.row_stride, c0, c1, a.cols));
  if (lane == 0) scratch[warp] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kNextThreads / 32; ++w) best = better(best, scratch[w]);
    int last = 1;
    if (parts > 1) {
      a.partial[row * parts + part] = best;
      __threadfence();
      last = atomicAdd(a.counters + row, 1) == parts - 1;
    }
    s_last = last;
  }
  __syncthreads();
  if (!s_last) return;
  if (warp == 0) {  // the best of the parts
    if (parts > 1) {
      __threadfence();
      best = Best{-INFINITY, static_cast<std::int32_t>(a.cols)};
      if (lane < parts) {
        const Best* p = a.partial + row * parts + lane;
        best = Best{__ldcg(&p->value), __ldcg(&p->index)};
      }
      best = warp_best(best);
    }
    if (lane == 0) {
      // A row of -inf (or NaN) only: the first column, as std::max_element gives.
      const std::int32_t id = best.index < a.cols ? best.index : 0;
      s_id = id;
      a.ids[row] = id;
      a.history[static_cast<std::int64_t>(*a.position) * rows + row] = id;
      if (parts > 1) a.counters[row] = 0;
    }
  }
  __syncthreads();
  const float* src = a.embedding + s_id * a.embedding_stride;  // (d)
  float* dst = a.x + row * a.x_stride;                         // (d)
  for (std::int64_t c = threadIdx.x; c < a.d; c += kNextThreads * kNextLoads) {
    float v[kNextLoads];  // every load in flight before the first store
#pragma unroll
    for (int u = 0; u < kNextLoads; ++u) v[u] = c + u * kNextThreads < a.d ? __ldg(src + c + u * kNextThreads) : 0.f;
#pragma unroll
    for (int u = 0; u < kNextLoads; ++u)
      if (c + u * kNextThreads < a.d) dst[c + u * kNextThreads] = v[u];
  }
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(a.counters + rows, 1) == rows - 1) {  // every row's block has read the position
      a.counters[rows] = 0;
      *a.position += 1;
    }
  }
}

// Parts a row: enough for every part to take one round of loads (kNextThreads * kNextLoads columns), as far as
// 8 blocks a multiprocessor (a full one) over all rows allow.
int next_parts(std::int64_t rows, std::int64_t cols, Device device) {
  const std::int64_t by_sms = 8 * multiprocessors(device) / std::max<std::int64_t>(rows, 1);
  const std::int64_t by_cols = ceil_div(cols, std::int64_t{kNextThreads * kNextLoads});
  return static_cast<int>(std::clamp<std::int64_t>(std::min(by_sms, by_cols), 1, kMostParts));
}

}  // namespace

std::size_t greedy_next_workspace_bytes(std::int64_t rows, Device) {
  // Counters (rows + 1, rounded up to keep the partials 8-byte aligned), then the partials at the most parts.
  return static_cast<std::size_t>((rows + 2) / 2 * 2 * sizeof(int) + rows * kMostParts * sizeof(Best));
}

void greedy_next(std::int32_t* ids, std::int32_t* history, std::int32_t* position, const float* logits,
                 std::int64_t rows, std::int64_t cols, std::int64_t row_stride, const ops::RowView& embedding,
                 const ops::RowView& x, void* workspace, bool overlap, Device device, const Stream& stream) {
  if (rows == 0) return;
  FT_CHECK(rows <= 65535, "greedy_next: at most 65535 rows, given ", rows);
  CudaDeviceGuard guard(device.index);
  const int parts = next_parts(rows, cols, device);
  NextArgs a{};
  a.ids = ids;
  a.history = history;
  a.position = position;
  a.logits = logits;
  a.cols = cols;
  a.row_stride = row_stride;
  a.chunk = ceil_div(cols, std::int64_t{parts});
  a.embedding = static_cast<const float*>(embedding.data);
  a.embedding_stride = embedding.row_stride;
  a.d = embedding.cols;
  a.x = static_cast<float*>(x.data);
  a.x_stride = x.row_stride;
  a.counters = static_cast<int*>(workspace);
  a.partial = reinterpret_cast<Best*>(static_cast<char*>(workspace) + (rows + 2) / 2 * 2 * sizeof(int));
  launch_kernel(greedy_next_kernel, dim3(static_cast<unsigned>(parts), static_cast<unsigned>(rows)), kNextThreads, 0,
                cuda_stream(stream), overlap && supports_dependent_launch(device), a);
  FT_CUDA_CHECK_LAUNCH();
}

void argmax_rows(std::int32_t* out, std::int32_t* history, const std::int32_t* position, const float* logits,
                 std::int64_t rows, std::int64_t cols, std::int64_t row_stride, Device device, const Stream& stream) {
  if (rows == 0) return;
  CudaDeviceGuard guard(device.index);
  argmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, cuda_stream(stream)>>>(out, history, position, logits, cols,
                                                                                 row_stride);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::gpu
