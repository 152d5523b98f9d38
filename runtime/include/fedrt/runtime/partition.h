// Splitting a training set across N simulated devices, so federated runs can
// be IID or non-IID like real fleets. Every partitioner puts each example
// index in [0, count) on exactly one device; the result depends only on the
// inputs and the seed. Devices may receive no examples under strong skew
// (small alpha, few examples); callers that need a minimum check sizes.
//
//   IID:        a seeded shuffle dealt out in near-equal parts.
//   Dirichlet:  for each class, proportions p ~ Dir(alpha, ..., alpha) over
//               the devices, and that class's examples split by p. Small
//               alpha (0.1) gives each device a few dominant labels; large
//               alpha (100) approaches IID.
//   Shards:     examples sorted by label, cut into devices * k equal shards,
//               k random shards per device: each device sees about k labels.
//
// Thread-safety: pure functions.
#ifndef FEDRT_RUNTIME_PARTITION_H_
#define FEDRT_RUNTIME_PARTITION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt {

// partition[d] lists device d's example indices in increasing order.
using Partition = std::vector<std::vector<uint32_t>>;

Result<Partition> PartitionIid(std::size_t count, int devices, uint64_t seed);
Result<Partition> PartitionDirichlet(const std::vector<uint8_t>& labels, int num_classes, int devices,
                                     double alpha, uint64_t seed);
Result<Partition> PartitionShards(const std::vector<uint8_t>& labels, int devices,
                                  int shards_per_device, uint64_t seed);
// The partition a command line names: "iid", "dirichlet:<alpha>" (alpha > 0)
// or "shards:<k>" (k in 1..1000); kInvalidArgument for anything else.
Result<Partition> PartitionBySpec(const std::string& spec, const std::vector<uint8_t>& labels, int num_classes,
                                  int devices, uint64_t seed);

// counts[d][c]: examples of class c on device d.
std::vector<std::vector<std::size_t>> LabelCounts(const Partition& partition,
                                                  const std::vector<uint8_t>& labels, int num_classes);
// How far device label distributions are from the global one: the mean over
// non-empty devices of the total-variation distance (0 = IID, near 1 =
// every device holds labels that are rare overall).
double LabelSkew(const Partition& partition, const std::vector<uint8_t>& labels, int num_classes);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_PARTITION_H_
