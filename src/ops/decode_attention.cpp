// decode_attention.cpp — validation of decode attention calls, the CPU path (the naive oracle over the cache's
// first Nk keys) and dispatch to the CUDA kernel (cuda/decode_attention.cu); the position counter's advance.
#include "ops/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "core/buffer.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "ops/attention.h"
#include "ops/cuda/decode_ops.h"
#include "ops/op_common.h"

namespace ft {

namespace {

constexpr const char* kOp = "decode_attention";

void check_4d(const Tensor& t, const char* name, const char* layout) {
  FT_CHECK(t.defined(), kOp, ": ", name, " is required but was not given");
  FT_CHECK(t.dim() == 4, kOp, ": ", name, " must be ", layout, ": expected 4 dims, given ", t.dim(), " (",
           t.describe(), ")");
  FT_CHECK(t.size(3) <= 1 || t.stride(3) == 1, kOp, ": ", name,
           " must have a contiguous last dim: expected stride 1, given ", t.stride(3), " (", t.describe(), ")");
}

// The CUDA kernel moves pairs of elements: even strides and 2-element aligned data.
void check_pairs(const Tensor& t, const char* name) {
  const bool even = t.stride(0) % 2 == 0 && t.stride(1) % 2 == 0 && t.stride(2) % 2 == 0;
  const bool aligned = reinterpret_cast<std::uintptr_t>(t.data()) % (2 * t.element_size()) == 0;
  FT_CHECK(even && aligned, kOp, ": ", name,
           " on CUDA must have even strides and data aligned to two elements, given ", t.describe());
}

struct DecodeShape {
  std::int64_t B, Hq, Hkv, Nq, D, capacity;
  double scale;
};

DecodeShape validate(const DecodeAttentionTensors& t, const DecodeAttentionOptions& o) {
  check_4d(t.q, "q", "(B, Hq, Nq, D)");
  check_4d(t.k, "k", "(B, Hkv, capacity, D)");
  check_4d(t.v, "v", "(B, Hkv, capacity, D)");
  check_4d(t.o, "o", "(B, Hq, Nq, D)");
  ops::check_dtype(kOp, t.q, "q", {DType::f32, DType::bf16, DType::f16});
  for (const auto& [x, name] : {std::pair{&t.k, "k"}, std::pair{&t.v, "v"}, std::pair{&t.o, "o"}}) {
    FT_CHECK(x->dtype() == t.q.dtype(), kOp, ": ", name, " must have q's dtype ", name_of(t.q.dtype()), ", given ",
             x->describe());
    ops::check_device(kOp, *x, name, t.q.device());
  }
  const DecodeShape s{t.q.size(0), t.q.size(1), t.k.size(1), t.q.size(2), t.q.size(3), t.k.size(2), 0};
  FT_CHECK(s.D % 2 == 0 && s.D >= 2 && s.D <= 256, kOp, ": the head dim must be even and in [2, 256], given ", s.D);
  FT_CHECK(s.Hkv >= 1 && s.Hq % s.Hkv == 0, kOp, ": the query heads (", s.Hq,
           ") must be a multiple of the key/value heads (", s.Hkv, ")");
  FT_CHECK(s.Nq >= 1 && s.Nq <= s.capacity, kOp, ": expected 1 to ", s.capacity, " (the cache's capacity) queries, given ",
           s.Nq);
  ops::check_shape(kOp, t.k, "k", {s.B, s.Hkv, s.capacity, s.D});
  ops::check_shape(kOp, t.v, "v", {s.B, s.Hkv, s.capacity, s.D});
  ops::check_shape(kOp, t.o, "o", {s.B, s.Hq, s.Nq, s.D});
  if (t.sinks.defined()) {
    ops::check_dtype(kOp, t.sinks, "sinks", {DType::f32});
    ops::check_device(kOp, t.sinks, "sinks", t.q.device());
    ops::check_shape(kOp, t.sinks, "sinks", {s.Hq});
    ops::check_contiguous(kOp, t.sinks, "sinks");
  }
  FT_CHECK(t.past != nullptr, kOp, ": the cached-key count (past) is required but was not given");
  FT_CHECK(o.window_left >= -1, kOp, ": window_left must be >= -1 (-1 = unbounded), given ", o.window_left);
  FT_CHECK(o.sink_tokens >= 0, kOp, ": sink_tokens must be >= 0, given ", o.sink_tokens);
  const double scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(s.D)));
  FT_CHECK(std::isfinite(scale) && scale > 0, kOp, ": the scale must be finite and > 0, given ", scale);
  if (t.q.device().is_cuda()) {
    check_pairs(t.q, "q");
    check_pairs(t.k, "k");
    check_pairs(t.v, "v");
    check_pairs(t.o, "o");
  }
  return {s.B, s.Hq, s.Hkv, s.Nq, s.D, s.capacity, scale};
}

