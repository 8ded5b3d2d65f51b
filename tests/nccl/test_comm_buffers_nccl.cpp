// test_comm_buffers_nccl.cpp — the ways of reaching NCCL that leave compute alone, on 2 ranks with one GPU
// each (mpirun -np 2): registered caller memory, ncclMemAlloc staging buffers (registered, and in symmetric
// windows), all_reduce_staged (fp32 by copies, bf16 by rounding), and communicators with CTA limits and
// policies (ncclConfig_t), and the copy-engine communicator (peer copies, dist/nccl/peer_communicator.h) — each
// gives the plain all-reduce's result bit for bit (2 ranks: one commutative addition per element, an exact
// halving), also for reduce_scatter and all_gather on the tuned communicators, the copy engine's
// reduce_scatter NCCL's, and the copy engine for 80 collectives in flight at once; bad tunings, buffer requests and oversized buffers are refused with
// ft::Error.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/tensor_io.h"
#include "dist/nccl/nccl_communicator.h"
#include "nccl/nccl_test_util.h"
#include "ops/cast.h"

namespace ft::test {
namespace {

Communicator& nccl() { return context().communicator_for(gpu()); }

constexpr std::int64_t kSizes[] = {5, (1 << 20) + 3};

// Rank r's values: irregular fp32 (not exact in bf16), so rounding and summation order would show.
std::vector<float> inputs(int r, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));  // (n)
  for (std::int64_t i = 0; i < n; ++i)
    v[i] = 1.0f / static_cast<float>(1 + (i * 7 + r * 13) % 1009) - 0.37f * static_cast<float>(r);
  return v;
}

// The plain path: the values all-reduced in place in an ordinary allocation.
std::vector<float> plain_all_reduce(const std::vector<float>& values, ReduceOp op) {
  OwnedTensor t = to_gpu(values, DType::f32, gpu());
  nccl().all_reduce(t, op)->wait();
  return to_host<float>(t);
}

// The plain bf16 path: rounded to bf16, all-reduced, widened back.
std::vector<float> plain_bf16_all_reduce(const std::vector<float>& values, ReduceOp op) {
  const auto n = static_cast<std::int64_t>(values.size());
  OwnedTensor data = to_gpu(values, DType::f32, gpu());
  OwnedTensor staged({n}, DType::bf16, gpu(), "test bf16 staging");
  cast(staged, data);
  nccl().all_reduce_widened(staged, op, data)->wait();
  return to_host<float>(data);
}

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.message();
  }
  return "accepted";
}

TEST(CommBuffersNccl, RegisteredCallerMemoryReducesAsPlain) {
  for (std::int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const std::vector<float> mine = inputs(context().rank(), n);
    OwnedTensor t = to_gpu(mine, DType::f32, gpu());
    const std::unique_ptr<CommRegistration> registration = nccl().register_buffer(t);
    nccl().all_reduce(t, ReduceOp::average)->wait();
    EXPECT_EQ(to_host<float>(t), plain_all_reduce(mine, ReduceOp::average));
  }
}

TEST(CommBuffersNccl, NcclMemoryAndSymmetricWindowsReduceAsPlain) {
  for (CommBufferKind kind : {CommBufferKind::nccl_mem, CommBufferKind::symmetric}) {
    for (std::int64_t n : kSizes) {
      SCOPED_TRACE(std::string(name_of(kind)) + ", " + std::to_string(n) + " elements");
      const std::vector<float> mine = inputs(context().rank(), n);
      const std::unique_ptr<CommBuffer> buffer = nccl().allocate_buffer(n, DType::f32, kind);
      ASSERT_EQ(buffer->tensor().numel(), n);
      ASSERT_EQ(buffer->tensor().device(), gpu());
      copy(buffer->tensor(), Tensor(const_cast<float*>(mine.data()), DType::f32, Device::cpu(), {n}));
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
        SCOPED_TRACE(name_of(op));
        copy(buffer->tensor(), Tensor(const_cast<float*>(mine.data()), DType::f32, Device::cpu(), {n}));
        nccl().all_reduce(buffer->tensor(), op)->wait();
        EXPECT_EQ(to_host<float>(buffer->tensor()), plain_all_reduce(mine, op));
      }
    }
  }
}

