// test_nccl_communicator.cpp — the NCCL communicator on 2 ranks, one GPU each (mpirun -np 2 on a machine
// with 2 GPUs): the bootstrap through DistributedContext; every collective in fp32 and bf16 (reduce_scatter's
// input and output of one dtype), sum and average, against values computed on the host, at sizes
// from 1 element to 2^20 + 3; all_gather in place; broadcast from rank 1; barrier; buffers on the host or
// the other GPU refused; and the ordering with the compute stream: a memset queued there behind 25 GiB of
// other memsets, right before the all_reduce, is what gets reduced.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/stream.h"
#include "nccl/nccl_test_util.h"

namespace ft::test {
namespace {

Communicator& nccl() { return context().communicator_for(gpu()); }

constexpr std::int64_t kSizes[] = {1, 1001, (1 << 20) + 3};

// Rank r's element i: fp32 values are multiples of 1/4 below 2^14, so sums and halves are exact.
float value_f32(int r, std::int64_t i) { return static_cast<float>(i % 4099) * static_cast<float>(r + 1) + 0.25f * r; }
bf16 value_bf16(int r, std::int64_t i) { return to_bf16(static_cast<float>(i % 97) * 1.5f + 256.0f * static_cast<float>(r)); }

std::vector<float> inputs_f32(int r, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));  // (n)
  for (std::int64_t i = 0; i < n; ++i) v[i] = value_f32(r, i);
  return v;
}
std::vector<bf16> inputs_bf16(int r, std::int64_t n) {
  std::vector<bf16> v(static_cast<std::size_t>(n));  // (n)
  for (std::int64_t i = 0; i < n; ++i) v[i] = value_bf16(r, i);
  return v;
}

TEST(NcclCommunicator, Bootstrap) {
  Communicator& comm = nccl();
  EXPECT_STREQ(comm.backend(), "nccl");
  EXPECT_EQ(comm.world_size(), 2);
  EXPECT_EQ(comm.rank(), context().rank());
  EXPECT_EQ(comm.local_world_size(), 2);
  EXPECT_EQ(gpu(), Device::cuda(context().local_rank()));
  EXPECT_EQ(&context().communicator_for(gpu()), &context().device_communicator());
  EXPECT_EQ(&context().communicator_for(Device::cpu()), &host());
  EXPECT_STREQ(host().backend(), "mpi");
  try {
    context().communicator_for(Device::cuda(1 - gpu().index));
    FAIL() << "communicator_for accepted the other rank's GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(e.message().find("drives " + gpu().to_string()), std::string::npos) << e.message();
  }
}

TEST(NcclCommunicator, AllReduceFp32SumAndAverage) {
  const int r = nccl().rank();
  for (const std::int64_t n : kSizes) {
    OwnedTensor sum = to_gpu(inputs_f32(r, n), DType::f32, gpu());
    OwnedTensor avg = to_gpu(inputs_f32(r, n), DType::f32, gpu());
    WorkHandle a = nccl().all_reduce(sum, ReduceOp::sum);
    WorkHandle b = nccl().all_reduce(avg, ReduceOp::average);
    a->wait();
    b->wait();
    EXPECT_TRUE(a->is_completed());
    a->wait();  // again: returns at once
    const std::vector<float> got_sum = to_host<float>(sum), got_avg = to_host<float>(avg);
    for (std::int64_t i = 0; i < n; ++i) {
      const float expected = value_f32(0, i) + value_f32(1, i);
      ASSERT_EQ(got_sum[i], expected) << "n " << n << ", element " << i;
      ASSERT_EQ(got_avg[i], expected / 2) << "n " << n << ", element " << i;
    }
  }
}

