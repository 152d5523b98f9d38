#include "star/star_data.h"

#include <chrono>
#include <cstdlib>

#include "fedrt/runtime/partition.h"

namespace fedrt {
namespace star {

Result<TrainTestData> LoadNormalized(const std::string& directory) {
  Result<TrainTestData> data = LoadMnistStyleDirectory(directory);
  if (!data.ok()) return data.status();
  const Normalization norm = ComputeNormalization(data->train);
  Normalize(data->train, norm);
  Normalize(data->test, norm);
  return data;
}

Result<std::vector<uint32_t>> DeviceShare(const Dataset& train, const std::string& partition, int devices,
                                          int index, uint64_t seed) {
  if (devices < 1 || index < 0 || index >= devices) {
    return InvalidArgument("device index " + std::to_string(index) + " is outside 0.." +
                           std::to_string(devices - 1));
  }
  Result<Partition> parts = Status(InvalidArgument("unknown partition '" + partition +
                                                   "' (iid, dirichlet:<alpha>, shards:<k>)"));
  if (partition == "iid") {
    parts = PartitionIid(train.count, devices, seed);
  } else if (partition.rfind("dirichlet:", 0) == 0) {
    char* end = nullptr;
    const double alpha = std::strtod(partition.c_str() + 10, &end);
    if (end == partition.c_str() + 10 || *end != '\0' || !(alpha > 0)) {
      return InvalidArgument("dirichlet needs a positive alpha: '" + partition + "'");
    }
    parts = PartitionDirichlet(train.labels, train.num_classes, devices, alpha, seed);
  } else if (partition.rfind("shards:", 0) == 0) {
    char* end = nullptr;
    const long k = std::strtol(partition.c_str() + 7, &end, 10);
    if (end == partition.c_str() + 7 || *end != '\0' || k < 1 || k > 1000) {
      return InvalidArgument("shards needs a count 1..1000: '" + partition + "'");
    }
    parts = PartitionShards(train.labels, devices, static_cast<int>(k), seed);
  }
  if (!parts.ok()) return parts.status();
  return std::move((*parts)[static_cast<std::size_t>(index)]);
}

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace star
}  // namespace fedrt
