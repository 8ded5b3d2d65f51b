// attention_checks.cpp — the argument checks shared by the dense and varlen attention entry points.
#include "ops/attention/attention_checks.h"

#include <cmath>
#include <cstdint>
#include <iterator>

#include "core/error.h"

namespace ft::attention_impl {

namespace {

// True when a and b certainly share memory: the same first element, or overlapping extents where one of
// them is dense (no gaps). Interleaved views of one buffer, such as the q, k and v of a fused projection,
// span each other's extents without sharing an element, so overlapping extents alone do not count.
bool shares_memory(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0 || a.device() != b.device()) return false;
  const auto* a0 = static_cast<const std::uint8_t*>(a.data());
  const auto* b0 = static_cast<const std::uint8_t*>(b.data());
  if (a0 == b0) return true;
  const bool dense = a.span_bytes() == a.numel() * a.element_size() || b.span_bytes() == b.numel() * b.element_size();
  return dense && a0 < b0 + b.span_bytes() && b0 < a0 + a.span_bytes();
}

}  // namespace

void check_defined(const Tensor& t, const char* name) {
  FT_CHECK(t.defined(), "attention: ", name, " is required but was not given");
}

void check_dims(const Tensor& t, const char* name, int dims, const char* layout) {
  check_defined(t, name);
  FT_CHECK(t.dim() == dims, "attention: ", name, " must be ", layout, ": expected ", dims, " dims, given ",
           t.dim(), " (", t.describe(), ")");
}

void check_like(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) {
  FT_CHECK(t.dtype() == ref.dtype(), "attention: ", name, " must have the dtype of ", ref_name, ": expected ",
           name_of(ref.dtype()), ", given ", name_of(t.dtype()), " (", t.describe(), ")");
  FT_CHECK(t.device() == ref.device(), "attention: ", name, " must be on the device of ", ref_name,
           ": expected ", ref.device().to_string(), ", given ", t.device().to_string());
}

void check_last_dim_contiguous(const Tensor& t, const char* name) {
  FT_CHECK(t.size(-1) <= 1 || t.stride(-1) == 1, "attention: ", name,
           " must have a contiguous last dim: expected stride 1, given ", t.stride(-1), " (", t.describe(), ")");
}

void check_shape(const Tensor& t, const char* name, const Shape& expected) {
  FT_CHECK(t.shape() == expected, "attention: ", name, " has the wrong shape: expected ", shape_string(expected),
           ", given ", shape_string(t.shape()));
}

void check_fp32_vector(const Tensor& t, const char* name, std::int64_t length, Device device) {
  FT_CHECK(t.dtype() == DType::f32, "attention: ", name, " must be fp32: given ", t.describe());
  FT_CHECK(t.dim() == 1 && t.size(0) == length, "attention: ", name, " must have shape [", length,
           "] (one value per query head): given ", shape_string(t.shape()));
  FT_CHECK(length <= 1 || t.stride(0) == 1, "attention: ", name, " must be contiguous: given ", t.describe());
  FT_CHECK(t.device() == device, "attention: ", name, " must be on ", device.to_string(), ", given ",
           t.device().to_string());
}

void check_operand_dims_and_dtypes(const OperandTensors& t, int dims, const char* q_layout, const char* kv_layout,
                                   const char* lse_layout) {
  check_dims(t.q, "q", dims, q_layout);
  check_dims(t.k, "k", dims, kv_layout);
  check_dims(t.v, "v", dims, kv_layout);
  check_dims(t.o, "o", dims, q_layout);
  check_dims(t.lse, "lse", dims - 1, lse_layout);

  const DType dtype = t.q.dtype();
  FT_CHECK_KIND(unsupported, dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f32,
                "attention: unsupported dtype ", name_of(dtype), ": expected bf16, fp16 or fp32");
  check_like(t.k, "k", t.q, "q");
  check_like(t.v, "v", t.q, "q");
  check_like(t.o, "o", t.q, "q");
}

void check_kv_heads(const OperandTensors& t) {
  const std::int64_t head_dim = t.q.size(-1), heads_q = t.q.size(1), heads_kv = t.k.size(1);
  FT_CHECK(t.k.size(-1) == head_dim, "attention: k must have the head dim of q: expected ", head_dim, ", given ",
           t.k.size(-1));
  check_shape(t.v, "v", t.k.shape());
  FT_CHECK(heads_q % heads_kv == 0, "attention: query heads must be a multiple of key/value heads: given Hq = ",
           heads_q, ", Hkv = ", heads_kv);
}