std::int64_t groups_of(std::int64_t heads_q, std::int64_t heads_kv, std::int64_t nq) {
  return (heads_q / heads_kv * nq + kDecodeRowsPerBlock - 1) / kDecodeRowsPerBlock;
}

}  // namespace

int decode_attention_splits(std::int64_t batch, std::int64_t heads_kv, std::int64_t rows_per_kv_head,
                            std::int64_t capacity, Device device) {
  if (!device.is_cuda()) return 1;
  std::int64_t sms = 0;
#if FT_HAS_CUDA
  sms = gpu::multiprocessors(device);
#else
  ops::no_cuda_build("decode_attention_splits", device);
#endif
  const std::int64_t groups = (rows_per_kv_head + kDecodeRowsPerBlock - 1) / kDecodeRowsPerBlock;
  const std::int64_t blocks = std::max<std::int64_t>(1, batch * heads_kv * groups);
  const std::int64_t fill = (2 * sms + blocks - 1) / blocks;
  const std::int64_t needed = (capacity + kDecodeKeysPerSplit - 1) / kDecodeKeysPerSplit;
  return static_cast<int>(std::clamp<std::int64_t>(std::min(fill, needed), 1, 64));
}

std::size_t decode_attention_workspace_bytes(std::int64_t batch, std::int64_t heads_q, std::int64_t heads_kv,
                                             std::int64_t queries, std::int64_t head_dim, std::int64_t capacity,
                                             Device device) {
  if (!device.is_cuda()) return 0;
  FT_CHECK(batch >= 0 && heads_kv >= 1 && heads_q % heads_kv == 0 && queries >= 1 && head_dim >= 0,
           "decode_attention_workspace_bytes: expected a batch >= 0, query heads a multiple of the key/value heads "
           "and at least one query, given batch ", batch, ", heads ", heads_q, " / ", heads_kv, ", queries ", queries);
  const std::int64_t slots = batch * heads_kv * groups_of(heads_q, heads_kv, queries);
  const int splits = decode_attention_splits(batch, heads_kv, heads_q / heads_kv * queries, capacity, device);
  // Counters (8 bytes a slot, keeping the partials aligned), then the partials when the keys are split.
  const std::int64_t partial = splits > 1 ? slots * splits * kDecodeRowsPerBlock * (head_dim + 2) * 4 : 0;
  return static_cast<std::size_t>(slots * 8 + partial);
}

void decode_attention(const DecodeAttentionTensors& t, const DecodeAttentionOptions& options) {
  NvtxRange range(kOp);
  const DecodeShape s = validate(t, options);
  if (t.q.device().is_cuda()) {
#if FT_HAS_CUDA
    const std::size_t need = decode_attention_workspace_bytes(s.B, s.Hq, s.Hkv, s.Nq, s.D, s.capacity, t.q.device());
    FT_CHECK(t.workspace != nullptr && t.workspace_bytes >= need, kOp, ": CUDA needs a workspace of ", need,
             " bytes (decode_attention_workspace_bytes), given ", t.workspace ? t.workspace_bytes : 0);
    const int splits = decode_attention_splits(s.B, s.Hkv, s.Hq / s.Hkv * s.Nq, s.capacity, t.q.device());
    return gpu::decode_attention(t, splits, s.scale, options.window_left, options.sink_tokens,
                                 options.overlap_launch, options.stream);
#else
    ops::no_cuda_build(kOp, t.q.device());
#endif
  }
  const std::int64_t nk = static_cast<std::int64_t>(*t.past) + s.Nq;
  FT_CHECK(*t.past >= 0 && nk <= s.capacity, kOp, ": ", *t.past, " cached keys and ", s.Nq,
           " new ones exceed the cache's capacity of ", s.capacity);
  const auto first = [&](const Tensor& x) { return Tensor(x.data(), x.dtype(), x.device(), {s.B, s.Hkv, nk, s.D}, x.strides()); };
  OwnedTensor lse({s.B, s.Hq, s.Nq}, DType::f32, Device::cpu(), "decode attention lse");
  AttentionTensors a;
  a.q = t.q;
  a.k = first(t.k);
  a.v = first(t.v);
  a.sinks = t.sinks;
  a.o = t.o;
  a.lse = lse;
  AttentionOptions ao;
  ao.causal = true;
  ao.window_left = options.window_left;
  ao.sink_tokens = options.sink_tokens;
  ao.scale = s.scale;
  ao.impl = AttentionImpl::naive;
  attention_forward(a, ao);
}

void advance_position(std::int32_t* position, std::int32_t by, Device device,
                      [[maybe_unused]] const Stream& stream) {
  FT_CHECK(position != nullptr, "advance_position: the position is required but was not given");
  if (device.is_cuda()) {
#if FT_HAS_CUDA
    return gpu::advance_position(position, by, device, stream);
#else
    ops::no_cuda_build("advance_position", device);
#endif
  }
  *position += by;
}

}  // namespace ft
