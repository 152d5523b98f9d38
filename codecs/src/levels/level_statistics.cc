// ComputeLevelStatistics: what a device measures from the vector it encodes
// with ALQ or AMQ (level_fit.h). Not a hot path (run at refit times only), so
// it is plain double-precision scalar code.
//
// Exactness: each r and r^2 is rounded to a whole number of
// kLevelStatisticsUnit (2^-24) and the units are summed in uint64, so the
// sums do not depend on the order in which coordinates, buckets or devices
// are combined.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "fedrt/codecs/level_fit.h"

namespace fedrt {
namespace {

constexpr double kUnitsPerOne = 0x1p24;  // 1 / kLevelStatisticsUnit

// Keeps `norms` sorted in decreasing order with at most kMaxBucketNorms.
void KeepLargest(float norm, std::vector<float>* norms) {
  if (norms->size() == kMaxBucketNorms && !(norm > norms->back())) return;
  norms->insert(std::upper_bound(norms->begin(), norms->end(), norm, std::greater<float>()), norm);
  if (norms->size() > kMaxBucketNorms) norms->pop_back();
}

}  // namespace

Result<LevelStatistics> ComputeLevelStatistics(const float* v, std::size_t d, std::size_t bucket,
                                               NormKind norm) {
  LevelStatistics stats;
  FEDRT_RETURN_IF_ERROR(ComputeLevelStatisticsInto(v, d, bucket, norm, &stats));
  return stats;
}

Status ComputeLevelStatisticsInto(const float* v, std::size_t d, std::size_t bucket, NormKind norm,
                                  LevelStatistics* out) {
  if (v == nullptr && d > 0) return InvalidArgument("level statistics: null input");
  if (norm != NormKind::kL2 && norm != NormKind::kMax) {
    return InvalidArgument("level statistics: unknown norm");
  }
  const std::size_t b = bucket == 0 ? d : bucket;
  LevelStatistics& stats = *out;
  stats.bucket_norms.clear();
  stats.largest_buckets.clear();
  uint64_t units = 0;
  uint64_t units_sq = 0;
  uint64_t count = 0;
  for (std::size_t start = 0; start < d; start += b) {
    const std::size_t n = std::min(b, d - start);
    const float* w = v + start;
    double scale = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isfinite(w[i])) {
        return InvalidArgument("level statistics: coordinate " + std::to_string(start + i) +
                               " is not finite");
      }
      const double x = w[i];
      if (norm == NormKind::kL2) {
        scale += x * x;  // exact per term: a float squared fits a double
      } else {
        scale = std::max(scale, std::fabs(x));
      }
    }
    if (norm == NormKind::kL2) scale = std::sqrt(scale);
    if (scale == 0.0) continue;  // all-zero bucket: nothing to quantize
    count += n;
    uint64_t bucket_units = 0;
    uint64_t bucket_units_sq = 0;
    for (std::size_t i = 0; i < n; ++i) {
      // sqrt is monotone and correctly rounded, so |x| <= scale: r <= 1.
      const double r = std::min(1.0, std::fabs(static_cast<double>(w[i])) / scale);
      bucket_units += static_cast<uint64_t>(std::nearbyint(r * kUnitsPerOne));
      bucket_units_sq += static_cast<uint64_t>(std::nearbyint(r * r * kUnitsPerOne));
    }
    units += bucket_units;
    units_sq += bucket_units_sq;
    const double largest = std::numeric_limits<float>::max();
    const float bucket_norm = static_cast<float>(std::min(scale, largest));
    KeepLargest(bucket_norm, &stats.bucket_norms);
    BucketMoments moments;
    moments.norm = bucket_norm;
    moments.count = static_cast<double>(n);
    moments.sum = static_cast<double>(bucket_units) * kLevelStatisticsUnit;
    moments.sum_sq = static_cast<double>(bucket_units_sq) * kLevelStatisticsUnit;
    stats.largest_buckets.push_back(moments);
    // Cut back now and then so memory stays bounded on long vectors.
    if (stats.largest_buckets.size() >= 8 * kMaxMixtureBuckets) KeepLargestBuckets(&stats.largest_buckets);
  }
  KeepLargestBuckets(&stats.largest_buckets);
  stats.count = static_cast<double>(count);
  stats.sum = static_cast<double>(units) * kLevelStatisticsUnit;
  stats.sum_sq = static_cast<double>(units_sq) * kLevelStatisticsUnit;
  return Status::Ok();
}

Status ValidateLevelStatistics(const LevelStatistics& stats, double max_count) {
  const auto whole = [](double v) { return std::isfinite(v) && v >= 0 && v == std::floor(v); };
  // r and r^2 are in [0, 1] and r^2 <= r: so are their rounded sums.
  const auto moments_ok = [](double count, double sum, double sum_sq) {
    return std::isfinite(sum) && std::isfinite(sum_sq) && sum_sq >= 0 && sum_sq <= sum && sum <= count;
  };
  if (!whole(stats.count) || stats.count > max_count) {
    return InvalidArgument("level statistics: count must be a whole number from 0 to " +
                           std::to_string(static_cast<uint64_t>(max_count)));
  }
  if (!moments_ok(stats.count, stats.sum, stats.sum_sq)) {
    return InvalidArgument("level statistics: sums are not finite or not 0 <= sum of r^2 <= sum of r <= count");
  }
  if (stats.bucket_norms.size() > kMaxBucketNorms) {
    return InvalidArgument("level statistics: more than " + std::to_string(kMaxBucketNorms) + " bucket norms");
  }
  for (std::size_t i = 0; i < stats.bucket_norms.size(); ++i) {
    const float norm = stats.bucket_norms[i];
    if (!std::isfinite(norm) || !(norm > 0) || (i > 0 && norm > stats.bucket_norms[i - 1])) {
      return InvalidArgument("level statistics: bucket norm " + std::to_string(i) +
                             " is not finite, positive and at most the one before");
    }
  }
  if (stats.largest_buckets.size() > kMaxMixtureBuckets) {
    return InvalidArgument("level statistics: more than " + std::to_string(kMaxMixtureBuckets) + " bucket moments");
  }
  for (std::size_t i = 0; i < stats.largest_buckets.size(); ++i) {
    const BucketMoments& b = stats.largest_buckets[i];
    if (!std::isfinite(b.norm) || !(b.norm > 0) || !whole(b.count) || b.count < 1 || b.count > max_count ||
        !moments_ok(b.count, b.sum, b.sum_sq)) {
      return InvalidArgument("level statistics: bucket moments " + std::to_string(i) + " are out of range");
    }
    if (i > 0 && LargerBucket(b, stats.largest_buckets[i - 1])) {
      return InvalidArgument("level statistics: bucket moments are not in decreasing order");
    }
  }
  return Status::Ok();
}

}  // namespace fedrt
