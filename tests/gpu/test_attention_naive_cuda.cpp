// test_attention_naive_cuda.cpp — the naive CUDA attention baseline (cuBLASLt GEMMs, S and P
// materialised) against the CPU double-precision oracle on the same values: causal, windows, sink
// tokens, sink logits, GQA/MQA, Nq != Nk (including rows that see nothing), both memory layouts, odd
// head dims, custom scale, for fp32, bf16 and fp16; determinism; out-of-memory reported as ft::Error.
// Run on a GPU machine: ./build/bin/gpu_test_attention_naive_cuda
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/attention_problem.h"
#include "common/expect_close.h"
#include "core/allocator.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "ops/attention.h"

namespace ft {
namespace {

using testing_util::expect_close;

struct Case {
  bool bnhd = false;  // memory layout (B, N, H, D) instead of (B, H, N, D)
  std::int64_t B = 1, Hq = 1, Hkv = 1, Nq = 1, Nk = 1, D = 16;
  bool causal = false;
  std::int64_t left = -1, right = -1, sink_tokens = 0;
  bool sinks = false;
  std::optional<double> scale;
};

std::string case_name(const Case& c, DType dtype) {
  auto window = [](std::int64_t w) { return w < 0 ? std::string("u") : std::to_string(w); };
  return str(name_of(dtype), c.bnhd ? "_bnhd" : "_bhnd", "_B", c.B, "_H", c.Hq, "x", c.Hkv, "_N", c.Nq, "x", c.Nk,
             "_D", c.D, c.causal ? "_causal" : "", "_w", window(c.left), "_", window(c.right), "_st", c.sink_tokens,
             c.sinks ? "_sinks" : "", c.scale ? "_scaled" : "");
}

using Problem = testing_util::AttentionProblem;

// Outputs start as NaN so that anything left unwritten fails the comparison.
void poison_outputs(const Problem& p) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Tensor& t : {p.o.view, p.lse.tensor(), p.dq.view, p.dk.view, p.dv.view}) fill_constant(t, nan);
  if (p.dsinks.defined()) fill_constant(p.dsinks, nan);
}

AttentionOptions options_of(const Case& c, AttentionImpl impl, const Stream& stream = {}) {
  AttentionOptions opt;
  opt.causal = c.causal;
  opt.window_left = c.left;
  opt.window_right = c.right;
  opt.sink_tokens = c.sink_tokens;
  opt.scale = c.scale;
  opt.impl = impl;
  opt.stream = stream;
  return opt;
}

struct Tolerance {
  double o, lse, grad;
};
// P (and dS) are rounded to the input dtype before their GEMMs, as a standard 16-bit attention does.
Tolerance tolerance_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return {1e-5, 2e-6, 2e-5};
    case DType::f16: return {2e-3, 2e-6, 4e-3};
    case DType::bf16: return {1e-2, 2e-6, 3e-2};
  }
  return {};
}

// Inputs drawn on a CPU problem of `dtype` and copied to the GPU problem (same layout, same values).
void fill_inputs(const Problem& cpu, const Problem& gpu, bool sinks) {
  fill_normal(cpu.q.view, 1);
  fill_normal(cpu.k.view, 2);
  fill_normal(cpu.v.view, 3);
  fill_normal(cpu.d_o.view, 4);
  if (sinks) fill_normal(cpu.sinks, 5, 0.5, 1.5);
  copy(gpu.q.view, cpu.q.view);
  copy(gpu.k.view, cpu.k.view);
  copy(gpu.v.view, cpu.v.view);
  copy(gpu.d_o.view, cpu.d_o.view);
  if (sinks) copy(gpu.sinks, cpu.sinks);
}

