// embedding.cu — CUDA embedding gather and its deterministic backward.
//   forward   one block per output row copies weight[id] in 16-byte packs where the rows allow.
//   backward  sort-free and atomic-free: a block owns kRows vocabulary rows x kCols columns of dweight,
//             keeps them in shared memory, scans all ids in tiles, compacts the positions whose id it owns
//             (in position order, by warp ballots) and adds those dout rows; each thread owns fixed
//             columns, so every dweight element is init + dout rows summed in position order — the CPU's
//             order, bit for bit.
#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace ft::gpu {

namespace {

constexpr int kGatherThreads = 128;
constexpr int kThreads = 256;                  // backward block
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 8;                       // vocabulary rows per backward block
constexpr int kColsPerThread = 4;
constexpr int kCols = kThreads * kColsPerThread;  // dweight columns per backward block
constexpr int kTile = kThreads;                // ids examined per scan step

// out (rows, d) <- weight (vocab, d)[ids (rows)], N-element packs.
template <int N>
__global__ void gather_kernel(float* __restrict__ out, std::int64_t out_stride, const float* __restrict__ weight,
                              std::int64_t weight_stride, const std::int32_t* __restrict__ ids, std::int64_t d) {
  const std::int64_t row = blockIdx.x;
  const float* src = weight + ids[row] * weight_stride;  // (d)
  float* dst = out + row * out_stride;                   // (d)
  for (std::int64_t c = threadIdx.x * N; c < d; c += kGatherThreads * N) store_pack<N>(dst + c, load_pack<N>(src + c));
}

// dweight rows [v0, v0 + kRows) x columns [c0, c0 + kCols) (+)= the dout rows of positions with those ids.
__global__ void __launch_bounds__(kThreads) scatter_add_kernel(float* __restrict__ dweight /* (vocab, d) */,
                                                               std::int64_t dw_stride, std::int64_t vocab,
                                                               const std::int32_t* __restrict__ ids /* (n) */,
                                                               const float* __restrict__ dout /* (n, d) */,
                                                               std::int64_t dout_stride, std::int64_t n,
                                                               std::int64_t d, bool accumulate) {
  __shared__ float acc[kRows][kCols];      // the block's dweight tile
  __shared__ std::int32_t hit_pos[kTile];  // positions of this tile whose id the block owns, in order
  __shared__ std::int8_t hit_row[kTile];   // their row in the tile
  __shared__ int warp_hits[kWarps];
  const std::int64_t v0 = static_cast<std::int64_t>(blockIdx.x) * kRows;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.y) * kCols;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  for (int r = 0; r < kRows; ++r)
    for (int k = 0; k < kColsPerThread; ++k) {
      const std::int64_t v = v0 + r, c = c0 + tid + k * kThreads;
      acc[r][tid + k * kThreads] = accumulate && v < vocab && c < d ? dweight[v * dw_stride + c] : 0.0f;
    }

  for (std::int64_t t0 = 0; t0 < n; t0 += kTile) {
    const std::int64_t pos = t0 + tid;
    const std::int64_t row = pos < n ? ids[pos] - v0 : -1;
    const bool hit = row >= 0 && row < kRows;
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_hits[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0, hits = 0;
    for (int w = 0; w < kWarps; ++w) {
      offset += w < warp ? warp_hits[w] : 0;
      hits += warp_hits[w];
    }
    if (hit) {
      const int slot = offset + __popc(ballot & ((1u << lane) - 1u));
      hit_pos[slot] = static_cast<std::int32_t>(pos - t0);
      hit_row[slot] = static_cast<std::int8_t>(row);
    }
    __syncthreads();
    for (int h = 0; h < hits; ++h) {
      const float* g = dout + (t0 + hit_pos[h]) * dout_stride;  // (d)
      float* a = acc[hit_row[h]];
      for (int k = 0; k < kColsPerThread; ++k) {
        const std::int64_t c = c0 + tid + k * kThreads;
        if (c < d) a[tid + k * kThreads] += g[c];
      }
    }
    __syncthreads();  // hit_pos, hit_row and warp_hits are rewritten by the next tile
  }

  for (int r = 0; r < kRows; ++r)
    for (int k = 0; k < kColsPerThread; ++k) {
      const std::int64_t v = v0 + r, c = c0 + tid + k * kThreads;
      if (v < vocab && c < d) dweight[v * dw_stride + c] = acc[r][tid + k * kThreads];
    }
}

}  // namespace

void embedding_forward(const ops::RowView& out, const std::int32_t* ids, const ops::RowView& weight, Device device,
                       const Stream& stream) {
  if (out.rows == 0 || out.cols == 0) return;
  FT_CHECK(out.rows <= 0x7fffffff, "embedding_forward: at most 2^31 - 1 ids per call, given ", out.rows);
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  auto* o = static_cast<float*>(out.data);
  const auto* w = static_cast<const float*>(weight.data);
  const bool packs = out.cols % 4 == 0 && out.row_stride % 4 == 0 && weight.row_stride % 4 == 0 &&
                     pack_aligned(o, 4, sizeof(float)) && pack_aligned(w, 4, sizeof(float));
  const auto rows = static_cast<unsigned>(out.rows);
  if (packs)
    gather_kernel<4><<<rows, kGatherThreads, 0, s>>>(o, out.row_stride, w, weight.row_stride, ids, out.cols);
  else
    gather_kernel<1><<<rows, kGatherThreads, 0, s>>>(o, out.row_stride, w, weight.row_stride, ids, out.cols);
  FT_CUDA_CHECK_LAUNCH();
}

void embedding_backward(const ops::RowView& dweight, const std::int32_t* ids, const ops::RowView& dout,
                        bool accumulate, Device device, const Stream& stream) {
  if (dweight.rows == 0 || dweight.cols == 0) return;
  CudaDeviceGuard guard(device.index);
  const dim3 grid(static_cast<unsigned>(ceil_div(dweight.rows, kRows)),
                  static_cast<unsigned>(ceil_div(dweight.cols, kCols)));
  scatter_add_kernel<<<grid, kThreads, 0, cuda_stream(stream)>>>(
      static_cast<float*>(dweight.data), dweight.row_stride, dweight.rows, ids, static_cast<const float*>(dout.data),
      dout.row_stride, dout.rows, dweight.cols, accumulate);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::gpu
