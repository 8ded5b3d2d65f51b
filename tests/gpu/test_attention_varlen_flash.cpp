// test_attention_varlen_flash.cpp — GPU tests (label gpu) of the CUDA flash varlen kernels
// (attention_varlen_forward / _backward on cuda tensors) against the CPU varlen oracle (AttentionImpl::naive
// on fp32 host copies of the same values): every variant (causal, windows, sink tokens, sink logits, GQA,
// scale), bf16 and fp16, head dims 64 and 128, both kernel families (auto: the Hopper ones where they run;
// sm80), both backward modes, packed batches with empty, length-1 and long sequences.
//   * Error bound: max |varlen - oracle| <= 2 max |dense - oracle| + 1e-3 max |oracle|, where dense is the
//     CUDA flash dense call run on each sequence separately (already tested against the oracle in
//     test_attention_flash.cpp): the varlen kernels must be as accurate as the dense ones on the same data.
//   * Sequences without keys give O = 0 exactly and L as a dense row that sees no key (-inf, or the sink
//     logit to fp32 rounding); without queries, dK = dV = 0 exactly.
//   * Outputs are poisoned with NaN before every run; the backward runs twice and gives bit-identical
//     gradients (dQ only in the deterministic mode).
//   * One sequence through the varlen kernels equals the dense kernels bit for bit (deterministic mode).
//   * The host mirror of the cumulative lengths gives the same results as validation from device memory.
// Run: ./build/bin/gpu_test_attention_varlen_flash   (needs a CUDA device; skips otherwise)
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/value_compare.h"
#include "common/varlen_case.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "ops/attention.h"
#include "ops/attention_varlen.h"

namespace ft {
namespace {

using testing_util::keep_first_backward;
using testing_util::max_abs;
using testing_util::max_abs_diff;
using testing_util::Outputs;
using testing_util::round_to;
using testing_util::RunToRun;
using testing_util::cumulative;
using testing_util::options_of;
using testing_util::same_bits;
using testing_util::VarlenCase;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Inputs in packed logical order, rounded to the case's dtype.
struct Inputs {
  std::vector<double> q, k, v, d_o;  // (total_q, Hq, D), (total_k, Hkv, D) x2, (total_q, Hq, D)
  std::vector<double> sinks;         // (Hq), empty = none
};

Inputs make_inputs(const VarlenCase& c, std::int64_t total_q, std::int64_t total_k) {
  std::mt19937_64 rng(4321 + std::hash<std::string>{}(c.name) % 1000);
  auto draw = [&](std::int64_t n, DType dtype, double std) {
    std::normal_distribution<double> normal(0.0, std);
    std::vector<double> out(static_cast<std::size_t>(n));
    for (double& x : out) x = round_to(dtype, normal(rng));
    return out;
  };
  Inputs in;
  in.q = draw(total_q * c.Hq * c.D, c.dtype, 1.0);
  in.k = draw(total_k * c.Hkv * c.D, c.dtype, 1.0);
  in.v = draw(total_k * c.Hkv * c.D, c.dtype, 1.0);
  in.d_o = draw(total_q * c.Hq * c.D, c.dtype, 1.0);
  if (c.sinks) in.sinks = draw(c.Hq, DType::f32, 2.0);
  return in;
}

// The tensors of one packed call on `device` (dtype for q, k, v and their gradients), and its lengths.
struct Packed {
  Device device;
  std::vector<std::int32_t> cu_q, cu_k;
  Buffer cu_q_device, cu_k_device;  // (B + 1) int32 on a CUDA device
  OwnedTensor q, k, v, o, lse, d_o, dq, dk, dv, sinks, dsinks;

