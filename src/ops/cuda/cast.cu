// cast.cu — CUDA dtype casts (round to nearest even, through fp32 as on the CPU) and fills over
// contiguous tensors: 4-element packs for the aligned body, single elements for the tail.
#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace ft::gpu {

namespace {

constexpr int kThreads = 256;

template <class Dst, class Src, int N>
__global__ void cast_kernel(Dst* __restrict__ dst, const Src* __restrict__ src, std::int64_t n /* multiple of N */) {
  for (std::int64_t e = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) * N; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x * N) {
    const Pack<Src, N> in = load_pack<N>(src + e);
    Pack<Dst, N> out;
#pragma unroll
    for (int i = 0; i < N; ++i) out.v[i] = from_f32<Dst>(to_f32(in.v[i]));
    store_pack<N>(dst + e, out);
  }
}

template <class T, int N>
__global__ void fill_kernel(T* __restrict__ dst, std::int64_t n /* multiple of N */, T value) {
  Pack<T, N> out;
#pragma unroll
  for (int i = 0; i < N; ++i) out.v[i] = value;
  for (std::int64_t e = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) * N; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x * N)
    store_pack<N>(dst + e, out);
}

}  // namespace

void cast(const Tensor& dst, const Tensor& src, const Stream& stream) {
  const std::int64_t n = src.numel();
  if (n == 0) return;
  CudaDeviceGuard guard(src.device().index);
  const cudaStream_t s = cuda_stream(stream);
  if (dst.dtype() == src.dtype()) {
    FT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), static_cast<std::size_t>(n) * src.element_size(),
                                  cudaMemcpyDeviceToDevice, s));
    return;
  }
  with_cuda_dtype(dst.dtype(), [&](auto dst_tag) {
    with_cuda_dtype(src.dtype(), [&](auto src_tag) {
      using Dst = decltype(dst_tag);
      using Src = decltype(src_tag);
      auto* d = static_cast<Dst*>(dst.data());
      const auto* x = static_cast<const Src*>(src.data());
      const bool packs = pack_aligned(d, 4, sizeof(Dst)) && pack_aligned(x, 4, sizeof(Src));
      launch_flat(n, packs, [&](auto pack, std::int64_t first, std::int64_t count) {
        constexpr int N = decltype(pack)::value;
        cast_kernel<Dst, Src, N><<<grid_for(count / N, kThreads), kThreads, 0, s>>>(d + first, x + first, count);
        FT_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void fill(const Tensor& dst, double value, const Stream& stream) {
  const std::int64_t n = dst.numel();
  if (n == 0) return;
  CudaDeviceGuard guard(dst.device().index);
  const cudaStream_t s = cuda_stream(stream);
  with_cuda_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto* d = static_cast<T*>(dst.data());
    // The value rounded once on the host (float, then the element type), as the CPU fill does.
    const float rounded = static_cast<float>(value);
    T element;
    if constexpr (std::is_same_v<T, float>)
      element = rounded;
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
      element = __float2bfloat16_rn(rounded);
    else
      element = __float2half_rn(rounded);
    launch_flat(n, pack_aligned(d, 4, sizeof(T)), [&](auto pack, std::int64_t first, std::int64_t count) {
      constexpr int N = decltype(pack)::value;
      fill_kernel<T, N><<<grid_for(count / N, kThreads), kThreads, 0, s>>>(d + first, count, element);
      FT_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace ft::gpu
