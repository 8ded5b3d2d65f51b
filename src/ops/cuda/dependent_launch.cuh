// dependent_launch.cuh — internal: programmatic dependent launch (compute capability 9.0+) for the decode
// step's chain of small kernels. A kernel launched with `overlap` may be scheduled before the previous kernel
// on its stream has finished: once every block of that kernel has called allow_next_grid() (or exited), its
// blocks start, may read what the previous kernel does not write (weights), and wait_for_previous_grid()
// before anything else — which returns once the previous kernel has completed and its writes are visible.
// Every kernel launched with `overlap` must call wait_for_previous_grid() before its first dependent access
// (and so completes after its predecessor, keeping the chain ordered). The kernels here call
// allow_next_grid() right after their own wait, so at most one kernel runs ahead, prefetching. Without
// `overlap`, or on older GPUs, the calls do nothing and the launch is an ordinary one.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "core/cuda_check.h"
#include "core/device.h"

namespace ft::gpu {

__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The line holding p into L2, without waiting for it.
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Whether the device can overlap launches (compute capability 9.0 or later).
bool supports_dependent_launch(Device device);

// The preferred shared-memory carveout of every kernel in the decode step's overlapping chain (the fused
// few-row GEMMs and the decode attention): all shared memory, the attention's need. A multiprocessor changes its
// split between L1 and shared memory only when idle, so blocks of consecutive kernels share one only when
// their carveouts agree.
inline constexpr int kChainCarveout = cudaSharedmemCarveoutMaxShared;
// Sets kChainCarveout as the kernel's preferred carveout, once per kernel and device.
void use_chain_carveout(const void* kernel, Device device);

// kernel<<<grid, block, shared_bytes, stream>>>(args...), allowed to overlap its predecessor when `overlap`
// (and the device supports it).
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream,
                   bool overlap, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = overlap ? &attribute : nullptr;
  config.numAttrs = overlap ? 1 : 0;
  FT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace ft::gpu
