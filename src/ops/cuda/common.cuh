// common.cuh — internal device helpers shared by the op kernels in this folder: CUDA element types for a
// DType, fp32 loads/stores of every element type, N-element packs for 16-byte (or narrower) vector
// accesses, warp and block reductions in a fixed order (deterministic), and launch helpers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/stream.h"

namespace ft::gpu {

inline cudaStream_t cuda_stream(const Stream& stream) { return static_cast<cudaStream_t>(stream.handle()); }

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride loop over `work` items with `threads` per block (capped: each thread loops).
inline unsigned grid_for(std::int64_t work, int threads) {
  constexpr std::int64_t kMaxBlocks = 8192;
  const std::int64_t blocks = ceil_div(work, threads);
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

// fn(T{}) with T the CUDA element type of dtype.
template <class Fn>
void with_cuda_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn(float{}); return;
    case DType::bf16: fn(__nv_bfloat16{}); return;
    case DType::f16: fn(__half{}); return;
  }
  FT_THROW(unsupported, "CUDA ops: unknown dtype");
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

// N consecutive elements moved as one aligned access (N * sizeof(T) bytes, at most 16).
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <int N, class T>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, N>*>(p);
}
template <int N, class T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& x) {
  *reinterpret_cast<Pack<T, N>*>(p) = x;
}

// True when p is aligned for an N-element pack of `element_bytes` elements.
inline bool pack_aligned(const void* p, int n, std::size_t element_bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % (static_cast<std::size_t>(n) * element_bytes) == 0;
}

// A flat range of n elements in two launches: launch(std::integral_constant<int, N>, first, count) for a
// body of 4-element packs (when `packs`) and a tail of single elements; count is a multiple of N.
template <class Launch>
void launch_flat(std::int64_t n, bool packs, Launch&& launch) {
  const std::int64_t body = packs ? n / 4 * 4 : 0;
  if (body > 0) launch(std::integral_constant<int, 4>{}, std::int64_t{0}, body);
  if (n > body) launch(std::integral_constant<int, 1>{}, body, n - body);
}

struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// The reduction of x over the warp (butterfly: every lane gets the same value, in a fixed order).
template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T x, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// The reduction of x over the block (blockDim.x a multiple of 32), returned to every thread. `scratch`
// holds 32 values in shared memory; the call synchronises the block, so scratch may be reused after it.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T x, Op op, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_reduce(x, op);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  T total = scratch[0];
  for (int w = 1; w < warps; ++w) total = op(total, scratch[w]);
  return total;
}

}  // namespace ft::gpu
