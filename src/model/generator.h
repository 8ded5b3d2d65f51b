// generator.h — autoregressive generation from a TransformerLM's parameters with a KV cache, built from the
// public ops (ops/*.h) so it runs on the CPU and on CUDA. A prefill runs the prompt through the blocks in
// one pass (attention_forward with the bottom-right-aligned causal mask, RoPE at host offsets), writing every
// layer's keys and values into the cache; each decode step then runs one new token per row.
// The numerics follow TransformerLM::forward (same ops, dtypes and residual order), so greedy generation
// gives the tokens that repeated full forwards give.
//
// Note [Graphed decode step]
// The decode step reads the position of its token (the cache length before it) from one int32 in device
// memory, advanced by the step itself, so every step enqueues the same work and a CUDA graph captured once
// per batch size and DecodePlan replays it for every token:
//   (sampling: embedding of the ids in device memory ->) per layer: RMSNorm, the fused QKV GEMM, rope_append
//   (RoPE of q and k at the device position, k and v written into the cache; ops/rope.h), decode_attention over
//   the cache's first position + 1 keys (flash-decoding; ops/decode_attention.h), output projection, residual,
//   RMSNorm, w1 / w3, SwiGLU, w2, residual -> final RMSNorm, LM head -> greedy: greedy_next (ops/argmax.h, one
//   kernel: the argmax of the logits into the ids buffer and the history, the embedding of those ids as the next
//   step's input, position += 1); sampling: position += 1.
// In bf16 with at most kSkinnyMaxRows rows, the GEMMs are the fused few-row kernels of ops/skinny_linear.h,
// which fold the small ops in: a layer is five kernels (RMSNorm + QKV GEMM + RoPE + cache append; attention;
// output projection + residual; RMSNorm + w1 / w3 + SwiGLU; w2 + residual) and the head one (final RMSNorm +
// LM head). Larger batches and fp32 run the ops above one by one (cuBLASLt GEMMs). On Hopper these kernels
// and the decode attention are launched to overlap their predecessors (GenerationOptions::overlap_launches):
// each is scheduled while the previous one finishes, prefetches its weight rows into L2 (the QKV kernel also
// reads the position and its RoPE angles; the attention copies the keys cached before the step into shared
// memory) and then waits for it, which hides most of a launch between consecutive kernels.
// Greedy decoding launches every step without waiting (the first step's input embedded before it): greedy_next
// also keeps each step's ids by position in device memory, read back once at the end. Sampling reads the logits
// back at every step, samples (model/sampling.h) and writes the ids it drew for the next step to embed.
// Without a graph (GenerationOptions::cuda_graph false, and on the CPU) the same work is enqueued at every
// step, so both give the same tokens bit for bit. The graph holds the cache, weights and workspace addresses
// (all allocated here once) and the cache's layout, which depends on the batch size: hence one graph per
// batch size. It runs on the model's stream, or on a stream of the generator's own when that is the legacy
// default stream (which cannot be captured).
//
// Memory (allocated once, for max_batch rows of max_len tokens):
//   kv cache   per layer (max_len, B, 2, H, Dh) in the compute dtype (bf16 in bf16 mode) for a batch of B rows:
//              position-major, so a prefill's keys and values for all rows are contiguous rows the K/V GEMM
//              writes in place
//   weights    bf16 mode: a bf16 cast of all parameters, refreshed at each generate() (the masters may change)
//   activations (tokens, rows) of one pass: the residual stream and x_mid (fp32), norm outputs, q, attention
//              output, FFN a, b, h (compute dtype), rstd and lse (fp32); the decode step's fused q, k, v rows
//              (B, 3d); the last position's logits (rows, V) fp32; the position and the ids (int32); the
//              decode attention's and greedy_next's workspaces
//   rope table bf16 mode: RoPE's angles at every position (max_len, Dh/2, 2) fp32, computed once, so that the
//              fused QKV kernel reads its position's row instead of computing them at every step
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/buffer.h"
#include "model/cuda_graph.h"
#include "model/sampling.h"
#include "model/transformer.h"

