// timer.cpp — time_repeats(): CUDA-event and wall-clock timing loops with optional L2 flushing.
#include "bench/timer.h"

#include <chrono>
#include <memory>

#include "core/buffer.h"
#include "core/error.h"
#if FT_HAS_CUDA
#include "core/cuda_check.h"
#endif

namespace ft {

namespace {

std::vector<double> time_on_cpu(const std::function<void()>& work, const TimingOptions& options) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < options.warmup; ++i) work();
  std::vector<double> samples;
  samples.reserve(options.repeats);
  for (int i = 0; i < options.repeats; ++i) {
    auto start = clock::now();
    work();
    samples.push_back(std::chrono::duration<double, std::milli>(clock::now() - start).count());
  }
  return samples;
}

#if FT_HAS_CUDA
std::vector<double> time_on_gpu(Device device, const Stream& stream, const std::function<void()>& work,
                                const TimingOptions& options) {
  CudaDeviceGuard guard(device.index);
  auto cuda_stream = static_cast<cudaStream_t>(stream.handle());
  Buffer flush;
  if (options.flush_l2) {
    int l2_bytes = 0;
    FT_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device.index));
    flush = Buffer(2 * static_cast<std::size_t>(l2_bytes), device, "bench.l2_flush", stream);
  }
  for (int i = 0; i < options.warmup; ++i) work();
  FT_CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
  Event start(device), stop(device);
  std::vector<double> samples;
  samples.reserve(options.repeats);
  for (int i = 0; i < options.repeats; ++i) {
    if (options.flush_l2) FT_CUDA_CHECK(cudaMemsetAsync(flush.data(), i & 0xff, flush.bytes(), cuda_stream));
    start.record(stream);
    work();
    stop.record(stream);
    stop.synchronize();
    samples.push_back(start.elapsed_ms(stop));
  }
  return samples;
}
#endif

}  // namespace

std::vector<double> time_repeats(Device device, const Stream& stream, const std::function<void()>& work,
                                 const TimingOptions& options) {
  FT_CHECK(options.warmup >= 0, "timing: warmup must be >= 0, given ", options.warmup);
  FT_CHECK(options.repeats >= 1, "timing: repeats must be >= 1, given ", options.repeats);
  if (device.is_cpu()) return time_on_cpu(work, options);
#if FT_HAS_CUDA
  return time_on_gpu(device, stream, work, options);
#else
  (void)stream;
  FT_THROW(unsupported, "timing on ", device.to_string(), " needs CUDA, but this flashtrain build has none");
#endif
}

}  // namespace ft
