// packed_documents.cpp — document layouts of batches and their synchronous staging on the device.
#include "model/packed_documents.h"

#include "core/error.h"
#include "model/token_staging.h"

namespace ft {

void layout_documents(const std::int32_t* inputs, std::int64_t batch, std::int64_t context, std::int32_t eos_id,
                      DocumentLayout& out) {
  FT_CHECK(batch >= 1 && context >= 1, "packed documents: the batch must be at least (1, 1), given (", batch, ", ",
           context, ")");
  const std::int64_t total = batch * context;
  FT_CHECK(total < (std::int64_t{1} << 31), "packed documents: a batch of ", total,
           " tokens does not fit int32 cumulative lengths");
  out.batch = batch;
  out.context = context;
  out.cu_seqlens.resize(static_cast<std::size_t>(total + 1));
  out.positions.resize(static_cast<std::size_t>(total));
  std::int64_t documents = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    std::int32_t position = 0;
    for (std::int64_t t = 0; t < context; ++t) {
      const std::int64_t i = b * context + t;
      if (position == 0) out.cu_seqlens[static_cast<std::size_t>(documents++)] = static_cast<std::int32_t>(i);
      out.positions[static_cast<std::size_t>(i)] = position;
      position = inputs[i] == eos_id ? 0 : position + 1;  // the token after an end of document starts one
    }
  }
  out.documents = documents;
  for (std::int64_t e = documents; e <= total; ++e)
    out.cu_seqlens[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(total);
}

DocumentStaging::DocumentStaging(Device device, std::int64_t batch, std::int64_t context, std::int64_t capacity)
    : device_(device), capacity_(capacity) {
  FT_CHECK(batch >= 1 && context >= 1, "packed documents: the batch must be at least (1, 1), given (", batch, ", ",
           context, ")");
  const std::int64_t total = batch * context;
  FT_CHECK(capacity == 0 || (capacity >= batch && capacity <= total), "packed documents: a fixed capacity must be ",
           batch, " (every row starts a document) to ", total, " (B*T) documents, given ", capacity);
  layout_.batch = batch;
  layout_.context = context;
  layout_.cu_seqlens.assign(static_cast<std::size_t>(total + 1), 0);
  layout_.positions.assign(static_cast<std::size_t>(total), 0);
  const std::int32_t* cu = layout_.cu_seqlens.data();
  const std::int32_t* positions = layout_.positions.data();
  if (device.is_cuda()) {
    cu_seqlens_ = Buffer(layout_.cu_seqlens.size() * sizeof(std::int32_t), device, "packed documents (cu_seqlens)");
    positions_ = Buffer(layout_.positions.size() * sizeof(std::int32_t), device, "packed documents (positions)");
    cu = static_cast<const std::int32_t*>(cu_seqlens_.data());
    positions = static_cast<const std::int32_t*>(positions_.data());
  }
  view_.cu_seqlens = {cu, layout_.cu_seqlens.data(), (capacity > 0 ? capacity : total) + 1, device};
  view_.max_seqlen = context;
  view_.positions = {positions, {batch, context}, device};
}

const PackedDocuments& DocumentStaging::place(const TokenBatch& batch, std::int32_t eos_id) {
  FT_CHECK(batch.batch == layout_.batch && batch.context == layout_.context, "packed documents: staging holds (",
           layout_.batch, ", ", layout_.context, ") batches, given (", batch.batch, ", ", batch.context, ")");
  layout_documents(batch.inputs.data(), batch.batch, batch.context, eos_id, layout_);
  FT_CHECK(capacity_ == 0 || layout_.documents <= capacity_, "packed documents: a batch holds ", layout_.documents,
           " documents, more than the fixed capacity of ", capacity_,
           " (a CUDA graph's; raise train --max-documents)");
  if (capacity_ == 0) view_.cu_seqlens.count = layout_.documents + 1;
  if (device_.is_cuda()) {
    upload_ids(cu_seqlens_, device_, layout_.cu_seqlens);
    upload_ids(positions_, device_, layout_.positions);
  }
  return view_;
}

}  // namespace ft
