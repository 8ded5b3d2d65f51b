// packed_documents.h — training on packed documents: the document layout of a batch (where each row's
// documents start, each token's position in its document), found on the host from the end-of-document
// token, and its staging on the model's device at a fixed capacity (TransformerLM::set_documents reads it).
//
// Note [Packed documents]
// Pretraining packs documents end to end into each (B, T) row; a document ends with its end-of-document
// token (eos_id), and the token after it starts the next document. Every row also starts a document (the
// row's first tokens may be a document's tail). With packing, the model
//   * confines attention to each document: varlen attention (ops/attention_varlen.h) over the B*T tokens of
//     the batch, flattened row by row, with one causal sequence per document;
//   * restarts RoPE positions at 0 at each document's start (ops/rope.h, per-token positions);
//   * computes the loss over every position as usual (the end-of-document token predicts the next
//     document's first token, as in unpacked training).
// So a packed step's loss is the token-weighted mean of the documents' own losses, and its gradients are the
// sum of the documents' gradients (each weighted by its share of the tokens).
// The layout has a fixed capacity: B*T + 1 cumulative lengths whatever the number of documents (at most B*T),
// the unused entries repeating the total so that they describe empty documents, and max_seqlen = T. A CUDA
// graph of the step captures the count of lengths the attention gets, so a graphed step passes a fixed
// capacity C + 1 (C documents, B*T unless `train --max-documents C` bounds it; a batch with more documents
// is an error, never a silent truncation) and the values change in place between replays. Eager steps pass
// only the documents' entries (documents + 1), so that the kernels neither schedule nor size scratch for
// empty ones. The staging's `capacity` chooses.
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "model/data_loader.h"
#include "ops/attention_varlen.h"
#include "ops/token_ids.h"

namespace ft {

// The documents of a (B, T) batch where the model reads them (see Note [Packed documents]).
struct PackedDocuments {
  // (documents + 1), or (capacity + 1) at a fixed capacity, over the batch's tokens flattened row-major, with
  // a host mirror
  CumulativeLengths cu_seqlens;
  std::int64_t max_seqlen = 0;   // T: bounds every document's length
  TokenIds positions;            // (B, T): each token's position in its document
};

// One batch's layout on the host.
struct DocumentLayout {
  std::int64_t batch = 0, context = 0;
  std::int64_t documents = 0;            // documents found (>= B when B*T > 0)
  std::vector<std::int32_t> cu_seqlens;  // (B*T + 1): entries past `documents` equal B*T
  std::vector<std::int32_t> positions;   // (B, T)
};

// out <- the documents of inputs (B, T): each row split after every eos_id token. The vectors keep their
// storage when the size is unchanged (fixed addresses for the staging).
void layout_documents(const std::int32_t* inputs, std::int64_t batch, std::int64_t context, std::int32_t eos_id,
                      DocumentLayout& out);

// The layout of each batch where the model runs: on the CPU the host vectors themselves, on a CUDA device
// copies in preallocated buffers (the host vectors stay as the lengths' host mirror).
class DocumentStaging {
 public:
  // Room for batches of exactly batch x context tokens. capacity > 0: the view always holds capacity + 1
  // lengths (a CUDA graph captures the count; batch <= capacity <= batch x context), and place() refuses a
  // batch of more documents; 0: documents + 1 of the last batch.
  DocumentStaging(Device device, std::int64_t batch, std::int64_t context, std::int64_t capacity);

  // Lays out batch's documents (its inputs split at eos_id) and puts them on the device; the view's addresses
  // are the same for every call, its values those of the last call.
  const PackedDocuments& place(const TokenBatch& batch, std::int32_t eos_id);
  const PackedDocuments& documents() const { return view_; }
  const DocumentLayout& layout() const { return layout_; }

 private:
  Device device_;
  std::int64_t capacity_;  // 0 = the last batch's documents
  DocumentLayout layout_;
  Buffer cu_seqlens_, positions_;  // CUDA: (B*T + 1) and (B, T) int32
  PackedDocuments view_;
};

}  // namespace ft
