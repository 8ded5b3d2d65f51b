// optimizer.cu — CUDA optimiser updates and the reductions behind gradient clipping, over flat fp32
// buffers: AdamW fused into one pass (the CPU's formula, operation for operation, correctly rounded fp32
// without FMA contraction, as the CPU build computes it; its factors passed by value or read from device
// memory when the kernel runs; clipping folded in as a gradient factor), SGD, scaling, clipping by a sum of
// squares held in device memory, and the sum of squares — per tensor in fixed chunks of kSumChunk elements
// (one block each, double), then one block adds every chunk in order (deterministic); the host reads the
// total back (this synchronises the stream) or it stays in device memory for kernels that follow.
#include <cstdint>

#include "core/buffer.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace ft::gpu {

namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kSumChunk = 1 << 14;  // elements per partial sum
constexpr int kFinishThreads = 1024;

// Whether the global norm sqrt(*sum_squares), read now, exceeds max_norm (not for a NaN norm); if so,
// factor = max_norm / (norm + eps) in double, rounded once as the host's clip_factor is.
__device__ bool clips(const double* sum_squares, double max_norm, double eps, float& factor) {
  const double norm = sqrt(*sum_squares);
  if (!(norm > max_norm)) return false;
  factor = static_cast<float>(max_norm / (norm + eps));
  return true;
}

// The factor GradScale multiplies gradients by: its own, or the clipping factor (1 when nothing clips).
__device__ float grad_factor(const GradScale& s) {
  if (s.sum_squares == nullptr) return static_cast<float>(s.factor);
  float factor = 1.0f;
  clips(s.sum_squares, s.max_norm, s.eps, factor);
  return factor;
}

// x (n) *= factor, one thread's share of a grid-stride loop; N divides n.
template <int N>
__device__ void scale_elements(float* __restrict__ x, std::int64_t n, float factor) {
  for (std::int64_t e = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) * N; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x * N) {
    Pack<float, N> xv = load_pack<N>(x + e);
#pragma unroll
    for (int i = 0; i < N; ++i) xv.v[i] *= factor;
    store_pack<N>(x + e, xv);
  }
}

// One AdamW step over p, g, m, v (n) with the factors `given`, or *from when from is not null (the same
// arithmetic either way), each gradient read as g * grad_factor(scale).
template <int N>
__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, std::int64_t n /* multiple of N */, AdamWFactors given,
                             const AdamWFactors* __restrict__ from, GradScale scale) {
  const AdamWFactors a = from ? *from : given;
  const float factor = grad_factor(scale);
  for (std::int64_t e = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) * N; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x * N) {
    const Pack<float, N> gv = load_pack<N>(g + e);
    Pack<float, N> pv = load_pack<N>(p + e), mv = load_pack<N>(m + e), vv = load_pack<N>(v + e);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float gi = __fmul_rn(gv.v[i], factor);
      const float mi = __fadd_rn(mv.v[i], __fmul_rn(a.one_minus_beta1, __fsub_rn(gi, mv.v[i])));
      const float vi = __fadd_rn(__fmul_rn(a.beta2, vv.v[i]), __fmul_rn(__fmul_rn(a.one_minus_beta2, gi), gi));
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bias_correction2_sqrt), a.eps);
      mv.v[i] = mi;
      vv.v[i] = vi;
      pv.v[i] = __fsub_rn(__fmul_rn(pv.v[i], a.decay), __fmul_rn(a.step_size, __fdiv_rn(mi, denom)));
    }
    store_pack<N>(m + e, mv);
    store_pack<N>(v + e, vv);
    store_pack<N>(p + e, pv);
  }
}

template <int N>
__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, std::int64_t n, float rate) {
  for (std::int64_t e = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) * N; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x * N) {
    const Pack<float, N> gv = load_pack<N>(g + e);
    Pack<float, N> pv = load_pack<N>(p + e);
#pragma unroll
    for (int i = 0; i < N; ++i) pv.v[i] = __fsub_rn(pv.v[i], __fmul_rn(rate, gv.v[i]));
    store_pack<N>(p + e, pv);
  }
}

template <int N>
__global__ void scale_kernel(float* __restrict__ x, std::int64_t n, float factor) {
  scale_elements<N>(x, n, factor);
}

// x (n) *= the clipping factor when the norm clips (clips()); otherwise x stays as it is.
template <int N>
__global__ void clip_kernel(float* __restrict__ x, std::int64_t n, const double* __restrict__ sum_squares,
                            double max_norm, double eps) {
  float factor;
  if (clips(sum_squares, max_norm, eps, factor)) scale_elements<N>(x, n, factor);
}

