// token_ids.cu — the range check of token ids in device memory: a kernel finds the first position holding
// an id outside [0, vocab) (atomicMin on the position: the answer does not depend on scheduling), the host
// reads it back and raises the same error as the CPU check, before the op writes anything. Inside a stream
// capture nothing can be read back (and a synchronisation would end the capture), so nothing is checked
// there: whoever fills a captured graph's id buffers checks the ids (GraphedTrainStep does, on the host).
#include <cstdint>

#include "core/buffer.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace ft::gpu {

namespace {

constexpr int kThreads = 256;

// first (1) <- min(first, every position i with ids[i] outside [0, vocab)).
__global__ void first_out_of_range_kernel(const std::int32_t* __restrict__ ids /* (n) */, std::int64_t n,
                                          std::int64_t vocab, unsigned long long* first /* (1) */) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int32_t id = ids[i];
    if (id < 0 || id >= vocab) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

}  // namespace

void check_token_range(const char* op, const TokenIds& ids, std::int64_t vocab, const char* name,
                       const Stream& stream) {
  const std::int64_t n = ids.numel();
  if (n == 0) return;
  const Device device = ids.device;
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FT_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;
  Buffer first(sizeof(unsigned long long), device, "token id check", stream);  // (1) first bad position
  FT_CUDA_CHECK(cudaMemsetAsync(first.data(), 0xff, sizeof(unsigned long long), s));
  first_out_of_range_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(
      ids.data, n, vocab, static_cast<unsigned long long*>(first.data()));
  FT_CUDA_CHECK_LAUNCH();
  unsigned long long position = 0;
  FT_CUDA_CHECK(cudaMemcpyAsync(&position, first.data(), sizeof(position), cudaMemcpyDeviceToHost, s));
  FT_CUDA_CHECK(cudaStreamSynchronize(s));
  if (position == ~0ull) return;
  std::int32_t id = 0;
  FT_CUDA_CHECK(cudaMemcpy(&id, ids.data + position, sizeof(id), cudaMemcpyDeviceToHost));
  ops::throw_token_out_of_range(op, ids, static_cast<std::int64_t>(position), id, vocab, name);
}

}  // namespace ft::gpu
