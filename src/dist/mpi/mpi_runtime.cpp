// mpi_runtime.cpp — MPI_Init_thread / MPI_Finalize for DistributedContext.
#include "dist/mpi/mpi_runtime.h"

#include <mpi.h>

#include <cstdlib>

#include "core/error.h"

namespace ft {

namespace {
const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}
}  // namespace

bool mpi_is_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

bool mpi_initialize() {
  if (mpi_is_initialized()) return false;
  int provided = MPI_THREAD_SINGLE;
  FT_CHECK_KIND(runtime, MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) == MPI_SUCCESS,
                "MPI_Init_thread failed");
  FT_CHECK_KIND(runtime, provided >= MPI_THREAD_SERIALIZED,
                "MPI_Init_thread: flashtrain needs MPI_THREAD_SERIALIZED, the MPI library provides ",
                thread_level_name(provided));
  return true;
}

void mpi_abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; should the library's return, still end this rank
}

void mpi_finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace ft
