// nccl_test_util.h — shared by the nccl tests (tests/nccl/test_*.cpp, each run as 2 ranks under
// mpirun on a machine with 2 GPUs, rank r on cuda:r): the job's DistributedContext
// (common/distributed_context.h), whose environment fails — never skips — when fewer than 2 GPUs are
// visible; and host <-> GPU copies of value vectors.
#pragma once

#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/distributed_context.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/tensor_io.h"

namespace ft::test {

// The host communicator (MPI) and this rank's GPU.
inline Communicator& host() { return context().host_communicator(); }
inline Device gpu() { return context().local_gpu(); }

// The job's context, which fails the suite (never skips it) unless it has 2 ranks and 2 GPUs.
class MultiGpuEnvironment : public DistributedTestEnvironment {
 protected:
  void check_job() override {
    ASSERT_EQ(context().world_size(), 2) << "the nccl tests run as 2 ranks (mpirun -np 2)";
    ASSERT_GE(cuda_device_count(), 2) << "the nccl tests need 2 GPUs (one per rank); this machine shows "
                                      << cuda_device_count();
    ASSERT_EQ(cudaSetDevice(gpu().index), cudaSuccess);
  }
};

inline ::testing::Environment* const nccl_environment =
    ::testing::AddGlobalTestEnvironment(new MultiGpuEnvironment);

// A GPU tensor (n) of dtype T (float or bf16) holding values.
template <class T>
OwnedTensor to_gpu(std::vector<T> values, DType dtype, Device device) {
  const auto n = static_cast<std::int64_t>(values.size());
  OwnedTensor t({n}, dtype, device, "test values");
  copy(t, Tensor(values.data(), dtype, Device::cpu(), {n}));
  return t;
}

// The values of a contiguous GPU tensor of T (float or bf16), on the host (after the device is idle).
template <class T>
std::vector<T> to_host(const Tensor& t) {
  std::vector<T> values(static_cast<std::size_t>(t.numel()));  // (numel)
  copy(Tensor(values.data(), t.dtype(), Device::cpu(), {t.numel()}), t.reshape({t.numel()}));
  return values;
}

}  // namespace ft::test
