// Adaptive quantization levels for ALQ and AMQ (codecs/README.md):
// what a device measures from its update, and the deterministic
// optimiser that turns pooled measurements into a new LevelTable.
//
// Flow. A device calls ComputeLevelStatistics() on the vector it is about to
// encode (same bucket size and norm as its codec) and sends the statistics
// beside its update. The owner of the table (the aggregator in the star
// topology; every peer after all-reducing the statistics in the peer
// topology) merges them (LevelStatistics::Merge, levels.h) and calls
// FitAlqLevels() or FitAmqLevels() with the next version number.
//
// Model. The normalized magnitudes r = |v_i| / norm(bucket) in [0, 1] are
// modelled either by one truncated normal f on [0, 1] whose mean and variance
// match the pooled ones (LevelModel::kPooled, the "norm-less" model), or by
// the norm-weighted mixture sum_b (||v_b|| / sum ||v||) f_b over the
// kMaxMixtureBuckets buckets with the largest norms, f_b matching bucket b's
// own mean and variance (LevelModel::kNormWeighted, the "-N" variant: ALQ-N,
// AMQ-N; codec key model=norm). Levels minimise the expected stochastic-rounding variance
//   V(l) = sum_j integral_{l_j}^{l_{j+1}} (r - l_j)(l_{j+1} - r) f(r) dr.
//
// Bits and levels. `bits` counts the sign: a coordinate is one of the 2s+1
// symbols {-s..s} (sign times a level index), which fit in `bits` bits, so
// s = LevelsForBits(bits) = 2^(bits-1) - 1 levels above zero (bits = 3, the
// default of `alq` and `amq`: s = 3, table {0, l_1, l_2, 1}, 7 symbols).
//
// Determinism. Everything is evaluated in double with a fixed sequence of
// operations (fixed iteration counts, no early exits that depend on timing),
// then rounded to float once at the end; the same statistics give the same
// table bit for bit. The only library calls are std::erfc, std::exp and
// std::sqrt (glibc on every fedrt target; see codecs/README.md, "ALQ and AMQ").
//
// Thread-safety: pure functions on values.
#ifndef FEDRT_CODECS_LEVEL_FIT_H_
#define FEDRT_CODECS_LEVEL_FIT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fedrt/codecs/levels.h"
#include "fedrt/platform/status.h"

