// test_skinny_linear_cuda.cpp — the fused few-row bf16 GEMM (ops/skinny_linear.h) on CUDA against its CPU
// composition of the unfused ops: every epilogue (store to bf16 and fp32, residual, SwiGLU, RoPE + cache
// append at a device position), with and without the fused RMSNorm, rows 1, 3 and 8 (padded to 1, 4, 8),
// inputs K = 64 and 1600 (a partial last chunk) and 6400 (more shared memory than the default 48 KB), an odd
// output width, more units than warps; a second run, launched to overlap the first, bit-identical, and so are
// RoPE angles read from a rope_table (or computed past its positions); the fused RMSNorm bit-identical to
// rmsnorm_forward followed by the GEMM; K split among warps bit-identical to one warp a unit; rows that do not
// fit and a misshapen table are clear errors; skinny_ffn (one kernel with grid barriers) bit-identical to its
// calls, with and without a next call (QKV with RoPE + cache append, or an LM head) on its output and then the
// decode attention with its output projection (decode_attention_projected) over that call's caches (1, 3 and 8
// rows; the xl shape and small ones; head dims 16 to 128; repeated, overlapping and graph-replayed calls, the
// barrier's arrivals left zero; one kernel, the attention past head dim 64 a second); no barrier, and a next call
// not on y, clear errors.
// Run on a GPU machine: ./build/bin/gpu_test_skinny_linear_cuda
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/device_pair.h"
#include "common/expect_close.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "model/cuda_graph.h"
#include "ops/cast.h"
#include "ops/decode_attention.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/skinny_linear.h"

