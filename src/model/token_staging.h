// token_staging.h — puts a host TokenBatch where the model runs: on the CPU the batch's own ids, on a
// CUDA device a copy in two preallocated (B, T) int32 buffers.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "model/data_loader.h"

namespace ft {

// dst (on device) <- the int32 values of src, synchronously.
void upload_ids(const Buffer& dst, Device device, const std::vector<std::int32_t>& src);

class TokenStaging {
 public:
  // Room for batches of at most batch x context ids on device.
  TokenStaging(Device device, std::int64_t batch, std::int64_t context);

  // (inputs, targets), each (B, T) int32 on the device; valid until the next place().
  std::pair<TokenIds, TokenIds> place(const TokenBatch& batch);

 private:
  Device device_;
  std::int64_t capacity_;  // ids per buffer
  Buffer inputs_, targets_;
};

}  // namespace ft
