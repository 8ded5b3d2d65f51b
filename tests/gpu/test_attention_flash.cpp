// test_attention_flash.cpp — GPU tests (label gpu) of the CUDA FlashAttention-2 kernels
// (AttentionImpl::flash on cuda tensors) against the CPU naive oracle (AttentionImpl::naive on CPU fp32
// tensors holding the same values, accumulated in double): every variant (causal, windows, sink tokens,
// sink logits, GQA 1/4/8), bf16/fp16/fp32, head dims 16..256, odd and unequal lengths, both memory
// layouts and unaligned strides, in both backward modes: the default deterministic one and the atomic
// dQ accumulation (AttentionOptions::deterministic = false). Outputs are poisoned with NaN before every
// run; the backward runs twice and must give bit-identical gradients, except dQ in the atomic mode (its
// fp32 atomic sums may round differently; dK, dV and dsinks stay bit-identical there too). On a Hopper GPU
// the kernels' head sections (forced small) must leave every output unchanged, bit for bit.
//   fp32 (TF32 tensor cores): |flash - ref| <= 1e-2 + 1e-2 |ref| element-wise.
//   bf16/fp16: max |flash - ref| <= 2 max |lp - ref| + slack, where lp is the same naive computation
//   carried out in the low dtype (inputs, P, dS and outputs rounded to it; low_precision_attention).
// Run: ./build/bin/gpu_test_attention_flash   (needs a CUDA device; skips otherwise)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/forced_flash_hook.h"
#include "common/value_compare.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "core/stream.h"
#include "core/tensor_io.h"
#include "ops/attention.h"
#include "ops/attention/attention_impls.h"
#include "ops/attention/visibility.h"