bool check_outputs_and_layout(const OperandTensors& t, const Shape& lse_shape) {
  check_shape(t.o, "o", t.q.shape());
  check_shape(t.lse, "lse", lse_shape);
  FT_CHECK(t.lse.dtype() == DType::f32, "attention: lse must be fp32, given ", t.lse.describe());
  FT_CHECK(t.lse.device() == t.q.device(), "attention: lse must be on ", t.q.device().to_string(), ", given ",
           t.lse.device().to_string());
  check_last_dim_contiguous(t.q, "q");
  check_last_dim_contiguous(t.k, "k");
  check_last_dim_contiguous(t.v, "v");
  check_last_dim_contiguous(t.o, "o");
  const bool has_sinks = t.sinks.defined();
  if (has_sinks) check_fp32_vector(t.sinks, "sinks", t.q.size(1), t.q.device());
  return has_sinks;
}

void check_gradients(const GradTensors& g, const Tensor& q, const Tensor& k, bool has_sinks, int dims,
                     const char* q_layout, const char* kv_layout) {
  check_dims(g.d_o, "d_o", dims, q_layout);
  check_dims(g.dq, "dq", dims, q_layout);
  check_dims(g.dk, "dk", dims, kv_layout);
  check_dims(g.dv, "dv", dims, kv_layout);
  const NamedTensor like_q[] = {{&g.d_o, "d_o"}, {&g.dq, "dq"}};
  for (auto [t, name] : like_q) {
    check_like(*t, name, q, "q");
    check_shape(*t, name, q.shape());
    check_last_dim_contiguous(*t, name);
  }
  const NamedTensor like_k[] = {{&g.dk, "dk"}, {&g.dv, "dv"}};
  for (auto [t, name] : like_k) {
    check_like(*t, name, q, "q");
    check_shape(*t, name, k.shape());
    check_last_dim_contiguous(*t, name);
  }
  if (has_sinks) {
    FT_CHECK(g.dsinks.defined(), "attention: dsinks is required when sinks are given");
    check_fp32_vector(g.dsinks, "dsinks", q.size(1), q.device());
  } else {
    FT_CHECK(!g.dsinks.defined(), "attention: dsinks was given but sinks were not");
  }
}

ResolvedVariant resolve_variant(const AttentionOptions& options, std::int64_t head_dim, std::int64_t widest,
                                Device device) {
  FT_CHECK(options.window_left >= -1, "attention: window_left must be >= -1 (-1 = unbounded), given ",
           options.window_left);
  FT_CHECK(options.window_right >= -1, "attention: window_right must be >= -1 (-1 = unbounded), given ",
           options.window_right);
  FT_CHECK(!options.causal || options.window_right <= 0,
           "attention: causal means window_right = 0, but window_right = ", options.window_right, " was given too");
  FT_CHECK(options.sink_tokens >= 0, "attention: sink_tokens must be >= 0, given ", options.sink_tokens);
  ResolvedVariant r;
  r.window_left = options.window_left >= widest ? -1 : options.window_left;
  r.window_right = options.causal ? 0 : (options.window_right >= widest ? -1 : options.window_right);
  r.scale = options.scale ? *options.scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  FT_CHECK(std::isfinite(r.scale), "attention: scale must be finite, given ", r.scale);
  if (options.impl == AttentionImpl::flash && device.is_cpu()) {
    FT_CHECK(options.block_q >= 16 && options.block_k >= 16, "attention: tile sizes must be >= 16, given block_q = ",
             options.block_q, ", block_k = ", options.block_k);
  }
  return r;
}

void check_no_alias(std::initializer_list<NamedTensor> outputs, std::initializer_list<NamedTensor> inputs) {
  for (auto out = outputs.begin(); out != outputs.end(); ++out) {
    for (auto other = std::next(out); other != outputs.end(); ++other)
      FT_CHECK(!shares_memory(*out->first, *other->first), "attention: outputs ", out->second, " and ",
               other->second, " share memory: give each output its own array");
    for (const auto& in : inputs)
      FT_CHECK(!shares_memory(*out->first, *in.first), "attention: output ", out->second, " shares memory with input ",
               in.second, ": give the output its own array");
  }
}

}  // namespace ft::attention_impl
