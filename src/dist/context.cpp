// context.cpp — choosing the backend, MPI start-up and shut-down around the communicators' lifetime, and
// the GPU bootstrap: this rank's GPU and the NCCL communicator.
#include "dist/context.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "dist/single_process_communicator.h"
#if FT_HAS_CUDA
#include "core/cuda_check.h"
#endif
#if FT_HAS_NCCL
#include "dist/nccl/nccl_communicator.h"
#include "dist/nccl/peer_communicator.h"
#endif
#if FT_HAS_MPI
#include "dist/mpi/mpi_communicator.h"
#include "dist/mpi/mpi_runtime.h"
#endif

namespace ft {

DistributedBackend parse_distributed_backend(std::string_view text) {
  if (text == "auto") return DistributedBackend::automatic;
  if (text == "mpi") return DistributedBackend::mpi;
  if (text == "single") return DistributedBackend::single;
  FT_THROW(invalid_argument, "unknown distributed backend '", text, "': expected auto, mpi or single");
}

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

#if !FT_HAS_NCCL
namespace {

// Why a GPU communicator cannot exist in this build.
[[noreturn]] void no_nccl() {
  FT_THROW(unsupported, "GPU collectives need NCCL, but this flashtrain build has none (",
           FT_HAS_CUDA ? "CMake found CUDA but not NCCL: install NCCL (e.g. libnccl-dev) or set NCCL_HOME, and reconfigure"
                       : "it was built without CUDA: configure with nvcc and NCCL present, e.g. cmake --preset cuda",
           ")");
}

}  // namespace
#endif

DistributedContext::DistributedContext(const DistributedOptions& options)
    : communicator_options_(options.communicator) {
#if FT_HAS_MPI
  const bool want_mpi = options.backend == DistributedBackend::mpi ||
                        (options.backend == DistributedBackend::automatic && (launched_by_mpi() || mpi_is_initialized()));
  if (want_mpi) {
    owns_mpi_ = mpi_initialize();
    uses_mpi_ = true;
    host_ = std::make_unique<MpiCommunicator>(options.communicator);
    return;
  }
#else
  FT_CHECK_KIND(unsupported, options.backend != DistributedBackend::mpi,
                "DistributedContext: the mpi backend was asked for, but this build has no MPI (install an MPI "
                "library, e.g. libopenmpi-dev, and reconfigure)");
  FT_CHECK_KIND(unsupported, options.backend == DistributedBackend::single || !launched_by_mpi(),
                "DistributedContext: this process was started by an MPI launcher, but this build has no MPI; "
                "every rank would train alone (install an MPI library and reconfigure, or run without mpirun)");
#endif
  host_ = std::make_unique<SingleProcessCommunicator>();
}

DistributedContext::~DistributedContext() {
  device_.reset();  // NCCL first, while MPI (which bootstrapped it and may end the job) still runs
  host_.reset();
#if FT_HAS_MPI
  if (owns_mpi_) mpi_finalize();
#endif
}

Device DistributedContext::local_gpu() const {
  FT_CHECK_KIND(unsupported, FT_HAS_CUDA, "rank ", rank(), " needs a GPU, but this flashtrain build has no CUDA "
                "(configure with nvcc present, e.g. cmake --preset cuda)");
  const int count = cuda_device_count();
  FT_CHECK_KIND(unsupported, count > 0, "rank ", rank(), " needs a GPU, but none is visible to this process "
                "(no driver, or CUDA_VISIBLE_DEVICES empty)");
  FT_CHECK_KIND(unsupported, local_world_size() <= count, "this node runs ", local_world_size(),
                " ranks but this process sees ", count, " GPU(s): flashtrain drives one GPU per rank (local rank r ",
                "uses cuda:r), so start at most ", count, " ranks per node and leave all of the node's GPUs visible "
                "to every rank (do not narrow CUDA_VISIBLE_DEVICES per rank)");
  return Device::cuda(local_rank());
}

Communicator& DistributedContext::device_communicator() {
#if FT_HAS_NCCL
  if (!device_) {
    const Device gpu = local_gpu();
    FT_CUDA_CHECK(cudaSetDevice(gpu.index));  // this rank's kernels and allocations default to its GPU
    device_ = std::make_unique<NcclCommunicator>(*host_, gpu, communicator_options_, compute_stream_);
  }
  return *device_;
#else
  no_nccl();
#endif
}

std::unique_ptr<Communicator> DistributedContext::make_device_communicator(const NcclTuning& tuning) {
  tuning.check();
#if FT_HAS_NCCL
  const Device gpu = local_gpu();
  FT_CUDA_CHECK(cudaSetDevice(gpu.index));
  return std::make_unique<NcclCommunicator>(*host_, gpu, communicator_options_, compute_stream_, tuning);
#else
  no_nccl();
#endif
}

std::unique_ptr<Communicator> DistributedContext::make_copy_engine_communicator(std::int64_t capacity_bytes) {
  FT_CHECK_KIND(unsupported, world_size() == 2, "the copy-engine all-reduce runs between 2 GPUs: it needs a world "
                "of 2 ranks, given ", world_size());
#if FT_HAS_NCCL
  Communicator& fallback = device_communicator();
  return std::make_unique<PeerCommunicator>(*host_, fallback, local_gpu(), capacity_bytes, communicator_options_,
                                            compute_stream_);
#else
  (void)capacity_bytes;
  no_nccl();
#endif
}

Communicator& DistributedContext::communicator_for(const Device& device) {
  if (device.is_cpu()) return host_communicator();
#if FT_HAS_NCCL
  const Device gpu = local_gpu();
  FT_CHECK(device == gpu, "communicator_for: rank ", rank(), " (local rank ", local_rank(), ") drives ",
           gpu.to_string(), "; given buffers on ", device.to_string());
  return device_communicator();
#else
  no_nccl();
#endif
}

Stream DistributedContext::model_stream(const Device& device) {
  if (!device.is_cuda()) return Stream();
  if (!model_stream_.handle()) {
    model_stream_ = Stream::create(device);
    set_compute_stream(model_stream_);
  }
  FT_CHECK(model_stream_.device() == device, "DistributedContext::model_stream: the stream lives on ",
           model_stream_.device().to_string(), ", given ", device.to_string());
  return model_stream_;
}

Communicator& DistributedContext::data_parallel_communicator(const Device& device) {
  if (world_size() > 1) return communicator_for(device);
  if (!identity_) identity_ = std::make_unique<SingleProcessCommunicator>();
  return *identity_;
}

void DistributedContext::abort_job(const std::string& message, int code) {
  std::string line = message;  // one line
  for (char& ch : line)
    if (ch == '\n' || ch == '\r') ch = ' ';
  std::fflush(stdout);
  std::fprintf(stderr, "flashtrain: error: rank %d of %d: %s; ending every rank\n", rank(), world_size(),
               line.c_str());
  std::fflush(stderr);
  // A moment for the launcher to forward the line before MPI_Abort ends the ranks and their output.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
#if FT_HAS_NCCL
  if (device_) static_cast<NcclCommunicator&>(*device_).abort();
#endif
#if FT_HAS_MPI
  if (uses_mpi_) mpi_abort(code);
#endif
  std::_Exit(code);
}

void DistributedContext::set_compute_stream(const Stream& stream) {
  compute_stream_ = stream;
#if FT_HAS_NCCL
  if (device_) static_cast<NcclCommunicator&>(*device_).set_compute_stream(stream);
#endif
}

}  // namespace ft
