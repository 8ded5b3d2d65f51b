// test_attention_flash_varlen_kernels.cpp — GPU tests (label gpu) of the CUDA flash kernels over packed
// sequences (cuda_flash_varlen_forward / _backward, attention_impls.h) against the dense flash kernels of
// the same family called once per sequence on views of the same packed tensors. The kernels narrow their
// shape to each sequence (Note [Packed sequences], flash_varlen.cuh) and run the dense tiles, so O, L, dK,
// dV and (deterministic mode) dQ must equal the dense calls' values exactly, for every sequence: every
// variant (causal, windows, sink tokens, sink logits, GQA, negative scale), unequal query and key lengths,
// zero-length sequences (no keys: O = 0, L = -inf, dQ = 0; no queries: dK = dV = 0) and max_seqlen above
// the longest sequence. dsinks is the sum of the dense calls' (to fp32 rounding); atomic-mode dQ (whose
// fp32 sums may come in another order) is compared within a unit in the last place of the dtype. Outputs are poisoned with NaN before every run,
// so a row a kernel fails to write, or writes for another sequence, shows.
// Run: ./build/bin/gpu_test_attention_flash_varlen_kernels   (needs a CUDA device; skips otherwise)
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "core/stream.h"
#include "core/tensor_io.h"
#include "ops/attention.h"
#include "ops/attention/attention_impls.h"
#include "ops/attention_varlen.h"

namespace ft {
namespace {

struct VarlenCase {
  std::string name;
  DType dtype = DType::bf16;
  std::int64_t heads_q = 2, heads_kv = 2, head_dim = 64;
  std::vector<std::int32_t> lens_q, lens_k;  // per sequence; lens_k empty = lens_q
  std::int64_t extra_max = 0;                // max_seqlen_q / _k given this far above the longest sequence
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1, sink_tokens = 0;
  bool sinks = false;
  double scale = 0;  // 0 = default 1/sqrt(D)
  bool deterministic = true;
  FlashKernels kernels = FlashKernels::sm80;
};

void PrintTo(const VarlenCase& c, std::ostream* os) { *os << c.name; }

std::vector<std::int32_t> cumulative(const std::vector<std::int32_t>& lens) {
  std::vector<std::int32_t> cu{0};
  for (std::int32_t n : lens) cu.push_back(cu.back() + n);
  return cu;
}

// Packed (total, H, D) tensors of one call's outputs.
struct PackedOutputs {
  OwnedTensor o, lse, dq, dk, dv, dsinks;
};

PackedOutputs packed_outputs(const VarlenCase& c, std::int64_t total_q, std::int64_t total_k, const Stream& stream) {
  const Device gpu = Device::cuda(0);
  PackedOutputs out;
  out.o = OwnedTensor({total_q, c.heads_q, c.head_dim}, c.dtype, gpu, "test.o", stream);
  out.lse = OwnedTensor({c.heads_q, total_q}, DType::f32, gpu, "test.lse", stream);
  out.dq = OwnedTensor({total_q, c.heads_q, c.head_dim}, c.dtype, gpu, "test.dq", stream);
  out.dk = OwnedTensor({total_k, c.heads_kv, c.head_dim}, c.dtype, gpu, "test.dk", stream);
  out.dv = OwnedTensor({total_k, c.heads_kv, c.head_dim}, c.dtype, gpu, "test.dv", stream);
  if (c.sinks) out.dsinks = OwnedTensor({c.heads_q}, DType::f32, gpu, "test.dsinks", stream);
  return out;
}

// Rows [row0, row0 + n) of a packed (total, H, D) tensor as a dense (1, H, n, D) view.
Tensor sequence_view(const Tensor& packed, std::int64_t row0, std::int64_t n) {
  const std::int64_t H = packed.size(1), D = packed.size(2);
  auto* base = static_cast<unsigned char*>(packed.data()) + row0 * packed.stride(0) * packed.element_size();
  return Tensor(base, packed.dtype(), packed.device(), {1, H, n, D},
                {n * packed.stride(0), packed.stride(1), packed.stride(0), 1});
}

// Columns [row0, row0 + n) of the packed L (Hq, total_q) as a dense (1, Hq, n) view.
Tensor lse_view(const Tensor& lse, std::int64_t row0, std::int64_t n) {
  auto* base = static_cast<float*>(lse.data()) + row0;
  return Tensor(base, DType::f32, lse.device(), {1, lse.size(0), n}, {lse.size(0) * lse.stride(0), lse.stride(0), 1});
}

// Equal values (either zero sign), no NaN: counts the elements that differ.
std::size_t count_different(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::max<std::size_t>(1, b.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) bad += a[i] == b[i] ? 0 : 1;
  return bad;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - b[i]);
    worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(worst, d);
  }
  return worst;
}

