// distributed_context.h — the job's DistributedContext for the tests run as several ranks under mpirun
// (tests/mpi, tests/nccl): created before the first test and destroyed (NCCL communicators, then
// MPI_Finalize) after the last by a gtest environment. Every collective's wait is bounded (60 s, then the
// job ends): a test that leaves its peer behind fails instead of hanging.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "dist/context.h"

namespace ft::test {

inline DistributedContext*& context_slot() {
  static DistributedContext* context = nullptr;
  return context;
}
inline DistributedContext& context() { return *context_slot(); }

class DistributedTestEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    DistributedOptions options;
    options.backend = DistributedBackend::mpi;
    options.communicator.timeout_seconds = 60;
    context_ = std::make_unique<DistributedContext>(options);
    context_slot() = context_.get();
    check_job();
  }
  void TearDown() override {
    context_slot() = nullptr;
    context_.reset();
  }

 protected:
  // Checks what the suite needs of the job once the context exists (gtest assertions); nothing by default.
  virtual void check_job() {}

 private:
  std::unique_ptr<DistributedContext> context_;
};

}  // namespace ft::test
