// argmax.h — greedy decoding's choice on the device: the index of each row's largest logit, written to
// device memory (so a captured decode step can feed it to the next step's embedding without the host).
#pragma once

#include <cstdint>

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

// out (rows) int32, in logits' device memory <- for each row of logits (rows, cols) fp32 (contiguous last
// dim) the index of its largest value among the first `limit` columns (0 = all; ties: the lowest index, as
// std::max_element). CPU or CUDA, ordered on stream.
// With history (and position, one int32, both in that memory) given, the indices also go to
// history[*position * rows + r], *position read when the work runs: a generation's tokens kept by position
// on the device, read back once at its end instead of at every step.
void argmax_rows(std::int32_t* out, const Tensor& logits, std::int64_t limit, const Stream& stream,
                 std::int32_t* history = nullptr, const std::int32_t* position = nullptr);

}  // namespace ft
