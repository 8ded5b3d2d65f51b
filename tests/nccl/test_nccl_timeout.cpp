// test_nccl_timeout.cpp — a GPU collective a peer never joins ends with the documented error within the
// configured timeout instead of hanging (2 ranks under mpirun, one GPU each). Both ranks make an NCCL
// communicator with a 2 s timeout and TimeoutAction::throw_error and run one all_reduce together (so NCCL's
// connections exist and no later call blocks in connecting); then rank 1 skips the next all_reduce. Rank 0
// must get ft::Error (runtime) naming the operation, its rank and the timeout after about 2 s, with its
// communicator aborted (later collectives refused). Neither rank uses NCCL afterwards: they meet over MPI
// and rank 1 aborts its communicator too (its peer is gone), so both exit cleanly.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/nccl/nccl_communicator.h"
#include "nccl/nccl_test_util.h"

namespace ft::test {
namespace {

TEST(NcclCommunicator, SkippedCollectiveEndsWithTimeoutErrorAndAbort) {
  using clock = std::chrono::steady_clock;
  CommunicatorOptions options;
  options.timeout_seconds = 2;
  options.on_timeout = TimeoutAction::throw_error;
  NcclCommunicator comm(host(), gpu(), options);
  OwnedTensor data = to_gpu(std::vector<float>(16, 1.0f), DType::f32, gpu());  // (16)
  comm.all_reduce(data, ReduceOp::sum)->wait();
  EXPECT_EQ(to_host<float>(data), std::vector<float>(16, 2.0f));
  host().barrier()->wait();

  if (comm.rank() == 0) {
    WorkHandle work = comm.all_reduce(data, ReduceOp::sum);
    const auto start = clock::now();
    try {
      work->wait();
      FAIL() << "wait() returned although rank 1 never joined the all_reduce";
    } catch (const Error& e) {
      const double seconds = std::chrono::duration<double>(clock::now() - start).count();
      EXPECT_EQ(e.kind(), ErrorKind::runtime);
      EXPECT_NE(e.message().find("all_reduce (fp32, 16 elements, sum) on rank 0 of 2"), std::string::npos)
          << e.message();
      EXPECT_NE(e.message().find("within the 2 s timeout"), std::string::npos) << e.message();
      EXPECT_GE(seconds, 2.0);
      EXPECT_LT(seconds, 6.0) << "the timeout and ncclCommAbort took too long";
    }
    EXPECT_TRUE(comm.aborted());
    try {
      comm.all_reduce(data, ReduceOp::sum);
      FAIL() << "an aborted communicator accepted a collective";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::runtime);
      EXPECT_NE(e.message().find("was aborted"), std::string::npos) << e.message();
    }
  }
  host().barrier()->wait();
  if (comm.rank() == 1) {
    EXPECT_FALSE(comm.aborted());
    comm.abort();
    EXPECT_TRUE(comm.aborted());
  }
}

}  // namespace
}  // namespace ft::test
