#include "fedrt/runtime/partition.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>

#include "train/random.h"

namespace fedrt {
namespace {

constexpr uint64_t kPartitionStream = 3;  // Rng stream of partitioning
constexpr int kMaxDevices = 1 << 20;

Status CheckDevices(int devices, std::size_t count) {
  if (devices < 1 || devices > kMaxDevices) return InvalidArgument("device count must be in [1, 2^20]");
  if (count > UINT32_MAX) return OutOfRange("more examples than 32-bit indices can address");
  return Status::Ok();
}

void SortEach(Partition& p) {
  for (auto& indices : p) std::sort(indices.begin(), indices.end());
}

}  // namespace

Result<Partition> PartitionIid(std::size_t count, int devices, uint64_t seed) {
  FEDRT_RETURN_IF_ERROR(CheckDevices(devices, count));
  std::vector<uint32_t> order(count);
  std::iota(order.begin(), order.end(), 0u);
  Rng rng(seed, kPartitionStream);
  rng.Shuffle(order.data(), order.size());
  Partition p(static_cast<std::size_t>(devices));
  const std::size_t d = static_cast<std::size_t>(devices);
  for (std::size_t i = 0; i < count; ++i) p[i % d].push_back(order[i]);
  SortEach(p);
  return p;
}

Result<Partition> PartitionDirichlet(const std::vector<uint8_t>& labels, int num_classes, int devices,
                                     double alpha, uint64_t seed) {
  FEDRT_RETURN_IF_ERROR(CheckDevices(devices, labels.size()));
  if (!(alpha > 0.0) || !std::isfinite(alpha)) return InvalidArgument("Dirichlet alpha must be positive");
  if (num_classes < 1 || num_classes > 256) return InvalidArgument("class count must be in [1, 256]");
  std::vector<std::vector<uint32_t>> by_class(static_cast<std::size_t>(num_classes));
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= num_classes) {
      return OutOfRange("label " + std::to_string(labels[i]) + " of example " + std::to_string(i) +
                        " is not below " + std::to_string(num_classes));
    }
    by_class[labels[i]].push_back(static_cast<uint32_t>(i));
  }
  Rng rng(seed, kPartitionStream);
  const std::size_t d = static_cast<std::size_t>(devices);
  Partition p(d);
  std::vector<double> share(d);
  for (auto& members : by_class) {
    rng.Shuffle(members.data(), members.size());
    double total = 0.0;
    for (double& s : share) total += (s = rng.Gamma(alpha));
    // Cut points from the cumulative proportions; the last device takes the
    // remainder, so every example is placed exactly once.
    std::size_t start = 0;
    double cumulative = 0.0;
    for (std::size_t k = 0; k < d; ++k) {
      cumulative += share[k];
      std::size_t end = k + 1 == d || total <= 0.0
                            ? members.size()
                            : static_cast<std::size_t>(std::floor(cumulative / total * static_cast<double>(members.size())));
      end = std::min(std::max(end, start), members.size());
      p[k].insert(p[k].end(), members.begin() + static_cast<std::ptrdiff_t>(start),
                  members.begin() + static_cast<std::ptrdiff_t>(end));
      start = end;
    }
  }
  SortEach(p);
  return p;
}

Result<Partition> PartitionShards(const std::vector<uint8_t>& labels, int devices, int shards_per_device,
                                  uint64_t seed) {
  FEDRT_RETURN_IF_ERROR(CheckDevices(devices, labels.size()));
  if (shards_per_device < 1) return InvalidArgument("shards per device must be positive");
  const std::size_t shards = static_cast<std::size_t>(devices) * static_cast<std::size_t>(shards_per_device);
  if (shards > labels.size()) return InvalidArgument("more shards than examples");
  Rng rng(seed, kPartitionStream);
  std::vector<uint32_t> order(labels.size());
  std::iota(order.begin(), order.end(), 0u);
  rng.Shuffle(order.data(), order.size());  // random order within each label
  std::stable_sort(order.begin(), order.end(), [&labels](uint32_t a, uint32_t b) { return labels[a] < labels[b]; });
  std::vector<uint32_t> shard_ids(shards);
  std::iota(shard_ids.begin(), shard_ids.end(), 0u);
  rng.Shuffle(shard_ids.data(), shard_ids.size());
  Partition p(static_cast<std::size_t>(devices));
  for (std::size_t s = 0; s < shards; ++s) {
    const std::size_t id = shard_ids[s];
    // Shard `id` covers [id * n / shards, (id + 1) * n / shards).
    const std::size_t begin = id * labels.size() / shards;
    const std::size_t end = (id + 1) * labels.size() / shards;
    auto& device = p[s / static_cast<std::size_t>(shards_per_device)];
    device.insert(device.end(), order.begin() + static_cast<std::ptrdiff_t>(begin),
                  order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  SortEach(p);
  return p;
}

Result<Partition> PartitionBySpec(const std::string& spec, const std::vector<uint8_t>& labels, int num_classes,
                                  int devices, uint64_t seed) {
  if (spec == "iid") return PartitionIid(labels.size(), devices, seed);
  if (spec.rfind("dirichlet:", 0) == 0) {
    char* end = nullptr;
    const double alpha = std::strtod(spec.c_str() + 10, &end);
    if (end == spec.c_str() + 10 || *end != '\0' || !(alpha > 0)) {
      return InvalidArgument("dirichlet needs a positive alpha: '" + spec + "'");
    }
    return PartitionDirichlet(labels, num_classes, devices, alpha, seed);
  }
  if (spec.rfind("shards:", 0) == 0) {
    char* end = nullptr;
    const long k = std::strtol(spec.c_str() + 7, &end, 10);
    if (end == spec.c_str() + 7 || *end != '\0' || k < 1 || k > 1000) {
      return InvalidArgument("shards needs a count 1..1000: '" + spec + "'");
    }
    return PartitionShards(labels, devices, static_cast<int>(k), seed);
  }
  return InvalidArgument("unknown partition '" + spec + "' (iid, dirichlet:<alpha>, shards:<k>)");
}

std::vector<std::vector<std::size_t>> LabelCounts(const Partition& partition,
                                                  const std::vector<uint8_t>& labels, int num_classes) {
  std::vector<std::vector<std::size_t>> counts(partition.size(),
                                               std::vector<std::size_t>(static_cast<std::size_t>(num_classes)));
  for (std::size_t d = 0; d < partition.size(); ++d) {
    for (uint32_t i : partition[d]) {
      if (i < labels.size() && labels[i] < num_classes) ++counts[d][labels[i]];
    }
  }
  return counts;
}

double LabelSkew(const Partition& partition, const std::vector<uint8_t>& labels, int num_classes) {
  const auto counts = LabelCounts(partition, labels, num_classes);
  std::vector<double> global(static_cast<std::size_t>(num_classes), 0.0);
  double all = 0.0;
  for (const auto& device : counts) {
    for (std::size_t c = 0; c < device.size(); ++c) global[c] += static_cast<double>(device[c]);
  }
  for (double g : global) all += g;
  if (all == 0.0) return 0.0;
  double sum = 0.0;
  int used = 0;
  for (const auto& device : counts) {
    double n = 0.0;
    for (std::size_t c : device) n += static_cast<double>(c);
    if (n == 0.0) continue;
    double tv = 0.0;
    for (std::size_t c = 0; c < device.size(); ++c) tv += std::abs(static_cast<double>(device[c]) / n - global[c] / all);
    sum += 0.5 * tv;
    ++used;
  }
  return used == 0 ? 0.0 : sum / used;
}

}  // namespace fedrt
