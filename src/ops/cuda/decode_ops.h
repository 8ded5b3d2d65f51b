// decode_ops.h — internal (CUDA builds only): the launchers of the decode-step kernels (decode_attention.cu,
// rope.cu's rope_append, skinny_linear.cu, argmax.cu), given arguments their public functions
// (ops/decode_attention.h, ops/rope.h, ops/skinny_linear.h, ops/argmax.h) have validated. Declares no CUDA types.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/stream.h"
#include "core/tensor.h"
#include "ops/decode_attention.h"
#include "ops/op_common.h"
#include "ops/skinny_linear.h"

#if FT_HAS_CUDA

namespace ft::gpu {

// rope.cu — see rope_append in ops/rope.h.
void rope_append(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache,
                 const std::int32_t* position, double theta, const Stream& stream);

// decode_attention.cu — the streaming multiprocessors of a device (cached per device).
int multiprocessors(Device device);
// o <- attention with `splits` key splits per group; workspace: decode_attention_workspace_bytes, zeroed once.
// overlap: launched to overlap the previous kernel (ops/cuda/dependent_launch.cuh).
void decode_attention(const DecodeAttentionTensors& t, int splits, double scale, std::int64_t window_left,
                      std::int64_t sink_tokens, bool overlap, const Stream& stream);
void advance_position(std::int32_t* position, std::int32_t by, Device device, const Stream& stream);

// skinny_linear.cu — see ops/skinny_linear.h; args validated, skinny_linear_fits(M, K).
void skinny_linear(const SkinnyLinearArgs& args);

// argmax.cu — out (rows) int32 <- the first index of the largest of logits (rows, cols) fp32, row_stride apart;
// also to history[*position * rows + r] when history is not null.
void argmax_rows(std::int32_t* out, std::int32_t* history, const std::int32_t* position, const float* logits,
                 std::int64_t rows, std::int64_t cols, std::int64_t row_stride, Device device, const Stream& stream);
// argmax.cu — see greedy_next in ops/argmax.h; the logits' cols already limited, x and embedding checked.
std::size_t greedy_next_workspace_bytes(std::int64_t rows, Device device);
void greedy_next(std::int32_t* ids, std::int32_t* history, std::int32_t* position, const float* logits,
                 std::int64_t rows, std::int64_t cols, std::int64_t row_stride, const ops::RowView& embedding,
                 const ops::RowView& x, void* workspace, bool overlap, Device device, const Stream& stream);

}  // namespace ft::gpu

#endif  // FT_HAS_CUDA
