// The aggregator tier on MPI (fedrt/runtime/mpi_tier.h): MPI_COMM_WORLD's
// ranks, one AllGather (sizes, then the bytes with MPI_Allgatherv).
#include "fedrt/runtime/mpi_tier.h"

#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

namespace fedrt {

namespace {

bool started = false;

// Set by the launchers of Open MPI, MPICH / Hydra and PMIx.
bool UnderLauncher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

class MpiTier final : public AggregatorTier {
 public:
  MpiTier(int rank, int size) : rank_(rank), size_(size) {}
  ~MpiTier() override { MPI_Finalize(); }
  MpiTier(const MpiTier&) = delete;
  MpiTier& operator=(const MpiTier&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status AllGather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) override {
    if (mine.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      return InvalidArgument("aggregator tier: " + std::to_string(mine.size()) + " bytes exceed MPI's int count");
    }
    int size = static_cast<int>(mine.size());
    std::vector<int> sizes(static_cast<std::size_t>(size_));
    if (MPI_Allgather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS) {
      return Status(StatusCode::kUnavailable, "MPI_Allgather failed");
    }
    std::vector<int> offsets(sizes.size());
    int64_t total = 0;
    for (std::size_t r = 0; r < sizes.size(); ++r) {
      offsets[r] = static_cast<int>(total);
      total += sizes[r];
      if (total > std::numeric_limits<int>::max()) return InvalidArgument("aggregator tier: a gather over 2 GiB");
    }
    std::vector<uint8_t> bytes(static_cast<std::size_t>(total));
    if (MPI_Allgatherv(mine.data(), size, MPI_BYTE, bytes.data(), sizes.data(), offsets.data(), MPI_BYTE,
                       MPI_COMM_WORLD) != MPI_SUCCESS) {
      return Status(StatusCode::kUnavailable, "MPI_Allgatherv failed");
    }
    all->assign(sizes.size(), {});
    for (std::size_t r = 0; r < sizes.size(); ++r) {
      (*all)[r].assign(bytes.begin() + offsets[r], bytes.begin() + offsets[r] + sizes[r]);
    }
    return Status::Ok();
  }

 private:
  const int rank_, size_;
};

}  // namespace

void AbortMpiJob(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; should it, this rank still ends
}

Result<std::unique_ptr<AggregatorTier>> StartMpiTier() {
  if (started) return Status(StatusCode::kFailedPrecondition, "MPI was started once in this process already");
  if (!UnderLauncher()) {
    return Status(StatusCode::kFailedPrecondition,
                  "--mpi needs an MPI launcher: start it as `mpirun -np K fedrt serve --mpi ...`");
  }
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    return Status(StatusCode::kUnavailable, "MPI_Init_thread failed");
  }
  started = true;
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::unique_ptr<AggregatorTier>(new MpiTier(rank, size));
}

}  // namespace fedrt
