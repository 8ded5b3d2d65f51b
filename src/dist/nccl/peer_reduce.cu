// peer_reduce.cu — the copy-engine all-reduce's reduction kernel: a grid-stride loop with few blocks, so it
// holds few SMs beside the model's kernels (it reads two buffers and writes one: bandwidth-bound).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "dist/nccl/peer_reduce.h"

namespace ft::gpu {

namespace {

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 16;  // about 12% of an H100's SMs: enough to keep up with NVLink's copies

__device__ float load(const float* p, std::int64_t i) { return p[i]; }
__device__ float load(const __nv_bfloat16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ void store(__nv_bfloat16* p, std::int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

template <class T>
__global__ void add_scaled(T* dst, const T* src, std::int64_t n, float scale) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    store(dst, i, (load(dst, i) + load(src, i)) * scale);
}

}  // namespace

void peer_reduce(void* dst, const void* src, std::int64_t n, DType dtype, float scale, void* stream) {
  if (n == 0) return;
  const std::int64_t wanted = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == DType::bf16)
    add_scaled<<<blocks, kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(dst), static_cast<const __nv_bfloat16*>(src),
                                           n, scale);
  else
    add_scaled<<<blocks, kThreads, 0, s>>>(static_cast<float*>(dst), static_cast<const float*>(src), n, scale);
  FT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ft::gpu
