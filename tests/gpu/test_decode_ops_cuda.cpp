// test_decode_ops_cuda.cpp — the decode step's CUDA ops against their CPU implementations: decode_attention
// (flash-decoding, cache length in device memory) against the CPU's naive oracle over the cache's first Nk keys
// in fp32, bf16 and fp16 — one and several key splits, several shared-memory tiles per split, cache lengths
// not a multiple of any tile, head dims 36 (rows not 16-byte aligned: 4-byte copies), 64, 80, 128 and 256, GQA
// with several query positions (more rows than one block takes), a sliding window with sink tokens, gpt-oss
// sink logits, xl's decode shape at lengths around 32-key edges; a repeated call (the split counters reset;
// launched to overlap the first) bit-identical, a captured CUDA graph replayed at a new length equal to a direct
// call; rope_append (RoPE at a device position, k and v appended to the cache) against the CPU's; rope_table as
// the angles rope_forward applies; argmax_rows (ties, id limit, the history row at a device position) exactly;
// greedy_next (argmax, history, embedding of the ids, the position advanced once) against the CPU's, for one row
// over many blocks and up to 64 rows.
// Run on a GPU machine: ./build/bin/gpu_test_decode_ops_cuda
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/device_pair.h"
#include "common/expect_close.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor_io.h"
#include "model/cuda_graph.h"
#include "ops/argmax.h"
#include "ops/decode_attention.h"
#include "ops/rope.h"

