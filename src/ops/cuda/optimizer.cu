// optimizer.cu — CUDA optimiser updates and the reductions behind gradient clipping, over flat fp32
// buffers: AdamW fused into one pass (the CPU's formula, operation for operation, correctly rounded fp32
// without FMA contraction, as the CPU build computes it), SGD, scaling, and the sum of squares — per
// tensor in fixed chunks of kSumChunk elements (one block each, double), then one block adds every chunk
// in order (deterministic); the host reads the total back (this synchronises the stream).
#include <cmath>
#include <cstdint>

#include "core/buffer.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace ft::gpu {

namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kSumChunk = 1 << 14;  // elements per partial sum
constexpr int kFinishThreads = 1024;

// The per-step scalars, computed on the host in double as the CPU does.
struct AdamScalars {
  float decay, beta2, one_minus_beta1, one_minus_beta2, step_size, bias_correction2_sqrt, eps;
};

template <int N>
__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, std::int64_t n /* multiple of N */, AdamScalars a) {
  for (std::int64_t e = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) * N; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x * N) {
    const Pack<float, N> gv = load_pack<N>(g + e);
    Pack<float, N> pv = load_pack<N>(p + e), mv = load_pack<N>(m + e), vv = load_pack<N>(v + e);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float gi = gv.v[i];
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
  for (std::int64_t e = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) * N; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x * N) {
    Pack<float, N> xv = load_pack<N>(x + e);
#pragma unroll
    for (int i = 0; i < N; ++i) xv.v[i] *= factor;
    store_pack<N>(x + e, xv);
  }
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

}  // namespace

void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                const AdamWConfig& c, std::int64_t step, Device device, const Stream& stream) {
  if (n == 0) return;
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  const auto t = static_cast<double>(step);
  AdamScalars a;
  a.decay = static_cast<float>(1.0 - c.lr * c.weight_decay);
  a.beta2 = static_cast<float>(c.beta2);
  a.one_minus_beta1 = static_cast<float>(1.0 - c.beta1);
  a.one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
  a.step_size = static_cast<float>(c.lr / (1.0 - std::pow(c.beta1, t)));
  a.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(c.beta2, t)));
  a.eps = static_cast<float>(c.eps);
  const bool packs = aligned16(params) && aligned16(grads) && aligned16(exp_avg) && aligned16(exp_avg_sq);
  launch_flat(n, packs, [&](auto pack, std::int64_t first, std::int64_t count) {
    constexpr int N = decltype(pack)::value;
    adamw_kernel<N><<<grid_for(count / N, kThreads), kThreads, 0, s>>>(params + first, grads + first, exp_avg + first,
                                                                       exp_avg_sq + first, count, a);
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

double sum_squares(const std::vector<Tensor>& tensors, const Stream& stream) {
  if (tensors.empty()) return 0.0;
  const Device device = tensors.front().device();
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  std::int64_t chunks = 0;
  for (const Tensor& t : tensors) chunks += ceil_div(t.numel(), kSumChunk);
  Buffer partial(static_cast<std::size_t>(chunks + 1) * sizeof(double), device, "sum of squares partials", stream);
  auto* pp = static_cast<double*>(partial.data());  // (chunks), then the total
  std::int64_t first = 0;
  for (const Tensor& t : tensors) {
    const std::int64_t n = t.numel(), count = ceil_div(n, kSumChunk);
    if (count == 0) continue;
    const auto* x = t.data_as<const float>();
    if (n % 4 == 0 && aligned16(x))
      chunk_squares_kernel<4><<<static_cast<unsigned>(count), kThreads, 0, s>>>(x, n, pp + first);
    else
      chunk_squares_kernel<1><<<static_cast<unsigned>(count), kThreads, 0, s>>>(x, n, pp + first);
    FT_CUDA_CHECK_LAUNCH();
    first += count;
  }
  finish_sum_kernel<<<1, kFinishThreads, 0, s>>>(pp, chunks, pp + chunks);
  FT_CUDA_CHECK_LAUNCH();
  double total = 0;
  FT_CUDA_CHECK(cudaMemcpyAsync(&total, pp + chunks, sizeof(total), cudaMemcpyDeviceToHost, s));
  FT_CUDA_CHECK(cudaStreamSynchronize(s));
  return total;
}

}  // namespace ft::gpu
