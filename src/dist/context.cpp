// context.cpp — choosing the backend, MPI start-up and shut-down around the communicators' lifetime.
#include "dist/context.h"

#include <cstdlib>

#include "core/error.h"
#include "dist/single_process_communicator.h"
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

DistributedContext::DistributedContext(const DistributedOptions& options) {
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
  host_.reset();
#if FT_HAS_MPI
  if (owns_mpi_) mpi_finalize();
#endif
}

}  // namespace ft
