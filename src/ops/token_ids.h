// token_ids.h — TokenIds: a non-owning view of int32 token ids (inputs of the embedding, targets of
// the cross-entropy). ft::DType holds floating-point types only, so ids travel as this small view with
// a shape and the device they live on, which the ops check against their tensors' device.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace ft {

struct TokenIds {
  const std::int32_t* data = nullptr;  // shape, contiguous row-major
  Shape shape;                          // e.g. (B, T)
  Device device = Device::cpu();

  std::int64_t numel() const { return shape_numel(shape); }
};

}  // namespace ft
