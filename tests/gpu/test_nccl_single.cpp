// test_nccl_single.cpp — the NCCL communicator in a world of one, with no launcher and no MPI:
// DistributedContext (backend single) + communicator_for(cuda:0) makes an NCCL communicator of 1 rank
// (its unique id never broadcast) whose collectives are identities or copies — all_reduce (sum, average;
// fp32, bf16), reduce_scatter and all_gather (out of place: copies; in place), broadcast from rank 0, barrier
// — and which refuses host buffers, buffers on another GPU and ranks that do not exist; a copy it makes
// runs after the work queued on the compute stream, and an all_reduce widened into fp32 has landed before
// the compute stream goes on past wait() (and, from the single-process identity DDP gets in a world of
// one, after the work queued on the stream it is given). In a CUDA build without NCCL, communicator_for(cuda)
// must refuse with an error naming the missing library instead.
// Run on a GPU machine: ./build/bin/gpu_test_nccl_single
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "core/half.h"
#include "core/stream.h"
#include "core/tensor_io.h"
#include "dist/context.h"

namespace ft {
namespace {

DistributedOptions single() {
  DistributedOptions options;
  options.backend = DistributedBackend::single;
  options.communicator.timeout_seconds = 60;
  return options;
}

#if FT_HAS_NCCL

template <class T>
OwnedTensor to_gpu(std::vector<T> values, DType dtype) {
  const auto n = static_cast<std::int64_t>(values.size());
  OwnedTensor t({n}, dtype, Device::cuda(0), "test values");
  copy(t, Tensor(values.data(), dtype, Device::cpu(), {n}));
  return t;
}

template <class T>
std::vector<T> to_host(const Tensor& t) {
  std::vector<T> values(static_cast<std::size_t>(t.numel()));  // (numel)
  copy(Tensor(values.data(), t.dtype(), Device::cpu(), {t.numel()}), t);
  return values;
}

std::vector<float> ramp(std::int64_t n, float offset) {
  std::vector<float> v(static_cast<std::size_t>(n));  // (n)
  for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000) * 0.5f + offset;
  return v;
}

TEST(NcclSingle, WorldOfOneBootstrap) {
  DistributedContext context(single());
  EXPECT_FALSE(context.uses_mpi());
  EXPECT_EQ(context.local_gpu(), Device::cuda(0));
  Communicator& comm = context.communicator_for(Device::cuda(0));
  EXPECT_STREQ(comm.backend(), "nccl");
  EXPECT_EQ(comm.world_size(), 1);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(&comm, &context.device_communicator());
  EXPECT_STREQ(context.communicator_for(Device::cpu()).backend(), "single");
  EXPECT_THROW(context.communicator_for(Device::cuda(1)), Error);  // rank 0 drives cuda:0
}

TEST(NcclSingle, CollectivesAreIdentitiesAndCopies) {
  DistributedContext context(single());
  Communicator& comm = context.communicator_for(Device::cuda(0));
  const std::int64_t n = 4099;
  const std::vector<float> values = ramp(n, 0.25f);

  for (const ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
    OwnedTensor data = to_gpu(values, DType::f32);
    comm.all_reduce(data, op)->wait();
    EXPECT_EQ(to_host<float>(data), values) << name_of(op);
    std::vector<bf16> values16;  // (n)
    for (const float v : values) values16.push_back(to_bf16(v));
    OwnedTensor data16 = to_gpu(values16, DType::bf16);
    comm.all_reduce(data16, op)->wait();
    const std::vector<bf16> got16 = to_host<bf16>(data16);
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(got16[i].bits, values16[i].bits) << name_of(op) << " " << i;

    OwnedTensor input = to_gpu(values, DType::f32);
    OwnedTensor output = to_gpu(std::vector<float>(n, -1.0f), DType::f32);
    comm.reduce_scatter(output, input, op)->wait();
    EXPECT_EQ(to_host<float>(output), values) << name_of(op);
  }

  OwnedTensor mine = to_gpu(values, DType::f32);
  OwnedTensor all = to_gpu(std::vector<float>(n, -1.0f), DType::f32);
  comm.all_gather(all, mine)->wait();
  EXPECT_EQ(to_host<float>(all), values);
  comm.all_gather(all, all)->wait();  // in place: the whole output is this rank's slice
  EXPECT_EQ(to_host<float>(all), values);

  OwnedTensor data = to_gpu(values, DType::f32);
  comm.broadcast(data, 0)->wait();
  EXPECT_EQ(to_host<float>(data), values);
  WorkHandle barrier = comm.barrier();
  barrier->wait();
  EXPECT_TRUE(barrier->is_completed());
}

TEST(NcclSingle, RefusesHostBuffersOtherGpusAndMissingRanks) {
  DistributedContext context(single());
  Communicator& comm = context.communicator_for(Device::cuda(0));
  std::vector<float> host_values(8, 1.0f);  // (8)
  try {
    comm.all_reduce(Tensor(host_values.data(), DType::f32, Device::cpu(), {8}), ReduceOp::sum);
    FAIL() << "a host buffer was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(e.message().find("cuda:0"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("on cpu"), std::string::npos) << e.message();
  }
  OwnedTensor mine = to_gpu(host_values, DType::f32);
  try {  // a view labelled cuda:1 (never touched: the check comes first)
    comm.all_gather(Tensor(mine->data(), DType::f32, Device::cuda(1), {8}),
                    Tensor(mine->data(), DType::f32, Device::cuda(1), {8}));
    FAIL() << "a buffer on cuda:1 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(e.message().find("must be on cuda:0"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("on cuda:1"), std::string::npos) << e.message();
  }
  EXPECT_THROW(comm.broadcast(mine, 1), Error);  // a world of one has no rank 1
  OwnedTensor half16({8}, DType::bf16, Device::cuda(0), "bf16");
  EXPECT_THROW(comm.reduce_scatter(half16, half16, ReduceOp::sum), Error);  // input and output overlap
}

TEST(NcclSingle, CopyRunsAfterTheComputeStream) {
  DistributedContext context(single());
  Communicator& comm = context.communicator_for(Device::cuda(0));
  const Stream compute = Stream::create(Device::cuda(0));
  context.set_compute_stream(compute);
  const auto stream = static_cast<cudaStream_t>(compute.handle());
  const std::int64_t n = 1 << 20;
  const std::size_t scratch_bytes = std::size_t{256} << 20;
  OwnedTensor input({n}, DType::f32, Device::cuda(0), "input"), output({n}, DType::f32, Device::cuda(0), "output");
  Buffer scratch(scratch_bytes, Device::cuda(0), "scratch");
  ASSERT_EQ(cudaMemset(input->data(), 0, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // 100 x 256 MiB of memsets ahead on the compute stream, then the input's values (bytes 0x3f): a copy
  // that did not wait for the compute stream would copy the zeros still there.
  for (int k = 0; k < 100; ++k) ASSERT_EQ(cudaMemsetAsync(scratch.data(), k, scratch_bytes, stream), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(input->data(), 0x3f, n * sizeof(float), stream), cudaSuccess);
  comm.reduce_scatter(output, input, ReduceOp::sum)->wait();
  compute.synchronize();
  context.set_compute_stream(Stream());  // before `compute` is destroyed
  EXPECT_EQ(to_host<float>(output), std::vector<float>(n, bits_float(0x3f3f3f3fu)));
}

// all_reduce_widened widens on the communication stream after the reduction, which waits for the compute
// stream; wait() orders the compute stream after the widening: a copy of the widened values queued on the
// compute stream right after wait() sees them all (had the Work completed before the widening, it would
// copy the -1 still there).
TEST(NcclSingle, AllReduceWidenedLandsBeforeTheComputeStreamGoesOn) {
  DistributedContext context(single());
  Communicator& comm = context.communicator_for(Device::cuda(0));
  const Stream compute = Stream::create(Device::cuda(0));
  context.set_compute_stream(compute);
  const auto stream = static_cast<cudaStream_t>(compute.handle());
  const std::int64_t n = std::int64_t{1} << 24;
  std::vector<bf16> values16(static_cast<std::size_t>(n));  // (n)
  for (std::int64_t i = 0; i < n; ++i) values16[i] = to_bf16(static_cast<float>(i % 1000) * 0.125f - 3.0f);
  OwnedTensor data = to_gpu(values16, DType::bf16);
  OwnedTensor widened = to_gpu(std::vector<float>(n, -1.0f), DType::f32);
  OwnedTensor seen({n}, DType::f32, Device::cuda(0), "seen");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int k = 0; k < 20; ++k) ASSERT_EQ(cudaMemsetAsync(seen->data(), k, n * sizeof(float), stream), cudaSuccess);
  comm.all_reduce_widened(data, ReduceOp::average, widened)->wait();
  ASSERT_EQ(cudaMemcpyAsync(seen->data(), widened->data(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream),
            cudaSuccess);
  compute.synchronize();
  context.set_compute_stream(Stream());  // before `compute` is destroyed
  const std::vector<float> got = to_host<float>(seen);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], to_float(values16[i])) << i;
  EXPECT_EQ(to_host<bf16>(data)[12345].bits, values16[12345].bits);
  EXPECT_THROW(comm.all_reduce_widened(data, ReduceOp::sum, data), Error);  // widened must be fp32
}

// In a world of one DDP gets the single-process identity, which widens device buffers on the stream it is
// given, right away: the widening must follow the work queued there before (the bytes 0x3f of data, after
// 100 x 256 MiB of memsets), not run on another stream ahead of it.
TEST(NcclSingle, IdentityWidensDeviceBuffersOnTheGivenStream) {
  DistributedContext context(single());
  Communicator& identity = context.data_parallel_communicator(Device::cuda(0));
  EXPECT_STREQ(identity.backend(), "single");
  const Stream stream = Stream::create(Device::cuda(0));
  const auto handle = static_cast<cudaStream_t>(stream.handle());
  const std::int64_t n = 1 << 20;
  const std::size_t scratch_bytes = std::size_t{256} << 20;
  OwnedTensor data = to_gpu(std::vector<bf16>(n, to_bf16(0.0f)), DType::bf16);
  OwnedTensor widened = to_gpu(std::vector<float>(n, -1.0f), DType::f32);
  Buffer scratch(scratch_bytes, Device::cuda(0), "scratch");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int k = 0; k < 100; ++k) ASSERT_EQ(cudaMemsetAsync(scratch.data(), k, scratch_bytes, handle), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(data->data(), 0x3f, n * sizeof(bf16), handle), cudaSuccess);
  identity.all_reduce_widened(data, ReduceOp::average, widened, stream)->wait();
  stream.synchronize();
  EXPECT_EQ(to_host<float>(widened), std::vector<float>(n, to_float(bf16{0x3f3f})));
}

#else  // a CUDA build without NCCL

TEST(NcclSingle, RefusedWithoutNccl) {
  DistributedContext context(single());
  try {
    context.communicator_for(Device::cuda(0));
    FAIL() << "communicator_for(cuda:0) returned a communicator in a build without NCCL";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(e.message().find("this flashtrain build has none"), std::string::npos) << e.message();
  }
}

#endif

}  // namespace
}  // namespace ft
