// The aggregator tier on MPI (fedrt/runtime/mpi_tier.h): MPI_COMM_WORLD's
// ranks: AllGather (sizes, then the bytes with MPI_Allgatherv), AllToAll
// (MPI_Alltoall, MPI_Alltoallv) and GatherToRank0 (MPI_Gather, MPI_Gatherv).
// The MPI calls are in the module fedrt_mpi.so (star/mpi_module.h), loaded
// here on the first StartMpiTier(): only `fedrt serve --mpi` maps MPI's
// libraries.
#include "fedrt/runtime/mpi_tier.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "star/mpi_module.h"

namespace fedrt {

namespace {

bool started = false;
const FedrtMpiModule* mpi = nullptr;

// Set by the launchers of Open MPI, MPICH / Hydra and PMIx.
bool UnderLauncher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

// The directory of this executable ("" when unknown).
std::string ExecutableDirectory() {
  std::string path(4096, '\0');
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0) return "";
  path.resize(static_cast<std::size_t>(n));
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// The module: beside the executable (a build tree), or where the install
// puts it relative to the executable (FEDRT_MPI_MODULE_DIR, e.g.
// ../lib/x86_64-linux-gnu/fedrt). RTLD_GLOBAL: Open MPI's own plugins
// resolve libmpi's symbols through the global scope.
Result<const FedrtMpiModule*> LoadModule() {
  if (mpi != nullptr) return mpi;
  const std::string directory = ExecutableDirectory();
  std::string errors;
  for (const std::string& path : {directory + "/" FEDRT_MPI_MODULE_FILE,
                                  directory + "/" FEDRT_MPI_MODULE_DIR "/" FEDRT_MPI_MODULE_FILE}) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      errors += std::string(errors.empty() ? "" : "; ") + (error != nullptr ? error : path + ": cannot be loaded");
      continue;
    }
    auto entry = reinterpret_cast<const FedrtMpiModule* (*)()>(dlsym(handle, FEDRT_MPI_MODULE_SYMBOL));
    const FedrtMpiModule* module = entry != nullptr ? entry() : nullptr;
    if (module == nullptr || module->version != FEDRT_MPI_MODULE_VERSION) {
      dlclose(handle);
      return Status(StatusCode::kFailedPrecondition,
                    path + " is not this fedrt's MPI module (" + FEDRT_MPI_MODULE_SYMBOL + " version " +
                        std::to_string(FEDRT_MPI_MODULE_VERSION) + ")");
    }
    mpi = module;
    return mpi;
  }
  return Status(StatusCode::kFailedPrecondition, "cannot load the MPI tier's module: " + errors);
}

class MpiTier final : public AggregatorTier {
 public:
  MpiTier(int rank, int size) : rank_(rank), size_(size) {}
  ~MpiTier() override { mpi->finalize(); }
  MpiTier(const MpiTier&) = delete;
  MpiTier& operator=(const MpiTier&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status AllGather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) override {
    int size = 0;
    FEDRT_RETURN_IF_ERROR(IntCount(mine.size(), &size));
    std::vector<int> sizes(static_cast<std::size_t>(size_)), offsets;
    if (mpi->allgather_int(size, sizes.data()) != 0) return Status(StatusCode::kUnavailable, "MPI_Allgather failed");
    std::vector<uint8_t> bytes;
    FEDRT_RETURN_IF_ERROR(Lay(sizes, &offsets, &bytes));
    if (mpi->allgatherv(mine.data(), size, bytes.data(), sizes.data(), offsets.data()) != 0) {
      return Status(StatusCode::kUnavailable, "MPI_Allgatherv failed");
    }
    Split(bytes, sizes, offsets, all);
    return Status::Ok();
  }

