// flash_params.h — internal (CUDA builds only): the parameter blocks of the FlashAttention-2 kernels,
// one per direction, filled by flash_api.cu from validated tensors and passed by value to the kernels.
#pragma once

#include <cstdint>

namespace ft::flash {

// A strided (B, H, N, D) operand: element strides of batch, head and row; the last dim is contiguous.
struct TensorRef {
  void* ptr = nullptr;
  std::int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
  // Element `row` of head h of batch b, as T* (T const-qualified for inputs).
  template <class T>
  __host__ __device__ T* at(int b, int h, std::int64_t row = 0) const {
    return static_cast<T*>(ptr) + b * batch_stride + h * head_stride + row * row_stride;
  }
};

// Sizes and the visible band shared by both directions (see visibility.h).
struct FlashShape {
  int batch = 0, heads_q = 0, heads_kv = 0, group = 1;  // group = heads_q / heads_kv
  int len_q = 0, len_k = 0;
  std::int64_t window_left = -1, window_right = -1, sink_tokens = 0;  // resolved; -1 = unbounded
  bool has_mask = false;    // any of causal / window / sink tokens: visible_keys is consulted
  float scale = 0;          // softmax scale
  float scale_log2 = 0;     // scale * log2(e): scores go straight into exp2
  bool vec16 = false;       // every tile operand allows 16-byte accesses (else element-wise copies)
  bool sm90 = false;        // run the Hopper kernels (flash_*_sm90_kernel.cuh; chosen by flash_api.cu)
  // Packed sequences (varlen), null for dense calls: (batch + 1) int32 cumulative lengths on the device;
  // len_q / len_k then hold the largest lengths. See Note [Packed sequences] (flash_varlen.cuh).
  const int* cu_seqlens_q = nullptr;
  const int* cu_seqlens_k = nullptr;
  int total_q = 0, total_k = 0;  // packed rows (the Hopper kernels' TMA maps)
};

struct FlashFwdParams {
  FlashShape shape;
  TensorRef q, k, v;  // (B, Hq, Nq, D), (B, Hkv, Nk, D) x2 — inputs
  TensorRef o;        // (B, Hq, Nq, D) output
  TensorRef lse;      // (B, Hq, Nq) fp32 output (row_stride is the Nq stride)
  const float* sinks = nullptr;  // (Hq) fp32 sink logits, or null
  // The Hopper kernel is persistent: `blocks` blocks (one per SM, at most one per tile) take the query
  // tiles of section_heads (batch x query head)s at a time, the first tile of each block its index, the
  // next ones from *tile_counter (an int, zero at launch). See Notes [Persistent forward tiles] and [L2
  // head sections] (flash_sm90_scheduler.cuh).
  int section_heads = 1;
  int blocks = 0;
  int* tile_counter = nullptr;
  // Packed sequences on Hopper: (batch + 1) prefix of the sequences' query tiles. See Note [Packed-sequence
  // tiles] (flash_sm90_scheduler.cuh).
  const int* varlen_tiles = nullptr;
};

struct FlashBwdParams {
  FlashShape shape;
  TensorRef q, k, v, o, d_o;  // inputs as in the forward, d_o like o
  TensorRef lse;              // (B, Hq, Nq) fp32 input
  TensorRef dq, dk, dv;       // outputs, shaped like q, k, v
  const float* sinks = nullptr;  // (Hq) fp32, or null
  float* dsinks = nullptr;       // (Hq) fp32 output when sinks are given
  // Scratch written by the pre-pass; rows padded to len_q_pad (a multiple of every query tile).
  int len_q_pad = 0;
  float* dsum = nullptr;         // (B, Hq, len_q_pad): D_i = dO_i . O_i, 0 on padding rows
  float* lse_log2 = nullptr;     // (B, Hq, len_q_pad): L_i * log2(e); +inf where P must vanish
  float* sink_partials = nullptr;  // (B * Hq, pre_blocks): per-block sums of exp(s_h - L_i) D_i
  int pre_blocks = 0;
  // false: the dK/dV kernel adds dS K into dq_accum in whatever order its blocks come (no dQ kernel;
  // dQ's rounding varies). The Hopper kernel accumulates dQ in both modes, in a fixed order when true.
  bool deterministic = true;
  // (B, Hq, len_q_pad, D) fp32 where the dK/dV kernel accumulates dQ (!deterministic, or the Hopper
  // kernel), zeroed by the pre-pass (with dq_order only the rows that see no key: the first key tile to
  // visit a query tile stores its piece).
  float* dq_accum = nullptr;
  // (B * Hq, pre_blocks) int, zeroed by the pre-pass, for the ordered additions (deterministic Hopper
  // kernel): how many key tiles have added into the query tile starting at that block's rows.
  int* dq_order = nullptr;
  // With dq_order: how many of the last grid heads add in ascending key-tile order (See Note [Ordered dQ
  // additions] in flash_sm90_scheduler.cuh).
  int ascending_heads = 0;
  // Launch geometry of the Hopper kernel: the grid heads (batch x kv head) whose tiles are launched
  // together (See Note [L2 head sections] in flash_sm90_scheduler.cuh).
  int dkdv_section_heads = 1;
  // Packed sequences: scratch rows per query head (varlen_scratch_rows; See Note [Packed sequences]).
  std::int64_t scratch_head_rows = 0;
  // Packed sequences on Hopper: (batch + 1) prefix of the sequences' key tiles, and the grid's key tiles
  // (at least its last entry). See Note [Packed-sequence tiles] (flash_sm90_scheduler.cuh).
  const int* varlen_key_tiles = nullptr;
  int varlen_grid_key_tiles = 0;
};

}  // namespace ft::flash
