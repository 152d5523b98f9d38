#include "star/star_data.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "fedrt/runtime/device_client.h"
#include "fedrt/runtime/partition.h"

namespace fedrt {
namespace star {

Result<TrainTestData> LoadNormalized(const std::string& directory) {
  Result<TrainTestData> data = LoadDataSet(directory);
  if (!data.ok()) return data.status();
  NormalizeWithTrainingSet(*data);
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

namespace {

// NumPy and CSV data sets: loaded whole, then the share is copied out.
Result<DeviceData> CutDeviceShare(const std::string& path, const std::string& partition, int devices, int index,
                                  uint64_t seed) {
  Result<TrainTestData> all = LoadNormalized(path);
  if (!all.ok()) return all.status();
  const Dataset& train = all->train;
  Result<std::vector<uint32_t>> share = DeviceShare(train, partition, devices, index, seed);
  if (!share.ok()) return share.status();
  DeviceData out;
  Dataset& data = out.data;
  data.count = share->size();
  data.channels = train.channels;
  data.height = train.height;
  data.width = train.width;
  data.num_classes = train.num_classes;
  data.normalization = train.normalization;
  const std::size_t size = train.example_size();
  for (uint32_t i : *share) {
    data.labels.push_back(train.labels[i]);
    if (train.features.empty()) {
      data.pixels.insert(data.pixels.end(), train.pixels.begin() + static_cast<std::ptrdiff_t>(i * size),
                         train.pixels.begin() + static_cast<std::ptrdiff_t>((i + 1) * size));
    } else {
      data.features.insert(data.features.end(), train.features.begin() + static_cast<std::ptrdiff_t>(i * size),
                           train.features.begin() + static_cast<std::ptrdiff_t>((i + 1) * size));
    }
  }
  out.share.resize(share->size());
  for (std::size_t i = 0; i < out.share.size(); ++i) out.share[i] = static_cast<uint32_t>(i);
  return out;
}

}  // namespace

Result<DeviceData> LoadDeviceShare(const std::string& directory, const std::string& partition, int devices,
                                   int index, uint64_t seed) {
  Result<DataSetKind> kind = DataSetKindOf(directory);
  if (!kind.ok()) return kind.status();
  if (*kind != DataSetKind::kIdxDirectory) return CutDeviceShare(directory, partition, devices, index, seed);
  const std::string images_path = MnistStyleFile(directory, "train-images-idx3-ubyte");
  const std::string labels_path = MnistStyleFile(directory, "train-labels-idx1-ubyte");
  Result<IdxArray> labels = ReadIdxFile(labels_path);
  if (!labels.ok()) return labels.status();
  if (labels->dims.size() != 1) return Corrupt(labels_path + ": labels must have 1 dimension");
  Result<IdxArray> test_labels = ReadIdxFile(MnistStyleFile(directory, "t10k-labels-idx1-ubyte"));
  if (!test_labels.ok()) return test_labels.status();
  // The class count as LoadMnistStyleDirectory has it: the largest label of both sets.
  int max_label = -1;
  for (uint8_t label : labels->data) max_label = std::max<int>(max_label, label);
  for (uint8_t label : test_labels->data) max_label = std::max<int>(max_label, label);

  DeviceData out;
  Dataset& data = out.data;
  data.count = labels->data.size();
  data.labels = std::move(labels->data);
  data.num_classes = max_label + 1;
  Result<std::vector<uint32_t>> share = DeviceShare(data, partition, devices, index, seed);
  if (!share.ok()) return share.status();
  // Where each kept example goes: (file row, position in the share), by row.
  std::vector<std::pair<uint32_t, uint32_t>> wanted;
  wanted.reserve(share->size());
  for (std::size_t i = 0; i < share->size(); ++i) wanted.emplace_back((*share)[i], static_cast<uint32_t>(i));
  std::sort(wanted.begin(), wanted.end());

  std::vector<uint32_t> dims;
  std::size_t example_size = 0, next = 0;
  NormalizationAccumulator sums;
  const Status streamed = StreamIdxRows(images_path, &dims, [&](std::size_t row, const uint8_t* bytes) {
    if (row == 0) {  // the checks of LoadIdxDataset, before anything is kept
      if (dims.size() != 3) return Corrupt(images_path + ": images must have 3 dimensions");
      if (dims[0] != data.count) {
        return Corrupt(labels_path + ": " + std::to_string(data.count) + " labels for " + std::to_string(dims[0]) +
                       " images in " + images_path);
      }
      if (dims[1] == 0 || dims[2] == 0 || dims[1] > 65536 || dims[2] > 65536) {
        return Corrupt(images_path + ": image size out of range");
      }
      data.height = static_cast<int>(dims[1]);
      data.width = static_cast<int>(dims[2]);
      example_size = data.example_size();
      data.pixels.resize(wanted.size() * example_size);
    }
    sums.Add(bytes, example_size);
    for (; next < wanted.size() && wanted[next].first == row; ++next) {
      std::copy(bytes, bytes + example_size, data.pixels.begin() + static_cast<std::ptrdiff_t>(wanted[next].second * example_size));
    }
    return Status::Ok();
  });
  if (!streamed.ok()) return streamed;
  if (dims.empty() || dims[0] != data.count || (data.count > 0 && example_size == 0)) {
    return Corrupt(images_path + ": " + std::to_string(dims.empty() ? 0 : dims[0]) + " images for " +
                   std::to_string(data.count) + " labels in " + labels_path);
  }
  // Keep the share's labels only, in share order; the share becomes 0 .. n-1.
  std::vector<uint8_t> kept(share->size());
  for (std::size_t i = 0; i < share->size(); ++i) kept[i] = data.labels[(*share)[i]];
  data.labels = std::move(kept);
  data.count = share->size();
  Normalize(data, sums.Result());
  out.share.resize(share->size());
  for (std::size_t i = 0; i < out.share.size(); ++i) out.share[i] = static_cast<uint32_t>(i);
  return out;
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
