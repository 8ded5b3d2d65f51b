// stream_work.cpp — the event bookkeeping, polling with a timeout and joining of a collective on a
// communication stream; ending the job.
#include "dist/nccl/stream_work.h"

#include <chrono>
#include <cstdlib>
#include <utility>

#include "core/cuda_check.h"
#include "dist/backoff.h"
#if FT_HAS_MPI
#include <mpi.h>
#endif

namespace ft {

void end_job() {
#if FT_HAS_MPI
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  std::_Exit(1);
}

StreamWork::StreamWork(std::string what, int device, cudaStream_t compute, double timeout_seconds)
    : what_(std::move(what)), device_(device), compute_(compute), timeout_seconds_(timeout_seconds) {
  FT_CUDA_CHECK(cudaEventCreate(&start_));
  FT_CUDA_CHECK(cudaEventCreate(&done_));
}

StreamWork::~StreamWork() {
  if (start_) cudaEventDestroy(start_);
  if (done_) cudaEventDestroy(done_);
}

bool StreamWork::is_completed() {
  if (completed_) return true;
  check_usable();
  const cudaError_t status = cudaEventQuery(done_);
  if (status == cudaSuccess) {
    completed_ = true;
    return true;
  }
  if (status != cudaErrorNotReady) FT_CUDA_CHECK(status);
  check_progress();
  return false;
}

void StreamWork::wait() {
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds_));
  Backoff backoff;
  while (!is_completed()) {
    if (Clock::now() > deadline) time_out(timeout_message(what_, rank(), world(), timeout_seconds_));
    backoff.pause();
  }
  if (joined_) return;
  CudaDeviceGuard guard(device_);  // the legacy default stream is the current device's
  FT_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
  joined_ = true;
}

void StreamWork::join() {
  if (joined_) return;
  check_usable();
  CudaDeviceGuard guard(device_);
  FT_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
  joined_ = true;
}

std::optional<double> StreamWork::elapsed_ms() {
  if (!is_completed()) return std::nullopt;
  float ms = 0;
  FT_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, done_));
  return ms;
}

}  // namespace ft
