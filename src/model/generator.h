// generator.h — autoregressive generation from a TransformerLM's parameters with a KV cache, built from the
// public ops (ops/*.h) so it runs on the CPU and on CUDA. A prefill runs the prompt through the blocks in
// one pass, writing every layer's keys and values into the cache; each decode step then runs one new token
// per row: attention_forward with Nq = 1 queries against Nk = the cache length (the attention's
// bottom-right-aligned causal mask makes the new token see the whole cache), RoPE at the token's position.
// The numerics follow TransformerLM::forward (same ops, dtypes and residual order), so greedy generation
// gives the tokens that repeated full forwards give.
//
// Memory (allocated once, for max_batch rows of max_len tokens):
//   kv cache   per layer (max_len, max_batch, 2, H, Dh) in the compute dtype (bf16 in bf16 mode): position-major,
//              so a step's keys and values for all rows are contiguous rows the K/V GEMM writes in place
//   weights    bf16 mode: a bf16 cast of all parameters, refreshed at each generate() (the masters may change)
//   activations (tokens, rows) of one pass: the residual stream and x_mid (fp32), norm outputs, q, attention
//              output, FFN a, b, h (compute dtype), rstd and lse (fp32); the last position's logits (rows, V) fp32
// Decode steps are not captured in a CUDA graph: the attention and RoPE ops take the cache length and the
// position as host arguments, which differ at every step.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "model/sampling.h"
#include "model/transformer.h"

namespace ft {

struct GenerationOptions {
  std::int64_t max_new_tokens = 32;
  SamplingOptions sampling;
  std::uint64_t seed = 0;
};

// Wall-clock times of the last generate() (the device waited for at the end of each part).
struct GenerationStats {
  double prefill_ms = 0;
  double decode_ms = 0;           // all decode steps
  std::int64_t decode_steps = 0;  // max_new_tokens - 1 (the first new token comes from the prefill)
};

class Generator {
 public:
  // Allocates the cache and workspace for up to max_batch rows and max_len tokens (prompt and new tokens,
  // at most the model's context length) on the model's device, in its precision, ordered on its stream.
  Generator(const TransformerLM& model, std::int64_t max_batch, std::int64_t max_len);
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // The max_new_tokens ids that follow each prompt (rows of equal length, ids in [0, vocab)). ft::Error
  // (invalid_argument) when the prompts are empty, ragged or too many, when prompt plus new tokens exceed
  // max_len or the context length, or when an option is out of range.
  std::vector<std::vector<std::int32_t>> generate(const std::vector<std::vector<std::int32_t>>& prompts,
                                                  const GenerationOptions& options);
  const GenerationStats& stats() const { return stats_; }
  std::int64_t max_batch() const { return max_batch_; }
  std::int64_t max_len() const { return max_len_; }

 private:
  // Runs tokens ids (T, B) (position-major) at positions [pos, pos + T) through the model, filling the cache,
  // and leaves the last position's logits (B, V) in host_logits_.
  void forward(const std::vector<std::int32_t>& ids, std::int64_t B, std::int64_t T, std::int64_t pos);
  void layer(std::int64_t l, std::int64_t B, std::int64_t T, std::int64_t pos);
  Tensor weight(std::size_t index) const;  // a GEMM weight (the bf16 cast in bf16 mode)
  Tensor rows(const OwnedTensor& t, std::int64_t count, std::int64_t cols) const;  // (count, cols) view of t
  DType compute_dtype() const;

  const TransformerLM& model_;
  std::int64_t max_batch_, max_len_;
  Buffer cache_;            // num_layers x (max_len, max_batch, 2, H, Dh)
  ParameterBuffer casts_;   // bf16 mode: the parameters in bf16
  OwnedTensor x_, x_mid_;   // (rows, d) fp32
  OwnedTensor ln_, q_, o_;  // (rows, d) compute dtype
  OwnedTensor a_, b_, h_;   // (rows, d_ff) compute dtype
  OwnedTensor rstd_;        // (rows) fp32
  OwnedTensor lse_;         // (max_batch, H, max_len) fp32
  OwnedTensor logits_;      // (max_batch, V) fp32
  Buffer device_ids_;       // CUDA: (rows) int32 staging of the ids
  std::vector<float> host_logits_;
  GenerationStats stats_;
};

}  // namespace ft
