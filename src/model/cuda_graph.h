// cuda_graph.h — the CUDA pieces of a graphed training step behind opaque handles (CPU code includes this
// header): CudaGraph captures the work a function enqueues on a stream into an executable CUDA graph and
// launches it on that stream; upload / download move a few bytes between host and device memory in the
// stream's order; wait_for_device waits for a whole device. A CPU-only build has none of it (ft::Error,
// unsupported).
#pragma once

#include <cstddef>
#include <functional>

#include "core/stream.h"

namespace ft {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();  // waits for the stream, then frees the graph and gives its memory back to the device
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Captures what enqueue() puts on `stream` (a stream of its own: CUDA cannot capture the legacy default
  // stream) and instantiates it; nothing runs. Memory the work allocates on the stream and frees again
  // (cudaMallocAsync / cudaFreeAsync) becomes graph memory nodes at fixed addresses. An error inside
  // enqueue(), or one CUDA raises for an operation a capture cannot hold, ends the capture (the stream is
  // usable again) and is rethrown, saying so.
  void capture(const Stream& stream, const std::function<void()>& enqueue);
  bool captured() const { return exec_ != nullptr; }
  // Enqueues one run of the captured graph on its stream.
  void launch() const;

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  Stream stream_;          // where it was captured and launches
};

// dst (device memory) <- bytes of src (pageable host memory, staged before this returns: src may change
// right after), ordered on stream.
void upload(void* dst, const void* src, std::size_t bytes, const Stream& stream);
// dst (host memory) <- bytes of src (device memory) after the stream's earlier work; waits for it.
void download(void* dst, const void* src, std::size_t bytes, const Stream& stream);
// Waits for all work on the device, on every stream (e.g. copies made on the legacy default stream, which
// a stream created non-blocking does not wait for).
void wait_for_device(Device device);

}  // namespace ft
