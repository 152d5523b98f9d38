// Private helpers the star roles share: loading the data set with the
// training set's normalisation, and cutting a device's share of it.
#ifndef FEDRT_RUNTIME_SRC_STAR_STAR_DATA_H_
#define FEDRT_RUNTIME_SRC_STAR_STAR_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/dataset.h"

namespace fedrt {
namespace star {

// Both sets of an MNIST-style directory, normalised with the training set's
// mean and standard deviation (devices and the aggregator agree on it).
Result<TrainTestData> LoadNormalized(const std::string& directory);

// The examples of device `index` of `devices` under `partition`
// ("iid", "dirichlet:<alpha>", "shards:<k>").
Result<std::vector<uint32_t>> DeviceShare(const Dataset& train, const std::string& partition, int devices,
                                          int index, uint64_t seed);

// Milliseconds of a monotonic clock.
uint64_t NowMs();

}  // namespace star
}  // namespace fedrt

#endif  // FEDRT_RUNTIME_SRC_STAR_STAR_DATA_H_