namespace ft {

struct GenerationOptions {
  std::int64_t max_new_tokens = 32;
  SamplingOptions sampling;
  std::uint64_t seed = 0;
  // CUDA: capture the decode step once per batch size and replay it (see Note [Graphed decode step]); false
  // enqueues it anew at every step (the same tokens). Ignored on the CPU.
  bool cuda_graph = true;
  // CUDA, compute capability 9.0+, with the fused few-row kernels: each kernel of the decode step may start
  // while its predecessor finishes, prefetching its weights (programmatic dependent launch; see
  // SkinnyLinearArgs::overlap_launch). The same tokens either way.
  bool overlap_launches = true;
  // bf16, at most kSkinnyMaxRows rows: the decode step's GEMMs are the fused few-row kernels of
  // ops/skinny_linear.h; false runs the unfused ops (cuBLASLt GEMMs) instead, for comparison.
  bool fused_gemms = true;
};

// Wall-clock times of the last generate() (the device waited for at the end of each part).
struct GenerationStats {
  double prefill_ms = 0;
  double decode_ms = 0;           // all decode steps
  std::int64_t decode_steps = 0;  // max_new_tokens - 1 (the first new token comes from the prefill)
  bool graphed = false;           // the decode steps replayed a CUDA graph
  bool fused_gemms = false;       // the decode steps ran the fused few-row GEMMs (ops/skinny_linear.h)
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
  // Runs tokens ids (T, B) (position-major) at positions [0, T) through the model, filling the cache, and
  // leaves the last position's logits (B, V) in host_logits_ (fused: the LM head's fused GEMM where it fits).
  void prefill(const std::vector<std::int32_t>& ids, std::int64_t B, std::int64_t T, bool fused);
  void prefill_layer(std::int64_t l, std::int64_t B, std::int64_t T);
  // What a decode step enqueues besides its batch size (a captured graph holds one plan).
  struct DecodePlan {
    std::int64_t id_limit = 0;  // argmax over ids below it (0 = all)
    bool overlap = false;       // GenerationOptions::overlap_launches
    bool fused = false;         // the fused few-row GEMMs (GenerationOptions::fused_gemms, bf16, and they fit)
    bool greedy = false;        // the step ends in greedy_next (ops/argmax.h), which embeds the next step's ids
  };
  // x's first B rows <- the embedding of the first B ids in ids_.
  void embed_ids(std::int64_t B);
  // Enqueues one decode step of B rows (see Note [Graphed decode step]).
  void enqueue_decode(std::int64_t B, const DecodePlan& plan);
  void decode_layer(std::int64_t l, std::int64_t B, const DecodePlan& plan);
  // Block l after its attention over R rows: x_mid = x + output_proj(o), then x = x_mid + FFN(ln2(x_mid)).
  void block_rest(std::int64_t l, std::int64_t R);
  // The final norm and LM head over the B rows of the residual stream starting at row `first`: logits_.
  // fused: the fused few-row GEMM where it fits; overlap: launched to overlap its predecessor.
  void lm_head(std::int64_t first, std::int64_t B, bool overlap, bool fused);
  Tensor weight(std::size_t index) const;  // a GEMM weight (the bf16 cast in bf16 mode)
  Tensor rows(const OwnedTensor& t, std::int64_t count, std::int64_t cols) const;  // (count, cols) view of t
  char* layer_cache(std::int64_t l) const;  // layer l's (max_len, B, 2, H, Dh) cache
  DType compute_dtype() const;
  std::int32_t* position() const { return static_cast<std::int32_t*>(position_.data()); }
  std::int32_t* device_ids() const { return static_cast<std::int32_t*>(ids_.data()); }

  const TransformerLM& model_;
  std::int64_t max_batch_, max_len_;
  Stream stream_;           // the model's stream, or one of the generator's own (see the Note)
  bool own_stream_ = false;
  Buffer cache_;            // num_layers x (max_len, B, 2, H, Dh)
  ParameterBuffer casts_;   // bf16 mode: the parameters in bf16
  OwnedTensor x_, x_mid_;   // (rows, d) fp32
  OwnedTensor ln_, q_, o_;  // (rows, d) compute dtype
  OwnedTensor a_, b_, h_;   // (rows, d_ff) compute dtype
  OwnedTensor qkv_;         // (max_batch, 3d) compute dtype: a decode step's q, k, v
  OwnedTensor rstd_;        // (rows) fp32
  OwnedTensor lse_;         // (max_batch, H, max_len) fp32
  OwnedTensor logits_;      // (max_batch, V) fp32
  OwnedTensor rope_table_;  // (max_len, Dh/2, 2) fp32: RoPE's (cos, sin) by position, for the fused QKV kernel
  Buffer ids_;              // (rows) int32 in the device's memory: the ids a pass embeds (the first B in a
                            // decode step) and, from row B on, greedy's ids by position
  Buffer position_;         // (1) int32 in the device's memory: the decode step's position
  Buffer attention_workspace_;  // decode_attention's, zeroed once
  std::size_t attention_workspace_bytes_ = 0;
  Buffer greedy_workspace_;     // greedy_next's, zeroed once
  std::size_t greedy_workspace_bytes_ = 0;
  bool skinny_ok_ = false;  // bf16 weights the fused few-row GEMMs take (ops/skinny_linear.h)
  // By batch size and plan (id limit, overlap, fused, greedy).
  std::map<std::tuple<std::int64_t, std::int64_t, bool, bool, bool>, std::unique_ptr<CudaGraph>> graphs_;
  std::vector<float> host_logits_;
  GenerationStats stats_;
};

}  // namespace ft