  Status AllToAll(const std::vector<std::vector<uint8_t>>& to, std::vector<std::vector<uint8_t>>* from) override {
    if (to.size() != static_cast<std::size_t>(size_)) {
      return InvalidArgument("aggregator tier: " + std::to_string(to.size()) + " parts for " + std::to_string(size_) +
                             " ranks");
    }
    std::vector<int> sizes(to.size()), offsets, from_sizes(to.size()), from_offsets;
    for (std::size_t j = 0; j < to.size(); ++j) FEDRT_RETURN_IF_ERROR(IntCount(to[j].size(), &sizes[j]));
    std::vector<uint8_t> bytes, from_bytes;
    FEDRT_RETURN_IF_ERROR(Lay(sizes, &offsets, &bytes));
    for (std::size_t j = 0; j < to.size(); ++j) std::copy(to[j].begin(), to[j].end(), bytes.begin() + offsets[j]);
    if (mpi->alltoall_int(sizes.data(), from_sizes.data()) != 0) {
      return Status(StatusCode::kUnavailable, "MPI_Alltoall failed");
    }
    FEDRT_RETURN_IF_ERROR(Lay(from_sizes, &from_offsets, &from_bytes));
    if (mpi->alltoallv(bytes.data(), sizes.data(), offsets.data(), from_bytes.data(), from_sizes.data(),
                       from_offsets.data()) != 0) {
      return Status(StatusCode::kUnavailable, "MPI_Alltoallv failed");
    }
    Split(from_bytes, from_sizes, from_offsets, from);
    return Status::Ok();
  }

  Status GatherToRank0(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) override {
    int size = 0;
    FEDRT_RETURN_IF_ERROR(IntCount(mine.size(), &size));
    std::vector<int> sizes(static_cast<std::size_t>(size_)), offsets;
    if (mpi->gather_int(size, sizes.data()) != 0) return Status(StatusCode::kUnavailable, "MPI_Gather failed");
    std::vector<uint8_t> bytes;
    // Only rank 0 receives: the others lay out nothing (their sizes are not set).
    if (rank_ != 0) sizes.assign(sizes.size(), 0);
    FEDRT_RETURN_IF_ERROR(Lay(sizes, &offsets, &bytes));
    if (mpi->gatherv(mine.data(), size, bytes.data(), sizes.data(), offsets.data()) != 0) {
      return Status(StatusCode::kUnavailable, "MPI_Gatherv failed");
    }
    all->clear();
    if (rank_ == 0) Split(bytes, sizes, offsets, all);
    return Status::Ok();
  }

 private:
  // MPI counts are ints.
  static Status IntCount(std::size_t bytes, int* count) {
    if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      return InvalidArgument("aggregator tier: " + std::to_string(bytes) + " bytes exceed MPI's int count");
    }
    *count = static_cast<int>(bytes);
    return Status::Ok();
  }
  // The offsets of parts of `sizes` laid end to end, and room for them.
  static Status Lay(const std::vector<int>& sizes, std::vector<int>* offsets, std::vector<uint8_t>* bytes) {
    offsets->resize(sizes.size());
    int64_t total = 0;
    for (std::size_t r = 0; r < sizes.size(); ++r) {
      (*offsets)[r] = static_cast<int>(total);
      total += sizes[r];
      if (total > std::numeric_limits<int>::max()) return InvalidArgument("aggregator tier: an exchange over 2 GiB");
    }
    bytes->resize(static_cast<std::size_t>(total));
    return Status::Ok();
  }
  static void Split(const std::vector<uint8_t>& bytes, const std::vector<int>& sizes, const std::vector<int>& offsets,
                    std::vector<std::vector<uint8_t>>* parts) {
    parts->assign(sizes.size(), {});
    for (std::size_t r = 0; r < sizes.size(); ++r) {
      (*parts)[r].assign(bytes.begin() + offsets[r], bytes.begin() + offsets[r] + sizes[r]);
    }
  }

  const int rank_, size_;
};

}  // namespace

void AbortMpiJob(int code) {
  if (mpi != nullptr) mpi->abort(code);
  std::_Exit(code);  // MPI_Abort does not return; should it, this rank still ends
}

Result<std::unique_ptr<AggregatorTier>> StartMpiTier() {
  if (started) return Status(StatusCode::kFailedPrecondition, "MPI was started once in this process already");
  if (!UnderLauncher()) {
    return Status(StatusCode::kFailedPrecondition,
                  "--mpi needs an MPI launcher: start it as `mpirun -np K fedrt serve --mpi ...`");
  }
  Result<const FedrtMpiModule*> module = LoadModule();
  if (!module.ok()) return module.status();
  int rank = 0, size = 0;
  if ((*module)->init(&rank, &size) != 0) return Status(StatusCode::kUnavailable, "MPI_Init_thread failed");
  started = true;
  return std::unique_ptr<AggregatorTier>(new MpiTier(rank, size));
}

}  // namespace fedrt
