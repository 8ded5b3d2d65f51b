// test_allocator_cuda.cpp — the CUDA side of the process-wide allocator: freed memory stays in the device's
// pool across synchronisations (the next allocation reuses it instead of mapping fresh memory), statistics
// count what flashtrain holds rather than what the pool keeps, and a request larger than the device
// raises out_of_memory naming the request.
// Run on a GPU machine: ./build/bin/gpu_test_allocator_cuda
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/allocator.h"
#include "core/buffer.h"
#include "core/error.h"

namespace ft {
namespace {

const Device kGpu = Device::cuda(0);

std::uint64_t pool_reserved_bytes() {
  cudaMemPool_t pool = nullptr;
  EXPECT_EQ(cudaDeviceGetMemPool(&pool, 0), cudaSuccess);
  std::uint64_t reserved = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved), cudaSuccess);
  return reserved;
}

TEST(AllocatorCuda, FreedMemoryStaysInThePoolAcrossSynchronisation) {
  constexpr std::size_t kBytes = 64ull << 20;  // as the leaderboard's fp32 dQ accumulator
  Allocator& allocator = Allocator::instance();
  const std::int64_t held_before = allocator.stats(kGpu).current_bytes;
  void* first = nullptr;
  {
    Buffer scratch(kBytes, kGpu, "test.scratch");
    first = scratch.data();
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(allocator.stats(kGpu).current_bytes, held_before + static_cast<std::int64_t>(kBytes));
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // CUDA's default pool would hand the 64 MB back here
  EXPECT_GE(pool_reserved_bytes(), kBytes);
  EXPECT_EQ(allocator.stats(kGpu).current_bytes, held_before);  // statistics count what flashtrain holds

  Buffer again(kBytes, kGpu, "test.scratch");
  EXPECT_EQ(again.data(), first);  // the same block, reused
}

TEST(AllocatorCuda, RequestLargerThanTheDeviceRaisesOutOfMemory) {
  std::size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  try {
    Buffer huge(2 * total_bytes, kGpu, "test.huge");
    FAIL() << "allocating twice the device's memory succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("test.huge"), std::string::npos) << e.what();
  }
  Buffer small(1 << 20, kGpu, "test.small");  // the allocator still works afterwards
  EXPECT_NE(small.data(), nullptr);
}

}  // namespace
}  // namespace ft