// The CUDA naive forward and backward on c, and the oracle on fp32 (B, H, N, D) copies of the same
// values; the oracle's backward starts from the CUDA O and L so that each pass is checked on its own.
void run_case(const Case& c, DType dtype) {
  SCOPED_TRACE(case_name(c, dtype));
  const Stream stream = Stream::create(Device::cuda(0));
  Problem host(c, dtype, c.bnhd, Device::cpu());
  Problem gpu(c, dtype, c.bnhd, Device::cuda(0));
  fill_inputs(host, gpu, c.sinks);
  poison_outputs(gpu);
  attention_forward(gpu.tensors(), options_of(c, AttentionImpl::naive, stream));
  attention_backward(gpu.tensors(), gpu.grads(), options_of(c, AttentionImpl::naive, stream));
  stream.synchronize();

  Problem oracle(c, DType::f32, false, Device::cpu());
  for (auto [dst, src] : {std::pair{&oracle.q, &host.q}, {&oracle.k, &host.k}, {&oracle.v, &host.v},
                          {&oracle.d_o, &host.d_o}})
    write_from_double(dst->view, read_as_double(src->view));
  if (c.sinks) copy(oracle.sinks, host.sinks);
  attention_forward(oracle.tensors(), options_of(c, AttentionImpl::naive));

  const Tolerance tol = tolerance_of(dtype);
  expect_close(read_as_double(gpu.o.view), read_as_double(oracle.o.view), tol.o, "O");
  expect_close(read_as_double(gpu.lse), read_as_double(oracle.lse), tol.lse, "L");

  write_from_double(oracle.o.view, read_as_double(gpu.o.view));
  copy(oracle.lse, gpu.lse);
  attention_backward(oracle.tensors(), oracle.grads(), options_of(c, AttentionImpl::naive));
  expect_close(read_as_double(gpu.dq.view), read_as_double(oracle.dq.view), tol.grad, "dQ");
  expect_close(read_as_double(gpu.dk.view), read_as_double(oracle.dk.view), tol.grad, "dK");
  expect_close(read_as_double(gpu.dv.view), read_as_double(oracle.dv.view), tol.grad, "dV");
  if (c.sinks) expect_close(read_as_double(gpu.dsinks), read_as_double(oracle.dsinks), tol.grad, "dsinks");
}

Case make(bool bnhd, std::int64_t B, std::int64_t Hq, std::int64_t Hkv, std::int64_t Nq, std::int64_t Nk,
          std::int64_t D) {
  Case c;
  c.bnhd = bnhd, c.B = B, c.Hq = Hq, c.Hkv = Hkv, c.Nq = Nq, c.Nk = Nk, c.D = D;
  return c;
}

// Each case exercises one GEMM batching path: (B, H, N, D) with B > 1 folds (b, kvh) into one batch,
// (B, N, H, D) with B > 1 and Hkv > 1 loops over b, B = 1 batches over heads, Hkv = 1 over b.
std::vector<Case> cases() {
  std::vector<Case> all;
  all.push_back(make(false, 2, 4, 4, 128, 128, 64));  // plain
  all.push_back(make(true, 2, 4, 4, 96, 96, 64));     // plain, (B, N, H, D)
  {
    Case c = make(false, 2, 4, 4, 128, 128, 64);
    c.causal = true;
    all.push_back(c);
  }
  {
    Case c = make(true, 2, 8, 2, 100, 100, 64);  // GQA, causal
    c.causal = true;
    all.push_back(c);
  }
  {
    Case c = make(false, 3, 6, 1, 64, 64, 32);  // MQA, causal
    c.causal = true;
    all.push_back(c);
  }
  {
    Case c = make(false, 1, 4, 2, 160, 160, 64);  // sliding window with sink tokens
    c.left = 32, c.right = 8, c.sink_tokens = 4;
    all.push_back(c);
  }
  {
    Case c = make(true, 2, 4, 4, 72, 72, 64);  // left window only, sink logits
    c.left = 16, c.sinks = true;
    all.push_back(c);
  }
  {
    Case c = make(false, 2, 4, 2, 128, 128, 64);  // causal GQA with sink logits
    c.causal = true, c.sinks = true;
    all.push_back(c);
  }
  {
    Case c = make(true, 2, 4, 2, 16, 144, 64);  // Nq < Nk (a KV-cache chunk), causal, sink logits
    c.causal = true, c.sinks = true;
    all.push_back(c);
  }
  {
    Case c = make(false, 2, 2, 2, 80, 48, 64);  // Nq > Nk, causal: the first 32 rows see nothing
    c.causal = true;
    all.push_back(c);
  }
  {
    Case c = make(true, 2, 4, 1, 80, 48, 32);  // the same with sink logits and MQA
    c.causal = true, c.sinks = true;
    all.push_back(c);
  }
  all.push_back(make(true, 2, 3, 3, 50, 70, 36));  // odd sizes: unaligned head offsets
  {
    Case c = make(false, 1, 2, 1, 128, 128, 128);  // custom scale, causal window with sink tokens
    c.causal = true, c.left = 40, c.sink_tokens = 2, c.scale = 0.3;
    all.push_back(c);
  }
  all.push_back(make(false, 3, 1, 1, 33, 65, 16));  // one head
  return all;
}

