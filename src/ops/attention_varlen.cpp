// attention_varlen.cpp — validation of varlen attention calls (packed sequences described by cumulative
// lengths) and dispatch: on the CPU each sequence runs through the dense implementations (the oracle or
// the tiled one) on strided views of the packed tensors; on CUDA the flash varlen kernels run once for
// the whole batch.
//
// Note [Varlen causal alignment]
// Causal masks and right-bounded windows align each sequence bottom-right, as the dense contract does:
// query i of a sequence sees keys j <= i + len_k - len_q (+ window_right). A sequence with fewer keys than
// queries would leave its first len_q - len_k queries seeing nothing, which in packed data means the two
// cumulative-length arrays describe different documents; so where the right side is bounded (causal
// included), every sequence must have len_k >= len_q, and a call that breaks this is invalid_argument.
// Without a right bound any lengths are accepted; a sequence with no keys gives O = 0 and, as a dense row
// that sees no key, L = -inf, or with sink logits L = the head's sink logit.
#include "ops/attention_varlen.h"

#include <limits>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "core/tensor_io.h"
#include "ops/attention/attention_checks.h"
#include "ops/attention/attention_impls.h"
#include "ops/op_common.h"
#if FT_HAS_CUDA
#include "core/cuda_check.h"
#endif

namespace ft {

namespace {

// The cumulative lengths of q and k as host values (B + 1 entries each).
struct HostLengths {
  std::vector<std::int32_t> q, k;
};

// The values of cu on the host: the entries themselves in host memory, else the host mirror when given, else
// a copy from the device ordered on `stream` (which waits for it).
std::vector<std::int32_t> host_values(const CumulativeLengths& cu, const Stream& stream) {
  const auto n = static_cast<std::size_t>(cu.count);
  if (cu.device.is_cpu()) return {cu.data, cu.data + n};
  if (cu.host) return {cu.host, cu.host + n};
  std::vector<std::int32_t> values(n);
#if FT_HAS_CUDA
  CudaDeviceGuard guard(cu.device.index);
  const auto cuda_stream = static_cast<cudaStream_t>(stream.handle());
  FT_CUDA_CHECK(
      cudaMemcpyAsync(values.data(), cu.data, n * sizeof(std::int32_t), cudaMemcpyDeviceToHost, cuda_stream));
  FT_CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
#else
  (void)stream;
  ops::no_cuda_build("varlen attention", cu.device);
#endif
  return values;
}

// cu: first 0, non-decreasing, last = total, every length <= max_seqlen.
void check_cumulative(const std::vector<std::int32_t>& cu, const char* name, std::int64_t total,
                      std::int64_t max_seqlen, const char* max_name) {
  FT_CHECK(cu.front() == 0, "varlen attention: ", name, " must start at 0: expected ", name, "[0] = 0, given ",
           cu.front());
  for (std::size_t b = 0; b + 1 < cu.size(); ++b) {
    const std::int64_t length = std::int64_t{cu[b + 1]} - cu[b];
    FT_CHECK(length >= 0, "varlen attention: ", name, " must be non-decreasing: given ", name, "[", b, "] = ", cu[b],
             " > ", name, "[", b + 1, "] = ", cu[b + 1]);
    FT_CHECK(length <= max_seqlen, "varlen attention: sequence ", b, " is longer than ", max_name, ": expected at most ",
             max_seqlen, " tokens, given ", length, " (", name, "[", b, "] = ", cu[b], ", ", name, "[", b + 1,
             "] = ", cu[b + 1], ")");
  }
  FT_CHECK(cu.back() == total, "varlen attention: the last entry of ", name,
           " must be the total token count: expected ", total, ", given ", name, "[", cu.size() - 1,
           "] = ", cu.back());
}

void check_lengths_argument(const CumulativeLengths& cu, const char* name, Device device) {
  FT_CHECK(cu.count >= 2, "varlen attention: ", name, " must hold B + 1 >= 2 entries, given ", cu.count);
  FT_CHECK(cu.data != nullptr, "varlen attention: ", name, " has no data");
  FT_CHECK(cu.device == device, "varlen attention: ", name, " must be on the device of q: expected ",
           device.to_string(), ", given ", cu.device.to_string());
}

// The validated shape, and the cumulative lengths on the host (see validate_attention_varlen).
VarlenAttentionShape validate(const VarlenAttentionTensors& t, const AttentionOptions& options,
                              const VarlenAttentionGrads* grads, HostLengths* lengths) {
  const attention_impl::OperandTensors operands{t.q, t.k, t.v, t.o, t.lse, t.sinks};
  attention_impl::check_operand_dims_and_dtypes(operands, 3, "(total_q, Hq, D)", "(total_k, Hkv, D)",
                                                "(Hq, total_q)");

  VarlenAttentionShape s;
  s.total_q = t.q.size(0);
  s.heads_q = t.q.size(1);
  s.head_dim = t.q.size(2);
  s.total_k = t.k.size(0);
  s.heads_kv = t.k.size(1);
  FT_CHECK(s.heads_q >= 1 && s.head_dim >= 1, "varlen attention: q must have Hq >= 1 and D >= 1, given ",
           shape_string(t.q.shape()));
  FT_CHECK(s.heads_kv >= 1, "varlen attention: k must have Hkv >= 1, given ", shape_string(t.k.shape()));
  attention_impl::check_kv_heads(operands);
  check_attention_head_dim(s.head_dim, options.impl, t.q.device());
  s.has_sinks = attention_impl::check_outputs_and_layout(operands, {s.heads_q, s.total_q});

  FT_CHECK(t.max_seqlen_q >= 0 && t.max_seqlen_k >= 0,
           "varlen attention: max_seqlen_q and max_seqlen_k must be >= 0, given ", t.max_seqlen_q, " and ",
           t.max_seqlen_k);
  s.max_seqlen_q = t.max_seqlen_q;
  s.max_seqlen_k = t.max_seqlen_k;
  const attention_impl::ResolvedVariant variant =
      attention_impl::resolve_variant(options, s.head_dim, s.max_seqlen_q + s.max_seqlen_k, t.q.device());
  s.window_left = variant.window_left;
  s.window_right = variant.window_right;
  s.sink_tokens = options.sink_tokens;
  s.scale = variant.scale;

  check_lengths_argument(t.cu_seqlens_q, "cu_seqlens_q", t.q.device());
  check_lengths_argument(t.cu_seqlens_k, "cu_seqlens_k", t.q.device());
  FT_CHECK(t.cu_seqlens_q.count == t.cu_seqlens_k.count,
           "varlen attention: cu_seqlens_q and cu_seqlens_k must describe the same number of sequences: given ",
           t.cu_seqlens_q.count, " and ", t.cu_seqlens_k.count, " entries");
  s.batch = t.cu_seqlens_q.count - 1;
  lengths->q = host_values(t.cu_seqlens_q, options.stream);
  lengths->k = host_values(t.cu_seqlens_k, options.stream);
  check_cumulative(lengths->q, "cu_seqlens_q", s.total_q, s.max_seqlen_q, "max_seqlen_q");
  check_cumulative(lengths->k, "cu_seqlens_k", s.total_k, s.max_seqlen_k, "max_seqlen_k");
  if (s.window_right >= 0) {  // See Note [Varlen causal alignment]
    for (std::int64_t b = 0; b < s.batch; ++b) {
      const std::int64_t len_q = lengths->q[b + 1] - lengths->q[b], len_k = lengths->k[b + 1] - lengths->k[b];
      FT_CHECK(len_k >= len_q, "varlen attention: ", options.causal ? "causal attention" : "a right window",
               " aligns each sequence's last query with its last key, so every sequence needs at least as many keys "
               "as queries: sequence ", b, " has ", len_q, " queries and ", len_k, " keys");
    }
  }

  if (grads) {
    attention_impl::check_gradients({grads->d_o, grads->dq, grads->dk, grads->dv, grads->dsinks}, t.q, t.k,
                                    s.has_sinks, 3, "(total_q, Hq, D)", "(total_k, Hkv, D)");
  }
  return s;
}

// ---- CPU: the dense implementations per sequence -------------------------------------------------

// Rows [start, start + length) of a packed (total, H, D) tensor as a dense (1, H, length, D) view.
Tensor sequence_view(const Tensor& packed, std::int64_t start, std::int64_t length) {
  const Tensor rows = packed.narrow(0, start, length);  // (length, H, D)
  return Tensor(rows.data(), rows.dtype(), rows.device(), {1, rows.size(1), length, rows.size(2)},
                {rows.stride(0) * length, rows.stride(1), rows.stride(0), rows.stride(2)});
}

// Columns [start, start + length) of lse (Hq, total_q) as a dense (1, Hq, length) view.
Tensor lse_view(const Tensor& lse, std::int64_t start, std::int64_t length) {
  const Tensor cols = lse.narrow(1, start, length);  // (Hq, length)
  return Tensor(cols.data(), cols.dtype(), cols.device(), {1, cols.size(0), length},
                {cols.stride(0) * cols.size(0), cols.stride(0), cols.stride(1)});
}

// Sequence b of the call as a dense problem (both lengths >= 1).
AttentionTensors sequence_tensors(const VarlenAttentionTensors& t, const HostLengths& n, std::int64_t b) {
  const std::int64_t q0 = n.q[b], len_q = n.q[b + 1] - q0, k0 = n.k[b], len_k = n.k[b + 1] - k0;
  return {sequence_view(t.q, q0, len_q), sequence_view(t.k, k0, len_k), sequence_view(t.v, k0, len_k), t.sinks,
          sequence_view(t.o, q0, len_q), lse_view(t.lse, q0, len_q)};
}

void cpu_forward(const VarlenAttentionTensors& t, const VarlenAttentionShape& s, const HostLengths& n,
                 const AttentionOptions& options) {
  for (std::int64_t b = 0; b < s.batch; ++b) {
    const std::int64_t q0 = n.q[b], len_q = n.q[b + 1] - q0, len_k = n.k[b + 1] - n.k[b];
    if (len_q == 0) continue;
    if (len_k == 0) {  // nothing to see: O = 0; L = the sink logit (only the sink column), else -inf
      fill_constant(t.o.narrow(0, q0, len_q), 0.0);
      for (std::int64_t h = 0; h < s.heads_q; ++h) {
        const double sink = s.has_sinks ? t.sinks.data_as<const float>()[h] : -std::numeric_limits<double>::infinity();
        fill_constant(t.lse.select(0, h).narrow(0, q0, len_q), sink);
      }
      continue;
    }
    const AttentionTensors d = sequence_tensors(t, n, b);
    const AttentionShape ds = validate_attention(d, options);
    if (options.impl == AttentionImpl::naive)
      attention_impl::cpu_naive_forward(d, ds);
    else
      attention_impl::cpu_tiled_forward(d, ds, options.block_q, options.block_k);
  }
}

// Each sequence's backward writes its own rows of dq, dk, dv; the sink-logit gradient sums over the
// sequences in order (in double, so that one sequence gives the dense call's value bit for bit).
void cpu_backward(const VarlenAttentionTensors& t, const VarlenAttentionGrads& g, const VarlenAttentionShape& s,
                  const HostLengths& n, const AttentionOptions& options) {
  OwnedTensor dsinks_part;         // (Hq) fp32: one sequence's sink-logit gradient
  std::vector<double> dsinks_sum;  // (Hq)
  if (s.has_sinks) {
    dsinks_part = OwnedTensor({s.heads_q}, DType::f32, Device::cpu(), "attention_varlen.dsinks");
    dsinks_sum.assign(static_cast<std::size_t>(s.heads_q), 0.0);
  }
  for (std::int64_t b = 0; b < s.batch; ++b) {
    const std::int64_t q0 = n.q[b], len_q = n.q[b + 1] - q0, k0 = n.k[b], len_k = n.k[b + 1] - k0;
    if (len_q == 0 || len_k == 0) {  // no query sees a key: zero gradients
      if (len_q > 0) fill_constant(g.dq.narrow(0, q0, len_q), 0.0);
      if (len_k > 0) {
        fill_constant(g.dk.narrow(0, k0, len_k), 0.0);
        fill_constant(g.dv.narrow(0, k0, len_k), 0.0);
      }
      continue;
    }
    const AttentionTensors d = sequence_tensors(t, n, b);
    const AttentionGrads dg{sequence_view(g.d_o, q0, len_q), sequence_view(g.dq, q0, len_q),
                            sequence_view(g.dk, k0, len_k), sequence_view(g.dv, k0, len_k), dsinks_part};
    const AttentionShape ds = validate_attention(d, options, &dg);
    if (options.impl == AttentionImpl::naive)
      attention_impl::cpu_naive_backward(d, dg, ds);
    else
      attention_impl::cpu_tiled_backward(d, dg, ds, options.block_q, options.block_k);
    if (s.has_sinks) {
      const float* part = dsinks_part->data_as<const float>();
      for (std::int64_t h = 0; h < s.heads_q; ++h) dsinks_sum[h] += part[h];
    }
  }
  if (s.has_sinks) write_from_double(g.dsinks, dsinks_sum);
}

void check_forward_aliases(const VarlenAttentionTensors& t) {
  attention_impl::check_no_alias({{&t.o, "o"}, {&t.lse, "lse"}},
                                 {{&t.q, "q"}, {&t.k, "k"}, {&t.v, "v"}, {&t.sinks, "sinks"}});
}

void check_backward_aliases(const VarlenAttentionTensors& t, const VarlenAttentionGrads& g) {
  attention_impl::check_no_alias({{&g.dq, "dq"}, {&g.dk, "dk"}, {&g.dv, "dv"}, {&g.dsinks, "dsinks"}},
                                 {{&t.q, "q"}, {&t.k, "k"}, {&t.v, "v"}, {&t.o, "o"}, {&t.lse, "lse"},
                                  {&g.d_o, "d_o"}, {&t.sinks, "sinks"}});
}

#if FT_HAS_CUDA
void check_cuda_impl(const AttentionOptions& options) {
  FT_CHECK_KIND(unsupported, options.impl == AttentionImpl::flash,
                "varlen attention on CUDA runs the flash kernels only: expected impl flash, given ",
                name_of(options.impl));
}
#endif

}  // namespace

VarlenAttentionShape validate_attention_varlen(const VarlenAttentionTensors& t, const AttentionOptions& options,
                                               const VarlenAttentionGrads* grads) {
  HostLengths lengths;
  return validate(t, options, grads, &lengths);
}

void attention_varlen_forward(const VarlenAttentionTensors& t, const AttentionOptions& options) {
  NvtxRange range(options.impl == AttentionImpl::naive ? "attention_varlen.forward.naive"
                                                       : "attention_varlen.forward.flash");
  HostLengths lengths;
  const VarlenAttentionShape s = validate(t, options, nullptr, &lengths);
  check_forward_aliases(t);
  if (t.q.device().is_cpu()) return cpu_forward(t, s, lengths, options);
#if FT_HAS_CUDA
  check_cuda_impl(options);
  attention_impl::cuda_flash_varlen_forward(t, s, options.stream, options.kernels);
#else
  ops::no_cuda_build("varlen attention", t.q.device());
#endif
}

void attention_varlen_backward(const VarlenAttentionTensors& t, const VarlenAttentionGrads& grads,
                               const AttentionOptions& options) {
  NvtxRange range(options.impl == AttentionImpl::naive ? "attention_varlen.backward.naive"
                                                       : "attention_varlen.backward.flash");
  HostLengths lengths;
  const VarlenAttentionShape s = validate(t, options, &grads, &lengths);
  check_backward_aliases(t, grads);
  if (t.q.device().is_cpu()) return cpu_backward(t, grads, s, lengths, options);
#if FT_HAS_CUDA
  check_cuda_impl(options);
  attention_impl::cuda_flash_varlen_backward(t, grads, s, options.stream, options.deterministic, options.kernels);
#else
  ops::no_cuda_build("varlen attention", t.q.device());
#endif
}

}  // namespace ft