class FlashVarlenVsDense : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(FlashVarlenVsDense, EveryRowMatchesItsSequence) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const VarlenCase& c = GetParam();
  const std::vector<std::int32_t>& lens_q = c.lens_q;
  const std::vector<std::int32_t>& lens_k = c.lens_k.empty() ? c.lens_q : c.lens_k;
  ASSERT_EQ(lens_q.size(), lens_k.size());
  const auto batch = static_cast<std::int64_t>(lens_q.size());
  const std::vector<std::int32_t> cu_q = cumulative(lens_q), cu_k = cumulative(lens_k);
  const std::int64_t total_q = cu_q.back(), total_k = cu_k.back();
  const std::int64_t max_q = *std::max_element(lens_q.begin(), lens_q.end()) + c.extra_max;
  const std::int64_t max_k = *std::max_element(lens_k.begin(), lens_k.end()) + c.extra_max;

  const Stream stream;
  const Device gpu = Device::cuda(0);
  OwnedTensor q({total_q, c.heads_q, c.head_dim}, c.dtype, gpu, "test.q", stream);
  OwnedTensor k({total_k, c.heads_kv, c.head_dim}, c.dtype, gpu, "test.k", stream);
  OwnedTensor v({total_k, c.heads_kv, c.head_dim}, c.dtype, gpu, "test.v", stream);
  OwnedTensor d_o({total_q, c.heads_q, c.head_dim}, c.dtype, gpu, "test.d_o", stream);
  OwnedTensor sinks;
  stream.synchronize();
  fill_normal(q, 11);
  fill_normal(k, 12);
  fill_normal(v, 13);
  fill_normal(d_o, 14);
  if (c.sinks) {
    sinks = OwnedTensor({c.heads_q}, DType::f32, gpu, "test.sinks", stream);
    stream.synchronize();
    fill_normal(sinks, 15, 0.0, 2.0);
  }
  Buffer cu_q_dev(cu_q.size() * sizeof(std::int32_t), gpu, "test.cu_q", stream);
  Buffer cu_k_dev(cu_k.size() * sizeof(std::int32_t), gpu, "test.cu_k", stream);
  stream.synchronize();
  ASSERT_EQ(cudaMemcpy(cu_q_dev.data(), cu_q.data(), cu_q_dev.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(cu_k_dev.data(), cu_k.data(), cu_k_dev.bytes(), cudaMemcpyHostToDevice), cudaSuccess);

  // The packed call.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  PackedOutputs packed = packed_outputs(c, total_q, total_k, stream);
  stream.synchronize();
  for (const OwnedTensor* t : {&packed.o, &packed.lse, &packed.dq, &packed.dk, &packed.dv}) fill_constant(*t, nan);
  if (c.sinks) fill_constant(packed.dsinks, nan);
  VarlenAttentionTensors vt;
  vt.q = q;
  vt.k = k;
  vt.v = v;
  vt.cu_seqlens_q = {static_cast<const std::int32_t*>(cu_q_dev.data()), cu_q.data(), batch + 1, gpu};
  vt.cu_seqlens_k = {static_cast<const std::int32_t*>(cu_k_dev.data()), cu_k.data(), batch + 1, gpu};
  vt.max_seqlen_q = max_q;
  vt.max_seqlen_k = max_k;
  if (c.sinks) vt.sinks = sinks;
  vt.o = packed.o;
  vt.lse = packed.lse;
  VarlenAttentionGrads vg{d_o, packed.dq, packed.dk, packed.dv, c.sinks ? packed.dsinks.tensor() : Tensor()};
  VarlenAttentionShape vs;
  vs.batch = batch;
  vs.heads_q = c.heads_q;
  vs.heads_kv = c.heads_kv;
  vs.total_q = total_q;
  vs.total_k = total_k;
  vs.head_dim = c.head_dim;
  vs.max_seqlen_q = max_q;
  vs.max_seqlen_k = max_k;
  vs.scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  vs.window_left = c.window_left;
  vs.window_right = c.causal ? 0 : c.window_right;
  vs.sink_tokens = c.sink_tokens;
  vs.has_sinks = c.sinks;
  attention_impl::cuda_flash_varlen_forward(vt, vs, stream, c.kernels);
  attention_impl::cuda_flash_varlen_backward(vt, vg, vs, stream, c.deterministic, c.kernels);
  stream.synchronize();

  // The dense calls, one per sequence, on views of the same inputs. Sequences without queries or keys
  // (which the dense contract does not take) get their defined results: O = 0, L = -inf, zero gradients.
  PackedOutputs dense = packed_outputs(c, total_q, total_k, stream);
  stream.synchronize();
  for (const OwnedTensor* t : {&dense.o, &dense.dq, &dense.dk, &dense.dv}) fill_constant(*t, 0.0);
  fill_constant(dense.lse, -std::numeric_limits<double>::infinity());
  std::vector<double> dsinks_sum(static_cast<std::size_t>(c.heads_q), 0.0), dsinks_abs = dsinks_sum;
  AttentionOptions options;
  options.causal = c.causal;
  options.window_left = c.window_left;
  options.window_right = c.window_right;
  options.sink_tokens = c.sink_tokens;
  if (c.scale != 0) options.scale = c.scale;
  options.deterministic = c.deterministic;
  options.kernels = c.kernels;
  options.stream = stream;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t nq = lens_q[b], nk = lens_k[b];
    if (nq == 0 || nk == 0) continue;
    OwnedTensor seq_dsinks;
    AttentionTensors t{sequence_view(q, cu_q[b], nq), sequence_view(k, cu_k[b], nk), sequence_view(v, cu_k[b], nk),
                       Tensor(), sequence_view(dense.o, cu_q[b], nq), lse_view(dense.lse, cu_q[b], nq)};
    AttentionGrads g{sequence_view(d_o, cu_q[b], nq), sequence_view(dense.dq, cu_q[b], nq),
                     sequence_view(dense.dk, cu_k[b], nk), sequence_view(dense.dv, cu_k[b], nk), Tensor()};
    if (c.sinks) {
      seq_dsinks = OwnedTensor({c.heads_q}, DType::f32, gpu, "test.seq_dsinks", stream);
      t.sinks = sinks;
      g.dsinks = seq_dsinks;
    }
    attention_forward(t, options);
    attention_backward(t, g, options);
    if (c.sinks) {
      stream.synchronize();
      const std::vector<double> part = read_as_double(seq_dsinks);
      for (std::int64_t h = 0; h < c.heads_q; ++h) {
        dsinks_sum[h] += part[h];
        dsinks_abs[h] += std::abs(part[h]);
      }
    }
  }
  stream.synchronize();

  const std::pair<const char*, std::pair<const OwnedTensor*, const OwnedTensor*>> exact[] = {
      {"o", {&packed.o, &dense.o}},
      {"lse", {&packed.lse, &dense.lse}},
      {"dk", {&packed.dk, &dense.dk}},
      {"dv", {&packed.dv, &dense.dv}}};
  for (const auto& [name, pair] : exact) {
    const std::vector<double> got = read_as_double(*pair.first), want = read_as_double(*pair.second);
    EXPECT_EQ(count_different(got, want), 0u) << name << ": max |varlen - dense| = " << max_abs_diff(got, want);
  }
  const std::vector<double> dq = read_as_double(packed.dq), dq_dense = read_as_double(dense.dq);
  if (c.deterministic) {
    EXPECT_EQ(count_different(dq, dq_dense), 0u) << "dq: max |varlen - dense| = " << max_abs_diff(dq, dq_dense);
  } else {
    // fp32 atomic sums in another order: within a unit in the last place at the largest magnitude.
    double largest = 0;
    for (double x : dq_dense) largest = std::max(largest, std::abs(x));
    const double ulp = c.dtype == DType::bf16 ? 1.0 / 128 : (c.dtype == DType::f16 ? 1.0 / 1024 : 1e-5);
    EXPECT_LE(max_abs_diff(dq, dq_dense), ulp * largest + 1e-6) << "dq (atomic mode) vs the dense dq";
  }
  if (c.sinks) {
    const std::vector<double> got = read_as_double(packed.dsinks);
    for (std::int64_t h = 0; h < c.heads_q; ++h)
      EXPECT_NEAR(got[h], dsinks_sum[h], 1e-6 * (1 + dsinks_abs[h])) << "dsinks[" << h << "] vs the dense sum";
  }
}

