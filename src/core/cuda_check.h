// cuda_check.h — internal (CUDA builds only): check macros for CUDA runtime, cuBLAS and NCCL calls
// that raise ft::Error naming the failed call, its status, file and line. Never include from public headers.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define FT_CUDA_CHECK(call)                                                                   \
  do {                                                                                        \
    cudaError_t ft_status_ = (call);                                                          \
    if (ft_status_ != cudaSuccess) {                                                          \
      if (ft_status_ == cudaErrorMemoryAllocation) {                                          \
        cudaGetLastError();                                                                   \
        FT_THROW(out_of_memory, #call, " failed: ", cudaGetErrorString(ft_status_));          \
      }                                                                                       \
      FT_THROW(device, #call, " failed: ", cudaGetErrorName(ft_status_), " (",                \
               cudaGetErrorString(ft_status_), ")");                                          \
    }                                                                                         \
  } while (0)

// After a kernel launch: raise the launch error, if any.
#define FT_CUDA_CHECK_LAUNCH() FT_CUDA_CHECK(cudaGetLastError())

#define FT_CUBLAS_CHECK(call)                                                                 \
  do {                                                                                        \
    auto ft_status_ = (call);                                                                 \
    if (ft_status_ != 0) {                                                                    \
      if (ft_status_ == 3 /* CUBLAS_STATUS_ALLOC_FAILED */)                                  \
        FT_THROW(out_of_memory, #call, " failed: CUBLAS_STATUS_ALLOC_FAILED");               \
      FT_THROW(device, #call, " failed with cuBLAS status ", static_cast<int>(ft_status_));  \
    }                                                                                         \
  } while (0)

#define FT_NCCL_CHECK(call)                                                                   \
  do {                                                                                        \
    auto ft_status_ = (call);                                                                 \
    if (ft_status_ != 0)                                                                      \
      FT_THROW(device, #call, " failed: ", ncclGetErrorString(ft_status_));                   \
  } while (0)

namespace ft {
// Makes `index` the current CUDA device for a scope, restoring the previous one after.
struct CudaDeviceGuard {
  int previous = 0;
  explicit CudaDeviceGuard(int index) {
    FT_CUDA_CHECK(cudaGetDevice(&previous));
    if (previous != index) FT_CUDA_CHECK(cudaSetDevice(index));
  }
  ~CudaDeviceGuard() { cudaSetDevice(previous); }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;
};
}  // namespace ft
