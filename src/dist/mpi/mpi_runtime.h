// mpi_runtime.h — starting and stopping MPI for DistributedContext (built with MPI only; no MPI types).
//   mpi_initialize  MPI_Init_thread asking for MPI_THREAD_SERIALIZED (any thread may call MPI, one at a
//                   time: the training thread issues and waits on collectives, and a helper thread may
//                   do so later as long as calls never overlap); ft::Error when the library gives less.
//                   Returns false, doing nothing, when MPI is already initialised (by the caller).
//   mpi_finalize    MPI_Finalize unless MPI is already finalised.
//   mpi_is_initialized  MPI_Initialized.
//   mpi_abort       MPI_Abort(MPI_COMM_WORLD, code): the launcher ends every rank of the job.
#pragma once

namespace ft {

bool mpi_initialize();
void mpi_finalize();
bool mpi_is_initialized();
[[noreturn]] void mpi_abort(int code);

}  // namespace ft