TEST(NcclCommunicator, AllReduceBf16SumAndAverage) {
  const int r = nccl().rank();
  for (const std::int64_t n : kSizes) {
    OwnedTensor sum = to_gpu(inputs_bf16(r, n), DType::bf16, gpu());
    OwnedTensor avg = to_gpu(inputs_bf16(r, n), DType::bf16, gpu());
    nccl().all_reduce(sum, ReduceOp::sum)->wait();
    nccl().all_reduce(avg, ReduceOp::average)->wait();
    const std::vector<bf16> got_sum = to_host<bf16>(sum), got_avg = to_host<bf16>(avg);
    for (std::int64_t i = 0; i < n; ++i) {
      const float exact = to_float(value_bf16(0, i)) + to_float(value_bf16(1, i));  // exact in fp32
      ASSERT_EQ(got_sum[i].bits, to_bf16(exact).bits) << "n " << n << ", element " << i;
      ASSERT_EQ(got_avg[i].bits, to_bf16(exact / 2).bits) << "n " << n << ", element " << i;
    }
  }
}

TEST(NcclCommunicator, ReduceScatterSumAndAverage) {
  const int r = nccl().rank();
  for (const std::int64_t n : kSizes) {  // elements per rank
    OwnedTensor input = to_gpu(inputs_f32(r, 2 * n), DType::f32, gpu());  // (2 n)
    OwnedTensor sum({n}, DType::f32, gpu(), "sum"), avg({n}, DType::f32, gpu(), "avg");
    nccl().reduce_scatter(sum, input, ReduceOp::sum)->wait();
    nccl().reduce_scatter(avg, input, ReduceOp::average)->wait();
    const std::vector<float> got_sum = to_host<float>(sum), got_avg = to_host<float>(avg);
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t i = r * n + j;  // this rank's slice of the input
      const float expected = value_f32(0, i) + value_f32(1, i);
      ASSERT_EQ(got_sum[j], expected) << "n " << n << ", element " << j;
      ASSERT_EQ(got_avg[j], expected / 2) << "n " << n << ", element " << j;
    }
  }
  for (const std::int64_t n : kSizes) {  // bf16: each sum rounded to bf16 (exact in fp32 first)
    OwnedTensor input = to_gpu(inputs_bf16(r, 2 * n), DType::bf16, gpu());  // (2 n)
    OwnedTensor sum({n}, DType::bf16, gpu(), "sum");
    nccl().reduce_scatter(sum, input, ReduceOp::sum)->wait();
    const std::vector<bf16> got = to_host<bf16>(sum);
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t i = r * n + j;
      const float exact = to_float(value_bf16(0, i)) + to_float(value_bf16(1, i));
      ASSERT_EQ(got[j].bits, to_bf16(exact).bits) << "n " << n << ", element " << j;
    }
  }
  OwnedTensor in16({4}, DType::bf16, gpu(), "in"), out32({2}, DType::f32, gpu(), "out");
  EXPECT_THROW(nccl().reduce_scatter(out32, in16, ReduceOp::sum), Error);  // dtypes differ
}

TEST(NcclCommunicator, AllGatherBothDtypesAndInPlace) {
  const int r = nccl().rank();
  for (const std::int64_t n : kSizes) {
    OwnedTensor mine = to_gpu(inputs_f32(r, n), DType::f32, gpu());
    OwnedTensor all({2 * n}, DType::f32, gpu(), "all");
    nccl().all_gather(all, mine)->wait();
    const std::vector<float> got = to_host<float>(all);
    for (int k = 0; k < 2; ++k)
      for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(got[k * n + i], value_f32(k, i)) << "n " << n << ", rank " << k;

    OwnedTensor mine16 = to_gpu(inputs_bf16(r, n), DType::bf16, gpu());
    OwnedTensor all16({2 * n}, DType::bf16, gpu(), "all16");
    nccl().all_gather(all16, mine16)->wait();
    const std::vector<bf16> got16 = to_host<bf16>(all16);
    for (int k = 0; k < 2; ++k)
      for (std::int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got16[k * n + i].bits, value_bf16(k, i).bits) << "n " << n << ", rank " << k;

    // In place: this rank's input is its own slice of the output; the rest starts as -1.
    std::vector<float> start(static_cast<std::size_t>(2 * n), -1.0f);  // (2 n)
    for (std::int64_t i = 0; i < n; ++i) start[r * n + i] = value_f32(r, i);
    OwnedTensor buffer = to_gpu(start, DType::f32, gpu());
    nccl().all_gather(buffer, buffer->narrow(0, r * n, n))->wait();
    const std::vector<float> gathered = to_host<float>(buffer);
    for (int k = 0; k < 2; ++k)
      for (std::int64_t i = 0; i < n; ++i)
        ASSERT_EQ(gathered[k * n + i], value_f32(k, i)) << "in place, n " << n << ", rank " << k;
  }
}