std::vector<VarlenCase> varlen_cases() {
  std::vector<VarlenCase> cases = {
      // One sequence: the dense call bit for bit.
      {.name = "single_causal_gqa2", .heads_q = 4, .heads_kv = 2, .lens_q = {300}, .causal = true},
      {.name = "single_full_d128", .head_dim = 128, .lens_q = {257}},
      // Packed documents.
      {.name = "docs_causal_gqa4_d128", .heads_q = 8, .heads_kv = 2, .head_dim = 128,
       .lens_q = {1, 129, 300, 64, 517, 2}, .causal = true},
      {.name = "docs_causal_long_d128", .heads_q = 4, .heads_kv = 1, .head_dim = 128, .lens_q = {1024, 2055, 999},
       .causal = true},
      {.name = "docs_unequal_full", .lens_q = {17, 200, 5}, .lens_k = {300, 90, 5}},
      {.name = "docs_unequal_causal_sinks", .heads_q = 4, .heads_kv = 1, .lens_q = {17, 300, 120},
       .lens_k = {300, 17, 40}, .causal = true, .sinks = true},
      {.name = "docs_window_sink_tokens_sinks", .heads_q = 4, .heads_kv = 2, .head_dim = 32,
       .lens_q = {100, 257, 33}, .causal = true, .window_left = 40, .sink_tokens = 3, .sinks = true},
      {.name = "docs_window_right_negative_scale", .head_dim = 80, .lens_q = {150, 77}, .lens_k = {150, 200},
       .window_left = 32, .window_right = 16, .scale = -0.3},
      {.name = "docs_d256", .head_dim = 256, .lens_q = {70, 190}, .causal = true},
      {.name = "docs_d16_max_above_longest", .head_dim = 16, .lens_q = {40, 9, 131}, .extra_max = 300,
       .causal = true, .sinks = true},
      // Sequences without queries or keys.
      {.name = "empty_sequences_sinks", .lens_q = {0, 50, 20, 0, 33}, .lens_k = {40, 0, 20, 0, 65},
       .sinks = true},
      {.name = "empty_sequences_causal", .lens_q = {0, 70, 0}, .lens_k = {10, 0, 0}, .causal = true},
  };
  std::vector<VarlenCase> all;
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    for (VarlenCase c : cases) {
      c.dtype = dtype;
      c.name = std::string(name_of(dtype)) + "_" + c.name;
      all.push_back(c);
      c.deterministic = false;
      c.name += "_atomic";
      all.push_back(c);
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Sm80, FlashVarlenVsDense, ::testing::ValuesIn(varlen_cases()),
                         [](const ::testing::TestParamInfo<VarlenCase>& info) { return info.param.name; });

}  // namespace
}  // namespace ft