// partial (chunks) <- per chunk c of x (n), sum of x^2 in double; N divides n when N > 1.
template <int N>
__global__ void __launch_bounds__(kThreads) chunk_squares_kernel(const float* __restrict__ x, std::int64_t n,
                                                                 double* __restrict__ partial) {
  __shared__ double scratch[32];
  const std::int64_t begin = blockIdx.x * kSumChunk, end = begin + kSumChunk < n ? begin + kSumChunk : n;
  double sum = 0;
  for (std::int64_t e = begin + threadIdx.x * N; e < end; e += kThreads * N) {
    const Pack<float, N> v = load_pack<N>(x + e);
#pragma unroll
    for (int i = 0; i < N; ++i) sum += static_cast<double>(v.v[i]) * v.v[i];
  }
  sum = block_reduce(sum, SumOp{}, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// total (1) <- sum of partial (count) in a fixed order.
__global__ void __launch_bounds__(kFinishThreads) finish_sum_kernel(const double* __restrict__ partial,
                                                                    std::int64_t count, double* __restrict__ total) {
  __shared__ double scratch[32];
  double sum = 0;
  for (std::int64_t i = threadIdx.x; i < count; i += kFinishThreads) sum += partial[i];
  sum = block_reduce(sum, SumOp{}, scratch);
  if (threadIdx.x == 0) *total = sum;
}

bool aligned16(const void* p) { return pack_aligned(p, 4, sizeof(float)); }

std::int64_t chunk_count(const std::vector<Tensor>& tensors) {
  std::int64_t chunks = 0;
  for (const Tensor& t : tensors) chunks += ceil_div(t.numel(), kSumChunk);
  return chunks;
}

// partial (chunk_count) <- the chunk sums of every tensor in order; *total <- their sum.
void enqueue_sum_squares(const std::vector<Tensor>& tensors, double* partial, double* total, cudaStream_t s) {
  std::int64_t first = 0;
  for (const Tensor& t : tensors) {
    const std::int64_t n = t.numel(), count = ceil_div(n, kSumChunk);
    if (count == 0) continue;
    const auto* x = t.data_as<const float>();
    if (n % 4 == 0 && aligned16(x))
      chunk_squares_kernel<4><<<static_cast<unsigned>(count), kThreads, 0, s>>>(x, n, partial + first);
    else
      chunk_squares_kernel<1><<<static_cast<unsigned>(count), kThreads, 0, s>>>(x, n, partial + first);
    FT_CUDA_CHECK_LAUNCH();
    first += count;
  }
  finish_sum_kernel<<<1, kFinishThreads, 0, s>>>(partial, first, total);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                const AdamWFactors& factors, const AdamWFactors* from, const GradScale& grad_scale, Device device,
                const Stream& stream) {
  if (n == 0) return;
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  const bool packs = aligned16(params) && aligned16(grads) && aligned16(exp_avg) && aligned16(exp_avg_sq);
  launch_flat(n, packs, [&](auto pack, std::int64_t first, std::int64_t count) {
    constexpr int N = decltype(pack)::value;
    adamw_kernel<N><<<grid_for(count / N, kThreads), kThreads, 0, s>>>(params + first, grads + first, exp_avg + first,
                                                                       exp_avg_sq + first, count, factors, from,
                                                                       grad_scale);
    FT_CUDA_CHECK_LAUNCH();
  });
}

void sgd_step(float* params, const float* grads, std::int64_t n, double lr, Device device, const Stream& stream) {
  if (n == 0) return;
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  const auto rate = static_cast<float>(lr);
  launch_flat(n, aligned16(params) && aligned16(grads), [&](auto pack, std::int64_t first, std::int64_t count) {
    constexpr int N = decltype(pack)::value;
    sgd_kernel<N><<<grid_for(count / N, kThreads), kThreads, 0, s>>>(params + first, grads + first, count, rate);
    FT_CUDA_CHECK_LAUNCH();
  });
}

void scale(float* x, std::int64_t n, double factor, Device device, const Stream& stream) {
  if (n == 0) return;
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  const auto f = static_cast<float>(factor);
  launch_flat(n, aligned16(x), [&](auto pack, std::int64_t first, std::int64_t count) {
    constexpr int N = decltype(pack)::value;
    scale_kernel<N><<<grid_for(count / N, kThreads), kThreads, 0, s>>>(x + first, count, f);
    FT_CUDA_CHECK_LAUNCH();
  });
}

void clip_scale(const std::vector<Tensor>& tensors, const double* sum_squares, double max_norm, double eps,
                const Stream& stream) {
  if (tensors.empty()) return;
  CudaDeviceGuard guard(tensors.front().device().index);
  const cudaStream_t s = cuda_stream(stream);
  for (const Tensor& t : tensors) {
    auto* x = t.data_as<float>();
    launch_flat(t.numel(), aligned16(x), [&](auto pack, std::int64_t first, std::int64_t count) {
      constexpr int N = decltype(pack)::value;
      clip_kernel<N><<<grid_for(count / N, kThreads), kThreads, 0, s>>>(x + first, count, sum_squares, max_norm, eps);
      FT_CUDA_CHECK_LAUNCH();
    });
  }
}

double sum_squares(const std::vector<Tensor>& tensors, const Stream& stream) {
  if (tensors.empty()) return 0.0;
  const Device device = tensors.front().device();
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  const std::int64_t chunks = chunk_count(tensors);
  Buffer partial(static_cast<std::size_t>(chunks + 1) * sizeof(double), device, "sum of squares partials", stream);
  auto* pp = static_cast<double*>(partial.data());  // (chunks), then the total
  enqueue_sum_squares(tensors, pp, pp + chunks, s);
  double total = 0;
  FT_CUDA_CHECK(cudaMemcpyAsync(&total, pp + chunks, sizeof(total), cudaMemcpyDeviceToHost, s));
  FT_CUDA_CHECK(cudaStreamSynchronize(s));
  return total;
}

void sum_squares_to(double* total, const std::vector<Tensor>& tensors, const Stream& stream) {
  const Device device = tensors.front().device();
  CudaDeviceGuard guard(device.index);
  const std::int64_t chunks = chunk_count(tensors);
  Buffer partial(static_cast<std::size_t>(chunks) * sizeof(double), device, "sum of squares partials",
                 stream);  // (chunks)
  enqueue_sum_squares(tensors, static_cast<double*>(partial.data()), total, cuda_stream(stream));
}

}  // namespace ft::gpu
