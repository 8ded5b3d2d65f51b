// cross_entropy.cu — CUDA mean cross-entropy with the fused softmax backward, as on the CPU: one block per
// row reads it twice (the max and the sum of exp(x - max) in double together, see Note [Cross-entropy in two
// reads]; then dlogits = (exp(x - max) / sum - onehot) * scale, in place over the logits when asked), writing
// the row's loss (double); one block then sums the row losses in a fixed order into the mean, which the host
// reads back (this synchronises the stream) or which stays in device memory (cross_entropy_to: nothing
// synchronises).
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "core/buffer.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace ft::gpu {

namespace {

constexpr int kMeanThreads = 1024;

// Note [Cross-entropy in two reads]
// A logits row (fp32, V of them: 600 KB at V = 151936) is too large to keep on chip, so the row kernel reads
// it twice, not three times: the first read keeps, per thread, a running maximum m and the sum in double of
// exp(x - m) over its elements, rescaled by exp(m_old - m_new) when a group of kUnroll packs raises m (in
// double; rare after the first packs); the block then takes the row's maximum M and sums the threads'
// sums, each times exp(m - M), in a fixed order. The second read writes dlogits = (exp(x - M) / sum - onehot)
// * scale as before. The terms exp(x - m) are those of a different m than the CPU's single maximum, so the
// sum may differ from the CPU's in its last bits (the loss within 1e-6 relative); dlogits use the same M.
// Each pass loads kUnroll packs before using them, so that each thread has several loads in flight.
constexpr int kUnroll = 4;

// Running (m, sum of exp(x - m)) of one thread: see Note [Cross-entropy in two reads]. m starts at the
// lowest finite float, so that -inf logits add exp(-inf) = 0 rather than NaN.
struct RowSum {
  float m = -FLT_MAX;
  double sum = 0;

  template <int N, int U>
  __device__ __forceinline__ void add(const Pack<float, N> (&v)[U]) {
    float group_max = m;
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int i = 0; i < N; ++i) group_max = fmaxf(group_max, v[u].v[i]);
    }
    if (group_max > m) {
      sum *= exp(static_cast<double>(m) - static_cast<double>(group_max));
      m = group_max;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int i = 0; i < N; ++i) sum += expf(v[u].v[i] - m);
    }
  }
};

// loss (rows) double; dl (rows, V) T or null (may alias x, fp32: each element is read before it is written);
// N-element packs of a row. See Note [Cross-entropy in two reads].
template <class T, int N>
__global__ void row_kernel(const float* x_base, std::int64_t x_stride, const std::int32_t* __restrict__ targets,
                           T* dl_base, std::int64_t dl_stride, std::int64_t V, float scale,
                           double* __restrict__ loss) {
  __shared__ float max_scratch[32];
  __shared__ double sum_scratch[32];
  const std::int64_t r = blockIdx.x;
  const float* x = x_base + r * x_stride;  // (V)
  const std::int32_t target = targets[r];
  const float x_target = x[target];  // read before any thread overwrites the row (two reductions below sync)
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * N;  // columns between a thread's packs
  const std::int64_t first = static_cast<std::int64_t>(threadIdx.x) * N;

  RowSum own;
  std::int64_t c = first;
  for (; c + (kUnroll - 1) * step < V; c += kUnroll * step) {
    Pack<float, N> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_pack<N>(x + c + u * step);
    own.add(v);
  }
  for (; c < V; c += step) {
    const Pack<float, N> v[1] = {load_pack<N>(x + c)};
    own.add(v);
  }
  const float m = block_reduce(own.m, MaxOp{}, max_scratch);
  const double sum = block_reduce(own.sum * exp(static_cast<double>(own.m) - static_cast<double>(m)), SumOp{},
                                  sum_scratch);
  if (threadIdx.x == 0) loss[r] = (static_cast<double>(m) + log(sum)) - x_target;
  if (!dl_base) return;
  T* dl = dl_base + r * dl_stride;  // (V)
  const float inv_sum = static_cast<float>(1.0 / sum);
  // dl at columns [col, col + N) from their logits v.
  const auto write = [&](std::int64_t col, const Pack<float, N>& v) {
    Pack<T, N> out;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float p = expf(v.v[i] - m) * inv_sum;
      out.v[i] = from_f32<T>((p - (col + i == target ? 1.0f : 0.0f)) * scale);
    }
    store_pack<N>(dl + col, out);
  };
  c = first;
  for (; c + (kUnroll - 1) * step < V; c += kUnroll * step) {
    Pack<float, N> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_pack<N>(x + c + u * step);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) write(c + u * step, v[u]);
  }
  for (; c < V; c += step) write(c, load_pack<N>(x + c));
}

