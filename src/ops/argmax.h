// argmax.h — greedy decoding's choice on the device: the index of each row's largest logit, written to
// device memory (so a captured decode step can feed it to the next step's embedding without the host); and
// greedy_next, a greedy decode step's whole tail (choice, embedding of the choice, position) in one pass.
#pragma once

#include <cstddef>
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

// The tail of a greedy decode step (CUDA: one kernel, several blocks a row; CPU: argmax_rows, embedding_forward
// and advance_position in turn): ids <- argmax_rows(logits, limit) with history[*position * rows + r] <- ids[r];
// x (rows, d) fp32 <- embedding (vocab, d) fp32 [ids] (the next step's input, as embedding_forward); then
// *position += 1. ids, history and position: int32 in logits' device memory.
struct GreedyNextArgs {
  Tensor logits;                     // (rows, cols) fp32, contiguous last dim
  std::int64_t limit = 0;            // argmax over the first `limit` columns (0 = all)
  std::int32_t* ids = nullptr;       // (rows)
  std::int32_t* history = nullptr;   // (positions, rows)
  std::int32_t* position = nullptr;  // (1)
  Tensor embedding;                  // (vocab, d) fp32, vocab >= the columns searched
  Tensor x;                          // (rows, d) fp32
  // CUDA: at least greedy_next_workspace_bytes(rows) of device memory, zeroed before its first use (the kernel
  // leaves it zero again); unused on the CPU.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  // CUDA, compute capability 9.0+: launched to overlap the previous kernel (programmatic dependent launch), which
  // may write the logits; nothing is read before waiting for it.
  bool overlap_launch = false;
  Stream stream;
};
std::size_t greedy_next_workspace_bytes(std::int64_t rows, Device device);
void greedy_next(const GreedyNextArgs& a);

}  // namespace ft