TEST(CommBuffersNccl, StagedAllReduceEqualsThePlainPathsInFp32AndBf16) {
  for (CommBufferKind kind : {CommBufferKind::nccl_mem, CommBufferKind::symmetric}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      for (std::int64_t n : kSizes) {
        SCOPED_TRACE(str(name_of(kind), ", ", name_of(dtype), ", ", n, " elements"));
        const std::vector<float> mine = inputs(context().rank(), n);
        const std::unique_ptr<CommBuffer> staging = nccl().allocate_buffer(n, dtype, kind);
        OwnedTensor data = to_gpu(mine, DType::f32, gpu());
        nccl().all_reduce_staged(data, staging->tensor(), ReduceOp::average)->wait();
        EXPECT_EQ(to_host<float>(data), dtype == DType::f32 ? plain_all_reduce(mine, ReduceOp::average)
                                                            : plain_bf16_all_reduce(mine, ReduceOp::average));
      }
    }
  }
}

TEST(CopyEngineNccl, AllReduceEqualsNcclBitForBit) {
  const std::unique_ptr<Communicator> peer = context().make_copy_engine_communicator(8 << 20);
  EXPECT_STREQ(peer->backend(), "copy_engine");
  EXPECT_EQ(peer->world_size(), 2);
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{5}, std::int64_t{(1 << 20) + 3}}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
      SCOPED_TRACE(str(n, " elements, ", name_of(op)));
      const std::vector<float> mine = inputs(context().rank(), n);
      OwnedTensor t = to_gpu(mine, DType::f32, gpu());
      peer->all_reduce(t, op)->wait();
      EXPECT_EQ(to_host<float>(t), plain_all_reduce(mine, op));
      // bf16, widened on the communication stream: the plain bf16 path's result.
      OwnedTensor data = to_gpu(mine, DType::f32, gpu());
      OwnedTensor staged({n}, DType::bf16, gpu(), "test bf16 staging");
      cast(staged, data);
      peer->all_reduce_widened(staged, op, data)->wait();
      EXPECT_EQ(to_host<float>(data), plain_bf16_all_reduce(mine, op));
    }
  }
}

TEST(CopyEngineNccl, ReduceScatterEqualsNcclBitForBit) {
  const std::unique_ptr<Communicator> peer = context().make_copy_engine_communicator(8 << 20);
  for (std::int64_t m : {std::int64_t{1}, std::int64_t{7}, std::int64_t{(1 << 20) + 3}}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
        SCOPED_TRACE(str(m, " elements per rank, ", name_of(dtype), ", ", name_of(op)));
        const std::vector<float> mine = inputs(context().rank(), 2 * m);
        OwnedTensor wide = to_gpu(mine, DType::f32, gpu());
        OwnedTensor input({2 * m}, dtype, gpu(), "test reduce_scatter input");
        cast(input, wide);
        OwnedTensor expected({m}, dtype, gpu(), "test reduce_scatter output");
        OwnedTensor got({m}, dtype, gpu(), "test reduce_scatter output");
        nccl().reduce_scatter(expected, input, op)->wait();
        peer->reduce_scatter(got, input, op)->wait();
        OwnedTensor expected32({m}, DType::f32, gpu(), "test"), got32({m}, DType::f32, gpu(), "test");
        cast(expected32, expected);
        cast(got32, got);
        EXPECT_EQ(to_host<float>(got32), to_host<float>(expected32));
      }
    }
  }
}

