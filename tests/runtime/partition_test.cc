#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "fedrt/runtime/partition.h"

namespace fedrt {
namespace {

std::vector<uint8_t> BalancedLabels(std::size_t count, int classes) {
  std::vector<uint8_t> labels(count);
  for (std::size_t i = 0; i < count; ++i) labels[i] = static_cast<uint8_t>((i * 7 + i / 13) % static_cast<std::size_t>(classes));
  return labels;
}

void CheckEachExampleOnce(const Partition& p, std::size_t count) {
  std::vector<int> seen(count, 0);
  for (const auto& device : p) {
    for (uint32_t i : device) {
      REQUIRE(i < count);
      ++seen[i];
    }
  }
  for (std::size_t i = 0; i < count; ++i) REQUIRE(seen[i] == 1);
}

TEST_CASE("every partitioner puts every example on exactly one device") {
  const std::vector<uint8_t> labels = BalancedLabels(2003, 10);
  for (int devices : {1, 3, 7, 50}) {
    INFO(devices << " devices");
    Result<Partition> iid = PartitionIid(labels.size(), devices, 1);
    REQUIRE(iid.ok());
    CHECK(iid->size() == static_cast<std::size_t>(devices));
    CheckEachExampleOnce(*iid, labels.size());
    for (double alpha : {0.05, 0.5, 100.0}) {
      Result<Partition> dir = PartitionDirichlet(labels, 10, devices, alpha, 2);
      REQUIRE(dir.ok());
      CheckEachExampleOnce(*dir, labels.size());
    }
    Result<Partition> shards = PartitionShards(labels, devices, 2, 3);
    REQUIRE(shards.ok());
    CheckEachExampleOnce(*shards, labels.size());
  }
}

TEST_CASE("iid parts differ in size by at most one example") {
  Result<Partition> p = PartitionIid(1000, 7, 9);
  REQUIRE(p.ok());
  for (const auto& device : *p) CHECK((device.size() == 142 || device.size() == 143));
}

TEST_CASE("dirichlet label skew is measurable and grows as alpha shrinks") {
  const std::vector<uint8_t> labels = BalancedLabels(20000, 10);
  const double iid = LabelSkew(*PartitionIid(labels.size(), 20, 4), labels, 10);
  const double mild = LabelSkew(*PartitionDirichlet(labels, 10, 20, 100.0, 4), labels, 10);
  const double strong = LabelSkew(*PartitionDirichlet(labels, 10, 20, 0.1, 4), labels, 10);
  INFO("skew iid " << iid << " alpha 100 " << mild << " alpha 0.1 " << strong);
  CHECK(iid < 0.06);  // sampling noise of 1000 examples over 10 classes
  CHECK(mild < 0.1);
  CHECK(strong > 0.5);
  // With alpha 0.1 a typical device's largest class holds most of its data.
  const auto counts = LabelCounts(*PartitionDirichlet(labels, 10, 20, 0.1, 4), labels, 10);
  int dominated = 0;
  for (const auto& device : counts) {
    std::size_t total = 0, top = 0;
    for (std::size_t c : device) {
      total += c;
      top = c > top ? c : top;
    }
    if (total > 0 && top * 2 > total) ++dominated;
  }
  CHECK(dominated >= 10);
}

TEST_CASE("shards give each device about k labels") {
  const std::vector<uint8_t> labels = BalancedLabels(10000, 10);
  Result<Partition> p = PartitionShards(labels, 10, 2, 5);
  REQUIRE(p.ok());
  const auto counts = LabelCounts(*p, labels, 10);
  for (const auto& device : counts) {
    int present = 0;
    for (std::size_t c : device) present += c > 0 ? 1 : 0;
    CHECK(present >= 1);
    CHECK(present <= 4);  // two shards, each may straddle a label boundary
  }
  CHECK(LabelSkew(*p, labels, 10) > 0.6);
}

TEST_CASE("partitions depend only on the seed") {
  const std::vector<uint8_t> labels = BalancedLabels(500, 5);
  CHECK(*PartitionDirichlet(labels, 5, 4, 0.3, 11) == *PartitionDirichlet(labels, 5, 4, 0.3, 11));
  CHECK(*PartitionDirichlet(labels, 5, 4, 0.3, 11) != *PartitionDirichlet(labels, 5, 4, 0.3, 12));
  CHECK(*PartitionShards(labels, 4, 3, 1) == *PartitionShards(labels, 4, 3, 1));
}

TEST_CASE("partitioners reject bad arguments") {
  const std::vector<uint8_t> labels = {0, 1, 2, 9};
  CHECK(PartitionIid(10, 0, 1).status().code() == StatusCode::kInvalidArgument);
  CHECK(PartitionDirichlet(labels, 10, 2, 0.0, 1).status().code() == StatusCode::kInvalidArgument);
  CHECK(PartitionDirichlet(labels, 5, 2, 1.0, 1).status().code() == StatusCode::kOutOfRange);
  CHECK(PartitionShards(labels, 3, 2, 1).status().code() == StatusCode::kInvalidArgument);
  CHECK(PartitionShards(labels, 2, 0, 1).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a partition named on the command line is the partition its partitioner gives") {
  const std::vector<uint8_t> labels = BalancedLabels(600, 10);
  CHECK(*PartitionBySpec("iid", labels, 10, 4, 3) == *PartitionIid(labels.size(), 4, 3));
  CHECK(*PartitionBySpec("dirichlet:0.5", labels, 10, 4, 3) == *PartitionDirichlet(labels, 10, 4, 0.5, 3));
  CHECK(*PartitionBySpec("shards:2", labels, 10, 4, 3) == *PartitionShards(labels, 4, 2, 3));
  for (const char* bad : {"", "IID", "dirichlet:", "dirichlet:0", "dirichlet:-1", "dirichlet:1x", "shards:0",
                          "shards:1001", "shards:two", "random"}) {
    INFO(bad);
    CHECK(PartitionBySpec(bad, labels, 10, 4, 3).status().code() == StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace fedrt
