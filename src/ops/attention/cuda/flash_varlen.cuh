// flash_varlen.cuh — internal (CUDA builds only): how the flash kernels run over packed sequences
// (ops/attention_varlen.h): each block narrows the call's shape to its own sequence.
#pragma once

#include <cstdint>

#include "ops/attention/cuda/flash_params.h"
#include "ops/attention/cuda/flash_traits.h"

namespace ft::flash {

// Note [Packed sequences]
// A varlen call packs `batch` sequences along the token axis: sequence b is the query rows
// [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q, o, d_o, dq and lse (Hq, total_q), and the key rows
// [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k, v, dk and dv. The parameter blocks describe it as a batch
// whose TensorRefs have batch_stride 0, with len_q / len_k the largest lengths (at least 1), which size the
// grids. Every block first narrows the shape to its sequence (narrow_to_sequence): len_q / len_k become the
// sequence's own, and the sequence's first rows q0 / k0 are added to every row it addresses. Blocks whose
// tile starts at or past the sequence's end return before any work. Every mask, tile bound and store then
// follows from the per-sequence shape exactly as in a dense call of that sequence alone, so each sequence
// gets the dense contract's result (bit for bit the dense kernel's, the tiles being the same) and no block
// reads or writes another sequence's rows.
// The backward's scratch (dsum, lse_log2 and the fp32 dq_accum) is laid out (Hq, scratch_head_rows) per
// query head, sequence b's rows from varlen_scratch_row(b, cu_seqlens_q[b]): padded to a multiple of
// kQueryPad like a dense call's, 16-byte aligned, and never overlapping the next sequence's. The pre-pass's
// and the sink partials' per-block indices (bh * pre_blocks + block) count blocks of the largest sequence;
// a sequence's blocks past its padded end write a zero sink partial and nothing else.

// The first scratch row of sequence b, whose first query row is q0: q0 rounded up to a multiple of 4 plus
// b (kQueryPad + 4). Rounding and padding add at most kQueryPad + 3 rows, so the rows of a sequence of n
// queries, padded to a multiple of kQueryPad, end before sequence b + 1's first.
__host__ __device__ __forceinline__ std::int64_t varlen_scratch_row(int b, int q0) {
  return ((static_cast<std::int64_t>(q0) + 3) & ~std::int64_t{3}) + static_cast<std::int64_t>(b) * (kQueryPad + 4);
}

// Scratch rows per query head of a varlen call of `batch` sequences and total_q query rows.
__host__ __device__ __forceinline__ std::int64_t varlen_scratch_rows(int batch, int total_q) {
  return varlen_scratch_row(batch, total_q);
}

// The first query and key rows of a block's sequence in the operands (0 for dense calls).
struct SeqRows {
  int q0 = 0, k0 = 0;
};

// Narrows s (a copy of the call's shape) to sequence b of a varlen call: len_q / len_k become its lengths.
// Dense calls are left as they are.
__device__ __forceinline__ SeqRows narrow_to_sequence(FlashShape& s, int b) {
  SeqRows rows;
  if (s.cu_seqlens_q) {
    rows.q0 = s.cu_seqlens_q[b];
    rows.k0 = s.cu_seqlens_k[b];
    s.len_q = s.cu_seqlens_q[b + 1] - rows.q0;
    s.len_k = s.cu_seqlens_k[b + 1] - rows.k0;
  }
  return rows;
}

// s with a sequence's lengths (the Hopper forward narrows per tile).
__device__ __forceinline__ FlashShape with_lengths(const FlashShape& s, int len_q, int len_k) {
  FlashShape narrowed = s;
  narrowed.len_q = len_q;
  narrowed.len_k = len_k;
  return narrowed;
}

// A sequence's shape for the mask helpers that take any shape type (key_queries, key_tile_queries,
// key_tiles_before) in warps of few registers: every field a reference, the lengths to a block's shared copy
// and the rest to the call's parameters, so that each is read where it is used instead of held.
struct SeqShapeRef {
  const volatile int& len_q;
  const volatile int& len_k;
  const std::int64_t& window_left;
  const std::int64_t& window_right;
  const std::int64_t& sink_tokens;
};

// The first scratch row (dsum, lse_log2; times D for dq_accum) of query head h of batch entry b, whose
// sequence starts at query row q0.
__device__ __forceinline__ std::int64_t scratch_row(const FlashBwdParams& p, int b, int h, int q0) {
  if (p.shape.cu_seqlens_q) return h * p.scratch_head_rows + varlen_scratch_row(b, q0);
  return static_cast<std::int64_t>(b * p.shape.heads_q + h) * p.len_q_pad;
}

// A sequence's scratch rows: its query rows padded to a multiple of kQueryPad (p.len_q_pad for dense calls).
__device__ __forceinline__ int scratch_rows_of(const FlashBwdParams& p, const FlashShape& s) {
  if (p.shape.cu_seqlens_q) return (s.len_q + kQueryPad - 1) / kQueryPad * kQueryPad;
  return p.len_q_pad;
}

}  // namespace ft::flash
