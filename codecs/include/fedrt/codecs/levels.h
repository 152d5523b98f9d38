// Quantization level tables for QSGD-style codecs and their adaptation
// (ALQ / AMQ, codecs/README.md).
//
// A level table is 0 = l_0 < l_1 < ... < l_s = 1 on normalized magnitudes.
// ALQ and AMQ fit the table to the gradients' distribution: devices compute
// LevelStatistics from their updates, the owner of the table (the aggregator,
// or every peer after all-reducing the statistics) merges them and refits,
// and ships the new table with a higher version. A payload names the version
// it was encoded with; decoding with another version is an error.
//
// Thread-safety: value types and pure functions. The fitting is deterministic
// (same statistics -> bit-identical levels on every machine) so peers agree.
#ifndef FEDRT_CODECS_LEVELS_H_
#define FEDRT_CODECS_LEVELS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt {

struct LevelTable {
  uint32_t version = 0;       // 0 = the codec's initial table
  std::vector<float> levels;  // s + 1 entries, levels[0] = 0, levels[s] = 1, increasing
};

// Uniform levels j / s (QSGD).
LevelTable UniformLevels(int s);
// Exponential levels p^(s - j) for j >= 1, l_0 = 0 (NUQSGD; AMQ's family).
LevelTable ExponentialLevels(int s, float p);
// kInvalidArgument unless the table is increasing from exactly 0 to exactly 1.
Status ValidateLevels(const LevelTable& table);

// Moments of one bucket's normalized magnitudes (for the "-N" mixture).
// count, sum and sum_sq are whole multiples of 2^-24 as in LevelStatistics.
struct BucketMoments {
  float norm = 0;
  double count = 0;
  double sum = 0;
  double sum_sq = 0;
};

// LevelStatistics::largest_buckets keeps at most this many buckets.
inline constexpr std::size_t kMaxMixtureBuckets = 64;

// Sufficient statistics of normalized magnitudes r = |v_i| / norm(bucket),
// pooled over buckets; mergeable across devices by Merge().
struct LevelStatistics {
  double count = 0;     // coordinates seen
  double sum = 0;       // sum of r
  double sum_sq = 0;    // sum of r^2
  // Per-bucket norms of the largest buckets, kept for the norm-weighted
  // mixture ("-N" variant); bounded in size.
  std::vector<float> bucket_norms;
  // Moments of the kMaxMixtureBuckets buckets with the largest norms, in
  // decreasing order of (norm, count, sum, sum_sq), so merging in any order
  // keeps the same list: the norm-weighted mixture of the "-N" fit.
  std::vector<BucketMoments> largest_buckets;

  void Merge(const LevelStatistics& other);
};

// The order of LevelStatistics::largest_buckets (true when a comes first),
// and sorting a list into it, cut to kMaxMixtureBuckets.
bool LargerBucket(const BucketMoments& a, const BucketMoments& b);
void KeepLargestBuckets(std::vector<BucketMoments>* buckets);

}  // namespace fedrt

#endif  // FEDRT_CODECS_LEVELS_H_
