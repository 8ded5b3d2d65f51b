// test_attention_flash_varlen_kernels.cpp — GPU tests (label gpu) of the CUDA flash kernels over packed
// sequences (cuda_flash_varlen_forward / _backward, attention_impls.h) against the dense flash kernels of
// the same family called once per sequence on views of the same packed tensors. The kernels narrow their
// shape to each sequence (Note [Packed sequences], flash_varlen.cuh) and run the dense tiles, so O, L, dK,
// dV and (deterministic mode) dQ must equal the dense calls' values exactly, for every sequence: every
// variant (causal, windows, sink tokens, sink logits, GQA, negative scale), unequal query and key lengths,
// zero-length sequences (no keys: O = 0, dQ = 0 and L = -inf, or the sink logit with sink logits; no
// queries: dK = dV = 0) and max_seqlen above
// the longest sequence; on the sm80 and (on a Hopper GPU) the sm90 kernels. dsinks is the sum of the dense
// calls' (to fp32 rounding); atomic-mode dQ (whose fp32 sums may come in another order) is compared within
// a unit in the last place of the dtype. Outputs are poisoned with NaN before every run, so a row a kernel
// fails to write, or writes for another sequence, shows. The Hopper kernels' schedule (forced persistent
// blocks, launch sections) leaves every output unchanged, and another dQ addition order the gradients to
// rounding.
// Run: ./build/bin/gpu_test_attention_flash_varlen_kernels   (needs a CUDA device; skips otherwise)
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/forced_flash_hook.h"
#include "common/varlen_case.h"
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

using testing_util::cumulative;
using testing_util::ForcedFlashHook;

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

// A case's packed inputs on the device, with its cumulative lengths (device and host).
struct PackedInputs {
  std::vector<std::int32_t> lens_q, lens_k, cu_q, cu_k;
  std::int64_t batch = 0, total_q = 0, total_k = 0, max_q = 0, max_k = 0;
  OwnedTensor q, k, v, d_o, sinks;
  Buffer cu_q_dev, cu_k_dev;
};

