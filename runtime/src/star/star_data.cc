#include "star/star_data.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "fedrt/runtime/device_client.h"
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

Result<int> ShareIndexFromId(const std::string& device_id, int devices) {
  std::size_t digits = device_id.size();
  while (digits > 0 && device_id[digits - 1] >= '0' && device_id[digits - 1] <= '9') --digits;
  if (digits == device_id.size()) return InvalidArgument("give --index: the id '" + device_id + "' ends in no number");
  // Only the last nine digits count, so the number fits an int.
  const std::size_t first = device_id.size() - std::min<std::size_t>(device_id.size() - digits, 9);
  return std::atoi(device_id.c_str() + first) % std::max(1, devices);
}

uint64_t DeviceShuffleSeed(uint64_t partition_seed, const std::string& device_id) {
  return partition_seed * 1000003u + DeviceSenderId(device_id);
}

Result<DeviceKey> LoadDeviceKey(const std::string& key_file, const std::string& device_id) {
  Result<transport::KeyStore> keys = transport::KeyStore::LoadFile(key_file);
  if (!keys.ok()) return keys.status();
  DeviceKey found;
  found.device_id = device_id;
  if (found.device_id.empty() && keys->SingleDeviceId() != nullptr) found.device_id = *keys->SingleDeviceId();
  if (!transport::IsValidDeviceId(found.device_id)) {
    return InvalidArgument("device id '" + found.device_id + "' is not valid");
  }
  const transport::Key* key = keys->Find(found.device_id);
  if (key == nullptr) return NotFound(key_file + ": no key for device '" + found.device_id + "'");
  found.key = *key;
  return found;
}

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace star
}  // namespace fedrt
