// peer_reduce.cu — the copy-engine collectives' reduction kernel: a grid-stride loop over 16-byte vectors
// (4 fp32 or 8 bf16 per load) when both buffers are 16-byte aligned, element by element otherwise. It is
// bandwidth-bound (two reads, one write per element), so a few blocks of wide loads keep up with NVLink
// while holding few SMs beside the model's kernels.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "dist/nccl/peer_reduce.h"

namespace ft::gpu {

namespace {

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 32;  // a quarter of an H100's SMs at most, for the time one half is read

__device__ float load(const float* p, std::int64_t i) { return p[i]; }
__device__ float load(const __nv_bfloat16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ void store(__nv_bfloat16* p, std::int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// out[i] = (a[i] + b[i]) * scale for the elements of one 16-byte vector (fp32: 4, bf16: 8).
__device__ uint4 add_vector(uint4 a, uint4 b, float scale, const float*) {
  const float4 x = *reinterpret_cast<float4*>(&a), y = *reinterpret_cast<float4*>(&b);
  float4 r = make_float4((x.x + y.x) * scale, (x.y + y.y) * scale, (x.z + y.z) * scale, (x.w + y.w) * scale);
  return *reinterpret_cast<uint4*>(&r);
}
__device__ uint4 add_vector(uint4 a, uint4 b, float scale, const __nv_bfloat16*) {
  uint4 out;
  const auto* x = reinterpret_cast<const __nv_bfloat16*>(&a);
  const auto* y = reinterpret_cast<const __nv_bfloat16*>(&b);
  auto* r = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
  for (int k = 0; k < 8; ++k) r[k] = __float2bfloat16_rn((__bfloat162float(x[k]) + __bfloat162float(y[k])) * scale);
  return out;
}

template <class T>
__global__ void add_scaled(T* dst, const T* a, const T* b, std::int64_t n, float scale, bool vectorized) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::int64_t done = 0;  // elements handled by the vector loop
  if (vectorized) {
    constexpr std::int64_t kPer = 16 / sizeof(T);
    const std::int64_t vectors = n / kPer;
    auto* d = reinterpret_cast<uint4*>(dst);
    const auto* x = reinterpret_cast<const uint4*>(a);
    const auto* y = reinterpret_cast<const uint4*>(b);
    for (std::int64_t v = first; v < vectors; v += stride) d[v] = add_vector(x[v], y[v], scale, dst);
    done = vectors * kPer;
  }
  for (std::int64_t i = done + first; i < n; i += stride) store(dst, i, (load(a, i) + load(b, i)) * scale);
}

}  // namespace

void peer_reduce(void* dst, const void* a, const void* b, std::int64_t n, DType dtype, float scale, void* stream) {
  if (n == 0) return;
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const bool vectorized = aligned(dst) && aligned(a) && aligned(b);
  const std::int64_t per_thread = vectorized ? 16 / static_cast<std::int64_t>(size_of(dtype)) : 1;
  const std::int64_t wanted = (n / per_thread + kThreads) / kThreads;
  const int blocks = static_cast<int>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == DType::bf16)
    add_scaled<<<blocks, kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(dst), static_cast<const __nv_bfloat16*>(a),
                                           static_cast<const __nv_bfloat16*>(b), n, scale, vectorized);
  else
    add_scaled<<<blocks, kThreads, 0, s>>>(static_cast<float*>(dst), static_cast<const float*>(a),
                                           static_cast<const float*>(b), n, scale, vectorized);
  FT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ft::gpu