namespace fedrt {

// How a bucket is normalized: r_i = |v_i| / ||bucket||_2 or |v_i| / max|v|.
enum class NormKind : uint8_t { kL2 = 0, kMax = 1 };

// Which density the fit uses (see Model above).
enum class LevelModel : uint8_t { kPooled = 0, kNormWeighted = 1 };

// Smallest and largest `bits` the fits accept.
inline constexpr int kMinLevelBits = 2;
inline constexpr int kMaxLevelBits = 8;

// s = 2^(bits-1) - 1 for bits in [kMinLevelBits, kMaxLevelBits], else 0.
int LevelsForBits(int bits);

// LevelStatistics::bucket_norms keeps at most this many norms: the largest,
// sorted in decreasing order. Merge must keep the same rule (the largest
// kMaxBucketNorms of both lists, decreasing) so that statistics merged from
// parts equal the statistics of the whole.
inline constexpr std::size_t kMaxBucketNorms = 1024;

// Resolution of LevelStatistics::sum and sum_sq: every coordinate's r and r^2
// are rounded to a multiple of 2^-24 before they are added, so sums are exact
// (order-independent: Merge is associative and commutative) while they stay
// below 2^29, i.e. for any realistic number of coordinates per refit.
inline constexpr double kLevelStatisticsUnit = 0x1p-24;

// Statistics of v (d floats) cut into buckets of `bucket` coordinates
// (0 = one bucket). All-zero buckets are skipped (count does not include
// them). kInvalidArgument if a coordinate is NaN or infinite, or v is null
// with d > 0.
Result<LevelStatistics> ComputeLevelStatistics(const float* v, std::size_t d, std::size_t bucket,
                                               NormKind norm);
// The same into *out (overwritten), keeping its vectors' memory: with
// bucket_norms reserved for kMaxBucketNorms + 1 entries and largest_buckets
// for 8 * kMaxMixtureBuckets, it allocates nothing (a device's round).
Status ComputeLevelStatisticsInto(const float* v, std::size_t d, std::size_t bucket, NormKind norm,
                                  LevelStatistics* out);

// Checks statistics received from elsewhere (a device's update) before they
// are merged: count, sum and sum_sq finite, count a whole number of at most
// `max_count` (the coordinates the sender encoded), 0 <= sum_sq <= sum <=
// count; at most kMaxBucketNorms norms, finite, > 0 and decreasing; at most
// kMaxMixtureBuckets bucket moments, each with a finite norm > 0, a whole
// count from 1 to max_count, 0 <= sum_sq <= sum <= count, in the order of
// LargerBucket. kInvalidArgument naming the first problem.
Status ValidateLevelStatistics(const LevelStatistics& stats, double max_count);

// The parent normal N(mu, sigma^2) of a normal truncated to [0, 1].
struct TruncatedNormal {
  double mu = 0.0;
  double sigma = 1.0;
};

// The truncated normal on [0, 1] whose mean and variance are `mean` and
// `variance`, solved by nested bisection (the mean is monotone in mu for a
// fixed sigma, and along the curve of matched means the variance is monotone
// in sigma). Targets outside the family are projected onto it: the mean is
// clamped to [1e-6, 1 - 1e-6] and always matched; a variance below that of
// sigma = 1e-6 gives sigma = 1e-6; a variance above what a truncated normal
// with that mean can reach (heavier tails than exponential, or U shapes)
// gives the widest member, whose parent mean lies at most 25 sigma beyond the
// nearer end (close to a truncated exponential). NaN inputs give N(0.5, 1).
TruncatedNormal FitTruncatedNormal(double mean, double variance);

// Pooled mean and variance of the statistics, fitted as above.
// kInvalidArgument if the statistics are empty or not finite.
Result<TruncatedNormal> FitTruncatedNormal(const LevelStatistics& stats);

// Mean and variance of the distribution truncated to [0, 1].
void TruncatedNormalMoments(const TruncatedNormal& f, double* mean, double* variance);

// V(levels) under f, in closed form from the normal pdf and cdf. `levels`
// must be increasing from 0 to 1 (not checked beyond count >= 2).
double RoundingVariance(const TruncatedNormal& f, const double* levels, std::size_t count);
double RoundingVariance(const TruncatedNormal& f, const std::vector<float>& levels);

// ALQ: s + 1 levels (0 and 1 included) minimising V under f, by coordinate
// descent (30 sweeps; each interior level moves to the minimiser of its two
// adjacent terms, solved through the cdf) from three starts: quantiles of f,
// uniform, exponential (p = 1/2). The start with the lowest V wins (ties: the
// earlier start). Double precision, strictly increasing. s >= 1.
std::vector<double> AlqLevels(const TruncatedNormal& f, int s);

// AMQ: the multiplier p in (0, 1) of the levels {0, p^(s-1), ..., p, 1}
// minimising V under f: V on the grid p = k/64 (k = 1..63), then 64
// golden-section steps around the best grid point. s >= 1 (s = 1: 0.5).
double AmqMultiplier(const TruncatedNormal& f, int s);

// One component per bucket of stats.largest_buckets (same order): weight
// norm_b / sum of the norms, f_b = FitTruncatedNormal(bucket mean, bucket
// variance). kInvalidArgument when there are no bucket moments or they are
// not finite.
struct MixtureComponent {
  double weight = 0.0;
  TruncatedNormal f;
};
Result<std::vector<MixtureComponent>> FitNormWeightedMixture(const LevelStatistics& stats);

// The same functions under the mixture: V is the weighted sum of the
// components' V; ALQ's and AMQ's searches are the ones above, with the
// mixture's cdf, partial moments and density.
double RoundingVariance(const std::vector<MixtureComponent>& mixture, const std::vector<float>& levels);
std::vector<double> AlqLevels(const std::vector<MixtureComponent>& mixture, int s);
double AmqMultiplier(const std::vector<MixtureComponent>& mixture, int s);

// The float table for double levels: 0 and 1 exact, interior levels rounded
// to float and kept at least 2^-24 apart (never denormal, always increasing).
LevelTable RoundLevelTable(const std::vector<double>& levels, uint32_t version);
// The same from `count` levels into *out, keeping its vector's memory.
void RoundLevelTableInto(const double* levels, std::size_t count, uint32_t version, LevelTable* out);

// The tables the codecs use. kInvalidArgument for bits outside
// [kMinLevelBits, kMaxLevelBits], next_version == 0 (version 0 is the codec's
// initial table) or empty statistics (for kNormWeighted: no bucket moments).
// AMQ levels are p^(s-j), computed by repeated multiplication in double from
// l_s = 1.
Result<LevelTable> FitAlqLevels(const LevelStatistics& stats, int bits, uint32_t next_version,
                                LevelModel model = LevelModel::kPooled);
Result<LevelTable> FitAmqLevels(const LevelStatistics& stats, int bits, uint32_t next_version,
                                LevelModel model = LevelModel::kPooled);
// The same into *out (left as it was on an error), keeping its vector's
// memory: with the pooled model the fit works on the stack (a few KiB) and,
// once out->levels has room for s + 1 levels, allocates nothing; the
// norm-weighted model still allocates its mixture.
Status FitAlqLevelsInto(const LevelStatistics& stats, int bits, uint32_t next_version, LevelModel model,
                        LevelTable* out);
Status FitAmqLevelsInto(const LevelStatistics& stats, int bits, uint32_t next_version, LevelModel model,
                        LevelTable* out);

}  // namespace fedrt

#endif  // FEDRT_CODECS_LEVEL_FIT_H_