  Packed(const VarlenCase& c, DType dtype, Device dev)
      : device(dev), cu_q(cumulative(c.len_q)), cu_k(cumulative(c.len_k)),
        q({cu_q.back(), c.Hq, c.D}, dtype, dev, "test.q"),
        k({cu_k.back(), c.Hkv, c.D}, dtype, dev, "test.k"),
        v({cu_k.back(), c.Hkv, c.D}, dtype, dev, "test.v"),
        o({cu_q.back(), c.Hq, c.D}, dtype, dev, "test.o"),
        lse({c.Hq, cu_q.back()}, DType::f32, dev, "test.lse"),
        d_o({cu_q.back(), c.Hq, c.D}, dtype, dev, "test.d_o"),
        dq({cu_q.back(), c.Hq, c.D}, dtype, dev, "test.dq"),
        dk({cu_k.back(), c.Hkv, c.D}, dtype, dev, "test.dk"),
        dv({cu_k.back(), c.Hkv, c.D}, dtype, dev, "test.dv") {
    if (c.sinks) {
      sinks = OwnedTensor({c.Hq}, DType::f32, dev, "test.sinks");
      dsinks = OwnedTensor({c.Hq}, DType::f32, dev, "test.dsinks");
    }
    if (dev.is_cuda()) {
      const std::size_t bytes = cu_q.size() * sizeof(std::int32_t);
      cu_q_device = Buffer(bytes, dev, "test.cu_q");
      cu_k_device = Buffer(bytes, dev, "test.cu_k");
      EXPECT_EQ(cudaMemcpy(cu_q_device.data(), cu_q.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(cu_k_device.data(), cu_k.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }

  void write(const Inputs& in) {
    write_from_double(q, in.q);
    write_from_double(k, in.k);
    write_from_double(v, in.v);
    write_from_double(d_o, in.d_o);
    if (sinks.defined()) write_from_double(sinks, in.sinks);
  }

  // with_host_mirror: the lengths carry their host copy (no device read while validating).
  VarlenAttentionTensors tensors(bool with_host_mirror = true) const {
    VarlenAttentionTensors t;
    t.q = q, t.k = k, t.v = v, t.o = o, t.lse = lse;
    const auto count = static_cast<std::int64_t>(cu_q.size());
    auto data_of = [&](const Buffer& dev, const std::vector<std::int32_t>& host) {
      return device.is_cuda() ? static_cast<const std::int32_t*>(dev.data()) : host.data();
    };
    t.cu_seqlens_q = {data_of(cu_q_device, cu_q), with_host_mirror ? cu_q.data() : nullptr, count, device};
    t.cu_seqlens_k = {data_of(cu_k_device, cu_k), with_host_mirror ? cu_k.data() : nullptr, count, device};
    for (std::size_t b = 0; b + 1 < cu_q.size(); ++b) {
      t.max_seqlen_q = std::max<std::int64_t>(t.max_seqlen_q, cu_q[b + 1] - cu_q[b]);
      t.max_seqlen_k = std::max<std::int64_t>(t.max_seqlen_k, cu_k[b + 1] - cu_k[b]);
    }
    if (sinks.defined()) t.sinks = sinks;
    return t;
  }
  VarlenAttentionGrads grads() const {
    VarlenAttentionGrads g{d_o, dq, dk, dv, Tensor()};
    if (dsinks.defined()) g.dsinks = dsinks;
    return g;
  }
};

// The CPU varlen oracle on fp32 copies of the inputs.
Outputs run_oracle(const VarlenCase& c, const Inputs& in) {
  Packed p(c, DType::f32, Device::cpu());
  p.write(in);
  const AttentionOptions options = options_of(c, AttentionImpl::naive);
  attention_varlen_forward(p.tensors(), options);
  attention_varlen_backward(p.tensors(), p.grads(), options);
  Outputs out{read_as_double(p.o), read_as_double(p.lse), read_as_double(p.dq), read_as_double(p.dk),
              read_as_double(p.dv), {}};
  if (c.sinks) out.dsinks = read_as_double(p.dsinks);
  return out;
}

// The varlen kernels: forward once, backward twice (repeat says which gradients matched bit for bit).
Outputs run_varlen(const VarlenCase& c, const Inputs& in, RunToRun* repeat, bool with_host_mirror = true) {
  Packed p(c, c.dtype, Device::cuda(0));
  p.write(in);
  const AttentionOptions options = options_of(c, AttentionImpl::flash);
  fill_constant(p.o, kNaN);
  fill_constant(p.lse, kNaN);
  attention_varlen_forward(p.tensors(with_host_mirror), options);
  Outputs out{read_as_double(p.o), read_as_double(p.lse), {}, {}, {}, {}};
  Outputs runs[2];
  for (Outputs& run : runs) {
    for (const OwnedTensor* g : {&p.dq, &p.dk, &p.dv}) fill_constant(*g, kNaN);
    if (c.sinks) fill_constant(p.dsinks, kNaN);
    attention_varlen_backward(p.tensors(with_host_mirror), p.grads(), options);
    run.dq = read_as_double(p.dq);
    run.dk = read_as_double(p.dk);
    run.dv = read_as_double(p.dv);
    if (c.sinks) run.dsinks = read_as_double(p.dsinks);
  }
  keep_first_backward(runs, repeat, out);
  return out;
}

// Rows [start, start + length) of a packed (total, H, D) tensor as a dense (1, H, length, D) view.
Tensor sequence_view(const Tensor& packed, std::int64_t start, std::int64_t length) {
  const Tensor rows = packed.narrow(0, start, length);
  return Tensor(rows.data(), rows.dtype(), rows.device(), {1, rows.size(1), length, rows.size(2)},
                {rows.stride(0) * length, rows.stride(1), rows.stride(0), 1});
}

// Columns [start, start + length) of lse (Hq, total) as a dense (1, Hq, length) view.
Tensor lse_view(const Tensor& lse, std::int64_t start, std::int64_t length) {
  const Tensor cols = lse.narrow(1, start, length);
  return Tensor(cols.data(), cols.dtype(), cols.device(), {1, cols.size(0), length},
                {cols.stride(0) * cols.size(0), cols.stride(0), 1});
}

// The dense CUDA flash kernels on each sequence separately, written into packed outputs; dsinks sums the
// sequences' parts in double. Sequences without keys or queries keep O = 0, L = -inf and zero gradients.
Outputs run_dense_per_sequence(const VarlenCase& c, const Inputs& in) {
  Packed p(c, c.dtype, Device::cuda(0));
  p.write(in);
  fill_constant(p.o, 0.0);
  fill_constant(p.lse, -kInf);
  for (const OwnedTensor* g : {&p.dq, &p.dk, &p.dv}) fill_constant(*g, 0.0);
  const AttentionOptions options = options_of(c, AttentionImpl::flash);
  std::vector<double> dsinks(static_cast<std::size_t>(c.Hq), 0.0);
  for (std::size_t b = 0; b + 1 < p.cu_q.size(); ++b) {
    const std::int64_t q0 = p.cu_q[b], lq = p.cu_q[b + 1] - q0, k0 = p.cu_k[b], lk = p.cu_k[b + 1] - k0;
    if (lq == 0 || lk == 0) continue;
    const AttentionTensors t{sequence_view(p.q, q0, lq), sequence_view(p.k, k0, lk), sequence_view(p.v, k0, lk),
                             p.sinks, sequence_view(p.o, q0, lq), lse_view(p.lse, q0, lq)};
    const AttentionGrads g{sequence_view(p.d_o, q0, lq), sequence_view(p.dq, q0, lq), sequence_view(p.dk, k0, lk),
                           sequence_view(p.dv, k0, lk), p.dsinks};
    attention_forward(t, options);
    attention_backward(t, g, options);
    if (c.sinks) {
      const std::vector<double> part = read_as_double(p.dsinks);
      for (std::int64_t h = 0; h < c.Hq; ++h) dsinks[h] += part[h];
    }
  }
  Outputs out{read_as_double(p.o), read_as_double(p.lse), read_as_double(p.dq), read_as_double(p.dk),
              read_as_double(p.dv), {}};
  if (c.sinks) out.dsinks = dsinks;
  return out;
}

// Every entry of `values` in the rows (token index) of empty sequences equals `expected`.
void expect_rows(const std::vector<double>& values, const std::vector<std::int32_t>& cu,
                 const std::vector<std::int32_t>& other_cu, std::int64_t row_size, double expected, const char* what) {
  for (std::size_t b = 0; b + 1 < cu.size(); ++b) {
    if (other_cu[b + 1] != other_cu[b]) continue;  // the other side is not empty
    for (std::int64_t i = std::int64_t{cu[b]} * row_size; i < std::int64_t{cu[b + 1]} * row_size; ++i)
      ASSERT_EQ(values[i], expected) << what << " of sequence " << b;
  }
}

class VarlenFlashVsOracle : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(VarlenFlashVsOracle, ForwardAndBackward) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const VarlenCase& c = GetParam();
  const std::int64_t total_q = cumulative(c.len_q).back(), total_k = cumulative(c.len_k).back();
  const Inputs in = make_inputs(c, total_q, total_k);
  const Outputs ref = run_oracle(c, in);
  const Outputs dense = run_dense_per_sequence(c, in);
  RunToRun repeat;
  const Outputs got = run_varlen(c, in, &repeat);
  EXPECT_TRUE(repeat.rest_identical) << "two backward runs gave different dK, dV or dsinks";
  if (c.deterministic) EXPECT_TRUE(repeat.dq_identical) << "two deterministic backward runs gave different dQ";

  const std::pair<const char*, const std::vector<double> Outputs::*> fields[] = {
      {"o", &Outputs::o},   {"lse", &Outputs::lse}, {"dq", &Outputs::dq},
      {"dk", &Outputs::dk}, {"dv", &Outputs::dv},   {"dsinks", &Outputs::dsinks}};
  for (const auto& [name, field] : fields) {
    const double err = max_abs_diff(got.*field, ref.*field), dense_err = max_abs_diff(dense.*field, ref.*field);
    EXPECT_LE(err, 2 * dense_err + 1e-3 * std::max(max_abs(ref.*field), 1.0))
        << name << ": max |varlen - oracle| = " << err << ", dense kernels per sequence: " << dense_err;
  }
  const std::vector<std::int32_t> cu_q = cumulative(c.len_q), cu_k = cumulative(c.len_k);
  expect_rows(got.o, cu_q, cu_k, c.Hq * c.D, 0.0, "O (no keys)");
  expect_rows(got.dq, cu_q, cu_k, c.Hq * c.D, 0.0, "dQ (no keys)");
  expect_rows(got.dk, cu_k, cu_q, c.Hkv * c.D, 0.0, "dK (no queries)");
  expect_rows(got.dv, cu_k, cu_q, c.Hkv * c.D, 0.0, "dV (no queries)");
  for (std::int64_t h = 0; h < c.Hq; ++h)  // lse (Hq, total_q)
    for (std::size_t b = 0; b + 1 < cu_q.size(); ++b)
      if (cu_k[b + 1] == cu_k[b])
        for (std::int64_t i = cu_q[b]; i < cu_q[b + 1]; ++i) {
          if (c.sinks)
            ASSERT_NEAR(got.lse[h * total_q + i], in.sinks[h], 1e-6 * (1 + std::abs(in.sinks[h])))
                << "L (no keys: the sink logit) of sequence " << b;
          else
            ASSERT_EQ(got.lse[h * total_q + i], -kInf) << "L (no keys) of sequence " << b;
        }
}

// Mixed documents: empty ones (both sides, and keys without queries where the right side is free),
// length 1, lengths around the kernels' tile sizes and a long one.
const std::vector<std::int32_t> kLenQ = {1, 0, 129, 64, 0, 517, 2, 1000, 63};
const std::vector<std::int32_t> kLenKAligned = {1, 0, 129, 64, 7, 517, 2, 1000, 70};
const std::vector<std::int32_t> kLenKFree = {3, 40, 0, 200, 0, 517, 2, 911, 63};

std::vector<VarlenCase> grid() {
  struct Mask {
    const char* name;
    bool causal;
    std::int64_t left, right, sink_tokens;
  };
  const Mask masks[] = {{"full", false, -1, -1, 0},          {"causal", true, -1, -1, 0},
                        {"window_100_0", false, 100, 0, 0},  {"window_33_17", false, 33, 17, 0},
                        {"causal_window_64_sink4", true, 64, -1, 4}, {"window_u_9", false, -1, 9, 0}};
  std::vector<VarlenCase> cases;
  int i = 0;
  for (const Mask& m : masks)
    for (DType dtype : {DType::bf16, DType::f16})
      for (std::int64_t D : {64, 128})
        for (FlashKernels kernels : {FlashKernels::auto_select, FlashKernels::sm80}) {
          VarlenCase c;
          c.causal = m.causal, c.left = m.left, c.right = m.right, c.sink_tokens = m.sink_tokens;
          c.dtype = dtype, c.D = D, c.kernels = kernels;
          c.sinks = i % 3 == 1;
          c.Hq = i % 2 == 0 ? 4 : 8, c.Hkv = i % 4 < 2 ? 2 : 1;  // GQA 2, 4 and 8
          c.scale = i % 5 == 2 ? 0.05 : 0;
          c.deterministic = i % 4 != 3;
          c.len_q = kLenQ;
          c.len_k = m.causal || m.right >= 0 ? kLenKAligned : kLenKFree;
          c.name = str(m.name, "_", name_of(dtype), "_D", D, "_", name_of(kernels), "_H", c.Hq, "x", c.Hkv,
                       c.sinks ? "_sinks" : "", c.scale != 0 ? "_scaled" : "", c.deterministic ? "" : "_atomic");
          cases.push_back(c);
          ++i;
        }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Variants, VarlenFlashVsOracle, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<VarlenCase>& info) { return info.param.name; });

// One sequence through the varlen kernels is the dense call on the same values, bit for bit, in the
// deterministic mode.
TEST(VarlenFlash, OneSequenceEqualsTheDenseKernelsBitForBit) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (DType dtype : {DType::bf16, DType::f16})
    for (std::int64_t D : {64, 128})
      for (bool causal : {false, true}) {
        VarlenCase c;
        c.name = str("single_", name_of(dtype), "_D", D, causal ? "_causal" : "");
        c.dtype = dtype, c.D = D, c.causal = causal, c.Hq = 8, c.Hkv = 2, c.sinks = causal;
        c.len_q = {777}, c.len_k = {777};
        SCOPED_TRACE(c.name);
        const Inputs in = make_inputs(c, 777, 777);
        RunToRun repeat;
        const Outputs got = run_varlen(c, in, &repeat);
        const Outputs dense = run_dense_per_sequence(c, in);
        EXPECT_TRUE(same_bits(got.o, dense.o)) << "O";
        EXPECT_TRUE(same_bits(got.lse, dense.lse)) << "L";
        EXPECT_TRUE(same_bits(got.dq, dense.dq)) << "dQ";
        EXPECT_TRUE(same_bits(got.dk, dense.dk)) << "dK";
        EXPECT_TRUE(same_bits(got.dv, dense.dv)) << "dV";
        if (c.sinks) EXPECT_TRUE(same_bits(got.dsinks, dense.dsinks)) << "dsinks";
      }
}

// Validation from device memory (no host mirror: the call copies the lengths) runs the same kernels.
TEST(VarlenFlash, LengthsReadFromTheDeviceGiveTheSameResults) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  VarlenCase c;
  c.name = "device_lengths";
  c.dtype = DType::bf16, c.Hq = 4, c.Hkv = 2, c.D = 64;
  c.causal = true, c.len_q = kLenQ, c.len_k = kLenKAligned;
  const Inputs in = make_inputs(c, cumulative(c.len_q).back(), cumulative(c.len_k).back());
  RunToRun repeat;
  const Outputs mirrored = run_varlen(c, in, &repeat, true);
  const Outputs read = run_varlen(c, in, &repeat, false);
  EXPECT_TRUE(same_bits(mirrored.o, read.o) && same_bits(mirrored.lse, read.lse) && same_bits(mirrored.dq, read.dq) &&
              same_bits(mirrored.dk, read.dk) && same_bits(mirrored.dv, read.dv));
}

// Bad lengths in device memory are caught by the validation's copy, before any kernel runs.
TEST(VarlenFlash, BadDeviceLengthsAreRefused) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  VarlenCase c;
  c.name = "bad_lengths";
  c.dtype = DType::bf16, c.D = 64;
  c.len_q = {4, 4}, c.len_k = {4, 4};
  Packed p(c, c.dtype, Device::cuda(0));
  const std::int32_t bad[] = {0, 5, 8};
  ASSERT_EQ(cudaMemcpy(p.cu_k_device.data(), bad, sizeof(bad), cudaMemcpyHostToDevice), cudaSuccess);
  VarlenAttentionTensors t = p.tensors(false);
  t.max_seqlen_k = 5;
  EXPECT_NO_THROW(attention_varlen_forward(t, options_of(c, AttentionImpl::flash)));  // non-causal: any lengths
  c.causal = true;
  try {
    attention_varlen_forward(t, options_of(c, AttentionImpl::flash));
    ADD_FAILURE() << "expected an ft::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 1 has 4 queries and 3 keys"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ft