namespace ft {
namespace {

const Device kGpu = Device::cuda(0);
using testing_util::expect_close;

using Pair = testing_util::DevicePair;
using testing_util::device_pair;

// The args of one call on one device (cpu = true: the host copies).
struct Call {
  SkinnyEpilogue epilogue;
  std::int64_t M, K, N;
  bool norm;
  DType y_dtype = DType::bf16;
};

std::string describe(const Call& c) {
  return str("epilogue ", static_cast<int>(c.epilogue), " M ", c.M, " K ", c.K, " N ", c.N, c.norm ? " norm" : "",
             " y ", name_of(c.y_dtype));
}

void check(const Call& c) {
  SCOPED_TRACE(describe(c));
  const bool rope = c.epilogue == SkinnyEpilogue::rope_append;
  const std::int64_t width = rope ? c.N / 3 : c.N, H = 2, capacity = 12;
  const Pair x = device_pair({c.M, c.K}, c.norm ? DType::f32 : DType::bf16, 1);
  const Pair w = device_pair({c.N, c.K}, DType::bf16, 2, 0.05);
  const Pair w3 = device_pair({c.N, c.K}, DType::bf16, 3, 0.05);
  const Pair g = device_pair({c.K}, DType::f32, 4);
  const Pair residual = device_pair({c.M, c.N}, DType::f32, 5);
  const Pair y = device_pair({c.M, width}, c.y_dtype, 6);
  const Pair kc = device_pair({c.M, H, capacity, width / H}, DType::bf16, 7);
  const Pair vc = device_pair({c.M, H, capacity, width / H}, DType::bf16, 8);
  const std::int32_t at = 9;
  Buffer position(sizeof(at), kGpu, "test position");
  ASSERT_EQ(cudaMemcpy(position.data(), &at, sizeof(at), cudaMemcpyHostToDevice), cudaSuccess);

  const auto args = [&](bool cpu) {
    const auto pick = [cpu](const Pair& p) -> Tensor { return cpu ? p.cpu.tensor() : p.gpu.tensor(); };
    SkinnyLinearArgs a;
    a.epilogue = c.epilogue;
    a.y = pick(y);
    a.x = pick(x);
    a.w = pick(w);
    if (c.epilogue == SkinnyEpilogue::swiglu) a.w3 = pick(w3);
    if (c.norm) a.norm_weight = pick(g);
    if (c.epilogue == SkinnyEpilogue::residual) a.residual = pick(residual);
    if (rope) {
      a.k_cache = pick(kc);
      a.v_cache = pick(vc);
      a.position = cpu ? &at : static_cast<const std::int32_t*>(position.data());
      a.rope_theta = 10000.0;
    }
    return a;
  };
  skinny_linear(args(true));
  skinny_linear(args(false));
  const std::vector<double> first = read_as_double(y.gpu);
  // bf16 outputs: one rounding apart; fp32: the accumulation order (and, with the norm, x' one bf16 step apart).
  const double tol = c.y_dtype == DType::bf16 || c.norm ? 2e-2 : 1e-4;
  expect_close(first, read_as_double(y.cpu), tol, "y");
  if (rope) {
    expect_close(read_as_double(kc.gpu), read_as_double(kc.cpu), 2e-2, "k cache");
    expect_close(read_as_double(vc.gpu), read_as_double(vc.cpu), 2e-2, "v cache");
  }
  SkinnyLinearArgs overlapping = args(false);
  overlapping.overlap_launch = true;
  skinny_linear(overlapping);
  EXPECT_EQ(read_as_double(y.gpu), first) << "a second run, launched to overlap the first";
  if (!rope) return;
  // The angles from a table holding the position, and from one too short for it: the same bits.
  const std::vector<double> k_first = read_as_double(kc.gpu), v_first = read_as_double(vc.gpu);
  for (std::int64_t rows : {capacity, std::int64_t{at}}) {
    SCOPED_TRACE(str("rope table of ", rows, " positions"));
    OwnedTensor table({rows, width / H / 2, 2}, DType::f32, kGpu, "test rope table");
    rope_table(table, {10000.0});
    SkinnyLinearArgs tabled = args(false);
    tabled.rope_table = table;
    tabled.overlap_launch = true;
    skinny_linear(tabled);
    EXPECT_EQ(read_as_double(y.gpu), first) << "q";
    EXPECT_EQ(read_as_double(kc.gpu), k_first) << "k cache";
    EXPECT_EQ(read_as_double(vc.gpu), v_first) << "v cache";
  }
}

TEST(SkinnyLinearCuda, MatchesTheCpuComposition) {
  for (std::int64_t M : {1, 3, 8})
    for (std::int64_t K : {64, 1600}) {
      check({SkinnyEpilogue::store, M, K, 97, false, DType::f32});
      check({SkinnyEpilogue::store, M, K, 96, true, DType::f32});
      check({SkinnyEpilogue::store, M, K, 200, false, DType::bf16});
      check({SkinnyEpilogue::residual, M, K, 130, false, DType::f32});
      check({SkinnyEpilogue::swiglu, M, K, 75, true});
      check({SkinnyEpilogue::swiglu, M, K, 64, false});
      check({SkinnyEpilogue::rope_append, M, K, 3 * 2 * 32, true});
      check({SkinnyEpilogue::rope_append, M, K, 3 * 2 * 8, false});
    }
  check({SkinnyEpilogue::residual, 8, 6400, 160, false, DType::f32});  // 100 KB of staged rows
  check({SkinnyEpilogue::store, 1, 64, 9001, false, DType::f32});      // several units a warp, all prefetched
  check({SkinnyEpilogue::swiglu, 5, 6400, 48, true});
}

// The fused RMSNorm stages x' as rmsnorm_forward writes it: the same bits as that op followed by the GEMM.
TEST(SkinnyLinearCuda, FusedNormIsRmsnormForwardThenTheGemm) {
  const std::int64_t N = 96;
  for (std::int64_t M : {1, 3, 8})
    for (std::int64_t K : {1600, 6400}) {  // x read once, and (past 4096 columns) in two passes
      SCOPED_TRACE(str("M ", M, " K ", K));
      const Pair x = device_pair({M, K}, DType::f32, 11), g = device_pair({K}, DType::f32, 12);
      const Pair w = device_pair({N, K}, DType::bf16, 13, 0.05);
      OwnedTensor ln({M, K}, DType::bf16, kGpu, "test ln"), rstd({M}, DType::f32, kGpu, "test rstd");
      OwnedTensor unfused({M, N}, DType::f32, kGpu, "test y"), fused({M, N}, DType::f32, kGpu, "test y");
      rmsnorm_forward(ln, rstd, x.gpu, g.gpu, {1e-5f});
      SkinnyLinearArgs a;
      a.y = unfused;
      a.x = ln;
      a.w = w.gpu;
      skinny_linear(a);
      a.y = fused;
      a.x = x.gpu;
      a.norm_weight = g.gpu;
      a.norm_eps = 1e-5f;
      skinny_linear(a);
      EXPECT_EQ(read_as_double(fused), read_as_double(unfused));
    }
}

// A row's result depends on neither the other rows nor the split of K among warps (Note [Skinny split K]): at
// K = 6400 an 8-row residual call takes too much shared memory to split, a 1-row call splits in 2 (1600 outputs)
// or 4 (160 outputs); each row alone gives the 8-row call's bits.
TEST(SkinnyLinearCuda, SplitKIsBitIdenticalToOneWarpAUnit) {
  const std::int64_t M = 8, K = 6400;
  for (std::int64_t N : {1600, 160}) {
    SCOPED_TRACE(str("N ", N));
    const Pair x = device_pair({M, K}, DType::bf16, 21), w = device_pair({N, K}, DType::bf16, 22, 0.05);
    const Pair residual = device_pair({M, N}, DType::f32, 23);
    OwnedTensor all({M, N}, DType::f32, kGpu, "test y"), one({1, N}, DType::f32, kGpu, "test y");
    SkinnyLinearArgs a;
    a.epilogue = SkinnyEpilogue::residual;
    a.y = all;
    a.x = x.gpu;
    a.w = w.gpu;
    a.residual = residual.gpu;
    skinny_linear(a);
    const std::vector<double> rows = read_as_double(all);
    for (std::int64_t m : {0, 5}) {
      a.y = one;
      a.x = Tensor(static_cast<char*>(x.gpu->data()) + m * K * 2, DType::bf16, kGpu, {1, K});
      a.residual = Tensor(residual.gpu->data_as<float>() + m * N, DType::f32, kGpu, {1, N});
      a.overlap_launch = m == 5;
      skinny_linear(a);
      const std::vector<double> got = read_as_double(one);
      EXPECT_EQ(got, std::vector<double>(rows.begin() + m * N, rows.begin() + (m + 1) * N)) << "row " << m;
    }
  }
}

// The nodes of the graph that fn's work on stream makes (captured, not run): its kernels.
std::size_t kernels_of(const Stream& stream, const std::function<void()>& fn) {
  const auto s = static_cast<cudaStream_t>(stream.handle());
  EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  fn();
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  std::size_t nodes = 0;
  EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  return nodes;
}

// skinny_ffn's optional next call on y: none, a QKV call (rope_append) or an LM head (store to fp32).
enum class Next { none, rope, store };

struct FfnCase {
  std::int64_t M, K, F, N;
  Next next = Next::none;
  std::int64_t heads = 2, head_dim = 32;  // the rope call's
  bool attend = false;                    // then decode_attention_projected over its caches (N outputs)
};

// skinny_ffn against skinny_linear's swiglu call, then its residual call, then the next call, then the attention:
// the same bits.
void check_ffn(const FfnCase& c) {
  const std::int64_t M = c.M, K = c.K, F = c.F, N = c.N;
  const Next next = c.next;
  SCOPED_TRACE(str("M ", M, " K ", K, " F ", F, " N ", N, " next ", static_cast<int>(next), " heads ", c.heads,
                   " x ", c.head_dim, c.attend ? " attend" : ""));
  const Pair x = device_pair({M, K}, DType::f32, 31), g = device_pair({K}, DType::f32, 32);
  const Pair w1 = device_pair({F, K}, DType::bf16, 33, 0.05), w3 = device_pair({F, K}, DType::bf16, 34, 0.05);
  const Pair w2 = device_pair({N, F}, DType::bf16, 35, 0.05), residual = device_pair({M, N}, DType::f32, 36);
  OwnedTensor h({M, F}, DType::bf16, kGpu, "test h"), want_h({M, F}, DType::bf16, kGpu, "test h");
  OwnedTensor y({M, N}, DType::f32, kGpu, "test y"), want({M, N}, DType::f32, kGpu, "test y");
  SkinnyLinearArgs up;
  up.epilogue = SkinnyEpilogue::swiglu;
  up.y = want_h;
  up.x = x.gpu;
  up.w = w1.gpu;
  up.w3 = w3.gpu;
  up.norm_weight = g.gpu;
  skinny_linear(up);
  SkinnyLinearArgs down;
  down.epilogue = SkinnyEpilogue::residual;
  down.y = want;
  down.x = want_h;
  down.w = w2.gpu;
  down.residual = residual.gpu;
  skinny_linear(down);
  // The next call: heads x head_dim of q over a cache of 12 at position 9, or 300 fp32 logits.
  const bool rope = next == Next::rope;
  const std::int64_t width = rope ? c.heads * c.head_dim : 300;
  const Pair wn = device_pair({rope ? 3 * width : width, N}, DType::bf16, 37, 0.05);
  const Pair gn = device_pair({N}, DType::f32, 38);
  const DType out_dtype = rope ? DType::bf16 : DType::f32;
  OwnedTensor out({M, width}, out_dtype, kGpu, "test out"), want_out({M, width}, out_dtype, kGpu, "test out");
  // The caches twice with the same contents: the reference's and the fused call's.
  const Shape cache{M, c.heads, 12, c.head_dim};
  const Pair kc = device_pair(cache, DType::bf16, 39), want_kc = device_pair(cache, DType::bf16, 39);
  const Pair vc = device_pair(cache, DType::bf16, 40), want_vc = device_pair(cache, DType::bf16, 40);
  const std::int32_t at = 9;
  Buffer position(sizeof(at), kGpu, "test position");
  ASSERT_EQ(cudaMemcpy(position.data(), &at, sizeof(at), cudaMemcpyHostToDevice), cudaSuccess);
  SkinnyLinearArgs nx;
  nx.epilogue = rope ? SkinnyEpilogue::rope_append : SkinnyEpilogue::store;
  nx.y = want_out;
  nx.x = want;
  nx.w = wn.gpu;
  nx.norm_weight = gn.gpu;
  if (rope) {
    nx.k_cache = want_kc.gpu;
    nx.v_cache = want_vc.gpu;
    nx.position = static_cast<const std::int32_t*>(position.data());
  }
  if (next != Next::none) skinny_linear(nx);
  // The attention over the caches with q from the rope call's output, projected by wo onto y.
  const Shape heads{M, c.heads, 1, c.head_dim};
  const Pair wo = device_pair({N, width}, DType::bf16, 41, 0.05);
  OwnedTensor o(heads, DType::bf16, kGpu, "test o"), want_o(heads, DType::bf16, kGpu, "test o");
  OwnedTensor mid({M, N}, DType::f32, kGpu, "test mid"), want_mid({M, N}, DType::f32, kGpu, "test mid");
  const std::size_t bytes = decode_projection_workspace_bytes(M, c.heads, c.heads, c.head_dim, N, kGpu);
  Buffer workspace(bytes, kGpu, "test workspace");
  ASSERT_EQ(cudaMemset(workspace.data(), 0, bytes), cudaSuccess);
  const auto q_of = [&](const OwnedTensor& t) {  // (M, heads, 1, head_dim) view of the rope call's q rows
    return Tensor(t->data(), DType::bf16, kGpu, heads, {width, c.head_dim, width, 1});
  };
  const auto* past = static_cast<const std::int32_t*>(position.data());
  const DecodeAttentionOptions attention_options;
  if (c.attend) {
    decode_attention_projected({q_of(want_out), want_kc.gpu, want_vc.gpu, Tensor(), want_o, past},
                               {wo.gpu, want, want_mid, workspace.data(), bytes}, attention_options);
  }

  Buffer barrier(kSkinnyBarrierBytes, kGpu, "test barrier");
  ASSERT_EQ(cudaMemset(barrier.data(), 0, kSkinnyBarrierBytes), cudaSuccess);
  SkinnyFfnArgs f;
  f.y = y;
  f.x = x.gpu;
  f.norm_weight = g.gpu;
  f.w1 = w1.gpu;
  f.w3 = w3.gpu;
  f.h = h;
  f.w2 = w2.gpu;
  f.residual = residual.gpu;
  f.barrier = barrier.data();
  SkinnyLinearArgs nf = nx;
  nf.y = out;
  nf.x = y;
  if (rope) {
    nf.k_cache = kc.gpu;
    nf.v_cache = vc.gpu;
  }
  if (next != Next::none) f.next = &nf;
  const DecodeAttentionTensors t{q_of(out), kc.gpu, vc.gpu, Tensor(), o, past};
  const DecodeProjection p{wo.gpu, y, mid, workspace.data(), bytes};
  if (c.attend) {
    f.attention = &t;
    f.projection = &p;
    f.attention_options = &attention_options;
  }
  const std::vector<double> want_y = read_as_double(want);
  const auto expect_next = [&](const std::string& what) {
    if (next == Next::none) return;
    EXPECT_EQ(read_as_double(out), read_as_double(want_out)) << what;
    EXPECT_EQ(read_as_double(kc.gpu), read_as_double(want_kc.gpu)) << what;
    EXPECT_EQ(read_as_double(vc.gpu), read_as_double(want_vc.gpu)) << what;
    if (!c.attend) return;
    EXPECT_EQ(read_as_double(o), read_as_double(want_o)) << what;
    EXPECT_EQ(read_as_double(mid), read_as_double(want_mid)) << what;
  };
  for (bool overlap : {false, true}) {
    f.overlap_launch = overlap;
    skinny_ffn(f);
    skinny_ffn(f);  // the barrier's arrivals were left zero
    EXPECT_EQ(read_as_double(h), read_as_double(want_h)) << "overlap " << overlap;
    EXPECT_EQ(read_as_double(y), want_y) << "overlap " << overlap;
    expect_next(str("overlap ", overlap));
  }
  const Stream stream = Stream::create(kGpu);
  f.stream = stream;
  CudaGraph graph;
  graph.capture(stream, [&] { skinny_ffn(f); });
  fill(y, 0.0, stream);
  graph.launch();
  graph.launch();
  stream.synchronize();
  EXPECT_EQ(read_as_double(y), want_y) << "graph replay";
  expect_next("graph replay");
  // One kernel for all the calls (the device holds the grid at once), the attention past head dim 64 its own.
  EXPECT_EQ(kernels_of(stream, [&] { skinny_ffn(f); }), c.attend && c.head_dim > 64 ? 2u : 1u);
  std::uint32_t arrivals = 1;
  ASSERT_EQ(cudaMemcpy(&arrivals, barrier.data(), sizeof(arrivals), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(arrivals, 0u) << "the barrier's arrivals left zero";
}

TEST(SkinnyLinearCuda, FfnIsItsCalls) {
  for (std::int64_t M : {1, 3, 8}) check_ffn({M, 1600, 6400, 1600});  // xl
  check_ffn({1, 64, 128, 64});                                        // the tiny model with d_ff 128
  check_ffn({2, 64, 8192, 40});                                       // more w1 units than warps, few w2 units
  for (std::int64_t M : {1, 3}) {  // with the next layer's QKV call or an LM head on y
    check_ffn({M, 1600, 6400, 1600, Next::rope});
    check_ffn({M, 1600, 6400, 1600, Next::store});
  }
  check_ffn({1, 64, 128, 64, Next::rope});
  check_ffn({8, 64, 128, 64, Next::store});
  // And the next layer's attention with its output projection: xl (25 heads of 64), the tiny model (4 of 16),
  // 8 rows; head dim 128 (its own kernel after the FFN's).
  for (std::int64_t M : {1, 3}) check_ffn({M, 1600, 6400, 1600, Next::rope, 25, 64, true});
  check_ffn({3, 64, 128, 64, Next::rope, 4, 16, true});
  check_ffn({8, 64, 128, 64, Next::rope, 2, 32, true});
  check_ffn({1, 256, 512, 256, Next::rope, 2, 128, true});
}

TEST(SkinnyLinearCuda, FfnBadCallsAreClearErrors) {
  const Pair x = device_pair({1, 64}, DType::bf16, 1), w1 = device_pair({128, 64}, DType::bf16, 2);
  const Pair w2 = device_pair({64, 128}, DType::bf16, 3), r = device_pair({1, 64}, DType::f32, 4);
  OwnedTensor h({1, 128}, DType::bf16, kGpu, "test h");
  SkinnyFfnArgs f;
  f.y = r.gpu;
  f.x = x.gpu;
  f.w1 = w1.gpu;
  f.w3 = w1.gpu;
  f.h = h;
  f.w2 = w2.gpu;
  f.residual = r.gpu;
  try {
    skinny_ffn(f);
    ADD_FAILURE() << "a call without a barrier ran";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("needs a barrier"), std::string::npos) << e.message();
  }
  Buffer barrier(kSkinnyBarrierBytes, kGpu, "test barrier");
  f.barrier = barrier.data();
  const Pair g = device_pair({64}, DType::f32, 5), other = device_pair({1, 64}, DType::f32, 6);
  OwnedTensor logits({1, 128}, DType::f32, kGpu, "test logits");
  SkinnyLinearArgs next;
  next.y = logits;
  next.x = other.gpu;  // not f.y
  next.w = w1.gpu;     // (128, 64): any (N, 64) weight
  next.norm_weight = g.gpu;
  f.next = &next;
  try {
    skinny_ffn(f);
    ADD_FAILURE() << "a next call on another tensor ran";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("next call's x must be y"), std::string::npos) << e.message();
  }
}

TEST(SkinnyLinearCuda, AMisshapenRopeTableIsAnError) {
  const Pair x = device_pair({1, 64}, DType::bf16, 1), w = device_pair({3 * 64, 64}, DType::bf16, 2);
  OwnedTensor y({1, 64}, DType::bf16, kGpu, "test y"), table({12, 16, 2}, DType::f32, kGpu, "test table");
  OwnedTensor kc({1, 1, 12, 64}, DType::bf16, kGpu, "test k"), vc({1, 1, 12, 64}, DType::bf16, kGpu, "test v");
  Buffer position(sizeof(std::int32_t), kGpu, "test position");
  SkinnyLinearArgs a;
  a.epilogue = SkinnyEpilogue::rope_append;
  a.y = y;
  a.x = x.gpu;
  a.w = w.gpu;
  a.k_cache = kc;
  a.v_cache = vc;
  a.position = static_cast<const std::int32_t*>(position.data());
  a.rope_table = table;  // the pairs of a head dim of 32, not 64
  try {
    skinny_linear(a);
    ADD_FAILURE() << "a table of 16 pairs for a head dim of 64 ran";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("rope_table must be (T, Dh/2 = 32, 2)"), std::string::npos) << e.message();
  }
}

TEST(SkinnyLinearCuda, RowsThatDoNotFitAreAnError) {
  EXPECT_TRUE(skinny_linear_fits(8, 1600));
  EXPECT_FALSE(skinny_linear_fits(9, 1600));
  EXPECT_FALSE(skinny_linear_fits(1, 1601));
  const Pair x = device_pair({9, 64}, DType::bf16, 1), w = device_pair({16, 64}, DType::bf16, 2);
  OwnedTensor y({9, 16}, DType::f32, kGpu, "test y");
  SkinnyLinearArgs a;
  a.y = y;
  a.x = x.gpu;
  a.w = w.gpu;
  try {
    skinny_linear(a);
    ADD_FAILURE() << "9 rows ran";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("expected 1 to 8 rows"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace ft
