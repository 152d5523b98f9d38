// Private: the MPI calls of the aggregator tier (fedrt/runtime/mpi_tier.h)
// as a table of C functions, exported by the module fedrt_mpi.so, which
// alone links MPI. `fedrt serve --mpi` loads it (dlopen, mpi_tier.cc); every
// other command, `fedrt device` above all, runs without MPI's libraries in
// its address space (docs/design/mpi-tier.md).
#ifndef FEDRT_RUNTIME_SRC_STAR_MPI_MODULE_H_
#define FEDRT_RUNTIME_SRC_STAR_MPI_MODULE_H_

#include <stdint.h>

extern "C" {

// Bumped whenever the table changes: a module of another version is refused.
#define FEDRT_MPI_MODULE_VERSION 2

// Every function returns 0 on success (MPI_SUCCESS), except abort, which
// does not return, and finalize.
struct FedrtMpiModule {
  uint32_t version;  // FEDRT_MPI_MODULE_VERSION
  // MPI_Init_thread(MPI_THREAD_FUNNELED), then this process's rank and the size of MPI_COMM_WORLD.
  int (*init)(int* rank, int* size);
  // MPI_Allgather of one int per rank.
  int (*allgather_int)(int mine, int* all);
  // MPI_Allgatherv of bytes.
  int (*allgatherv)(const void* mine, int size, void* all, const int* sizes, const int* offsets);
  // MPI_Alltoall of one int per rank pair: mine[j] to rank j, all[i] from rank i.
  int (*alltoall_int)(const int* mine, int* all);
  // MPI_Alltoallv of bytes.
  int (*alltoallv)(const void* mine, const int* sizes, const int* offsets, void* all, const int* all_sizes,
                   const int* all_offsets);
  // MPI_Gather of one int per rank to rank 0 (`all` is read on rank 0 only).
  int (*gather_int)(int mine, int* all);
  // MPI_Gatherv of bytes to rank 0 (sizes, offsets, all: rank 0 only).
  int (*gatherv)(const void* mine, int size, void* all, const int* sizes, const int* offsets);
  void (*abort)(int code);
  void (*finalize)(void);
};

// The module's one exported symbol.
const FedrtMpiModule* fedrt_mpi_module(void);
#define FEDRT_MPI_MODULE_SYMBOL "fedrt_mpi_module"

}  // extern "C"

#endif  // FEDRT_RUNTIME_SRC_STAR_MPI_MODULE_H_
