// decode_attention.h — attention of a few new queries per row (a decode step: Nq = 1, or a handful) against a
// KV cache whose current length lives in memory, not in the call's arguments: the kernel reads it when it runs,
// so one enqueued decode step serves every position and can be captured once in a CUDA graph and replayed.
// The function is the attention contract's (ops/attention.h) with the bottom-right-aligned causal mask: with
// Nk = *past + Nq keys, query i sees keys j <= i + *past, bounded on the left by window_left (keys j <
// sink_tokens exempt) and with optional gpt-oss sink logits in the denominator.
//   cpu  : the naive oracle (attention_forward, impl naive) over the first Nk keys of the cache
//   cuda : flash-decoding — the keys split over `splits` blocks per (row, KV head, group of query rows) only when
//          the cache is long (at most kDecodeKeysPerSplit keys of the capacity a split), each an online softmax
//          over its share of [0, Nk) in fp32 with its keys and values staged in shared memory; the last block of
//          a group to finish combines the partials (no second kernel). GQA-aware: one block handles up to
//          kDecodeRowsPerBlock query rows (query heads of one KV head x new positions), so each K/V row is read
//          once per split for them all. See Note [Decode attention tiles] (cuda/decode_attention.cu).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

// Query rows (heads sharing a KV head x new positions) one CUDA block attends for.
inline constexpr std::int64_t kDecodeRowsPerBlock = 8;
// Keys of the capacity per split on CUDA: a shorter cache is one block's (no merge of partials).
inline constexpr std::int64_t kDecodeKeysPerSplit = 256;

struct DecodeAttentionOptions {
  std::int64_t window_left = -1;  // keys j >= i + *past - window_left; -1 = unbounded
  std::int64_t sink_tokens = 0;   // keys j < sink_tokens bypass the left window bound
  std::optional<double> scale;    // default 1/sqrt(D)
  // CUDA, compute capability 9.0+: the kernel may be scheduled while the previous kernel on the stream
  // finishes (programmatic dependent launch). Before waiting for that kernel it reads *past and copies the
  // keys and values cached before the new queries' (positions < *past), so the previous kernel must not write
  // those (it may write q and the new positions' keys and values, as the decode step's QKV GEMM does). Hides
  // a launch and a memory round trip in a chain of small kernels; the results are the same.
  bool overlap_launch = false;
  Stream stream;                  // CUDA work is ordered on this stream
};

// Tensors of one call. k and v are the cache: (B, Hkv, capacity, D) views (any strides, contiguous last dim),
// of which the first Nk = *past + Nq positions are read; the new queries' own keys and values must already be
// in it (rope_append, ops/rope.h, writes them).
struct DecodeAttentionTensors {
  Tensor q;                          // (B, Hq, Nq, D)   bf16 | fp16 | fp32
  Tensor k;                          // (B, Hkv, capacity, D) same dtype, Hq % Hkv == 0
  Tensor v;                          // (B, Hkv, capacity, D) same dtype
  Tensor sinks;                      // (Hq) fp32, optional gpt-oss sink logits (undefined = none)
  Tensor o;                          // (B, Hq, Nq, D) output, same dtype
  const std::int32_t* past = nullptr;  // one int32 in q's device memory: keys cached before the new queries
  // CUDA: at least decode_attention_workspace_bytes of device memory, zeroed before its first use (the kernel
  // leaves its counters zero again); unused on the CPU.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

// Key splits per group on a CUDA device (fixed for a captured step; each call divides its actual keys
// evenly among them): one per kDecodeKeysPerSplit keys of the capacity, fewer when the groups alone give
// twice as many blocks as the GPU has multiprocessors.
int decode_attention_splits(std::int64_t batch, std::int64_t heads_kv, std::int64_t rows_per_kv_head,
                            std::int64_t capacity, Device device);
// Bytes of workspace a call of these sizes needs (0 on the CPU).
std::size_t decode_attention_workspace_bytes(std::int64_t batch, std::int64_t heads_q, std::int64_t heads_kv,
                                             std::int64_t queries, std::int64_t head_dim, std::int64_t capacity,
                                             Device device);

// o <- attention(q, k[:Nk], v[:Nk]). Checks shapes, dtypes, devices and strides (ft::Error naming what was
// expected and what was given); *past is read when the work runs and must keep Nk within the capacity (the
// kernel clamps Nk to it).
void decode_attention(const DecodeAttentionTensors& t, const DecodeAttentionOptions& options);

// *position += by, in the stream's order (CUDA: one tiny kernel; CPU: at once). position: one int32 in the
// device's memory.
void advance_position(std::int32_t* position, std::int32_t by, Device device, const Stream& stream);

}  // namespace ft