namespace ft {
namespace {

using testing_util::ForcedFlashHook;
using testing_util::keep_first_backward;
using testing_util::max_abs;
using testing_util::max_abs_diff;
using testing_util::Outputs;
using testing_util::round_to;
using testing_util::RunToRun;
using testing_util::same_bits;

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Layout { bhnd, bnhd };

struct FlashCase {
  std::string name;
  DType dtype = DType::bf16;
  std::int64_t batch = 1, heads_q = 1, heads_kv = 1, len_q = 1, len_k = 1, head_dim = 64;
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1, sink_tokens = 0;
  bool sinks = false;            // gpt-oss sink logits, one per query head
  Layout layout = Layout::bhnd;  // memory layout of q, k, v, o and their gradients
  bool unaligned = false;        // rows padded by one element: no 16-byte strides
  double scale = 0;              // 0 = default 1/sqrt(D)
  bool own_stream = false;       // run on a created stream instead of the default one
  bool deterministic = true;     // AttentionOptions::deterministic of the flash backward
  FlashKernels kernels = FlashKernels::auto_select;  // AttentionOptions::kernels
};

void PrintTo(const FlashCase& c, std::ostream* os) { *os << c.name; }

// Problem inputs in logical (B, H, N, D) order, already rounded to the case's dtype.
struct Inputs {
  std::vector<double> q, k, v, d_o;  // (B,Hq,Nq,D), (B,Hkv,Nk,D) x2, (B,Hq,Nq,D)
  std::vector<double> sinks;         // (Hq) fp32 values, empty = none
};

std::vector<double> random_values(std::size_t n, std::mt19937_64& rng, DType dtype, double std) {
  std::normal_distribution<double> normal(0.0, std);
  std::vector<double> out(n);
  for (double& x : out) x = round_to(dtype, normal(rng));
  return out;
}

Inputs make_inputs(const FlashCase& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto q_size = static_cast<std::size_t>(c.batch * c.heads_q * c.len_q * c.head_dim);
  const auto kv_size = static_cast<std::size_t>(c.batch * c.heads_kv * c.len_k * c.head_dim);
  Inputs in;
  in.q = random_values(q_size, rng, c.dtype, 1.0);
  in.k = random_values(kv_size, rng, c.dtype, 1.0);
  in.v = random_values(kv_size, rng, c.dtype, 1.0);
  in.d_o = random_values(q_size, rng, c.dtype, 1.0);
  if (c.sinks) in.sinks = random_values(static_cast<std::size_t>(c.heads_q), rng, DType::f32, 2.0);
  return in;
}

double resolved_scale(const FlashCase& c) {
  return c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
}

AttentionOptions options_of(const FlashCase& c, AttentionImpl impl) {
  AttentionOptions options;
  options.causal = c.causal;
  options.window_left = c.window_left;
  options.window_right = c.window_right;
  options.sink_tokens = c.sink_tokens;
  if (c.scale != 0) options.scale = c.scale;
  options.impl = impl;
  options.deterministic = c.deterministic;
  options.kernels = c.kernels;
  return options;
}

// The oracle: the CPU naive implementation on fp32 tensors holding the inputs' values.
Outputs run_reference(const FlashCase& c, const Inputs& in) {
  const Device cpu = Device::cpu();
  const Shape q_shape{c.batch, c.heads_q, c.len_q, c.head_dim}, kv_shape{c.batch, c.heads_kv, c.len_k, c.head_dim};
  OwnedTensor q(q_shape, DType::f32, cpu, "test.q"), k(kv_shape, DType::f32, cpu, "test.k"),
      v(kv_shape, DType::f32, cpu, "test.v"), o(q_shape, DType::f32, cpu, "test.o"),
      lse({c.batch, c.heads_q, c.len_q}, DType::f32, cpu, "test.lse"), d_o(q_shape, DType::f32, cpu, "test.d_o"),
      dq(q_shape, DType::f32, cpu, "test.dq"), dk(kv_shape, DType::f32, cpu, "test.dk"),
      dv(kv_shape, DType::f32, cpu, "test.dv");
  OwnedTensor sinks, dsinks;
  write_from_double(q, in.q);
  write_from_double(k, in.k);
  write_from_double(v, in.v);
  write_from_double(d_o, in.d_o);
  AttentionTensors t{q, k, v, Tensor(), o, lse};
  AttentionGrads g{d_o, dq, dk, dv, Tensor()};
  if (c.sinks) {
    sinks = OwnedTensor({c.heads_q}, DType::f32, cpu, "test.sinks");
    dsinks = OwnedTensor({c.heads_q}, DType::f32, cpu, "test.dsinks");
    write_from_double(sinks, in.sinks);
    t.sinks = sinks;
    g.dsinks = dsinks;
  }
  const AttentionOptions options = options_of(c, AttentionImpl::naive);
  attention_forward(t, options);
  attention_backward(t, g, options);
  Outputs out{read_as_double(o), read_as_double(lse), read_as_double(dq), read_as_double(dk), read_as_double(dv), {}};
  if (c.sinks) out.dsinks = read_as_double(dsinks);
  return out;
}

// The naive computation carried out in the case's dtype: S and the softmax statistics exact, P and dS
// rounded to the dtype before they multiply V, dO, K, Q (as the kernels do), outputs rounded.
Outputs low_precision_attention(const FlashCase& c, const Inputs& in) {
  const std::int64_t B = c.batch, Hq = c.heads_q, Nq = c.len_q, Nk = c.len_k, D = c.head_dim;
  const std::int64_t group = c.heads_q / c.heads_kv;
  const double scale = resolved_scale(c);
  const std::int64_t right = c.causal ? 0 : c.window_right;
  Outputs out;
  out.o.assign(in.q.size(), 0.0);
  out.lse.assign(static_cast<std::size_t>(B * Hq * Nq), -kInf);
  out.dq.assign(in.q.size(), 0.0);
  out.dk.assign(in.k.size(), 0.0);
  out.dv.assign(in.v.size(), 0.0);
  if (c.sinks) out.dsinks.assign(static_cast<std::size_t>(Hq), 0.0);
  std::vector<double> s(static_cast<std::size_t>(Nk)), dsum(static_cast<std::size_t>(Nq));
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < Hq; ++h) {
      const std::int64_t hk = h / group;
      const double* q = in.q.data() + (b * Hq + h) * Nq * D;                  // (Nq, D)
      const double* d_o = in.d_o.data() + (b * Hq + h) * Nq * D;              // (Nq, D)
      const double* k = in.k.data() + (b * c.heads_kv + hk) * Nk * D;         // (Nk, D)
      const double* v = in.v.data() + (b * c.heads_kv + hk) * Nk * D;         // (Nk, D)
      double* o = out.o.data() + (b * Hq + h) * Nq * D;                       // (Nq, D)
      double* dq = out.dq.data() + (b * Hq + h) * Nq * D;                     // (Nq, D)
      double* dk = out.dk.data() + (b * c.heads_kv + hk) * Nk * D;            // (Nk, D)
      double* dv = out.dv.data() + (b * c.heads_kv + hk) * Nk * D;            // (Nk, D)
      const double sink = c.sinks ? in.sinks[h] : -kInf;
      for (std::int64_t i = 0; i < Nq; ++i) {
        const KeyRange range = visible_keys(i, Nq, Nk, c.window_left, right, c.sink_tokens);
        double top = sink;
        for (std::int64_t j = 0; j < Nk; ++j) {
          if (!range.contains(j)) continue;
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += q[i * D + d] * k[j * D + d];
          s[j] = scale * dot;
          top = std::max(top, s[j]);
        }
        if (top == -kInf) continue;  // nothing visible: O = 0, L = -inf, no gradient
        double sum = c.sinks ? std::exp(sink - top) : 0.0;
        for (std::int64_t j = 0; j < Nk; ++j)
          if (range.contains(j)) sum += std::exp(s[j] - top);
        const double lse = top + std::log(sum);
        out.lse[(b * Hq + h) * Nq + i] = static_cast<float>(lse);
        std::vector<double> row(static_cast<std::size_t>(D), 0.0);
        for (std::int64_t j = 0; j < Nk; ++j) {
          if (!range.contains(j)) continue;
          const double p = round_to(c.dtype, std::exp(s[j] - lse));
          for (std::int64_t d = 0; d < D; ++d) row[d] += p * v[j * D + d];
        }
        double dot = 0;
        for (std::int64_t d = 0; d < D; ++d) {
          o[i * D + d] = round_to(c.dtype, row[d]);
          dot += d_o[i * D + d] * o[i * D + d];
        }
        dsum[i] = dot;
        if (c.sinks) out.dsinks[h] -= std::exp(sink - lse) * dot;
        for (std::int64_t j = 0; j < Nk; ++j) {
          if (!range.contains(j)) continue;
          const double p = std::exp(s[j] - lse);
          const double p_low = round_to(c.dtype, p);
          double dp = 0;
          for (std::int64_t d = 0; d < D; ++d) dp += d_o[i * D + d] * v[j * D + d];
          const double ds = round_to(c.dtype, p * (dp - dsum[i]));
          for (std::int64_t d = 0; d < D; ++d) {
            dv[j * D + d] += p_low * d_o[i * D + d];
            dq[i * D + d] += scale * ds * k[j * D + d];
            dk[j * D + d] += scale * ds * q[i * D + d];
          }
        }
      }
    }
  }
  for (auto* grad : {&out.dq, &out.dk, &out.dv})
    for (double& x : *grad) x = round_to(c.dtype, x);
  for (double& x : out.dsinks) x = static_cast<float>(x);
  return out;
}

// A device tensor of logical shape (B, H, N, D) stored in `layout`, rows padded by one element when
// `unaligned`.
struct DeviceTensor {
  OwnedTensor storage;
  Tensor view;
};

DeviceTensor device_tensor(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t D, const FlashCase& c,
                           const Stream& stream, const char* tag) {
  const std::int64_t row = D + (c.unaligned ? 1 : 0);
  DeviceTensor t;
  if (c.layout == Layout::bhnd) {
    t.storage = OwnedTensor({B, H, N, row}, c.dtype, Device::cuda(0), tag, stream);
    t.view = t.storage.tensor();
  } else {
    t.storage = OwnedTensor({B, N, H, row}, c.dtype, Device::cuda(0), tag, stream);
    t.view = t.storage.tensor().permute({0, 2, 1, 3});
  }
  t.view = t.view.narrow(3, 0, D);
  return t;
}

