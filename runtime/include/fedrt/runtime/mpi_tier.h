// The aggregator tier on MPI (aggregator_tier.h): `mpirun -np K fedrt serve
// --mpi` makes K ranks of MPI_COMM_WORLD the K aggregator ranks: AllGather
// is MPI_Allgather of the sizes then MPI_Allgatherv of the bytes, AllToAll
// MPI_Alltoall then MPI_Alltoallv, GatherToRank0 MPI_Gather then
// MPI_Gatherv. Built only with FEDRT_WITH_MPI and an MPI found (the
// fedrt_mpi library); MPI's own failure model holds: a rank that dies ends
// the job.
//
// Ownership: the caller owns the tier; MPI is finalised when it is
// destroyed. Thread-safety: MPI is initialised for one thread
// (MPI_THREAD_FUNNELED): every call from the thread that created it.
#ifndef FEDRT_RUNTIME_MPI_TIER_H_
#define FEDRT_RUNTIME_MPI_TIER_H_

#include <memory>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/aggregator_tier.h"

namespace fedrt {

// Initialises MPI and gives this process's rank. kFailedPrecondition when
// the process was not started by an MPI launcher (mpirun), or once a tier
// has been made in this process.
Result<std::unique_ptr<AggregatorTier>> StartMpiTier();

// Ends every rank of the job with `code` (MPI_Abort): a rank that fails
// must not leave the others waiting in a collective.
[[noreturn]] void AbortMpiJob(int code);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_MPI_TIER_H_
