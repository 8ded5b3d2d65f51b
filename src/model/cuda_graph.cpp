// cuda_graph.cpp — CudaGraph over the CUDA runtime's stream capture, graph instantiation and launch, and
// the stream-ordered small copies; in a CPU-only build each refuses with ft::Error (unsupported).
#include "model/cuda_graph.h"

#include "core/error.h"
#if FT_HAS_CUDA
#include "core/cuda_check.h"
#endif

namespace ft {

#if FT_HAS_CUDA

namespace {
cudaStream_t as_stream(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }
}  // namespace

CudaGraph::~CudaGraph() {
  if (!graph_) return;
  CudaDeviceGuard guard(stream_.device().index);
  cudaStreamSynchronize(as_stream(stream_));  // a launch may still run; errors surface where it is waited for
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  cudaDeviceGraphMemTrim(stream_.device().index);
}

void CudaGraph::capture(const Stream& stream, const std::function<void()>& enqueue) {
  FT_CHECK(!graph_, "CudaGraph: already captured; capture once per CudaGraph");
  FT_CHECK_KIND(unsupported, stream.handle() != nullptr,
                "CudaGraph: cannot capture the legacy default stream; enqueue the work on a stream of its own "
                "(Stream::create)");
  CudaDeviceGuard guard(stream.device().index);
  const cudaStream_t s = as_stream(stream);
  // Relaxed: calls that are not stream work (the naive attention's cudaMemGetInfo) may run during the capture;
  // all stream work is captured, and waiting on the capturing stream still fails.
  FT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  // Ends a failed capture (which fails itself when the error invalidated it): the stream is free again.
  const auto abandon = [s] {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(s, &partial);
    if (partial) cudaGraphDestroy(partial);
    cudaGetLastError();
  };
  try {
    enqueue();
  } catch (const Error& e) {
    abandon();
    throw Error(e.kind(), str("while capturing a CUDA graph: ", e.message()), e.file(), e.line());
  } catch (...) {
    abandon();
    throw;
  }
  cudaGraph_t graph = nullptr;
  FT_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  if (status != cudaSuccess) cudaGraphDestroy(graph);
  FT_CUDA_CHECK(status);
  graph_ = graph;
  exec_ = exec;
  stream_ = stream;
}

void CudaGraph::launch() const {
  FT_CHECK(exec_ != nullptr, "CudaGraph: nothing to launch; capture() first");
  CudaDeviceGuard guard(stream_.device().index);
  FT_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), as_stream(stream_)));
}

void upload(void* dst, const void* src, std::size_t bytes, const Stream& stream) {
  CudaDeviceGuard guard(stream.device().index);
  FT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(stream)));
}

void download(void* dst, const void* src, std::size_t bytes, const Stream& stream) {
  CudaDeviceGuard guard(stream.device().index);
  FT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)));
  FT_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
}

void wait_for_device(Device device) {
  CudaDeviceGuard guard(device.index);
  FT_CUDA_CHECK(cudaDeviceSynchronize());
}

#else  // CPU-only build

namespace {
[[noreturn]] void no_cuda(const char* what) {
  FT_THROW(unsupported, what, " needs CUDA, but this flashtrain build has none (configure with nvcc present)");
}
}  // namespace

CudaGraph::~CudaGraph() = default;
void CudaGraph::capture(const Stream&, const std::function<void()>&) { no_cuda("CudaGraph::capture"); }
void CudaGraph::launch() const { no_cuda("CudaGraph::launch"); }
void upload(void*, const void*, std::size_t, const Stream&) { no_cuda("upload"); }
void download(void*, const void*, std::size_t, const Stream&) { no_cuda("download"); }
void wait_for_device(Device) { no_cuda("wait_for_device"); }

#endif

}  // namespace ft
