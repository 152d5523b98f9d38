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
  Result<Partition> parts = PartitionBySpec(partition, train.labels, train.num_classes, devices, seed);
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