// lse (B, Hq, Nq) fp32; strided in the (B, N, H, D) layout.
DeviceTensor device_lse(const FlashCase& c, const Stream& stream) {
  DeviceTensor t;
  if (c.layout == Layout::bhnd) {
    t.storage = OwnedTensor({c.batch, c.heads_q, c.len_q}, DType::f32, Device::cuda(0), "test.lse", stream);
    t.view = t.storage.tensor();
  } else {
    t.storage = OwnedTensor({c.batch, c.len_q, c.heads_q}, DType::f32, Device::cuda(0), "test.lse", stream);
    t.view = t.storage.tensor().permute({0, 2, 1});
  }
  return t;
}

// The flash kernels on the GPU. The backward runs twice; `repeat` reports which gradients both runs gave
// bit for bit.
Outputs run_flash(const FlashCase& c, const Inputs& in, RunToRun* repeat) {
  const Stream stream = c.own_stream ? Stream::create(Device::cuda(0)) : Stream();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  DeviceTensor q = device_tensor(c.batch, c.heads_q, c.len_q, c.head_dim, c, stream, "test.q");
  DeviceTensor k = device_tensor(c.batch, c.heads_kv, c.len_k, c.head_dim, c, stream, "test.k");
  DeviceTensor v = device_tensor(c.batch, c.heads_kv, c.len_k, c.head_dim, c, stream, "test.v");
  DeviceTensor o = device_tensor(c.batch, c.heads_q, c.len_q, c.head_dim, c, stream, "test.o");
  DeviceTensor d_o = device_tensor(c.batch, c.heads_q, c.len_q, c.head_dim, c, stream, "test.d_o");
  DeviceTensor dq = device_tensor(c.batch, c.heads_q, c.len_q, c.head_dim, c, stream, "test.dq");
  DeviceTensor dk = device_tensor(c.batch, c.heads_kv, c.len_k, c.head_dim, c, stream, "test.dk");
  DeviceTensor dv = device_tensor(c.batch, c.heads_kv, c.len_k, c.head_dim, c, stream, "test.dv");
  DeviceTensor lse = device_lse(c, stream);
  stream.synchronize();
  write_from_double(q.view, in.q);
  write_from_double(k.view, in.k);
  write_from_double(v.view, in.v);
  write_from_double(d_o.view, in.d_o);
  AttentionTensors t{q.view, k.view, v.view, Tensor(), o.view, lse.view};
  AttentionGrads g{d_o.view, dq.view, dk.view, dv.view, Tensor()};
  OwnedTensor sinks, dsinks;
  if (c.sinks) {
    sinks = OwnedTensor({c.heads_q}, DType::f32, Device::cuda(0), "test.sinks", stream);
    dsinks = OwnedTensor({c.heads_q}, DType::f32, Device::cuda(0), "test.dsinks", stream);
    stream.synchronize();
    write_from_double(sinks, in.sinks);
    t.sinks = sinks;
    g.dsinks = dsinks;
  }
  AttentionOptions options = options_of(c, AttentionImpl::flash);
  options.stream = stream;

  fill_constant(o.view, nan);
  fill_constant(lse.view, nan);
  attention_forward(t, options);
  stream.synchronize();
  Outputs out{read_as_double(o.view), read_as_double(lse.view), {}, {}, {}, {}};

  Outputs runs[2];
  for (Outputs& run : runs) {
    for (const Tensor* grad : {&dq.view, &dk.view, &dv.view}) fill_constant(*grad, nan);
    if (c.sinks) fill_constant(dsinks, nan);
    attention_backward(t, g, options);
    stream.synchronize();
    run.dq = read_as_double(dq.view);
    run.dk = read_as_double(dk.view);
    run.dv = read_as_double(dv.view);
    if (c.sinks) run.dsinks = read_as_double(dsinks);
  }
  keep_first_backward(runs, repeat, out);
  return out;
}

// Element-wise |got - ref| <= atol + rtol |ref|; returns the number of violations (NaN counts).
std::size_t count_outside(const std::vector<double>& got, const std::vector<double>& ref, double atol, double rtol) {
  if (got.size() != ref.size()) return std::max<std::size_t>(1, ref.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == ref[i]) continue;
    if (!(std::abs(got[i] - ref[i]) <= atol + rtol * std::abs(ref[i]))) ++bad;
  }
  return bad;
}

// d s_h = -sum_{b,i} exp(s_h - L_i) dO_i . O_i recomputed in double from the flash outputs O and L;
// spread[h] = sum_{b,i} exp(s_h - L_i) |dO_i| |O_i| bounds how rounding O moves it.
std::vector<double> sink_gradient_of(const FlashCase& c, const Inputs& in, const Outputs& got,
                                     std::vector<double>* spread) {
  std::vector<double> expected(static_cast<std::size_t>(c.heads_q), 0.0);
  spread->assign(expected.size(), 0.0);
  const std::int64_t D = c.head_dim;
  for (std::int64_t b = 0; b < c.batch; ++b) {
    for (std::int64_t h = 0; h < c.heads_q; ++h) {
      for (std::int64_t i = 0; i < c.len_q; ++i) {
        const std::int64_t row = (b * c.heads_q + h) * c.len_q + i;
        double dot = 0, norm_o = 0, norm_do = 0;
        for (std::int64_t d = 0; d < D; ++d) {
          dot += in.d_o[row * D + d] * got.o[row * D + d];
          norm_o += got.o[row * D + d] * got.o[row * D + d];
          norm_do += in.d_o[row * D + d] * in.d_o[row * D + d];
        }
        const double weight = std::exp(in.sinks[h] - got.lse[row]);
        expected[h] -= weight * dot;
        (*spread)[h] += weight * std::sqrt(norm_o * norm_do);
      }
    }
  }
  return expected;
}