TEST(CopyEngineNccl, ManyCollectivesInFlightKeepTheirOwnResults) {
  // 40 all-reduces of changing sizes issued back to back, waited for only at the end: the mailboxes are
  // reused by each, so the flags must keep them apart.
  const std::unique_ptr<Communicator> peer = context().make_copy_engine_communicator(1 << 20);
  std::vector<OwnedTensor> buffers;
  std::vector<std::vector<float>> expected;
  std::vector<WorkHandle> works;
  for (int k = 0; k < 40; ++k) {
    const std::int64_t n = 1 + (k * 7919) % 200000;
    std::vector<float> mine = inputs(context().rank() + 2 * k, n);
    expected.push_back(plain_all_reduce(mine, ReduceOp::average));
    buffers.push_back(to_gpu(mine, DType::f32, gpu()));
  }
  // All-reduces with a reduce-scatter between each (the same flags and mailboxes).
  std::vector<OwnedTensor> rs_in, rs_out;
  std::vector<std::vector<float>> rs_expected;
  for (int k = 0; k < 40; ++k) {
    const std::int64_t m = 1 + (k * 104729) % 100000;
    const std::vector<float> mine = inputs(context().rank() + 3 * k, 2 * m);
    rs_in.push_back(to_gpu(mine, DType::f32, gpu()));
    rs_out.emplace_back(Shape{m}, DType::f32, gpu(), "test reduce_scatter output");
    OwnedTensor reference({m}, DType::f32, gpu(), "test reduce_scatter output");
    nccl().reduce_scatter(reference, rs_in.back(), ReduceOp::sum)->wait();
    rs_expected.push_back(to_host<float>(reference));
  }
  std::vector<WorkHandle> rs_works;
  for (std::size_t k = 0; k < buffers.size(); ++k) {
    works.push_back(peer->all_reduce(buffers[k], ReduceOp::average));
    rs_works.push_back(peer->reduce_scatter(rs_out[k], rs_in[k], ReduceOp::sum));
  }
  for (std::size_t k = 0; k < rs_works.size(); ++k) {
    rs_works[k]->wait();
    EXPECT_EQ(to_host<float>(rs_out[k]), rs_expected[k]) << "reduce_scatter " << k;
  }
  for (std::size_t k = 0; k < works.size(); ++k) {
    works[k]->wait();
    ASSERT_TRUE(works[k]->elapsed_ms().has_value());
    EXPECT_EQ(to_host<float>(buffers[k]), expected[k]) << "collective " << k;
  }
}

TEST(CopyEngineNccl, RefusesBuffersBeyondItsMailboxAndOtherDevices) {
  const std::unique_ptr<Communicator> peer = context().make_copy_engine_communicator(64);
  OwnedTensor big({17}, DType::f32, gpu(), "test data");  // 68 bytes
  EXPECT_NE(error_of([&] { peer->all_reduce(big, ReduceOp::sum); }).find("exceeds the copy-engine communicator's "
                                                                         "mailbox of 64 bytes"),
            std::string::npos);
  std::vector<float> host_values(4, 1.0f);
  EXPECT_NE(error_of([&] { peer->all_reduce(Tensor(host_values.data(), DType::f32, Device::cpu(), {4}),
                                            ReduceOp::sum); })
                .find("this rank's GPU"),
            std::string::npos);
}