void make_inputs(const VarlenCase& c, const Stream& stream, PackedInputs& in) {
  in.lens_q = c.lens_q;
  in.lens_k = c.lens_k.empty() ? c.lens_q : c.lens_k;
  ASSERT_EQ(in.lens_q.size(), in.lens_k.size());
  in.batch = static_cast<std::int64_t>(in.lens_q.size());
  in.cu_q = cumulative(in.lens_q);
  in.cu_k = cumulative(in.lens_k);
  in.total_q = in.cu_q.back();
  in.total_k = in.cu_k.back();
  in.max_q = *std::max_element(in.lens_q.begin(), in.lens_q.end()) + c.extra_max;
  in.max_k = *std::max_element(in.lens_k.begin(), in.lens_k.end()) + c.extra_max;
  const Device gpu = Device::cuda(0);
  in.q = OwnedTensor({in.total_q, c.heads_q, c.head_dim}, c.dtype, gpu, "test.q", stream);
  in.k = OwnedTensor({in.total_k, c.heads_kv, c.head_dim}, c.dtype, gpu, "test.k", stream);
  in.v = OwnedTensor({in.total_k, c.heads_kv, c.head_dim}, c.dtype, gpu, "test.v", stream);
  in.d_o = OwnedTensor({in.total_q, c.heads_q, c.head_dim}, c.dtype, gpu, "test.d_o", stream);
  if (c.sinks) in.sinks = OwnedTensor({c.heads_q}, DType::f32, gpu, "test.sinks", stream);
  in.cu_q_dev = Buffer(in.cu_q.size() * sizeof(std::int32_t), gpu, "test.cu_q", stream);
  in.cu_k_dev = Buffer(in.cu_k.size() * sizeof(std::int32_t), gpu, "test.cu_k", stream);
  stream.synchronize();
  fill_normal(in.q, 11);
  fill_normal(in.k, 12);
  fill_normal(in.v, 13);
  fill_normal(in.d_o, 14);
  if (c.sinks) fill_normal(in.sinks, 15, 0.0, 2.0);
  ASSERT_EQ(cudaMemcpy(in.cu_q_dev.data(), in.cu_q.data(), in.cu_q_dev.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(in.cu_k_dev.data(), in.cu_k.data(), in.cu_k_dev.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
}

// Every output of a forward + backward, in logical order.
struct Results {
  std::vector<double> o, lse, dq, dk, dv, dsinks, dsinks_abs;  // dsinks_abs: the dense parts' |sum| (dense only)
};

// The packed call, its outputs poisoned with NaN first.
Results run_varlen(const VarlenCase& c, const PackedInputs& in, const Stream& stream) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  PackedOutputs out = packed_outputs(c, in.total_q, in.total_k, stream);
  stream.synchronize();
  for (const OwnedTensor* t : {&out.o, &out.lse, &out.dq, &out.dk, &out.dv}) fill_constant(*t, nan);
  if (c.sinks) fill_constant(out.dsinks, nan);
  const Device gpu = Device::cuda(0);
  VarlenAttentionTensors vt;
  vt.q = in.q;
  vt.k = in.k;
  vt.v = in.v;
  vt.cu_seqlens_q = {static_cast<const std::int32_t*>(in.cu_q_dev.data()), in.cu_q.data(), in.batch + 1, gpu};
  vt.cu_seqlens_k = {static_cast<const std::int32_t*>(in.cu_k_dev.data()), in.cu_k.data(), in.batch + 1, gpu};
  vt.max_seqlen_q = in.max_q;
  vt.max_seqlen_k = in.max_k;
  if (c.sinks) vt.sinks = in.sinks;
  vt.o = out.o;
  vt.lse = out.lse;
  VarlenAttentionGrads vg{in.d_o, out.dq, out.dk, out.dv, c.sinks ? out.dsinks.tensor() : Tensor()};
  VarlenAttentionShape vs;
  vs.batch = in.batch;
  vs.heads_q = c.heads_q;
  vs.heads_kv = c.heads_kv;
  vs.total_q = in.total_q;
  vs.total_k = in.total_k;
  vs.head_dim = c.head_dim;
  vs.max_seqlen_q = in.max_q;
  vs.max_seqlen_k = in.max_k;
  vs.scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  vs.window_left = c.window_left;
  vs.window_right = c.causal ? 0 : c.window_right;
  vs.sink_tokens = c.sink_tokens;
  vs.has_sinks = c.sinks;
  attention_impl::cuda_flash_varlen_forward(vt, vs, stream, c.kernels);
  attention_impl::cuda_flash_varlen_backward(vt, vg, vs, stream, c.deterministic, c.kernels);
  stream.synchronize();
  Results r{read_as_double(out.o), read_as_double(out.lse), read_as_double(out.dq), read_as_double(out.dk),
            read_as_double(out.dv), {}, {}};
  if (c.sinks) r.dsinks = read_as_double(out.dsinks);
  return r;
}

// L of a row that sees no key: -inf, or with sink logits the head's sink logit s, as the kernels' final
// normalisation computes it in fp32 (s log2(e), then times ln 2).
double lse_of_no_keys(const VarlenCase& c, const std::vector<double>& sinks, std::int64_t h) {
  if (!c.sinks) return -std::numeric_limits<double>::infinity();
  const float top = static_cast<float>(sinks[h]) * 1.4426950408889634f;
  return top * 0.6931471805599453f;
}

// The dense calls of the same family, one per sequence, on views of the same inputs. Sequences without
// queries or keys (which the dense contract does not take) get their defined results: O = 0, L as a row
// that sees no key (lse_of_no_keys), zero gradients. dsinks is the sum of the calls' in double.
Results run_dense(const VarlenCase& c, const PackedInputs& in, const Stream& stream) {
  PackedOutputs dense = packed_outputs(c, in.total_q, in.total_k, stream);
  stream.synchronize();
  for (const OwnedTensor* t : {&dense.o, &dense.dq, &dense.dk, &dense.dv}) fill_constant(*t, 0.0);
  const std::vector<double> sinks = c.sinks ? read_as_double(in.sinks) : std::vector<double>();
  std::vector<double> lse(static_cast<std::size_t>(c.heads_q * in.total_q));  // (Hq, total_q)
  for (std::int64_t h = 0; h < c.heads_q; ++h)
    for (std::int64_t i = 0; i < in.total_q; ++i) lse[h * in.total_q + i] = lse_of_no_keys(c, sinks, h);
  write_from_double(dense.lse, lse);
  Results r;
  if (c.sinks) r.dsinks.assign(static_cast<std::size_t>(c.heads_q), 0.0), r.dsinks_abs = r.dsinks;
  AttentionOptions options;
  options.causal = c.causal;
  options.window_left = c.window_left;
  options.window_right = c.window_right;
  options.sink_tokens = c.sink_tokens;
  if (c.scale != 0) options.scale = c.scale;
  options.deterministic = c.deterministic;
  options.kernels = c.kernels;
  options.stream = stream;
  for (std::int64_t b = 0; b < in.batch; ++b) {
    const std::int64_t nq = in.lens_q[b], nk = in.lens_k[b], q0 = in.cu_q[b], k0 = in.cu_k[b];
    if (nq == 0 || nk == 0) continue;
    OwnedTensor seq_dsinks;
    AttentionTensors t{sequence_view(in.q, q0, nq), sequence_view(in.k, k0, nk), sequence_view(in.v, k0, nk),
                       Tensor(), sequence_view(dense.o, q0, nq), lse_view(dense.lse, q0, nq)};
    AttentionGrads g{sequence_view(in.d_o, q0, nq), sequence_view(dense.dq, q0, nq), sequence_view(dense.dk, k0, nk),
                     sequence_view(dense.dv, k0, nk), Tensor()};
    if (c.sinks) {
      seq_dsinks = OwnedTensor({c.heads_q}, DType::f32, Device::cuda(0), "test.seq_dsinks", stream);
      t.sinks = in.sinks;
      g.dsinks = seq_dsinks;
    }
    attention_forward(t, options);
    attention_backward(t, g, options);
    if (c.sinks) {
      stream.synchronize();
      const std::vector<double> part = read_as_double(seq_dsinks);
      for (std::int64_t h = 0; h < c.heads_q; ++h) {
        r.dsinks[h] += part[h];
        r.dsinks_abs[h] += std::abs(part[h]);
      }
    }
  }
  stream.synchronize();
  r.o = read_as_double(dense.o);
  r.lse = read_as_double(dense.lse);
  r.dq = read_as_double(dense.dq);
  r.dk = read_as_double(dense.dk);
  r.dv = read_as_double(dense.dv);
  return r;
}

// How expect_same compares the gradients: dK and dV exactly and dQ exactly in the deterministic mode (else
// to rounding: its fp32 atomic sums come in any order), or every gradient to rounding (sums in another
// fixed order).
enum class Grads { same_order, any_order };

// O and L equal; the gradients as `grads` says, to rounding meaning within a unit in the last place of the
// dtype at the largest magnitude; dsinks within fp32 rounding of `want`'s (summed over sequences when `want`
// is dense).
void expect_same(const VarlenCase& c, const Results& got, const Results& want, Grads grads = Grads::same_order) {
  const std::pair<const char*, std::pair<const std::vector<double>*, const std::vector<double>*>> fields[] = {
      {"o", {&got.o, &want.o}},   {"lse", {&got.lse, &want.lse}}, {"dk", {&got.dk, &want.dk}},
      {"dv", {&got.dv, &want.dv}}, {"dq", {&got.dq, &want.dq}}};
  const double ulp = c.dtype == DType::bf16 ? 1.0 / 128 : (c.dtype == DType::f16 ? 1.0 / 1024 : 1e-5);
  for (const auto& [name, pair] : fields) {
    const std::string field = name;
    const bool gradient = field != "o" && field != "lse";
    const bool rounded = gradient && (grads == Grads::any_order || (field == "dq" && !c.deterministic));
    if (!rounded) {
      EXPECT_EQ(count_different(*pair.first, *pair.second), 0u)
          << name << ": max |got - want| = " << max_abs_diff(*pair.first, *pair.second);
      continue;
    }
    double largest = 0;
    for (double x : *pair.second) largest = std::max(largest, std::abs(x));
    EXPECT_LE(max_abs_diff(*pair.first, *pair.second), ulp * largest + 1e-6) << name << " (to rounding)";
  }
  for (std::size_t h = 0; h < want.dsinks.size(); ++h) {
    const double spread = want.dsinks_abs.empty() ? std::abs(want.dsinks[h]) : want.dsinks_abs[h];
    EXPECT_NEAR(got.dsinks[h], want.dsinks[h], 1e-6 * (1 + spread)) << "dsinks[" << h << "]";
  }
}

bool hopper_gpu() { return describe_device(Device::cuda(0)).find("sm_90") != std::string::npos; }

class FlashVarlenVsDense : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(FlashVarlenVsDense, EveryRowMatchesItsSequence) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const VarlenCase& c = GetParam();
  if (c.kernels == FlashKernels::sm90 && !hopper_gpu()) GTEST_SKIP() << "needs a Hopper GPU";
  const Stream stream;
  PackedInputs in;
  make_inputs(c, stream, in);
  expect_same(c, run_varlen(c, in, stream), run_dense(c, in, stream));
}

// The Hopper kernels schedule packed sequences' tiles sequence by sequence (Note [Packed-sequence tiles]):
// with 1 or 3 persistent forward blocks each block takes tiles of many sequences (empty ones between), and
// launch sections of 1 or 3 kv heads split the heads; the outputs stay the same bit for bit. Ascending
// additions for every head (another dQ order, and each block's query tiles last first, so dK and dV sum in
// another order too) keep O, L and dsinks, and the gradients to rounding.
TEST(FlashVarlenKernels, HopperScheduleGivesTheSameOutputs) {
  if (!cuda_available() || !hopper_gpu()) GTEST_SKIP() << "needs a Hopper GPU";
  for (std::int64_t d : {64, 96, 128, 256}) {
    const VarlenCase c{.name = "schedule", .heads_q = 8, .heads_kv = 4, .head_dim = d,
                       .lens_q = {130, 0, 1, 300, 64, 0, 257}, .lens_k = {130, 5, 1, 300, 64, 0, 300},
                       .causal = true, .sink_tokens = 2, .sinks = true, .kernels = FlashKernels::sm90};
    SCOPED_TRACE(str("d ", d));
    const Stream stream;
    PackedInputs in;
    make_inputs(c, stream, in);
    const Results whole = run_varlen(c, in, stream);
    for (int blocks : {1, 3}) {
      SCOPED_TRACE(str("forward blocks ", blocks));
      const ForcedFlashHook forced(attention_impl::force_flash_forward_blocks, blocks, 0);
      expect_same(c, run_varlen(c, in, stream), whole);
    }
    for (int heads : {1, 3}) {
      SCOPED_TRACE(str("sections of ", heads));
      const ForcedFlashHook forced(attention_impl::force_flash_section_heads, heads, 0);
      expect_same(c, run_varlen(c, in, stream), whole);
    }
    SCOPED_TRACE("every head ascending");
    const ForcedFlashHook forced(attention_impl::force_flash_ascending_heads, c.heads_kv, -1);
    expect_same(c, run_varlen(c, in, stream), whole, Grads::any_order);
  }
}

// kernels sm90 over packed fp32 (or off a Hopper GPU): an unsupported error naming what sm90 needs.
TEST(FlashVarlenKernels, Sm90KernelsRefuseWhatTheyCannotRun) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const VarlenCase c{.name = "f32", .dtype = DType::f32, .lens_q = {40, 70}, .kernels = FlashKernels::sm90};
  const Stream stream;
  PackedInputs in;
  make_inputs(c, stream, in);
  try {
    run_varlen(c, in, stream);
    FAIL() << "kernels sm90 accepted fp32";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(e.message().find(hopper_gpu() ? "fp32" : "compute capability 9.0"), std::string::npos) << e.message();
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
  for (FlashKernels kernels : {FlashKernels::sm80, FlashKernels::sm90}) {
    for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
      for (VarlenCase c : cases) {
        // The Hopper kernels (forward and backward): 16-bit inputs at head dims 64, 80, 96, 128 and 256.
        const bool hopper_dim = c.head_dim == 64 || c.head_dim == 80 || c.head_dim == 96 || c.head_dim == 128 ||
                                c.head_dim == 256;
        if (kernels == FlashKernels::sm90 && (dtype == DType::f32 || !hopper_dim)) continue;
        c.dtype = dtype;
        c.kernels = kernels;
        c.name = std::string(name_of(kernels)) + "_" + name_of(dtype) + "_" + c.name;
        all.push_back(c);
        c.deterministic = false;
        c.name += "_atomic";
        all.push_back(c);
      }
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Kernels, FlashVarlenVsDense, ::testing::ValuesIn(varlen_cases()),
                         [](const ::testing::TestParamInfo<VarlenCase>& info) { return info.param.name; });

}  // namespace
}  // namespace ft
