// token_staging.cpp — TokenStaging: synchronous host-to-device copies of token ids.
#include "model/token_staging.h"

#include <vector>

#include "core/error.h"
#include "core/tensor_io.h"

namespace ft {

// ft::DType has no integer type: fp32 views of the same 4-byte words copy the ids unchanged.
void upload_ids(const Buffer& dst, Device device, const std::vector<std::int32_t>& src) {
  const Shape shape{static_cast<std::int64_t>(src.size())};
  copy(Tensor(dst.data(), DType::f32, device, shape),
       Tensor(const_cast<std::int32_t*>(src.data()), DType::f32, Device::cpu(), shape));
}

TokenStaging::TokenStaging(Device device, std::int64_t batch, std::int64_t context)
    : device_(device), capacity_(batch * context) {
  if (device.is_cpu()) return;
  const auto bytes = static_cast<std::size_t>(capacity_) * sizeof(std::int32_t);
  inputs_ = Buffer(bytes, device, "token ids (inputs)");
  targets_ = Buffer(bytes, device, "token ids (targets)");
}

std::pair<TokenIds, TokenIds> TokenStaging::place(const TokenBatch& batch) {
  if (device_.is_cpu()) return {batch.input_ids(), batch.target_ids()};
  FT_CHECK(batch.batch * batch.context <= capacity_, "token staging holds ", capacity_, " ids per buffer, given a (",
           batch.batch, ", ", batch.context, ") batch");
  upload_ids(inputs_, device_, batch.inputs);
  upload_ids(targets_, device_, batch.targets);
  const Shape shape{batch.batch, batch.context};
  return {TokenIds{static_cast<const std::int32_t*>(inputs_.data()), shape, device_},
          TokenIds{static_cast<const std::int32_t*>(targets_.data()), shape, device_}};
}

}  // namespace ft