TEST(NcclCommunicator, BroadcastFromRankOneAndBarrier) {
  const int r = nccl().rank();
  for (const std::int64_t n : kSizes) {
    OwnedTensor data = to_gpu(inputs_f32(r, n), DType::f32, gpu());
    OwnedTensor data16 = to_gpu(inputs_bf16(r, n), DType::bf16, gpu());
    nccl().broadcast(data, 1)->wait();
    nccl().broadcast(data16, 1)->wait();
    const std::vector<float> got = to_host<float>(data);
    const std::vector<bf16> got16 = to_host<bf16>(data16);
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], value_f32(1, i)) << "n " << n << ", element " << i;
      ASSERT_EQ(got16[i].bits, value_bf16(1, i).bits) << "n " << n << ", element " << i;
    }
  }
  for (int i = 0; i < 3; ++i) {
    WorkHandle barrier = nccl().barrier();
    barrier->wait();
    EXPECT_TRUE(barrier->is_completed());
  }
}

TEST(NcclCommunicator, RefusesBuffersElsewhere) {
  std::vector<float> host_values(4, 1.0f);  // (4)
  try {
    nccl().all_reduce(Tensor(host_values.data(), DType::f32, Device::cpu(), {4}), ReduceOp::sum);
    FAIL() << "a host buffer was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(e.message().find(gpu().to_string()), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("on cpu"), std::string::npos) << e.message();
  }
  // A view labelled with the other GPU (never touched: the check comes first).
  OwnedTensor mine({4}, DType::f32, gpu(), "mine");
  const Device other = Device::cuda(1 - gpu().index);
  try {
    nccl().broadcast(Tensor(mine->data(), DType::f32, other, {4}), 0);
    FAIL() << "a buffer on " << other.to_string() << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(e.message().find("must be on " + gpu().to_string()), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("on " + other.to_string()), std::string::npos) << e.message();
  }
  EXPECT_THROW(nccl().broadcast(mine, 2), Error);  // no rank 2
}

TEST(NcclCommunicator, CollectivesWaitForTheComputeStream) {
  const int r = nccl().rank();
  const Stream compute = Stream::create(gpu());
  context().set_compute_stream(compute);
  const auto stream = static_cast<cudaStream_t>(compute.handle());
  const std::int64_t n = 1 << 20;
  const std::size_t scratch_bytes = std::size_t{256} << 20;
  OwnedTensor data({n}, DType::f32, gpu(), "data"), seen({n}, DType::f32, gpu(), "seen");
  Buffer scratch(scratch_bytes, gpu(), "scratch");
  ASSERT_EQ(cudaMemset(data->data(), 0, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // 100 x 256 MiB of memsets ahead on the compute stream (~10 ms), then this rank's values: bytes
  // 0x3f (rank 0) or 0x40 (rank 1) in every position. An all_reduce that did not wait for the compute
  // stream would sum the zeros still in `data`.
  for (int k = 0; k < 100; ++k) ASSERT_EQ(cudaMemsetAsync(scratch.data(), k, scratch_bytes, stream), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(data->data(), 0x3f + r, n * sizeof(float), stream), cudaSuccess);
  WorkHandle work = nccl().all_reduce(data, ReduceOp::sum);
  work->wait();
  // wait() ordered the compute stream after the all_reduce: a copy queued there sees the sum.
  ASSERT_EQ(cudaMemcpyAsync(seen->data(), data->data(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream),
            cudaSuccess);
  compute.synchronize();
  context().set_compute_stream(Stream());  // before `compute` is destroyed

  const float expected = bits_float(0x3f3f3f3fu) + bits_float(0x40404040u);
  const std::vector<float> got = to_host<float>(seen);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], expected) << "element " << i;
}

}  // namespace
}  // namespace ft::test
