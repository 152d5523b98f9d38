// Private helpers the star roles and their hosts (RunDevice, RunAggregator,
// the C API's host conveniences) share: loading the data set with the
// training set's normalisation, cutting a device's share of it, and the
// device's defaults for its share, shuffling seed and key.
#ifndef FEDRT_RUNTIME_SRC_STAR_STAR_DATA_H_
#define FEDRT_RUNTIME_SRC_STAR_STAR_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/transport/auth.h"

namespace fedrt {
namespace star {

// Both sets of an MNIST-style directory, normalised with the training set's
// mean and standard deviation (devices and the aggregator agree on it).
Result<TrainTestData> LoadNormalized(const std::string& directory);

// The examples of device `index` of `devices` under `partition`
// ("iid", "dirichlet:<alpha>", "shards:<k>").
Result<std::vector<uint32_t>> DeviceShare(const Dataset& train, const std::string& partition, int devices,
                                          int index, uint64_t seed);

// A device's share of the training set of an MNIST-style directory, loaded
// without the rest: the labels of both sets are read (the partition and the
// class count need them), the training images are streamed once, and only
// the share's examples are kept, in share order, with the whole training
// set's normalisation (the same bits as LoadNormalized). The test set's
// images are not read. Training over `data` with `share` (0 .. n-1) visits
// the same examples in the same order as the full set with DeviceShare's
// indices. Memory: the share, not the data set.
struct DeviceData {
  Dataset data;
  std::vector<uint32_t> share;
};
Result<DeviceData> LoadDeviceShare(const std::string& directory, const std::string& partition, int devices,
                                   int index, uint64_t seed);

// The share a device takes when none is given: the number its id ends in,
// modulo `devices` ("dev-7" of 4 devices: share 3). kInvalidArgument when
// the id ends in no number.
Result<int> ShareIndexFromId(const std::string& device_id, int devices);

// The seed that orders a device's examples: the partition seed and the
// device's sender id, so devices of one partition shuffle differently and a
// device shuffles the same way in every run.
uint64_t DeviceShuffleSeed(uint64_t partition_seed, const std::string& device_id);

// A device's id and key from its key file (transport::KeyStore::LoadFile):
// `device_id`'s line, or with an empty id the file's only entry.
struct DeviceKey {
  std::string device_id;
  transport::Key key;
};
Result<DeviceKey> LoadDeviceKey(const std::string& key_file, const std::string& device_id);

// Milliseconds of a monotonic clock.
uint64_t NowMs();

}  // namespace star
}  // namespace fedrt

#endif  // FEDRT_RUNTIME_SRC_STAR_STAR_DATA_H_