class NaiveCuda : public ::testing::TestWithParam<std::tuple<Case, DType>> {};

TEST_P(NaiveCuda, MatchesTheCpuOracle) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  run_case(std::get<0>(GetParam()), std::get<1>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Cases, NaiveCuda,
                         ::testing::Combine(::testing::ValuesIn(cases()),
                                            ::testing::Values(DType::f32, DType::bf16, DType::f16)),
                         [](const ::testing::TestParamInfo<std::tuple<Case, DType>>& info) {
                           return str("i", info.index, "_",
                                      case_name(std::get<0>(info.param), std::get<1>(info.param)));
                         });

// Two backward runs of the same problem give bitwise-identical gradients (dsinks included).
TEST(NaiveCudaDeterminism, BackwardIsBitwiseRepeatable) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Case c = make(true, 2, 8, 2, 96, 96, 64);
  c.causal = true, c.sinks = true;
  Problem host(c, DType::bf16, c.bnhd, Device::cpu());
  Problem gpu(c, DType::bf16, c.bnhd, Device::cuda(0));
  fill_inputs(host, gpu, true);
  std::vector<std::vector<double>> first;
  for (int run = 0; run < 2; ++run) {
    poison_outputs(gpu);
    attention_forward(gpu.tensors(), options_of(c, AttentionImpl::naive));
    attention_backward(gpu.tensors(), gpu.grads(), options_of(c, AttentionImpl::naive));
    const std::vector<std::vector<double>> now = {read_as_double(gpu.dq.view), read_as_double(gpu.dk.view),
                                                  read_as_double(gpu.dv.view), read_as_double(gpu.dsinks)};
    if (run == 0)
      first = now;
    else
      for (std::size_t i = 0; i < now.size(); ++i) EXPECT_EQ(now[i], first[i]) << "gradient " << i;
  }
}

// Expects attention_forward on c to throw out_of_memory naming what S and P need, without leaking.
void expect_out_of_memory(const Case& c, const Problem& gpu) {
  const MemoryStats before = Allocator::instance().stats(Device::cuda(0));
  try {
    attention_forward(gpu.tensors(), options_of(c, AttentionImpl::naive));
    FAIL() << "a forward whose S does not fit returned normally";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_memory) << e.what();
    EXPECT_NE(e.message().find("materialises S (fp32 ["), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("GiB"), std::string::npos) << e.message();
  }
  EXPECT_EQ(Allocator::instance().stats(Device::cuda(0)).current_bytes, before.current_bytes);
}

// S larger than the whole device: B = 64, H = 16, N = 65536 needs 16 TiB for S alone.
TEST(NaiveCudaMemory, ScoresLargerThanTheDeviceRaiseOutOfMemory) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Case c = make(false, 64, 16, 16, 65536, 65536, 8);
  {
    Problem gpu(c, DType::bf16, false, Device::cuda(0));
    expect_out_of_memory(c, gpu);
  }
  run_case(make(false, 2, 4, 2, 64, 64, 32), DType::bf16);  // the process carries on normally
}

// S and P fit the device but not its free memory: the allocator's own failure comes back with the
// S and P sizes added.
TEST(NaiveCudaMemory, ScoresLargerThanTheFreeMemoryRaiseOutOfMemory) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Case c = make(false, 1, 8, 8, 32768, 32768, 16);  // S 32 GiB + P 16 GiB in bf16
  const double needed = 8.0 * 32768 * 32768 * 6;
  std::size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  if (static_cast<double>(total_bytes) < needed * 1.25) GTEST_SKIP() << "device too small for this case";
  {
    Problem gpu(c, DType::bf16, false, Device::cuda(0));
    ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
    const auto keep_free = static_cast<std::size_t>(needed / 2);  // S alone does not fit
    Buffer blocker(free_bytes - keep_free, Device::cuda(0), "test.blocker");
    expect_out_of_memory(c, gpu);
  }
  run_case(make(true, 2, 4, 4, 64, 64, 32), DType::f16);
}

}  // namespace
}  // namespace ft