namespace ft {
namespace {

const Device kGpu = Device::cuda(0);
using testing_util::expect_close;

using Pair = testing_util::DevicePair;
using testing_util::device_pair;

// One int32 in device memory.
struct DeviceInt {
  Buffer buffer{sizeof(std::int32_t), kGpu, "test int"};
  std::int32_t* data() const { return static_cast<std::int32_t*>(buffer.data()); }
  void set(std::int32_t value) const {
    ASSERT_EQ(cudaMemcpy(data(), &value, sizeof(value), cudaMemcpyHostToDevice), cudaSuccess);
  }
};

struct Case {
  std::int64_t B, Hq, Hkv, Nq, D, capacity, past;
  DType dtype = DType::f32;
  std::int64_t window_left = -1, sink_tokens = 0;
  bool sinks = false;
};

std::string describe(const Case& c) {
  return str("B ", c.B, " Hq ", c.Hq, " Hkv ", c.Hkv, " Nq ", c.Nq, " D ", c.D, " capacity ", c.capacity, " past ",
             c.past, " ", name_of(c.dtype), " window ", c.window_left, " sink tokens ", c.sink_tokens,
             c.sinks ? " sinks" : "");
}

// Runs c on both devices (k and v as (B, capacity, Hkv, D) storage, the generator's kind of strided view);
// returns the CUDA output after checking it against the CPU's.
std::vector<double> check_case(const Case& c, double tol) {
  SCOPED_TRACE(describe(c));
  const Pair q = device_pair({c.B, c.Hq, c.Nq, c.D}, c.dtype, 1);
  const Pair k = device_pair({c.B, c.capacity, c.Hkv, c.D}, c.dtype, 2);
  const Pair v = device_pair({c.B, c.capacity, c.Hkv, c.D}, c.dtype, 3);
  const Pair sinks = device_pair({c.Hq}, DType::f32, 4);
  OwnedTensor o_cpu({c.B, c.Hq, c.Nq, c.D}, c.dtype, Device::cpu(), "test o");
  OwnedTensor o_gpu({c.B, c.Hq, c.Nq, c.D}, c.dtype, kGpu, "test o");
  const auto cache = [](const OwnedTensor& t) { return t->permute({0, 2, 1, 3}); };  // (B, Hkv, capacity, D)
  DecodeAttentionOptions options;
  options.window_left = c.window_left;
  options.sink_tokens = c.sink_tokens;

  const auto past_cpu = static_cast<std::int32_t>(c.past);
  DecodeAttentionTensors t{q.cpu, cache(k.cpu), cache(v.cpu), c.sinks ? sinks.cpu.tensor() : Tensor(), o_cpu,
                           &past_cpu};
  decode_attention(t, options);

  DeviceInt past;
  past.set(static_cast<std::int32_t>(c.past));
  const std::size_t bytes = decode_attention_workspace_bytes(c.B, c.Hq, c.Hkv, c.Nq, c.D, c.capacity, kGpu);
  Buffer workspace(bytes, kGpu, "test workspace");
  EXPECT_EQ(cudaMemset(workspace.data(), 0, bytes), cudaSuccess);
  DecodeAttentionTensors g{q.gpu, cache(k.gpu), cache(v.gpu), c.sinks ? sinks.gpu.tensor() : Tensor(), o_gpu,
                           past.data(), workspace.data(), bytes};
  decode_attention(g, options);
  const std::vector<double> first = read_as_double(o_gpu);
  expect_close(first, read_as_double(o_cpu), tol, "decode attention");
  options.overlap_launch = true;  // programmatic dependent launch: the same result
  decode_attention(g, options);   // the counters were reset: the same result, bit for bit
  EXPECT_EQ(read_as_double(o_gpu), first);
  return first;
}

TEST(DecodeAttentionCuda, MatchesTheCpuOracle) {
  const int many = decode_attention_splits(1, 2, 1, 1000, kGpu);
  ASSERT_GT(many, 1) << "a long cache over few heads must split its keys";
  ASSERT_EQ(decode_attention_splits(48, 16, 1, 1000, kGpu), 1) << "768 blocks fill the GPU without splits";
  // One query per row, no GQA: lengths 1, odd, one short of the capacity; splits > 1.
  for (std::int64_t past : {0, 37, 998})
    for (DType dtype : {DType::f32, DType::bf16, DType::f16})
      check_case({1, 2, 2, 1, 64, 1000, past, dtype}, dtype == DType::f32 ? 1e-5 : 2e-2);
  // Head dims that leave lanes idle or use several pairs per lane; 36 (72-byte rows): 4-byte copies.
  for (std::int64_t D : {36, 80, 128, 256}) check_case({2, 3, 3, 1, D, 300, 211, DType::bf16}, 2e-2);
  // One split: many rows and heads, three tiles of keys.
  check_case({48, 16, 16, 1, 64, 1000, 517, DType::bf16}, 2e-2);
  // fp32 rows of 1 KB: tiles of 32 keys, several per split.
  check_case({1, 2, 2, 1, 256, 300, 200, DType::f32}, 1e-5);
  // GQA: 4 query heads per KV head x 3 new positions = 12 rows, two blocks per KV head.
  check_case({2, 8, 2, 3, 64, 500, 140, DType::f32}, 1e-5);
  check_case({1, 8, 2, 3, 128, 500, 0, DType::bf16}, 2e-2);
  // Sliding window with sink tokens, and gpt-oss sink logits.
  check_case({2, 4, 2, 2, 64, 400, 301, DType::f32, 16, 4}, 1e-5);
  check_case({2, 4, 1, 1, 64, 400, 301, DType::f32, -1, 0, true}, 1e-5);
  check_case({1, 4, 4, 1, 64, 400, 3, DType::f32, 8, 2, true}, 1e-5);
  // The xl decode's shape (25 heads of 64, a cache of 192) at lengths on and around 32-key edges, full; a batch of
  // rows; GQA over a cache that is not a multiple of a tile; a window with sinks; fp16 with head dim 128.
  for (std::int64_t past : {0, 31, 32, 47, 48, 63, 100, 191})
    check_case({1, 25, 25, 1, 64, 192, past, DType::bf16}, 2e-2);
  check_case({3, 4, 4, 1, 64, 160, 77, DType::bf16}, 2e-2);
  check_case({1, 8, 2, 3, 64, 200, 140, DType::f32}, 1e-5);
  check_case({1, 2, 2, 2, 64, 256, 200, DType::f32, 40, 3, true}, 1e-5);
  check_case({1, 3, 3, 1, 128, 256, 250, DType::f16}, 2e-2);
}

TEST(DecodeAttentionCuda, GraphReplayReadsTheLengthFromDeviceMemory) {
  const std::int64_t B = 2, H = 4, D = 64, capacity = 256;
  const Pair q = device_pair({B, H, 1, D}, DType::bf16, 5);
  const Pair k = device_pair({B, H, capacity, D}, DType::bf16, 6);
  const Pair v = device_pair({B, H, capacity, D}, DType::bf16, 7);
  OwnedTensor o({B, H, 1, D}, DType::bf16, kGpu, "test o");
  DeviceInt past;
  const std::size_t bytes = decode_attention_workspace_bytes(B, H, H, 1, D, capacity, kGpu);
  Buffer workspace(bytes, kGpu, "test workspace");
  ASSERT_EQ(cudaMemset(workspace.data(), 0, bytes), cudaSuccess);
  const Stream stream = Stream::create(kGpu);
  DecodeAttentionOptions options;
  options.stream = stream;
  const DecodeAttentionTensors t{q.gpu, k.gpu, v.gpu, Tensor(), o, past.data(), workspace.data(), bytes};
  CudaGraph graph;
  graph.capture(stream, [&] { decode_attention(t, options); });
  for (std::int32_t length : {10, 129, 255}) {
    past.set(length);
    graph.launch();
    stream.synchronize();
    const std::vector<double> replayed = read_as_double(o);
    decode_attention(t, options);
    stream.synchronize();
    EXPECT_EQ(read_as_double(o), replayed) << "past " << length;
  }
}

TEST(DecodeAttentionCuda, BadCallsAreClearErrors) {
  const Pair q = device_pair({1, 3, 1, 64}, DType::f32, 1), k = device_pair({1, 2, 16, 64}, DType::f32, 2);
  OwnedTensor o({1, 3, 1, 64}, DType::f32, kGpu, "test o");
  DeviceInt past;
  DecodeAttentionTensors t{q.gpu, k.gpu, k.gpu, Tensor(), o, past.data()};
  EXPECT_THROW(decode_attention(t, {}), Error);  // 3 query heads over 2 KV heads
  const Pair q2 = device_pair({1, 2, 1, 64}, DType::f32, 1);
  OwnedTensor o2({1, 2, 1, 64}, DType::f32, kGpu, "test o");
  t.q = q2.gpu;
  t.o = o2;
  EXPECT_THROW(decode_attention(t, {}), Error);  // no workspace
}

TEST(RopeAppendCuda, MatchesTheCpu) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(name_of(dtype));
    const std::int64_t B = 3, Hq = 4, Hkv = 2, T = 2, D = 64, capacity = 40;
    const Pair q = device_pair({B, Hq, T, D}, dtype, 1), k = device_pair({B, Hkv, T, D}, dtype, 2), v = device_pair({B, Hkv, T, D}, dtype, 3);
    const Pair kc = device_pair({B, capacity, Hkv, D}, dtype, 4), vc = device_pair({B, capacity, Hkv, D}, dtype, 5);
    const auto cache = [](const OwnedTensor& t) { return t->permute({0, 2, 1, 3}); };
    const std::int32_t at = 27;
    rope_append(q.cpu, k.cpu, v.cpu, cache(kc.cpu), cache(vc.cpu), &at, {500000.0});
    DeviceInt position;
    position.set(at);
    rope_append(q.gpu, k.gpu, v.gpu, cache(kc.gpu), cache(vc.gpu), position.data(), {500000.0});
    const double tol = dtype == DType::f32 ? 1e-6 : 1e-2;
    expect_close(read_as_double(q.gpu), read_as_double(q.cpu), tol, "q");
    expect_close(read_as_double(kc.gpu), read_as_double(kc.cpu), tol, "k cache");
    EXPECT_EQ(read_as_double(vc.gpu), read_as_double(vc.cpu)) << "v cache";
  }
}

