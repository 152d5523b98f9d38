// Level tables (fedrt/codecs/levels.h): the fixed families and validation.
// The fitting (ALQ coordinate descent, AMQ multiplier search) lives in
// level_fit.cc.
#include <algorithm>
#include <functional>
#include <string>

#include "fedrt/codecs/levels.h"

namespace fedrt {

LevelTable UniformLevels(int s) {
  LevelTable table;
  if (s < 1) return table;
  table.levels.resize(static_cast<std::size_t>(s) + 1);
  for (int j = 0; j <= s; ++j) table.levels[static_cast<std::size_t>(j)] = static_cast<float>(j) / static_cast<float>(s);
  return table;
}

LevelTable ExponentialLevels(int s, float p) {
  LevelTable table;
  if (s < 1) return table;
  table.levels.resize(static_cast<std::size_t>(s) + 1);
  table.levels[0] = 0.0f;
  // p^(s-j) by repeated multiplication from the top, in float: exact for
  // p = 0.5 and the same on every platform (no pow()).
  float level = 1.0f;
  for (int j = s; j >= 1; --j) {
    table.levels[static_cast<std::size_t>(j)] = level;
    level *= p;
  }
  return table;
}

Status ValidateLevels(const LevelTable& table) {
  const std::vector<float>& l = table.levels;
  if (l.size() < 2) return InvalidArgument("a level table needs at least the levels 0 and 1");
  if (l.front() != 0.0f) return InvalidArgument("a level table must start at exactly 0");
  if (l.back() != 1.0f) return InvalidArgument("a level table must end at exactly 1");
  for (std::size_t j = 1; j < l.size(); ++j) {
    if (!(l[j] > l[j - 1])) {
      return InvalidArgument("level " + std::to_string(j) + " (" + std::to_string(l[j]) +
                             ") is not above level " + std::to_string(j - 1));
    }
  }
  return Status::Ok();
}

void LevelStatistics::Merge(const LevelStatistics& other) {
  count += other.count;
  sum += other.sum;
  sum_sq += other.sum_sq;
  bucket_norms.insert(bucket_norms.end(), other.bucket_norms.begin(), other.bucket_norms.end());
  // Keep the largest norms only (the "-N" mixture uses the largest buckets);
  // sorted, so merging in any order gives the same list.
  constexpr std::size_t kMaxBucketNorms = 1024;
  std::sort(bucket_norms.begin(), bucket_norms.end(), std::greater<float>());
  if (bucket_norms.size() > kMaxBucketNorms) bucket_norms.resize(kMaxBucketNorms);
  largest_buckets.insert(largest_buckets.end(), other.largest_buckets.begin(), other.largest_buckets.end());
  KeepLargestBuckets(&largest_buckets);
}

bool LargerBucket(const BucketMoments& a, const BucketMoments& b) {
  if (a.norm != b.norm) return a.norm > b.norm;
  if (a.count != b.count) return a.count > b.count;
  if (a.sum != b.sum) return a.sum > b.sum;
  return a.sum_sq > b.sum_sq;
}

void KeepLargestBuckets(std::vector<BucketMoments>* buckets) {
  std::sort(buckets->begin(), buckets->end(), LargerBucket);
  if (buckets->size() > kMaxMixtureBuckets) buckets->resize(kMaxMixtureBuckets);
}

}  // namespace fedrt
