// stream_work.h — internal to the GPU communicators (this folder): a collective enqueued on a communication
// stream, as a Work. CUDA events bracket it (start, done: elapsed_ms() is its device time); is_completed()
// queries done; wait() polls it until complete or past the timeout; join() and wait() make the compute
// stream (the one current when the collective was issued) wait for done. Each backend adds its checks.
// Also end_job(), which both backends call on a fatal failure when their options say so.
#pragma once

#include <cuda_runtime.h>

#include <optional>
#include <string>

#include "dist/communicator.h"

namespace ft {

// Ends the whole job after a fatal communication failure: MPI_Abort when MPI runs, else this process.
[[noreturn]] void end_job();

class StreamWork : public Work {
 public:
  StreamWork(std::string what, int device, cudaStream_t compute, double timeout_seconds);
  ~StreamWork() override;
  StreamWork(const StreamWork&) = delete;
  StreamWork& operator=(const StreamWork&) = delete;

  const std::string& what() const { return what_; }
  cudaEvent_t start() const { return start_; }  // record on the communication stream before the collective
  cudaEvent_t done() const { return done_; }    // and after it

  bool is_completed() override;
  void wait() override;
  void join() override;
  std::optional<double> elapsed_ms() override;

 protected:
  // Before each query: ft::Error when the communicator can no longer be used (NCCL: aborted).
  virtual void check_usable() {}
  // While the collective is not complete: fails on an asynchronous error (NCCL's).
  virtual void check_progress() {}
  // Past the timeout: throws ft::Error or ends the job (the communicator's options).
  [[noreturn]] virtual void time_out(const std::string& message) = 0;
  // The rank and world the timeout message names.
  virtual int rank() const = 0;
  virtual int world() const = 0;

 private:
  std::string what_;
  int device_ = 0;
  cudaStream_t compute_;
  double timeout_seconds_ = 0;
  cudaEvent_t start_ = nullptr, done_ = nullptr;
  bool completed_ = false;  // done has completed
  bool joined_ = false;     // the compute stream waits for it
};

}  // namespace ft
