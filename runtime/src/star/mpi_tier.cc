// The aggregator tier on MPI (fedrt/runtime/mpi_tier.h): MPI_COMM_WORLD's
// ranks, one AllGather (sizes, then the bytes with MPI_Allgatherv). The MPI
// calls are in the module fedrt_mpi.so (star/mpi_module.h), loaded here on
// the first StartMpiTier(): only `fedrt serve --mpi` maps MPI's libraries.
#include "fedrt/runtime/mpi_tier.h"

#include <dlfcn.h>
#include <unistd.h>

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
    if (mine.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      return InvalidArgument("aggregator tier: " + std::to_string(mine.size()) + " bytes exceed MPI's int count");
    }
    int size = static_cast<int>(mine.size());
    std::vector<int> sizes(static_cast<std::size_t>(size_));
    if (mpi->allgather_int(size, sizes.data()) != 0) return Status(StatusCode::kUnavailable, "MPI_Allgather failed");
    std::vector<int> offsets(sizes.size());
    int64_t total = 0;
    for (std::size_t r = 0; r < sizes.size(); ++r) {
      offsets[r] = static_cast<int>(total);
      total += sizes[r];
      if (total > std::numeric_limits<int>::max()) return InvalidArgument("aggregator tier: a gather over 2 GiB");
    }
    std::vector<uint8_t> bytes(static_cast<std::size_t>(total));
    if (mpi->allgatherv(mine.data(), size, bytes.data(), sizes.data(), offsets.data()) != 0) {
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