class FlashVsNaive : public ::testing::TestWithParam<FlashCase> {};

TEST_P(FlashVsNaive, ForwardAndBackward) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const FlashCase& c = GetParam();
  const Inputs in = make_inputs(c, 1234 + std::hash<std::string>{}(c.name) % 1000);
  const Outputs ref = run_reference(c, in);
  RunToRun repeat;
  const Outputs got = run_flash(c, in, &repeat);
  EXPECT_TRUE(repeat.rest_identical) << "two backward runs gave different dK, dV or dsinks";
  if (c.deterministic) EXPECT_TRUE(repeat.dq_identical) << "two deterministic backward runs gave different dQ";

  const std::pair<const char*, std::pair<const std::vector<double>*, const std::vector<double>*>> fields[] = {
      {"o", {&got.o, &ref.o}},    {"dq", {&got.dq, &ref.dq}}, {"dk", {&got.dk, &ref.dk}},
      {"dv", {&got.dv, &ref.dv}}, {"dsinks", {&got.dsinks, &ref.dsinks}}};
  // lse is fp32 for every dtype: the scores of 16-bit inputs are exact products summed in fp32.
  const double lse_tol = c.dtype == DType::f32 ? 1e-2 : 2e-3;
  EXPECT_EQ(count_outside(got.lse, ref.lse, lse_tol, lse_tol), 0u)
      << "lse: max |flash - ref| = " << max_abs_diff(got.lse, ref.lse);

  // The sink gradient must be exactly the row sum the contract defines, over the flash O and L.
  std::vector<double> spread;
  if (c.sinks) {
    const std::vector<double> expected = sink_gradient_of(c, in, got, &spread);
    for (std::int64_t h = 0; h < c.heads_q; ++h)
      EXPECT_NEAR(got.dsinks[h], expected[h], 1e-5 * (1 + spread[h])) << "dsinks[" << h << "] vs its own O, lse";
  }

  if (c.dtype == DType::f32) {
    for (const auto& [name, pair] : fields) {
      EXPECT_EQ(count_outside(*pair.first, *pair.second, 1e-2, 1e-2), 0u)
          << name << ": max |flash - ref| = " << max_abs_diff(*pair.first, *pair.second);
    }
    return;
  }
  const Outputs low = low_precision_attention(c, in);
  const std::vector<double>* low_of[] = {&low.o, &low.dq, &low.dk, &low.dv};
  // Slack: half a unit in the last place of the dtype at the largest reference magnitude, plus 1e-4
  // for gradients that vanish exactly in the reference (fp32 noise of a cancellation).
  const double ulp = c.dtype == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
  for (int f = 0; f < 4; ++f) {
    const auto& [name, pair] = fields[f];
    const double err = max_abs_diff(*pair.first, *pair.second);
    const double base = max_abs_diff(*low_of[f], *pair.second);
    const double slack = 0.5 * ulp * max_abs(*pair.second) + 1e-4;
    std::cout << "  " << c.name << " " << name << ": flash err " << err << ", low-precision naive err " << base
              << " (ratio " << (base > 0 ? err / base : 0) << ")\n";
    EXPECT_LE(err, 2 * base + slack) << name << ": flash error vs the low-precision naive error";
  }
  if (c.sinks) {
    for (std::int64_t h = 0; h < c.heads_q; ++h)
      EXPECT_NEAR(got.dsinks[h], ref.dsinks[h], 2 * std::abs(low.dsinks[h] - ref.dsinks[h]) + ulp * spread[h])
          << "dsinks[" << h << "] vs the reference";
  }
}

