// device_pair.h — a tensor on the host and its copy on a CUDA device holding the same seeded normals (rounded
// to the dtype once, so both hold identical values): the inputs of the GPU tests that compare an op's CUDA
// implementation with its CPU one.
#pragma once

#include <cstdint>

#include "core/buffer.h"
#include "core/tensor_io.h"

namespace ft::testing_util {

struct DevicePair {
  OwnedTensor cpu, gpu;
};

inline DevicePair device_pair(const Shape& shape, DType dtype, std::uint64_t seed, double std = 1.0,
                              Device device = Device::cuda(0)) {
  DevicePair p{OwnedTensor(shape, dtype, Device::cpu(), "test"), OwnedTensor(shape, dtype, device, "test")};
  fill_normal(p.cpu, seed, 0.0, std);
  copy(p.gpu, p.cpu);
  return p;
}

}  // namespace ft::testing_util