// mean (1) (+)= sum of loss (rows) / divisor, summed in a fixed order.
__global__ void __launch_bounds__(kMeanThreads) mean_kernel(const double* __restrict__ loss, std::int64_t rows,
                                                            double divisor, bool accumulate,
                                                            double* __restrict__ mean) {
  __shared__ double scratch[32];
  double sum = 0;
  for (std::int64_t r = threadIdx.x; r < rows; r += kMeanThreads) sum += loss[r];
  sum = block_reduce(sum, SumOp{}, scratch);
  if (threadIdx.x == 0) *mean = accumulate ? *mean + sum / divisor : sum / divisor;
}

// Threads of a row's block: at most 512, so that two rows share an SM and one's reductions overlap the
// other's loads.
int row_threads(std::int64_t V) { return V >= 2048 ? 512 : V >= 256 ? 128 : 32; }

// row_loss (rows) <- each row's loss, *mean (+)= their sum / divisor; dlogits written when it has data.
void enqueue(const ops::RowView& logits, const std::int32_t* targets, const ops::RowView& dlogits, double grad_scale,
             double divisor, bool accumulate, double* row_loss, double* mean, cudaStream_t s) {
  const std::int64_t rows = logits.rows, V = logits.cols;
  FT_CHECK(rows <= 0x7fffffff, "cross_entropy: at most 2^31 - 1 rows per call, given ", rows);
  const float scale = static_cast<float>(grad_scale / divisor);
  const auto* x = static_cast<const float*>(logits.data);
  const bool has_dl = dlogits.data != nullptr;
  const DType dl_dtype = has_dl ? dlogits.dtype : DType::f32;
  with_cuda_dtype(dl_dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* dl = static_cast<T*>(dlogits.data);
    const bool packs = V % 4 == 0 && logits.row_stride % 4 == 0 && pack_aligned(x, 4, sizeof(float)) &&
                       (!has_dl || (dlogits.row_stride % 4 == 0 && pack_aligned(dl, 4, sizeof(T))));
    const auto blocks = static_cast<unsigned>(rows);
    const int threads = row_threads(V);
    if (packs)
      row_kernel<T, 4><<<blocks, threads, 0, s>>>(x, logits.row_stride, targets, dl, dlogits.row_stride, V, scale,
                                                   row_loss);
    else
      row_kernel<T, 1><<<blocks, threads, 0, s>>>(x, logits.row_stride, targets, dl, dlogits.row_stride, V, scale,
                                                   row_loss);
  });
  FT_CUDA_CHECK_LAUNCH();
  mean_kernel<<<1, kMeanThreads, 0, s>>>(row_loss, rows, divisor, accumulate, mean);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace

double cross_entropy(const ops::RowView& logits, const std::int32_t* targets, const ops::RowView& dlogits,
                     double grad_scale, double divisor, Device device, const Stream& stream) {
  const std::int64_t rows = logits.rows;
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  Buffer loss(static_cast<std::size_t>(rows + 1) * sizeof(double), device, "cross-entropy losses", stream);
  auto* row_loss = static_cast<double*>(loss.data());  // (rows), then the mean
  enqueue(logits, targets, dlogits, grad_scale, divisor, false, row_loss, row_loss + rows, s);
  double mean = 0;
  FT_CUDA_CHECK(cudaMemcpyAsync(&mean, row_loss + rows, sizeof(mean), cudaMemcpyDeviceToHost, s));
  FT_CUDA_CHECK(cudaStreamSynchronize(s));
  return mean;
}

void cross_entropy_to(double* mean, const ops::RowView& logits, const std::int32_t* targets,
                      const ops::RowView& dlogits, double grad_scale, double divisor, bool accumulate,
                      Device device, const Stream& stream) {
  CudaDeviceGuard guard(device.index);
  Buffer row_loss(static_cast<std::size_t>(logits.rows) * sizeof(double), device, "cross-entropy losses",
                  stream);  // (rows)
  enqueue(logits, targets, dlogits, grad_scale, divisor, accumulate, static_cast<double*>(row_loss.data()), mean,
          cuda_stream(stream));
}

}  // namespace ft::gpu
