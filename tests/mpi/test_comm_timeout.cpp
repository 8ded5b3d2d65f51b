// test_comm_timeout.cpp — a collective that a peer joins too late ends with the documented error within
// the configured timeout instead of hanging (2 ranks under mpirun): rank 1 joins an all_reduce 3.5 s late,
// rank 0 waits with a 2 s timeout and must get ft::Error (runtime) naming the operation, its rank and the
// timeout after about 2 s, having slept rather than spun while waiting (its thread's CPU time stays a small
// fraction of the wait); rank 0 then completes the collective once rank 1 has joined, so both exit.
#include <gtest/gtest.h>

#include <time.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/mpi/mpi_communicator.h"
#include "mpi/mpi_test_util.h"

namespace ft::test {
namespace {

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

TEST(MpiCommunicator, StuckPeerEndsWithTimeoutError) {
  using clock = std::chrono::steady_clock;
  CommunicatorOptions options;
  options.timeout_seconds = 2;
  options.on_timeout = TimeoutAction::throw_error;
  MpiCommunicator comm(options);
  std::vector<float> data(16, 1.0f);  // (16)
  const Tensor t(data.data(), DType::f32, Device::cpu(), {16});
  comm.barrier()->wait();
  if (comm.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));
    comm.all_reduce(t, ReduceOp::sum)->wait();
  } else {
    WorkHandle work = comm.all_reduce(t, ReduceOp::sum);
    const auto start = clock::now();
    const double cpu_start = thread_cpu_seconds();
    try {
      work->wait();
      FAIL() << "wait() returned although rank 1 had not joined the all_reduce";
    } catch (const Error& e) {
      const double seconds = std::chrono::duration<double>(clock::now() - start).count();
      EXPECT_EQ(e.kind(), ErrorKind::runtime);
      EXPECT_NE(e.message().find("all_reduce (fp32, 16 elements, sum) on rank 0 of 2"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("within the 2 s timeout"), std::string::npos) << e.message();
      EXPECT_GE(seconds, 2.0);
      EXPECT_LT(seconds, 3.4);  // bounded: well before rank 1 joins
      const double cpu = thread_cpu_seconds() - cpu_start;
      EXPECT_LT(cpu, 0.2 * seconds) << "rank 0 used " << cpu << " s of CPU in " << seconds << " s of waiting";
      std::cout << "[ waiting  ] " << seconds << " s waited, " << cpu << " s of CPU\n";
    }
    const auto give_up = clock::now() + std::chrono::seconds(30);
    while (!work->is_completed()) ASSERT_LT(clock::now(), give_up) << "the late all_reduce never completed";
  }
  EXPECT_EQ(data, std::vector<float>(16, 2.0f));
}

}  // namespace
}  // namespace ft::test