std::vector<FlashCase> variant_cases() {
  // The variants at d = 64, each for bf16, fp16 and fp32.
  const std::vector<FlashCase> base = {
      {.name = "full_128", .batch = 2, .heads_q = 2, .heads_kv = 2, .len_q = 128, .len_k = 128},
      {.name = "causal_300", .batch = 2, .heads_q = 2, .heads_kv = 2, .len_q = 300, .len_k = 300, .causal = true},
      {.name = "causal_q17_k300", .heads_q = 2, .heads_kv = 2, .len_q = 17, .len_k = 300, .causal = true},
      {.name = "causal_q300_k17_empty_rows", .heads_q = 2, .heads_kv = 2, .len_q = 300, .len_k = 17,
       .causal = true},
      {.name = "full_q127_k1", .heads_q = 2, .heads_kv = 2, .len_q = 127, .len_k = 1},
      {.name = "one_by_one_causal", .heads_q = 2, .heads_kv = 2, .len_q = 1, .len_k = 1, .causal = true},
      {.name = "sliding_64_causal", .heads_q = 2, .heads_kv = 2, .len_q = 300, .len_k = 300, .causal = true,
       .window_left = 64},
      {.name = "window_32_16_q127_k200", .heads_q = 2, .heads_kv = 2, .len_q = 127, .len_k = 200,
       .window_left = 32, .window_right = 16},
      {.name = "window_right_20_scale", .heads_q = 2, .heads_kv = 2, .len_q = 150, .len_k = 150,
       .window_right = 20, .scale = 0.3},
      {.name = "negative_scale_causal_sinks_gqa2", .heads_q = 4, .heads_kv = 2, .len_q = 130, .len_k = 150,
       .causal = true, .sinks = true, .scale = -0.3},
      {.name = "diagonal_only", .heads_q = 2, .heads_kv = 2, .len_q = 100, .len_k = 100, .window_left = 0,
       .window_right = 0},
      {.name = "window_empty_rows_q200_k90", .heads_q = 2, .heads_kv = 2, .len_q = 200, .len_k = 90,
       .window_left = 8, .window_right = 0},
      {.name = "sink_tokens_4_sliding_48", .heads_q = 2, .heads_kv = 2, .len_q = 300, .len_k = 300,
       .causal = true, .window_left = 48, .sink_tokens = 4},
      {.name = "sink_tokens_70_sliding_20_q90_k257", .heads_q = 2, .heads_kv = 2, .len_q = 90, .len_k = 257,
       .causal = true, .window_left = 20, .sink_tokens = 70},
      {.name = "sink_tokens_5_causal", .heads_q = 2, .heads_kv = 2, .len_q = 257, .len_k = 257, .causal = true,
       .sink_tokens = 5},
      {.name = "sink_logits_1x1", .heads_q = 3, .heads_kv = 3, .len_q = 1, .len_k = 1, .sinks = true},
      {.name = "sink_logits_causal_gqa4", .heads_q = 8, .heads_kv = 2, .len_q = 200, .len_k = 200, .causal = true,
       .sinks = true},
      {.name = "sink_logits_empty_rows", .heads_q = 2, .heads_kv = 1, .len_q = 120, .len_k = 40, .causal = true,
       .sinks = true},
      {.name = "gqa8_causal", .heads_q = 8, .heads_kv = 1, .len_q = 300, .len_k = 300, .causal = true},
      {.name = "gqa4_full_q65_k130", .heads_q = 4, .heads_kv = 1, .len_q = 65, .len_k = 130},
      {.name = "everything_bnhd", .batch = 2, .heads_q = 4, .heads_kv = 1, .len_q = 129, .len_k = 333,
       .window_left = 40, .window_right = 8, .sink_tokens = 3, .sinks = true, .layout = Layout::bnhd},
      {.name = "causal_bnhd", .batch = 2, .heads_q = 2, .heads_kv = 2, .len_q = 300, .len_k = 300, .causal = true,
       .layout = Layout::bnhd},
      {.name = "unaligned_causal_gqa2", .heads_q = 4, .heads_kv = 2, .len_q = 100, .len_k = 111, .causal = true,
       .unaligned = true},
      {.name = "unaligned_bnhd_window", .heads_q = 2, .heads_kv = 2, .len_q = 77, .len_k = 77, .window_left = 10,
       .window_right = 10, .layout = Layout::bnhd, .unaligned = true},
      {.name = "own_stream_causal", .heads_q = 2, .heads_kv = 2, .len_q = 200, .len_k = 200, .causal = true,
       .own_stream = true},
      {.name = "causal_sinks_gqa4_1100", .heads_q = 4, .heads_kv = 1, .len_q = 1100, .len_k = 1100, .causal = true,
       .sinks = true},
      {.name = "full_q700_k900", .batch = 2, .heads_q = 2, .heads_kv = 2, .len_q = 700, .len_k = 900},
  };
  std::vector<FlashCase> cases;
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    for (FlashCase c : base) {
      c.dtype = dtype;
      c.name = std::string(name_of(dtype)) + "_d64_" + c.name;
      cases.push_back(c);
    }
  }
  return cases;
}

std::vector<FlashCase> head_dim_cases() {
  std::vector<FlashCase> cases;
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    for (std::int64_t d : {16, 32, 64, 80, 96, 128, 256}) {
      const std::string prefix = std::string(name_of(dtype)) + "_d" + std::to_string(d) + "_";
      cases.push_back({.name = prefix + "causal_sinks_gqa2", .dtype = dtype, .batch = 2, .heads_q = 4,
                       .heads_kv = 2, .len_q = 200, .len_k = 200, .head_dim = d, .causal = true, .sinks = true});
      cases.push_back({.name = prefix + "window_sink_tokens_bnhd_q130_k257", .dtype = dtype, .heads_q = 2,
                       .heads_kv = 2, .len_q = 130, .len_k = 257, .head_dim = d, .window_left = 50,
                       .window_right = 30, .sink_tokens = 6, .layout = Layout::bnhd});
      cases.push_back({.name = prefix + "full_q31_k300", .dtype = dtype, .heads_q = 2, .heads_kv = 1, .len_q = 31,
                       .len_k = 300, .head_dim = d});
    }
    // A negative scale at d=256, whose Hopper forward negates Q in shared memory before S = Q K^T: -1/16, the
    // default's magnitude. At 0.3 (the d=64 case's) the scores spread over ~5 (0.3 x 16) and the gradients
    // reach ~20, so the TF32 rounding of fp32 inputs alone (10 mantissa bits, exact otherwise) puts dK a few
    // elements past the fixed 1e-2 + 1e-2 |ref| bound, with either sign; at 1/16 it stays 10x below it.
    cases.push_back({.name = std::string(name_of(dtype)) + "_d256_negative_scale_causal_q150_k170", .dtype = dtype,
                     .heads_q = 2, .heads_kv = 1, .len_q = 150, .len_k = 170, .head_dim = 256, .causal = true,
                     .scale = -1.0 / 16});
    cases.push_back({.name = std::string(name_of(dtype)) + "_d128_causal_long_1031", .dtype = dtype, .heads_q = 2,
                     .heads_kv = 1, .len_q = 1031, .len_k = 1031, .head_dim = 128, .causal = true});
  }
  return cases;
}

// Key tiles seen by more than 32 query tiles of 64 rows, so that the Hopper backward's search for the
// query tiles that need no mask (full_query_tiles in flash_mask.cuh) narrows its range: a window with a key
// tile of sink tokens (whose unmasked tiles run to the last one), and a causal diagonal moved by
// len_k - len_q. bf16 at d=128 and d=256 (the Hopper backward's two kernels: 128 and 64 keys a block), on
// the default kernels only: the CPU reference takes seconds here.
std::vector<FlashCase> long_span_cases() {
  std::vector<FlashCase> cases;
  for (std::int64_t d : {128, 256}) {
    const std::string prefix = "bf16_d" + std::to_string(d) + "_";
    cases.push_back({.name = prefix + "window_600_sink_tokens_130_q2112", .len_q = 2112, .len_k = 2112,
                     .head_dim = d, .causal = true, .window_left = 600, .sink_tokens = 130});
    cases.push_back({.name = prefix + "causal_q2112_k2400", .len_q = 2112, .len_k = 2400, .head_dim = d,
                     .causal = true});
  }
  return cases;
}