TEST(RopeTableCuda, HoldsTheAnglesForwardAppliesAndMatchesTheCpu) {
  const std::int64_t T = 300, D = 64;
  const double theta = 10000.0;
  OwnedTensor table({T, D / 2, 2}, DType::f32, kGpu, "test table");
  OwnedTensor on_cpu({T, D / 2, 2}, DType::f32, Device::cpu(), "test");
  rope_table(table, {theta});
  rope_table(on_cpu, {theta});
  // Rotating the pair (1, 0) at position t gives (cos, sin) of its angle exactly.
  std::vector<double> unit(static_cast<std::size_t>(T * D), 0.0);
  for (std::size_t e = 0; e < unit.size(); e += 2) unit[e] = 1.0;
  OwnedTensor x({1, 1, T, D}, DType::f32, kGpu, "test x");
  OwnedTensor host({1, 1, T, D}, DType::f32, Device::cpu(), "test");
  write_from_double(host, unit);
  copy(x, host);
  rope_forward(x, {theta});
  EXPECT_EQ(read_as_double(table), read_as_double(x)) << "the table against rope_forward's";
  expect_close(read_as_double(table), read_as_double(on_cpu), 1e-6, "the table against the CPU's");
}

TEST(ArgmaxCuda, MatchesTheCpu) {
  const std::int64_t rows = 5, cols = 50257;
  Pair x = device_pair({rows, cols}, DType::f32, 9);
  std::vector<double> values = read_as_double(x.cpu);
  values[1 * cols + 7] = values[1 * cols + 9000] = 100;  // a tie: the lower index
  values[2 * cols + cols - 1] = 100;                      // the last column
  values[3 * cols + 40000] = 100;                         // past the limit below for row 3's check
  write_from_double(x.cpu, values);
  copy(x.gpu, x.cpu);
  for (std::int64_t limit : {std::int64_t{0}, std::int64_t{30000}}) {
    std::vector<std::int32_t> want(rows), got(rows);
    argmax_rows(want.data(), x.cpu, limit, {});
    Buffer out(rows * sizeof(std::int32_t), kGpu, "test argmax");
    Buffer history(3 * rows * sizeof(std::int32_t), kGpu, "test history");  // (3, rows): row 2 written
    DeviceInt position;
    position.set(2);
    argmax_rows(static_cast<std::int32_t*>(out.data()), x.gpu, limit, {}, static_cast<std::int32_t*>(history.data()),
                position.data());
    ASSERT_EQ(cudaMemcpy(got.data(), out.data(), rows * sizeof(std::int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(got, want) << "limit " << limit;
    ASSERT_EQ(cudaMemcpy(got.data(), static_cast<std::int32_t*>(history.data()) + 2 * rows, rows * sizeof(std::int32_t),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(got, want) << "history, limit " << limit;
    EXPECT_EQ(want[1], 7);
  }
}

TEST(GreedyNextCuda, MatchesTheCpuAndAdvancesThePositionOnce) {
  const std::int64_t d = 100;
  // Rows x columns: one row over many blocks, a few rows, a batch of 64 (two blocks a row), one block a row.
  using Shape = std::pair<std::int64_t, std::int64_t>;  // (rows, columns) of the logits
  for (const auto& [rows, cols] : {Shape{1, 50257}, {5, 50257}, {64, 50257}, {3, 300}}) {
    SCOPED_TRACE(str(rows, " rows of ", cols));
    Pair logits = device_pair({rows, cols}, DType::f32, 9);
    std::vector<double> values = read_as_double(logits.cpu);
    values[0 * cols + cols - 1] = 100;  // the last column
    if (rows > 1) values[1 * cols + 7] = values[1 * cols + cols / 2] = 100;  // a tie: the lower index
    if (rows > 2) values[2 * cols + cols * 3 / 4] = 100;                       // past the limit below
    write_from_double(logits.cpu, values);
    copy(logits.gpu, logits.cpu);
    const Pair embedding = device_pair({cols, d}, DType::f32, 10);
    for (std::int64_t limit : {std::int64_t{0}, cols * 2 / 3}) {
      SCOPED_TRACE(str("limit ", limit));
      // The CPU: two steps from position 2.
      std::vector<std::int32_t> ids(rows), history(5 * rows, -1);
      std::int32_t at = 2;
      OwnedTensor x_cpu({rows, d}, DType::f32, Device::cpu(), "test x");
      GreedyNextArgs c;
      c.logits = logits.cpu;
      c.limit = limit;
      c.ids = ids.data();
      c.history = history.data();
      c.position = &at;
      c.embedding = embedding.cpu;
      c.x = x_cpu;
      greedy_next(c);
      greedy_next(c);
      ASSERT_EQ(at, 4);
      // The GPU: the same two steps, the second launched to overlap the first (the counters were reset).
      Buffer ids_gpu(rows * sizeof(std::int32_t), kGpu, "test ids");
      Buffer history_gpu(5 * rows * sizeof(std::int32_t), kGpu, "test history");
      ASSERT_EQ(cudaMemset(history_gpu.data(), 0xff, 5 * rows * sizeof(std::int32_t)), cudaSuccess);
      DeviceInt position;
      position.set(2);
      OwnedTensor x_gpu({rows, d}, DType::f32, kGpu, "test x");
      const std::size_t bytes = greedy_next_workspace_bytes(rows, kGpu);
      Buffer workspace(bytes, kGpu, "test workspace");
      ASSERT_EQ(cudaMemset(workspace.data(), 0, bytes), cudaSuccess);
      GreedyNextArgs g = c;
      g.logits = logits.gpu;
      g.ids = static_cast<std::int32_t*>(ids_gpu.data());
      g.history = static_cast<std::int32_t*>(history_gpu.data());
      g.position = position.data();
      g.embedding = embedding.gpu;
      g.x = x_gpu;
      g.workspace = workspace.data();
      g.workspace_bytes = bytes;
      greedy_next(g);
      g.overlap_launch = true;
      greedy_next(g);
      std::vector<std::int32_t> got(rows), got_history(5 * rows);
      std::int32_t got_at = 0;
      ASSERT_EQ(cudaMemcpy(got.data(), g.ids, rows * sizeof(std::int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(got_history.data(), g.history, 5 * rows * sizeof(std::int32_t), cudaMemcpyDeviceToHost),
                cudaSuccess);
      ASSERT_EQ(cudaMemcpy(&got_at, g.position, sizeof(got_at), cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(got, ids);
      EXPECT_EQ(got_history, history) << "history rows 2 and 3 written, the others untouched";
      EXPECT_EQ(got_at, 4) << "advanced once a call";
      EXPECT_EQ(read_as_double(x_gpu), read_as_double(x_cpu)) << "the embedding rows of the ids";
      EXPECT_EQ(ids[0], limit == 0 ? cols - 1 : ids[0]);
      if (rows > 1) EXPECT_EQ(ids[1], 7);
    }
  }
}

}  // namespace
}  // namespace ft
