// attention_checks.h — internal: the argument checks the dense (attention.cpp) and varlen
// (attention_varlen.cpp) entry points share. Each throws ft::Error naming what was expected and what
// was given; messages start with "attention: ".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "core/tensor.h"
#include "ops/attention.h"

namespace ft::attention_impl {

void check_defined(const Tensor& t, const char* name);
// t is defined and has `dims` dims; `layout` names them in the message, e.g. "(B, Hq, Nq, D)".
void check_dims(const Tensor& t, const char* name, int dims, const char* layout);
// t has the dtype and device of ref.
void check_like(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name);
void check_last_dim_contiguous(const Tensor& t, const char* name);
void check_shape(const Tensor& t, const char* name, const Shape& expected);
// t is a contiguous fp32 (length) vector on device (sink logits and their gradient).
void check_fp32_vector(const Tensor& t, const char* name, std::int64_t length, Device device);

// The forward operands of a dense or varlen call. Both lay q/o out with the query heads at dim 1 and k/v with
// the key/value heads at dim 1, the head dim last.
struct OperandTensors {
  const Tensor &q, &k, &v, &o, &lse, &sinks;
};
// The dims of q, k, v and o (`dims` each, named by q_layout / kv_layout) and lse (dims - 1, lse_layout); q of a
// supported dtype (bf16, fp16, fp32), and k, v and o with the dtype and device of q.
void check_operand_dims_and_dtypes(const OperandTensors& t, int dims, const char* q_layout, const char* kv_layout,
                                   const char* lse_layout);
// k with the head dim of q, v with the shape of k, and Hq a multiple of Hkv.
void check_kv_heads(const OperandTensors& t);
// o with the shape of q, lse of lse_shape in fp32 on q's device, q/k/v/o with a contiguous last dim, and the
// sink logits (when given) an fp32 vector of Hq values. Returns whether sinks were given.
bool check_outputs_and_layout(const OperandTensors& t, const Shape& lse_shape);

// invalid_argument when an output shares memory with another output or with an input: the kernels
// would read values they have already overwritten (or two results would land in one place).
// The gradient tensors of a backward call (AttentionGrads, VarlenAttentionGrads).
struct GradTensors {
  const Tensor &d_o, &dq, &dk, &dv, &dsinks;
};
// d_o and dq like q, dk and dv like k (dtype, device, shape, contiguous last dim), each of `dims` dims laid
// out as q_layout / kv_layout (q holds the query heads at dim 1); dsinks given exactly when sinks are.
void check_gradients(const GradTensors& g, const Tensor& q, const Tensor& k, bool has_sinks, int dims,
                     const char* q_layout, const char* kv_layout);

// The variant options checked (windows >= -1, causal without a right window, sink tokens >= 0, a finite
// scale, CPU tiles >= 16) and resolved for sequences of at most `widest` = Nq + Nk tokens: a window
// at least that wide bounds nothing and becomes -1, causal is window_right = 0, scale defaults to 1/sqrt(D).
struct ResolvedVariant {
  std::int64_t window_left = -1, window_right = -1;
  double scale = 0;
};
ResolvedVariant resolve_variant(const AttentionOptions& options, std::int64_t head_dim, std::int64_t widest,
                                Device device);

using NamedTensor = std::pair<const Tensor*, const char*>;
void check_no_alias(std::initializer_list<NamedTensor> outputs, std::initializer_list<NamedTensor> inputs);

}  // namespace ft::attention_impl
