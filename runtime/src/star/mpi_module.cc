// The module fedrt_mpi.so (star/mpi_module.h): MPI_COMM_WORLD's collectives
// for the aggregator tier, and nothing of fedrt.
#include "star/mpi_module.h"

#include <mpi.h>

namespace {

int Init(int* rank, int* size) {
  int provided = 0;
  const int status = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (status != MPI_SUCCESS) return status;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  return MPI_SUCCESS;
}

int AllgatherInt(int mine, int* all) { return MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD); }

int Allgatherv(const void* mine, int size, void* all, const int* sizes, const int* offsets) {
  return MPI_Allgatherv(mine, size, MPI_BYTE, all, sizes, offsets, MPI_BYTE, MPI_COMM_WORLD);
}

int AlltoallInt(const int* mine, int* all) {
  return MPI_Alltoall(mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
}

int Alltoallv(const void* mine, const int* sizes, const int* offsets, void* all, const int* all_sizes,
              const int* all_offsets) {
  return MPI_Alltoallv(mine, sizes, offsets, MPI_BYTE, all, all_sizes, all_offsets, MPI_BYTE, MPI_COMM_WORLD);
}

int GatherInt(int mine, int* all) { return MPI_Gather(&mine, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD); }

int Gatherv(const void* mine, int size, void* all, const int* sizes, const int* offsets) {
  return MPI_Gatherv(mine, size, MPI_BYTE, all, sizes, offsets, MPI_BYTE, 0, MPI_COMM_WORLD);
}

void Abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

void Finalize() { MPI_Finalize(); }

const FedrtMpiModule kModule = {FEDRT_MPI_MODULE_VERSION, Init, AllgatherInt, Allgatherv, AlltoallInt, Alltoallv,
                                 GatherInt, Gatherv, Abort, Finalize};

}  // namespace

extern "C" __attribute__((visibility("default"))) const FedrtMpiModule* fedrt_mpi_module(void) { return &kModule; }