TEST(CommBuffersNccl, TunedCommunicatorsGiveTheDefaultsResults) {
  const int rank = context().rank();
  const std::int64_t n = (1 << 20) + 4;  // even: reduce_scatter's halves
  const std::vector<float> mine = inputs(rank, n);
  // The default communicator's reduce_scatter and all_gather.
  OwnedTensor rs_in = to_gpu(mine, DType::f32, gpu());
  OwnedTensor rs_out({n / 2}, DType::f32, gpu(), "test reduce_scatter output");
  nccl().reduce_scatter(rs_out, rs_in, ReduceOp::sum)->wait();
  const std::vector<float> scattered = to_host<float>(rs_out);
  OwnedTensor gathered({n}, DType::f32, gpu(), "test all_gather output");
  nccl().all_gather(gathered, rs_out)->wait();
  const std::vector<float> all = to_host<float>(gathered);

  for (const NcclTuning& tuning : {NcclTuning{.max_ctas = 1}, NcclTuning{.min_ctas = 2, .max_ctas = 4},
                                   NcclTuning{.cta_policy = CtaPolicy::efficiency},
                                   NcclTuning{.cta_policy = CtaPolicy::zero}, NcclTuning{.low_priority = true}}) {
    SCOPED_TRACE(tuning.describe());
    const std::unique_ptr<Communicator> tuned = context().make_device_communicator(tuning);
    EXPECT_STREQ(tuned->backend(), "nccl");
    EXPECT_EQ(static_cast<NcclCommunicator&>(*tuned).tuning().max_ctas, tuning.max_ctas);
    OwnedTensor t = to_gpu(mine, DType::f32, gpu());
    tuned->all_reduce(t, ReduceOp::average)->wait();
    EXPECT_EQ(to_host<float>(t), plain_all_reduce(mine, ReduceOp::average));
    OwnedTensor in = to_gpu(mine, DType::f32, gpu());
    OwnedTensor out({n / 2}, DType::f32, gpu(), "test reduce_scatter output");
    tuned->reduce_scatter(out, in, ReduceOp::sum)->wait();
    EXPECT_EQ(to_host<float>(out), scattered);
    OwnedTensor again({n}, DType::f32, gpu(), "test all_gather output");
    tuned->all_gather(again, out)->wait();
    EXPECT_EQ(to_host<float>(again), all);
    // Symmetric windows on a tuned communicator (the few-CTA kernels under a CTA limit).
    const std::unique_ptr<CommBuffer> window = tuned->allocate_buffer(n, DType::f32, CommBufferKind::symmetric);
    copy(window->tensor(), Tensor(const_cast<float*>(mine.data()), DType::f32, Device::cpu(), {n}));
    tuned->all_reduce(window->tensor(), ReduceOp::average)->wait();
    EXPECT_EQ(to_host<float>(window->tensor()), plain_all_reduce(mine, ReduceOp::average));
  }
}

TEST(CommBuffersNccl, BadTuningsAndBufferRequestsAreRefused) {
  // Checked before the bootstrap: every rank refuses at once, none waits for the other.
  EXPECT_NE(error_of([] { context().make_device_communicator({.min_ctas = 4, .max_ctas = 2}); })
                .find("min_ctas (4) must not exceed max_ctas (2)"),
            std::string::npos);
  EXPECT_NE(error_of([] { NcclCommunicator(host(), gpu(), {}, {}, {.max_ctas = 65}); }).find("max_ctas must be"),
            std::string::npos);
  EXPECT_NE(error_of([] { nccl().allocate_buffer(8, DType::f32, CommBufferKind::plain); })
                .find("expected the kind nccl_mem or symmetric, given plain"),
            std::string::npos);
  EXPECT_NE(error_of([] { nccl().allocate_buffer(8, DType::f16, CommBufferKind::nccl_mem); }).find("fp32 or bf16"),
            std::string::npos);
  std::vector<float> host_values(8, 1.0f);
  EXPECT_NE(error_of([&] { nccl().register_buffer(Tensor(host_values.data(), DType::f32, Device::cpu(), {8})); })
                .find("host tensor"),
            std::string::npos);
  OwnedTensor data({8}, DType::f32, gpu(), "test data");
  OwnedTensor short_staging({4}, DType::f32, gpu(), "test staging");
  EXPECT_NE(error_of([&] { nccl().all_reduce_staged(data, short_staging, ReduceOp::sum); }).find("8 elements"),
            std::string::npos);
  EXPECT_GE(NcclCommunicator::runtime_version(), 21900);
}

}  // namespace
}  // namespace ft::test
