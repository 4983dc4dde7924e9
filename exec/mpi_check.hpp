#pragma once
// STRATA_MPI_CHECK(call): every MPI call of the executor goes through it. A failure prints the
// call, the file and line and MPI's error string, then aborts every rank of the job (an MPI
// failure mid-run is not a user's mistake to recover from). MPI reports errors to the check only
// on communicators whose error handler is MPI_ERRORS_RETURN (exec/mpi_communicator.cpp sets it on
// its own); elsewhere MPI's default handler aborts first.

#include <cstdio>

#include <mpi.h>

#define STRATA_MPI_CHECK(call)                                                                     \
  do {                                                                                             \
    const int strata_mpi_status = (call);                                                          \
    if (strata_mpi_status != MPI_SUCCESS) {                                                        \
      char strata_mpi_text[MPI_MAX_ERROR_STRING];                                                  \
      int strata_mpi_length = 0;                                                                   \
      MPI_Error_string(strata_mpi_status, strata_mpi_text, &strata_mpi_length);                    \
      std::fprintf(stderr, "strata: MPI call %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, \
                   strata_mpi_text);                                                               \
      MPI_Abort(MPI_COMM_WORLD, 3);                                                                \
    }                                                                                              \
  } while (false)
