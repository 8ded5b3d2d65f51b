// device_token_batch.h — (B, T) random token ids, inputs then targets, on the host and copied to GPU 0, for
// the GPU model tests.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/buffer.h"
#include "ops/token_ids.h"

namespace ft::test {

struct DeviceTokenBatch {
  std::int64_t B, T;
  std::vector<std::int32_t> host;  // (2, B, T)
  Buffer device;
  DeviceTokenBatch(std::int64_t batch, std::int64_t seq, std::int64_t vocab, std::uint64_t seed)
      : B(batch), T(seq), host(static_cast<std::size_t>(2 * batch * seq)) {
    std::mt19937_64 gen(seed);
    std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(vocab - 1));
    for (auto& x : host) x = id(gen);
    device = Buffer(host.size() * sizeof(std::int32_t), Device::cuda(0), "test batch");
    EXPECT_EQ(cudaMemcpy(device.data(), host.data(), host.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  const std::int32_t* base(Device d) const {
    return d.is_cpu() ? host.data() : static_cast<const std::int32_t*>(device.data());
  }
  TokenIds inputs(Device d) const { return {base(d), {B, T}, d}; }
  TokenIds targets(Device d) const { return {base(d) + B * T, {B, T}, d}; }
};

}  // namespace ft::test
