// test_communicator.cpp — the MPI communicator's collectives on 2 ranks (run under mpirun -np 2):
// all_reduce (sum, average; fp32 and bf16; widened into fp32), reduce_scatter, all_gather (also in place),
// broadcast from a non-zero root, barrier, and the bootstrap (rank, world, local rank) of DistributedContext.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "mpi/mpi_test_util.h"

namespace ft::test {
namespace {

Tensor view(std::vector<float>& v) { return Tensor(v.data(), DType::f32, Device::cpu(), {static_cast<std::int64_t>(v.size())}); }

TEST(MpiCommunicator, Bootstrap) {
  EXPECT_TRUE(context().uses_mpi());
  EXPECT_EQ(context().world_size(), 2);
  EXPECT_GE(context().rank(), 0);
  EXPECT_LT(context().rank(), 2);
  EXPECT_STREQ(world().backend(), "mpi");
  // One node: the local ranks are the ranks.
  EXPECT_EQ(context().local_world_size(), 2);
  EXPECT_EQ(context().local_rank(), context().rank());
}

TEST(MpiCommunicator, AllReduceSumAndAverage) {
  const int r = world().rank();
  std::vector<float> a(1000), b(1000);  // (1000) each
  for (int i = 0; i < 1000; ++i) a[i] = b[i] = static_cast<float>(i * (r + 1)) + 0.25f * static_cast<float>(r);
  WorkHandle sum = world().all_reduce(view(a), ReduceOp::sum);
  WorkHandle avg = world().all_reduce(view(b), ReduceOp::average);
  sum->wait();
  avg->wait();
  EXPECT_TRUE(sum->is_completed());
  for (int i = 0; i < 1000; ++i) {
    const float expected = static_cast<float>(i) + static_cast<float>(2 * i) + 0.25f;  // rank 0 + rank 1
    ASSERT_EQ(a[i], expected) << i;
    ASSERT_EQ(b[i], expected / 2) << i;
  }
}

TEST(MpiCommunicator, AllReduceBf16) {
  const int r = world().rank();
  std::vector<bf16> a(64), b(64);  // (64) each
  for (int i = 0; i < 64; ++i) a[i] = b[i] = to_bf16(static_cast<float>(i) * 1.5f + static_cast<float>(r) * 256.0f);
  world().all_reduce(Tensor(a.data(), DType::bf16, Device::cpu(), {64}), ReduceOp::sum)->wait();
  world().all_reduce(Tensor(b.data(), DType::bf16, Device::cpu(), {64}), ReduceOp::average)->wait();
  for (int i = 0; i < 64; ++i) {
    const float x0 = to_float(to_bf16(static_cast<float>(i) * 1.5f)), x1 = to_float(to_bf16(i * 1.5f + 256.0f));
    const float sum = to_float(to_bf16(x0 + x1));
    ASSERT_EQ(to_float(a[i]), sum) << i;
    ASSERT_EQ(to_float(b[i]), to_float(to_bf16(sum / 2))) << i;
  }
}

// all_reduce_widened: the bf16 result stays in data and its fp32 value lands in widened once the Work is
// complete (the default widening: when is_completed() or wait() first sees the completion).
TEST(MpiCommunicator, AllReduceWidenedIntoFp32) {
  const int r = world().rank();
  std::vector<bf16> a(64);  // (64)
  std::vector<float> widened(64, -1.0f), b(64), wide_b(64, -1.0f);  // (64) each
  for (int i = 0; i < 64; ++i) {
    a[i] = to_bf16(static_cast<float>(i) * 1.5f + static_cast<float>(r) * 256.0f);
    b[i] = static_cast<float>(i) + 0.5f * static_cast<float>(r);
  }
  WorkHandle w16 = world().all_reduce_widened(Tensor(a.data(), DType::bf16, Device::cpu(), {64}), ReduceOp::average,
                                              view(widened));
  WorkHandle w32 = world().all_reduce_widened(view(b), ReduceOp::sum, view(wide_b));
  while (!w16->is_completed()) {
  }
  w32->wait();
  for (int i = 0; i < 64; ++i) {
    const float x0 = to_float(to_bf16(static_cast<float>(i) * 1.5f)), x1 = to_float(to_bf16(i * 1.5f + 256.0f));
    const float average = to_float(to_bf16(to_float(to_bf16(x0 + x1)) / 2));
    ASSERT_EQ(to_float(a[i]), average) << i;
    ASSERT_EQ(widened[i], average) << i;
    ASSERT_EQ(wide_b[i], b[i]) << i;
    ASSERT_EQ(b[i], static_cast<float>(2 * i) + 0.5f) << i;
  }
  std::vector<float> short_out(63);
  std::vector<bf16> wide16(64);
  const Tensor data(a.data(), DType::bf16, Device::cpu(), {64});
  EXPECT_THROW(world().all_reduce_widened(data, ReduceOp::sum, view(short_out)), Error);
  EXPECT_THROW(world().all_reduce_widened(data, ReduceOp::sum, Tensor(wide16.data(), DType::bf16, Device::cpu(), {64})),
               Error);
  EXPECT_THROW(world().all_reduce_widened(view(b), ReduceOp::sum, view(b)), Error);  // overlaps the data
}

TEST(MpiCommunicator, ReduceScatterAndAllGather) {
  const int r = world().rank();
  std::vector<float> input(8), output(4);  // (2 * 4), (4)
  for (int i = 0; i < 8; ++i) input[i] = static_cast<float>(10 * r + i);
  world().reduce_scatter(view(output), view(input), ReduceOp::sum)->wait();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(output[i], static_cast<float>(10 + 2 * (4 * r + i)));

  std::vector<float> mine = {static_cast<float>(r), static_cast<float>(r) + 0.5f}, all(4, -1.0f);  // (2), (2 * 2)
  world().all_gather(view(all), view(mine))->wait();
  EXPECT_EQ(all, (std::vector<float>{0.0f, 0.5f, 1.0f, 1.5f}));

  // In place: this rank's input is its own slice of the output.
  std::vector<float> buffer(4, -1.0f);  // (2 * 2)
  buffer[2 * r] = static_cast<float>(7 * r);
  buffer[2 * r + 1] = static_cast<float>(7 * r + 1);
  world().all_gather(view(buffer), view(buffer).narrow(0, 2 * r, 2))->wait();
  EXPECT_EQ(buffer, (std::vector<float>{0.0f, 1.0f, 7.0f, 8.0f}));

  std::vector<float> wrong(3);
  EXPECT_THROW(world().reduce_scatter(view(output), view(wrong), ReduceOp::sum), Error);

  // bf16: rank r's input element i is 3 r + i + 0.5; each sum rounded to bf16, the average halved in bf16.
  std::vector<bf16> in16(8), sum16(4), avg16(4);  // (2 * 4), (4), (4)
  for (int i = 0; i < 8; ++i) in16[i] = to_bf16(static_cast<float>(3 * r + i) + 0.5f);
  const auto view16 = [](std::vector<bf16>& v) {
    return Tensor(v.data(), DType::bf16, Device::cpu(), {static_cast<std::int64_t>(v.size())});
  };
  world().reduce_scatter(view16(sum16), view16(in16), ReduceOp::sum)->wait();
  world().reduce_scatter(view16(avg16), view16(in16), ReduceOp::average)->wait();
  for (int j = 0; j < 4; ++j) {
    const float exact = static_cast<float>(3 + 2 * (4 * r + j)) + 1.0f;  // (4 r + j + 0.5) + (3 + 4 r + j + 0.5)
    EXPECT_EQ(sum16[j].bits, to_bf16(exact).bits) << j;
    EXPECT_EQ(avg16[j].bits, to_bf16(exact / 2).bits) << j;
  }
  EXPECT_THROW(world().reduce_scatter(view(output), view16(in16), ReduceOp::sum), Error);  // dtypes differ
}

TEST(MpiCommunicator, BroadcastFromRankOneAndBarrier) {
  const int r = world().rank();
  std::vector<float> data(5, static_cast<float>(r + 1));  // (5)
  world().broadcast(view(data), 1)->wait();
  EXPECT_EQ(data, std::vector<float>(5, 2.0f));
  EXPECT_THROW(world().broadcast(view(data), 2), Error);
  world().barrier()->wait();
}

}  // namespace
}  // namespace ft::test