// The variant cases, then the head-dim cases.
std::vector<FlashCase> variant_and_head_dim_cases() {
  std::vector<FlashCase> cases = variant_cases();
  for (const FlashCase& c : head_dim_cases()) cases.push_back(c);
  return cases;
}

// The variant and head-dim cases on the portable sm80 kernels: with the default (auto) choice a Hopper GPU
// runs the sm90 kernels for bf16/fp16 at d = 64, 80, 96, 128 and 256, so these keep the sm80 ones tested
// there too.
std::vector<FlashCase> sm80_cases() {
  std::vector<FlashCase> cases = variant_and_head_dim_cases();
  for (FlashCase& c : cases) {
    c.kernels = FlashKernels::sm80;
    c.name += "_sm80";
  }
  return cases;
}

// The variant and head-dim cases with the atomic dQ accumulation (deterministic = false), on the default
// choice (the sm90 kernels where they run) and forced to sm80.
std::vector<FlashCase> atomic_cases() {
  std::vector<FlashCase> cases = variant_and_head_dim_cases();
  for (const FlashCase& c : sm80_cases()) cases.push_back(c);
  for (FlashCase& c : cases) {
    c.deterministic = false;
    c.name += "_atomic";
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<FlashCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Variants, FlashVsNaive, ::testing::ValuesIn(variant_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(HeadDims, FlashVsNaive, ::testing::ValuesIn(head_dim_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Sm80, FlashVsNaive, ::testing::ValuesIn(sm80_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(AtomicDq, FlashVsNaive, ::testing::ValuesIn(atomic_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(LongSpans, FlashVsNaive, ::testing::ValuesIn(long_span_cases()), case_name);

// True on a GPU of compute capability 9.0 (H100, H200), read from the device description.
bool hopper_gpu() { return describe_device(Device::cuda(0)).find("sm_90") != std::string::npos; }

// An aligned (1, 2, 64, d) case's tensors and options, for the kernel-choice tests.
struct ChoiceCase {
  FlashCase c;
  Stream stream;
  DeviceTensor q, k, v, o, lse;
  explicit ChoiceCase(FlashCase fc)
      : c(std::move(fc)),
        q(device_tensor(1, 2, 64, c.head_dim, c, stream, "test.q")),
        k(device_tensor(1, 2, 64, c.head_dim, c, stream, "test.k")),
        v(device_tensor(1, 2, 64, c.head_dim, c, stream, "test.v")),
        o(device_tensor(1, 2, 64, c.head_dim, c, stream, "test.o")),
        lse(device_lse(c, stream)) {}
  AttentionTensors tensors() const { return {q.view, k.view, v.view, Tensor(), o.view, lse.view}; }
};

TEST(FlashAttention, AutoPicksHopperKernelsWhereTheyRun) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const bool hopper = hopper_gpu();
  const FlashKernels expected = hopper ? FlashKernels::sm90 : FlashKernels::sm80;
  for (std::int64_t d : {64, 80, 96, 128, 256}) {
    ChoiceCase bf16({.name = "bf16", .dtype = DType::bf16, .heads_q = 2, .heads_kv = 2, .len_q = 64, .len_k = 64,
                     .head_dim = d});
    EXPECT_EQ(flash_kernels_for(bf16.tensors(), options_of(bf16.c, AttentionImpl::flash)), expected) << "d=" << d;
  }
  ChoiceCase f32({.name = "f32", .dtype = DType::f32, .heads_q = 2, .heads_kv = 2, .len_q = 64, .len_k = 64});
  EXPECT_EQ(flash_kernels_for(f32.tensors(), options_of(f32.c, AttentionImpl::flash)), FlashKernels::sm80);
  ChoiceCase d32({.name = "d32", .dtype = DType::bf16, .heads_q = 2, .heads_kv = 2, .len_q = 64, .len_k = 64,
                  .head_dim = 32});
  EXPECT_EQ(flash_kernels_for(d32.tensors(), options_of(d32.c, AttentionImpl::flash)), FlashKernels::sm80);
  ChoiceCase forced({.name = "sm80", .dtype = DType::bf16, .heads_q = 2, .heads_kv = 2, .len_q = 64, .len_k = 64,
                     .kernels = FlashKernels::sm80});
  EXPECT_EQ(flash_kernels_for(forced.tensors(), options_of(forced.c, AttentionImpl::flash)), FlashKernels::sm80);
}

TEST(FlashAttention, Sm90KernelsRefuseWhatTheyCannotRun) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // fp32 (or any case off a Hopper GPU): an unsupported error naming what sm90 needs.
  ChoiceCase f32({.name = "f32", .dtype = DType::f32, .heads_q = 2, .heads_kv = 2, .len_q = 64, .len_k = 64,
                  .kernels = FlashKernels::sm90});
  try {
    attention_forward(f32.tensors(), options_of(f32.c, AttentionImpl::flash));
    FAIL() << "kernels sm90 accepted fp32";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(e.message().find(hopper_gpu() ? "fp32" : "compute capability 9.0"), std::string::npos) << e.message();
  }
}

// K and V broadcast over the query heads (head stride 0): the Hopper kernels' TMA maps cannot describe
// them, so auto runs the sm80 kernels (the same output, bit for bit, as grouped-query attention reading
// the one stored head) and a forced sm90 is refused by name.
TEST(FlashAttention, BroadcastOperandsRunOnSm80) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  ChoiceCase c({.name = "broadcast", .dtype = DType::bf16, .heads_q = 2, .heads_kv = 2, .len_q = 64, .len_k = 64});
  std::mt19937_64 rng(7);
  for (const Tensor* x : {&c.q.view, &c.k.view, &c.v.view})
    write_from_double(*x, random_values(static_cast<std::size_t>(x->numel()), rng, c.c.dtype, 1.0));
  const Tensor& k = c.k.view;
  const Tensor& v = c.v.view;
  const Tensor k_bcast(k.data(), k.dtype(), k.device(), {1, 2, 64, 64}, {k.stride(0), 0, k.stride(2), 1});
  const Tensor v_bcast(v.data(), v.dtype(), v.device(), {1, 2, 64, 64}, {v.stride(0), 0, v.stride(2), 1});
  const Tensor k_one = k.narrow(1, 0, 1), v_one = v.narrow(1, 0, 1);

  AttentionOptions options = options_of(c.c, AttentionImpl::flash);
  const AttentionTensors bcast{c.q.view, k_bcast, v_bcast, Tensor(), c.o.view, c.lse.view};
  EXPECT_EQ(flash_kernels_for(bcast, options), FlashKernels::sm80);
  attention_forward(bcast, options);
  const std::vector<double> o_bcast = read_as_double(c.o.view);
  options.kernels = FlashKernels::sm80;
  attention_forward({c.q.view, k_one, v_one, Tensor(), c.o.view, c.lse.view}, options);
  EXPECT_TRUE(same_bits(o_bcast, read_as_double(c.o.view)));

  if (!hopper_gpu()) return;
  options.kernels = FlashKernels::sm90;
  try {
    attention_forward(bcast, options);
    FAIL() << "kernels sm90 accepted broadcast K and V";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(e.message().find("broadcast"), std::string::npos) << e.message();
  }
}

// The Hopper kernels launch their heads in L2-sized sections (flash_sm90_scheduler.cuh), which hold every head at
// these sizes; forced sections of 1, 2, 3 and 5 grid heads (a partial last section, sections across batches
// and across a GQA group) give the same outputs bit for bit — dQ too in the deterministic mode.
TEST(FlashAttention, HopperHeadSectionsGiveTheSameOutputs) {
  if (!cuda_available() || !hopper_gpu()) GTEST_SKIP() << "needs a Hopper GPU";
  for (std::int64_t d : {64, 96, 128, 256})
    for (bool deterministic : {true, false}) {
      const FlashCase c{.name = "sections", .batch = 3, .heads_q = 4, .heads_kv = 2, .len_q = 300, .len_k = 300,
                        .head_dim = d, .causal = true, .sinks = true, .deterministic = deterministic};
      SCOPED_TRACE(str("d ", d, deterministic ? " deterministic" : " atomic dQ"));
      const Inputs in = make_inputs(c, 5);
      RunToRun repeat;
      const Outputs whole = run_flash(c, in, &repeat);
      for (int heads : {1, 2, 3, 5}) {
        SCOPED_TRACE(str("sections of ", heads));
        const ForcedFlashHook forced(attention_impl::force_flash_section_heads, heads, 0);
        const Outputs sectioned = run_flash(c, in, &repeat);
        EXPECT_TRUE(same_bits(whole.o, sectioned.o));
        EXPECT_TRUE(same_bits(whole.lse, sectioned.lse));
        if (deterministic) EXPECT_TRUE(same_bits(whole.dq, sectioned.dq));
        EXPECT_TRUE(same_bits(whole.dk, sectioned.dk));
        EXPECT_TRUE(same_bits(whole.dv, sectioned.dv));
        EXPECT_TRUE(same_bits(whole.dsinks, sectioned.dsinks));
      }
    }
}

// The Hopper forward is persistent: one block per SM takes query tiles until none are left, its K/V ring,
// the Q buffer and the consumers' turns running on from tile to tile. These sizes have fewer tiles than
// SMs, so forced to 1, 2 or 3 blocks every block takes many tiles — of masks that visit different key
// tiles, none at all (rows that see no key), a negative scale (Q's sign flipped per tile), grouped-query
// heads, partial launch sections — and O and L come out the same bit for bit.
TEST(FlashAttention, HopperPersistentForwardGivesTheSameOutputs) {
  if (!cuda_available() || !hopper_gpu()) GTEST_SKIP() << "needs a Hopper GPU";
  const std::vector<FlashCase> cases = {
      {.name = "negative_scale_causal_sinks_gqa2", .batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = 330,
       .len_k = 350, .causal = true, .sinks = true, .scale = -0.3},
      {.name = "causal_q300_k17_empty_rows", .heads_q = 3, .heads_kv = 3, .len_q = 300, .len_k = 17,
       .causal = true},
      {.name = "sink_tokens_70_sliding_20_q400_k457", .heads_q = 2, .heads_kv = 1, .len_q = 400, .len_k = 457,
       .causal = true, .window_left = 20, .sink_tokens = 70, .sinks = true},
      {.name = "window_bnhd_q777_k600", .batch = 2, .heads_q = 2, .heads_kv = 2, .len_q = 777, .len_k = 600,
       .window_left = 200, .window_right = 30, .layout = Layout::bnhd},
  };
  for (std::int64_t d : {64, 80, 96, 128, 256})
    for (FlashCase c : cases) {
      c.head_dim = d;
      SCOPED_TRACE(str(c.name, " d ", d));
      const Inputs in = make_inputs(c, 11);
      RunToRun repeat;
      const Outputs whole = run_flash(c, in, &repeat);
      for (int blocks : {1, 2, 3})
        for (int heads : {0, 3}) {
          SCOPED_TRACE(str(blocks, " blocks, sections of ", heads, " heads (0: the L2-sized ones)"));
          const ForcedFlashHook forced_blocks(attention_impl::force_flash_forward_blocks, blocks, 0);
          const ForcedFlashHook forced_heads(attention_impl::force_flash_section_heads, heads, 0);
          const Outputs got = run_flash(c, in, &repeat);
          EXPECT_TRUE(same_bits(whole.o, got.o));
          EXPECT_TRUE(same_bits(whole.lse, got.lse));
        }
    }
}

// The deterministic Hopper backward adds the dQ pieces of its last grid heads first key tile first and
// those of the others last key tile first (ascending_heads_for in flash_sm90_scheduler.cuh: none at these sizes).
// Forced to take either order, and with query rows that see no key, each gives the gradients of the
// all-descending run up to the order of its fp32 sums (within a unit in the last place of bf16 at the
// largest magnitude), O and dsinks bit for bit, and the same bits from run to run. Groups of 2 and 4 query
// heads a kv head, each query head with its own counters.
TEST(FlashAttention, HopperAscendingHeadsGiveTheSameGradients) {
  if (!cuda_available() || !hopper_gpu()) GTEST_SKIP() << "needs a Hopper GPU";
  const FlashCase cases[] = {
      {.name = "ascending_gqa2", .batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = 300, .len_k = 170,
       .causal = true, .sinks = true},
      {.name = "ascending_gqa4", .heads_q = 8, .heads_kv = 2, .len_q = 700, .len_k = 700, .causal = true},
  };
  for (std::int64_t d : {64, 96, 128, 256})
    for (FlashCase c : cases) {
      c.head_dim = d;
      SCOPED_TRACE(str(c.name, " d ", d));
      const Inputs in = make_inputs(c, 7);
      Outputs descending;
      {
        const ForcedFlashHook forced(attention_impl::force_flash_ascending_heads, 0, -1);
        RunToRun repeat;
        descending = run_flash(c, in, &repeat);
        EXPECT_TRUE(repeat.dq_identical && repeat.rest_identical);
      }
      for (int heads : {1, 3, 4}) {
        SCOPED_TRACE(str(heads, " ascending heads"));
        const ForcedFlashHook forced(attention_impl::force_flash_ascending_heads, heads, -1);
        RunToRun repeat;
        const Outputs got = run_flash(c, in, &repeat);
        EXPECT_TRUE(repeat.dq_identical && repeat.rest_identical);
        EXPECT_TRUE(same_bits(descending.o, got.o));
        EXPECT_TRUE(same_bits(descending.dsinks, got.dsinks));
        const std::pair<const char*, std::pair<const std::vector<double>*, const std::vector<double>*>> grads[] = {
            {"dq", {&got.dq, &descending.dq}}, {"dk", {&got.dk, &descending.dk}}, {"dv", {&got.dv, &descending.dv}}};
        for (const auto& [name, pair] : grads)
          EXPECT_LE(max_abs_diff(*pair.first, *pair.second), max_abs(*pair.second) / 128) << name;
      }
    }
}

// Before each addition the deterministic Hopper backward counts the key tiles that add into the step's query
// tile ahead of its own (key_tiles_before in flash_sm90_scheduler.cuh): without a left window bound by a
// search over the prefix of key tiles that visit it (at d=128 and 256 moving the prefix's end from the
// writer's step before, key_tiles_before_walked), else by a scan. These heads have 36 key tiles (71 at
// d=256, whose blocks take 64 keys), so the search narrows ranges of more than 32 tiles and the walk moves
// over many, in the descending order and, with every head forced to it, the ascending one (grouped heads
// tile by tile). A wrong count hangs the kernel, loses pieces or adds them out of turn: each run gives the
// atomic run's gradients up to the order of the fp32 sums (the steps' order differs too with ascending heads
// and groups) and the same bits from run to run.
TEST(FlashAttention, HopperOrderedDqOverManyKeyTilesMatchesAtomic) {
  if (!cuda_available() || !hopper_gpu()) GTEST_SKIP() << "needs a Hopper GPU";
  const FlashCase cases[] = {
      {.name = "causal_gqa2", .heads_q = 4, .heads_kv = 2, .len_q = 4500, .len_k = 4500, .causal = true},
      {.name = "causal_q3000_k4500", .heads_q = 2, .heads_kv = 2, .len_q = 3000, .len_k = 4500, .causal = true},
      {.name = "full_q3000_k4500", .heads_q = 2, .heads_kv = 1, .len_q = 3000, .len_k = 4500},
      {.name = "window_1000_sink_tokens_200", .heads_q = 2, .heads_kv = 2, .len_q = 4500, .len_k = 4500,
       .causal = true, .window_left = 1000, .sink_tokens = 200},
  };
  for (std::int64_t d : {64, 128, 256})
    for (FlashCase c : cases) {
      c.head_dim = d;
      SCOPED_TRACE(str(c.name, " d ", d));
      const Inputs in = make_inputs(c, 13);
      FlashCase atomic_case = c;
      atomic_case.deterministic = false;
      RunToRun atomic_repeat;
      const Outputs atomic = run_flash(atomic_case, in, &atomic_repeat);
      for (int ascending : {0, 64}) {
        SCOPED_TRACE(str(ascending, " ascending heads (at most every grid head)"));
        const ForcedFlashHook forced(attention_impl::force_flash_ascending_heads, ascending, -1);
        RunToRun repeat;
        const Outputs got = run_flash(c, in, &repeat);
        EXPECT_TRUE(repeat.dq_identical && repeat.rest_identical);
        const std::pair<const char*, std::pair<const std::vector<double>*, const std::vector<double>*>> grads[] = {
            {"dq", {&got.dq, &atomic.dq}}, {"dk", {&got.dk, &atomic.dk}}, {"dv", {&got.dv, &atomic.dv}}};
        for (const auto& [name, pair] : grads)
          EXPECT_LE(max_abs_diff(*pair.first, *pair.second), max_abs(*pair.second) / 128) << name;
      }
    }
}

TEST(FlashAttention, UnsupportedHeadDimNamesTheSupportedSet) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const FlashCase c{.name = "d48", .dtype = DType::bf16, .len_q = 8, .len_k = 8, .head_dim = 48};
  const Stream stream;
  DeviceTensor q = device_tensor(1, 1, 8, 48, c, stream, "test.q");
  DeviceTensor k = device_tensor(1, 1, 8, 48, c, stream, "test.k");
  DeviceTensor v = device_tensor(1, 1, 8, 48, c, stream, "test.v");
  DeviceTensor o = device_tensor(1, 1, 8, 48, c, stream, "test.o");
  DeviceTensor lse = device_lse(c, stream);
  try {
    attention_forward({q.view, k.view, v.view, Tensor(), o.view, lse.view}, options_of(c, AttentionImpl::flash));
    FAIL() << "head dim 48 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(e.message().find("48"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("16, 32, 64, 80, 96, 128, 256"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace ft
