#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/level_fit.h"

namespace fedrt {
namespace {

// splitmix64: a tiny deterministic generator for test data and the test's own
// stochastic rounding (the codecs use Philox; this test only measures levels).
struct TestRng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1p-53; }  // (0, 1)
  double Laplace() {
    const double u = Uniform();
    return u < 0.5 ? std::log(2.0 * u) : -std::log(2.0 * (1.0 - u));
  }
  double Normal() {  // Box-Muller
    const double u = Uniform();
    const double v = Uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

std::vector<float> LaplaceVector(std::size_t d, uint64_t seed) {
  TestRng rng{seed};
  std::vector<float> v(d);
  for (float& x : v) x = static_cast<float>(rng.Laplace());
  return v;
}

std::vector<float> Uniform(int s) {
  std::vector<float> l(static_cast<std::size_t>(s) + 1);
  for (int j = 0; j <= s; ++j) l[static_cast<std::size_t>(j)] = static_cast<float>(j) / static_cast<float>(s);
  return l;
}

std::vector<float> Exponential(int s, float p) {
  std::vector<float> l(static_cast<std::size_t>(s) + 1);
  l[static_cast<std::size_t>(s)] = 1.0f;
  for (int j = s - 1; j >= 1; --j) l[static_cast<std::size_t>(j)] = l[static_cast<std::size_t>(j) + 1] * p;
  l[0] = 0.0f;
  return l;
}

bool StrictlyIncreasingFromZeroToOne(const std::vector<float>& l) {
  if (l.size() < 2 || l.front() != 0.0f || l.back() != 1.0f) return false;
  for (std::size_t j = 1; j < l.size(); ++j) {
    if (!(l[j] > l[j - 1])) return false;
  }
  return true;
}

LevelStatistics StatsWithMoments(double mean, double variance, double count = 1e6) {
  LevelStatistics stats;
  stats.count = count;
  stats.sum = mean * count;
  stats.sum_sq = (variance + mean * mean) * count;
  return stats;
}

LevelStatistics Merged(const LevelStatistics& a, const LevelStatistics& b) {
  LevelStatistics out = a;
  out.Merge(b);
  return out;
}

// Composite Simpson integration of (r - a)(b - r) g(r) over each segment,
// with g the parent normal density, normalized by Simpson's own mass on [0, 1]:
// independent of the library's closed form and of erfc.
double BruteForceVariance(const TruncatedNormal& f, const std::vector<double>& l) {
  auto density = [&](double r) {
    const double x = (r - f.mu) / f.sigma;
    return std::exp(-0.5 * x * x);
  };
  auto simpson = [&](double a, double b, const std::function<double(double)>& g) {
    // An even number of steps, each at most sigma / 20.
    const int n = 2 * static_cast<int>(std::ceil(std::max(500.0, 10.0 * (b - a) / f.sigma)));
    const double h = (b - a) / n;
    double sum = g(a) + g(b);
    for (int i = 1; i < n; ++i) sum += (i % 2 == 1 ? 4.0 : 2.0) * g(a + h * i);
    return sum * h / 3.0;
  };
  double mass = 0.0;
  double total = 0.0;
  for (std::size_t j = 0; j + 1 < l.size(); ++j) {
    const double a = l[j];
    const double b = l[j + 1];
    mass += simpson(a, b, density);
    total += simpson(a, b, [&](double r) { return (r - a) * (b - r) * density(r); });
  }
  return total / mass;
}

// E||Q(v) - v||^2 / ||v||^2 for stochastic rounding of r = |v_i| / ||bucket||_2
// on `levels`: estimated over `seeds` draws, and exactly.
struct QuantizationError {
  double sampled;
  double expected;
};

QuantizationError MeasureQuantization(const std::vector<float>& v, std::size_t bucket,
                                      const std::vector<float>& levels, int seeds) {
  double energy = 0.0;
  double sampled = 0.0;
  double expected = 0.0;
  for (int seed = 0; seed < seeds; ++seed) {
    TestRng rng{0x5eed0000ull + static_cast<uint64_t>(seed)};
    for (std::size_t start = 0; start < v.size(); start += bucket) {
      const std::size_t n = std::min(bucket, v.size() - start);
      double norm = 0.0;
      for (std::size_t i = 0; i < n; ++i) norm += static_cast<double>(v[start + i]) * v[start + i];
      norm = std::sqrt(norm);
      if (seed == 0) energy += norm * norm;
      if (norm == 0.0) continue;
      for (std::size_t i = 0; i < n; ++i) {
        const double x = v[start + i];
        const double r = std::fabs(x) / norm;
        std::size_t j = static_cast<std::size_t>(
            std::upper_bound(levels.begin(), levels.end(), static_cast<float>(r)) - levels.begin());
        j = std::min(std::max<std::size_t>(j, 1), levels.size() - 1) - 1;
        const double lo = levels[j];
        const double hi = levels[j + 1];
        const double up = (r - lo) / (hi - lo);
        const double q = rng.Uniform() < up ? hi : lo;
        const double decoded = std::copysign(norm * q, x);
        sampled += (decoded - x) * (decoded - x);
        if (seed == 0) expected += norm * norm * (r - lo) * (hi - r);
      }
    }
  }
  return {sampled / seeds / energy, expected / energy};
}

TEST_CASE("levels for bits count the sign bit") {
  CHECK(LevelsForBits(2) == 1);
  CHECK(LevelsForBits(3) == 3);
  CHECK(LevelsForBits(4) == 7);
  CHECK(LevelsForBits(8) == 127);
  CHECK(LevelsForBits(1) == 0);
  CHECK(LevelsForBits(9) == 0);
  CHECK(LevelsForBits(-3) == 0);
}

TEST_CASE("level statistics pool normalized magnitudes and skip all-zero buckets") {
  const std::vector<float> v = {3.0f, -4.0f, 0.0f, 0.0f, 0.0f, -2.0f, 1.0f};
  Result<LevelStatistics> l2 = ComputeLevelStatistics(v.data(), v.size(), 2, NormKind::kL2);
  REQUIRE(l2.ok());
  CHECK(l2->count == 5.0);  // buckets {3,-4}, {0,-2}, {1}; {0,0} skipped
  CHECK(l2->sum == doctest::Approx(0.6 + 0.8 + 0.0 + 1.0 + 1.0).epsilon(1e-7));
  CHECK(l2->sum_sq == doctest::Approx(3.0).epsilon(1e-7));
  CHECK(l2->bucket_norms == std::vector<float>{5.0f, 2.0f, 1.0f});
  Result<LevelStatistics> max = ComputeLevelStatistics(v.data(), v.size(), 2, NormKind::kMax);
  REQUIRE(max.ok());
  CHECK(max->count == 5.0);
  CHECK(max->sum == doctest::Approx(0.75 + 1.0 + 0.0 + 1.0 + 1.0).epsilon(1e-7));
  CHECK(max->bucket_norms == std::vector<float>{4.0f, 2.0f, 1.0f});
  // Bucket 0 is one bucket for the whole vector.
  Result<LevelStatistics> whole = ComputeLevelStatistics(v.data(), v.size(), 0, NormKind::kL2);
  REQUIRE(whole.ok());
  CHECK(whole->count == 7.0);
  CHECK(whole->sum_sq == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(whole->bucket_norms == std::vector<float>{std::sqrt(30.0f)});
  // Sums are whole multiples of the stated unit.
  CHECK(std::nearbyint(l2->sum / kLevelStatisticsUnit) * kLevelStatisticsUnit == l2->sum);
  Result<LevelStatistics> empty = ComputeLevelStatistics(nullptr, 0, 16, NormKind::kL2);
  REQUIRE(empty.ok());
  CHECK(empty->count == 0.0);
  CHECK(empty->bucket_norms.empty());
}

TEST_CASE("level statistics reject non-finite coordinates and a null input") {
  std::vector<float> v(10, 1.0f);
  v[7] = std::numeric_limits<float>::quiet_NaN();
  Result<LevelStatistics> nan = ComputeLevelStatistics(v.data(), v.size(), 4, NormKind::kL2);
  REQUIRE_FALSE(nan.ok());
  CHECK(nan.status().code() == StatusCode::kInvalidArgument);
  CHECK(nan.status().message().find("coordinate 7") != std::string::npos);
  v[7] = -std::numeric_limits<float>::infinity();
  CHECK(ComputeLevelStatistics(v.data(), v.size(), 4, NormKind::kMax).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(ComputeLevelStatistics(nullptr, 3, 4, NormKind::kL2).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("level statistics keep the largest bucket norms in decreasing order") {
  // 1500 buckets of 3 with norms 1..1500 in a scrambled order.
  std::vector<float> v;
  std::vector<float> norms;
  for (int i = 0; i < 1500; ++i) {
    const float norm = static_cast<float>((i * 73) % 1500 + 1);
    norms.push_back(norm);
    v.insert(v.end(), {0.0f, norm, 0.0f});
  }
  Result<LevelStatistics> stats = ComputeLevelStatistics(v.data(), v.size(), 3, NormKind::kL2);
  REQUIRE(stats.ok());
  std::sort(norms.begin(), norms.end(), std::greater<float>());
  norms.resize(kMaxBucketNorms);
  CHECK(stats->bucket_norms == norms);
  CHECK(stats->sum == 1500.0);
  CHECK(stats->sum_sq == 1500.0);
}

TEST_CASE("statistics of two halves merged equal the statistics of the whole, bit for bit") {
  // More buckets than kMaxBucketNorms, so the norm lists are truncated.
  const std::size_t bucket = 16;
  std::vector<float> v = LaplaceVector(1100 * bucket + 7, 42);
  // Scale buckets differently so the largest-norm list is not trivial.
  for (std::size_t i = 0; i < v.size(); ++i) v[i] *= static_cast<float>(1 + (i / bucket) % 13);
  std::fill(v.begin() + 5 * bucket, v.begin() + 6 * bucket, 0.0f);  // one all-zero bucket
  Result<LevelStatistics> whole = ComputeLevelStatistics(v.data(), v.size(), bucket, NormKind::kL2);
  REQUIRE(whole.ok());
  for (std::size_t split_bucket : {1u, 37u, 640u, 1099u}) {
    const std::size_t split = split_bucket * bucket;
    Result<LevelStatistics> first = ComputeLevelStatistics(v.data(), split, bucket, NormKind::kL2);
    Result<LevelStatistics> second =
        ComputeLevelStatistics(v.data() + split, v.size() - split, bucket, NormKind::kL2);
    REQUIRE(first.ok());
    REQUIRE(second.ok());
    for (const LevelStatistics& merged :
         {Merged(*first, *second), Merged(*second, *first)}) {
      CHECK(merged.count == whole->count);
      CHECK(merged.sum == whole->sum);
      CHECK(merged.sum_sq == whole->sum_sq);
      CHECK(merged.bucket_norms == whole->bucket_norms);
    }
  }
  CHECK(whole->count == static_cast<double>(v.size() - bucket));
  CHECK(whole->bucket_norms.size() == kMaxBucketNorms);
}

TEST_CASE("the truncated normal fit recovers the moments it was computed from") {
  for (double mu : {-0.3, -0.05, 0.0, 0.02, 0.3, 0.5, 0.8, 1.0, 1.2}) {
    for (double sigma : {0.002, 0.01, 0.03, 0.2, 1.0, 5.0}) {
      if (-mu / sigma > 24.0 || (mu - 1.0) / sigma > 24.0) continue;  // outside the fitted family
      INFO("mu " << mu << " sigma " << sigma);
      double mean = 0.0;
      double variance = 0.0;
      TruncatedNormalMoments({mu, sigma}, &mean, &variance);
      const TruncatedNormal fit = FitTruncatedNormal(mean, variance);
      double fit_mean = 0.0;
      double fit_variance = 0.0;
      TruncatedNormalMoments(fit, &fit_mean, &fit_variance);
      CHECK(fit_mean == doctest::Approx(mean).epsilon(1e-9));
      CHECK(fit_variance == doctest::Approx(variance).epsilon(1e-7));
      if (sigma <= 0.2) {  // wider ones are nearly uniform on [0, 1]: parameters are ill-conditioned
        CHECK(fit.mu == doctest::Approx(mu).epsilon(1e-5).scale(sigma));
        CHECK(fit.sigma == doctest::Approx(sigma).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("the truncated normal fit clamps degenerate moments") {
  auto moments = [](const TruncatedNormal& f) {
    double mean = 0.0;
    double variance = 0.0;
    TruncatedNormalMoments(f, &mean, &variance);
    return std::vector<double>{mean, variance};
  };
  // No spread: the narrowest member at the mean.
  TruncatedNormal point = FitTruncatedNormal(0.25, 0.0);
  CHECK(point.sigma == doctest::Approx(1e-6));
  CHECK(point.mu == doctest::Approx(0.25));
  // Means at the edges are clamped inside.
  for (double mean : {0.0, -1.0, 1.0, 2.0}) {
    const TruncatedNormal f = FitTruncatedNormal(mean, 1e-3);
    CHECK(std::isfinite(f.mu));
    CHECK(std::isfinite(f.sigma));
    const double m = moments(f)[0];
    CHECK(m >= 0.0);
    CHECK(m <= 1.0);
  }
  // Heavier tails than exponential (coefficient of variation 2) and a U shape
  // (variance above the uniform's): the mean is kept, the variance is the
  // largest the family reaches, close to the exponential's for small means.
  const TruncatedNormal heavy = FitTruncatedNormal(0.02, 4.0 * 0.02 * 0.02);
  CHECK(moments(heavy)[0] == doctest::Approx(0.02).epsilon(1e-9));
  CHECK(moments(heavy)[1] < 4.0 * 0.02 * 0.02);
  CHECK(moments(heavy)[1] > 0.99 * 0.02 * 0.02);
  const TruncatedNormal mirrored = FitTruncatedNormal(0.98, 4.0 * 0.02 * 0.02);
  CHECK(mirrored.mu == doctest::Approx(1.0 - heavy.mu));
  CHECK(mirrored.sigma == doctest::Approx(heavy.sigma));
  const TruncatedNormal u_shape = FitTruncatedNormal(0.5, 0.2);
  CHECK(moments(u_shape)[0] == doctest::Approx(0.5));
  CHECK(moments(u_shape)[1] == doctest::Approx(1.0 / 12.0).epsilon(1e-3));
  const TruncatedNormal nan = FitTruncatedNormal(std::nan(""), 0.1);
  CHECK(nan.mu == 0.5);
  CHECK(nan.sigma == 1.0);
  CHECK(FitTruncatedNormal(LevelStatistics{}).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("the closed-form rounding variance matches brute-force integration") {
  const std::vector<TruncatedNormal> distributions = {
      {0.0, 0.03},     // half-normal magnitudes, bucket ~1024
      {0.0, 0.008},    // very peaked
      {0.02, 0.01},    // peak inside
      {-8.0, 0.4},     // close to exponential
      {0.5, 3.0},      // close to uniform
      {0.9, 0.05},     // mass near 1
      {0.3, 0.0005},   // narrow spike between levels
  };
  std::vector<std::vector<double>> tables = {{0.0, 1.0 / 3, 2.0 / 3, 1.0},
                                             {0.0, 1.0 / 64, 1.0 / 32, 1.0 / 16, 1.0 / 8, 0.25, 0.5, 1.0}};
  std::vector<double> scattered = {0.0};
  TestRng rng{7};
  for (int j = 0; j < 14; ++j) scattered.push_back(rng.Uniform());
  scattered.push_back(1.0);
  std::sort(scattered.begin(), scattered.end());
  tables.push_back(scattered);
  for (const TruncatedNormal& f : distributions) {
    tables.push_back(AlqLevels(f, 7));
    for (const std::vector<double>& l : tables) {
      INFO("mu " << f.mu << " sigma " << f.sigma << " levels " << l.size());
      const double closed = RoundingVariance(f, l.data(), l.size());
      CHECK(closed == doctest::Approx(BruteForceVariance(f, l)).epsilon(1e-6));
    }
    tables.pop_back();
  }
}

TEST_CASE("alq lowers the rounding variance below uniform and exponential tables on a peaked distribution") {
  // Magnitudes of Gaussian coordinates normalized by the L2 norm of a bucket of 1024.
  const double mean = std::sqrt(2.0 / M_PI) / 32.0;
  const double variance = (1.0 - 2.0 / M_PI) / 1024.0;
  const TruncatedNormal f = FitTruncatedNormal(mean, variance);
  for (int bits = 2; bits <= 6; ++bits) {
    const int s = LevelsForBits(bits);
    INFO("bits " << bits);
    Result<LevelTable> alq = FitAlqLevels(StatsWithMoments(mean, variance), bits, 1);
    Result<LevelTable> amq = FitAmqLevels(StatsWithMoments(mean, variance), bits, 1);
    REQUIRE(alq.ok());
    REQUIRE(amq.ok());
    const double v_alq = RoundingVariance(f, alq->levels);
    const double v_amq = RoundingVariance(f, amq->levels);
    const double v_uniform = RoundingVariance(f, Uniform(s));
    const double v_exponential = RoundingVariance(f, Exponential(s, 0.5f));
    MESSAGE("bits " << bits << ": V alq " << v_alq << ", amq " << v_amq << ", uniform " << v_uniform
                    << ", exponential " << v_exponential);
    if (s == 1) {
      CHECK(v_alq == v_uniform);
      continue;
    }
    CHECK(v_alq < 0.5 * v_uniform);
    CHECK(v_alq < v_exponential);
    CHECK(v_alq <= v_amq * (1.0 + 1e-12));
    CHECK(v_amq < 0.5 * v_uniform);
    CHECK(v_amq <= v_exponential);
    // Coordinate descent ended near a local minimum: moving any interior level
    // (in double, before rounding) does not lower V by more than 1e-4 of it
    // (30 sweeps converge fully for small s; for s = 31 a few 1e-5 remain).
    const std::vector<double> levels = AlqLevels(f, s);
    const double v = RoundingVariance(f, levels.data(), levels.size());
    for (std::size_t j = 1; j + 1 < levels.size(); ++j) {
      for (double step : {-1e-3, 1e-3}) {
        std::vector<double> moved = levels;
        moved[j] += step * (levels[j + 1] - levels[j - 1]);
        CHECK(RoundingVariance(f, moved.data(), moved.size()) >= v * (1.0 - 1e-4));
      }
    }
  }
}

TEST_CASE("fitted tables are increasing from exactly 0 to exactly 1 for every bits") {
  const std::vector<std::vector<double>> moments = {
      {0.025, 0.00035}, {0.02, 0.0016}, {0.3, 0.0}, {0.5, 0.2}, {1e-9, 1e-12}, {0.97, 1e-4}};
  for (const std::vector<double>& m : moments) {
    // Every bits for the first distribution, a few for the others (time under qemu).
    const std::vector<int> all_bits = {2, 3, 4, 5, 6, 8};
    const std::vector<int> some_bits = {2, 3, 5};
    for (int bits : &m == &moments.front() ? all_bits : some_bits) {
      INFO("mean " << m[0] << " variance " << m[1] << " bits " << bits);
      for (bool amq : {false, true}) {
        const LevelStatistics stats = StatsWithMoments(m[0], m[1]);
        Result<LevelTable> table = amq ? FitAmqLevels(stats, bits, 9) : FitAlqLevels(stats, bits, 9);
        REQUIRE(table.ok());
        CHECK(table->version == 9u);
        CHECK(table->levels.size() == static_cast<std::size_t>(LevelsForBits(bits)) + 1);
        CHECK(StrictlyIncreasingFromZeroToOne(table->levels));
        CHECK(table->levels[1] >= 0x1p-24f);
      }
    }
  }
}

TEST_CASE("fitting rejects bad bits, version 0 and empty statistics") {
  const LevelStatistics stats = StatsWithMoments(0.02, 0.0004);
  for (int bits : {-1, 0, 1, 9, 32}) {
    CHECK(FitAlqLevels(stats, bits, 1).status().code() == StatusCode::kInvalidArgument);
    CHECK(FitAmqLevels(stats, bits, 1).status().code() == StatusCode::kInvalidArgument);
  }
  CHECK(FitAlqLevels(stats, 3, 0).status().code() == StatusCode::kInvalidArgument);
  CHECK(FitAmqLevels(stats, 3, 0).status().code() == StatusCode::kInvalidArgument);
  CHECK(FitAlqLevels(LevelStatistics{}, 3, 1).status().code() == StatusCode::kInvalidArgument);
  LevelStatistics broken = stats;
  broken.sum = std::numeric_limits<double>::infinity();
  CHECK(FitAmqLevels(broken, 3, 1).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("fitted tables are bit-identical when computed twice") {
  const std::vector<float> v = LaplaceVector(1 << 14, 3);
  Result<LevelStatistics> stats = ComputeLevelStatistics(v.data(), v.size(), 1024, NormKind::kL2);
  REQUIRE(stats.ok());
  for (int bits : {3, 5}) {
    Result<LevelTable> a1 = FitAlqLevels(*stats, bits, 2);
    Result<LevelTable> a2 = FitAlqLevels(*stats, bits, 2);
    Result<LevelTable> m1 = FitAmqLevels(*stats, bits, 2);
    Result<LevelTable> m2 = FitAmqLevels(*stats, bits, 2);
    REQUIRE(a1.ok());
    REQUIRE(a2.ok());
    REQUIRE(m1.ok());
    REQUIRE(m2.ok());
    REQUIRE(a1->levels.size() == a2->levels.size());
    REQUIRE(m1->levels.size() == m2->levels.size());
    CHECK(std::memcmp(a1->levels.data(), a2->levels.data(), a1->levels.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(m1->levels.data(), m2->levels.data(), m1->levels.size() * sizeof(float)) == 0);
  }
}

// Bits of tables fitted on x86-64; every target (AArch64 and ARMv7 under
// qemu) must reproduce them, since peers refit independently.
TEST_CASE("fitted tables reproduce golden bits on every target") {
  LevelStatistics stats;
  stats.count = 65536;
  stats.sum = 1448.5;
  stats.sum_sq = 64.0;
  auto bits_of = [](const LevelTable& table) {
    std::vector<uint32_t> out(table.levels.size());
    std::memcpy(out.data(), table.levels.data(), out.size() * sizeof(float));
    return out;
  };
  const Result<TruncatedNormal> f = FitTruncatedNormal(stats);
  REQUIRE(f.ok());
  CHECK(f->mu == doctest::Approx(-13.857967341921096).epsilon(1e-12));
  CHECK(f->sigma == doctest::Approx(0.55431869367684383).epsilon(1e-12));
  CHECK(bits_of(*FitAlqLevels(stats, 3, 1)) ==
        std::vector<uint32_t>{0x00000000u, 0x3d1a24d7u, 0x3df7509cu, 0x3f800000u});
  CHECK(bits_of(*FitAmqLevels(stats, 3, 1)) ==
        std::vector<uint32_t>{0x00000000u, 0x3d310502u, 0x3e54e0bfu, 0x3f800000u});
  CHECK(bits_of(*FitAlqLevels(stats, 5, 1)) ==
        std::vector<uint32_t>{0x00000000u, 0x3b58b6d7u, 0x3be36513u, 0x3c345ea0u, 0x3c801e01u, 0x3cabd417u,
                              0x3cdec0a4u, 0x3d0d5ce3u, 0x3d312054u, 0x3d5c801au, 0x3d8933c1u, 0x3dac00a7u,
                              0x3ddbf7d1u, 0x3e138ecbu, 0x3e659779u, 0x3f800000u});
  CHECK(bits_of(*FitAmqLevels(stats, 5, 1)) ==
        std::vector<uint32_t>{0x00000000u, 0x3bfe8027u, 0x3c3408ddu, 0x3c7eb6dau, 0x3cb42f8eu, 0x3cfeed98u,
                              0x3d345648u, 0x3d7f2462u, 0x3db47d0au, 0x3dff5b38u, 0x3e34a3d5u, 0x3e7f9219u,
                              0x3eb4caa7u, 0x3effc907u, 0x3f34f183u, 0x3f800000u});
}

TEST_CASE("on laplace samples alq and amq quantize with lower normalized variance than uniform levels") {
  const std::size_t bucket = 1024;
  const int kSeeds = 16;
  const std::vector<float> v = LaplaceVector(1 << 16, 2020);
  Result<LevelStatistics> stats = ComputeLevelStatistics(v.data(), v.size(), bucket, NormKind::kL2);
  REQUIRE(stats.ok());
  for (int bits : {3, 4}) {
    const int s = LevelsForBits(bits);
    Result<LevelTable> alq = FitAlqLevels(*stats, bits, 1);
    Result<LevelTable> amq = FitAmqLevels(*stats, bits, 1);
    REQUIRE(alq.ok());
    REQUIRE(amq.ok());
    const QuantizationError e_alq = MeasureQuantization(v, bucket, alq->levels, kSeeds);
    const QuantizationError e_amq = MeasureQuantization(v, bucket, amq->levels, kSeeds);
    const QuantizationError e_uniform = MeasureQuantization(v, bucket, Uniform(s), kSeeds);
    const QuantizationError e_exponential = MeasureQuantization(v, bucket, Exponential(s, 0.5f), kSeeds);
    MESSAGE("laplace d=65536 b=1024 bits " << bits << " (s=" << s << "), normalized variance "
            "sampled/expected: alq " << e_alq.sampled << "/" << e_alq.expected << ", amq "
            << e_amq.sampled << "/" << e_amq.expected << ", uniform (qsgd) " << e_uniform.sampled << "/"
            << e_uniform.expected << ", exponential p=0.5 " << e_exponential.sampled << "/"
            << e_exponential.expected);
    // The sampled figures agree with the exact expectation (16 seeds x 65536
    // coordinates), and the fitted levels win by a wide margin.
    for (const QuantizationError& e : {e_alq, e_amq, e_uniform, e_exponential}) {
      CHECK(e.sampled == doctest::Approx(e.expected).epsilon(0.05).scale(0.0));
    }
    CHECK(e_alq.expected < 0.5 * e_uniform.expected);
    CHECK(e_amq.expected < 0.5 * e_uniform.expected);
    CHECK(e_alq.sampled < 0.5 * e_uniform.sampled);
    CHECK(e_amq.sampled < 0.5 * e_uniform.sampled);
    CHECK(e_alq.expected < e_exponential.expected);
  }
}

TEST_CASE("on tails heavier than exponential the clamped fit still beats uniform levels") {
  // Cubes of normal samples: magnitudes with a coefficient of variation near
  // 2.5, outside what a truncated normal reaches.
  const std::size_t bucket = 1024;
  TestRng rng{99};
  std::vector<float> v(1 << 15);
  for (float& x : v) {
    const double z = rng.Normal();
    x = static_cast<float>(z * z * z);
  }
  Result<LevelStatistics> stats = ComputeLevelStatistics(v.data(), v.size(), bucket, NormKind::kL2);
  REQUIRE(stats.ok());
  const int bits = 3;
  Result<LevelTable> alq = FitAlqLevels(*stats, bits, 1);
  Result<LevelTable> amq = FitAmqLevels(*stats, bits, 1);
  REQUIRE(alq.ok());
  REQUIRE(amq.ok());
  const QuantizationError e_alq = MeasureQuantization(v, bucket, alq->levels, 1);
  const QuantizationError e_amq = MeasureQuantization(v, bucket, amq->levels, 1);
  const QuantizationError e_uniform = MeasureQuantization(v, bucket, Uniform(LevelsForBits(bits)), 1);
  MESSAGE("normal cubed d=32768 b=1024 bits 3, expected normalized variance: alq " << e_alq.expected
          << ", amq " << e_amq.expected << ", uniform (qsgd) " << e_uniform.expected);
  CHECK(e_alq.expected < 0.5 * e_uniform.expected);
  CHECK(e_amq.expected < 0.5 * e_uniform.expected);
}

// Normalized error ||decode(encode(v)) - v||^2 / ||v||^2 of a codec,
// averaged over rounds (each round draws fresh Philox randomness).
double CodecError(Codec& codec, const std::vector<float>& v, uint32_t rounds) {
  std::vector<uint8_t> payload(codec.MaxEncodedSize(v.size()));
  std::vector<float> out(v.size());
  double error = 0.0;
  double energy = 0.0;
  for (uint32_t round = 0; round < rounds; ++round) {
    CodecContext context;
    context.session_seed = 0x1e7e15ull;
    context.round = round;
    context.sender_id = 3;
    Result<std::size_t> size = codec.Encode(v.data(), v.size(), context, payload.data(), payload.size());
    REQUIRE(size.ok());
    REQUIRE(codec.Decode(payload.data(), *size, context, out.data(), out.size()).ok());
    for (std::size_t i = 0; i < v.size(); ++i) {
      error += (static_cast<double>(out[i]) - v[i]) * (static_cast<double>(out[i]) - v[i]);
      energy += static_cast<double>(v[i]) * v[i];
    }
  }
  return error / energy;
}

TEST_CASE("with fitted tables the alq and amq codecs beat qsgd with the same number of levels on laplace input") {
  // The whole loop: a device measures its update, the owner fits, both ends
  // install the table, the codecs quantize with it.
  const std::vector<float> v = LaplaceVector(1 << 15, 77);
  Result<LevelStatistics> stats = ComputeLevelStatistics(v.data(), v.size(), 1024, NormKind::kL2);
  REQUIRE(stats.ok());
  for (int bits : {3, 4}) {
    const int s = LevelsForBits(bits);
    const std::string keys = ":bits=" + std::to_string(bits) + ",b=1024";
    auto alq = MakeAdaptiveCodec("alq" + keys);
    auto amq = MakeAdaptiveCodec("amq" + keys);
    auto qsgd = MakeCodec("qsgd:s=" + std::to_string(s) + ",b=1024");
    REQUIRE(alq.ok());
    REQUIRE(amq.ok());
    REQUIRE(qsgd.ok());
    const double alq_initial = CodecError(**alq, v, 4);
    const double amq_initial = CodecError(**amq, v, 4);
    Result<LevelTable> alq_table = FitAlqLevels(*stats, bits, 1);
    Result<LevelTable> amq_table = FitAmqLevels(*stats, bits, 1);
    REQUIRE(alq_table.ok());
    REQUIRE(amq_table.ok());
    REQUIRE((*alq)->SetLevelTable(*alq_table).ok());
    REQUIRE((*amq)->SetLevelTable(*amq_table).ok());
    const double alq_fitted = CodecError(**alq, v, 4);
    const double amq_fitted = CodecError(**amq, v, 4);
    const double qsgd_error = CodecError(**qsgd, v, 4);
    MESSAGE("codecs on laplace d=32768 b=1024 bits " << bits << ": normalized error alq " << alq_fitted
            << " (version 0: " << alq_initial << "), amq " << amq_fitted << " (version 0: " << amq_initial
            << "), qsgd s=" << s << " " << qsgd_error);
    CHECK(alq_fitted < 0.5 * qsgd_error);
    CHECK(amq_fitted < 0.5 * qsgd_error);
    CHECK(alq_fitted < alq_initial);
    CHECK(amq_fitted < 1.02 * amq_initial);  // at bits=4 the fitted p is close to the initial 1/2
  }
}

// `buckets` buckets of 1024: every eighth bucket is large and Laplace (scale 10),
// the others small and much heavier tailed (0.1 times a cubed Laplace: most
// of their r near 0). Pooled statistics are dominated by the many small
// buckets, the error by the few large ones, whose shape the norm-weighted
// mixture favours.
std::vector<float> UnequalBuckets(uint64_t seed, std::size_t buckets) {
  TestRng rng{seed};
  std::vector<float> v(buckets * 1024);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if ((i / 1024) % 8 == 0) {
      v[i] = static_cast<float>(10.0 * rng.Laplace());
    } else {
      const double l = rng.Laplace();
      v[i] = static_cast<float>(0.1 * l * l * l);
    }
  }
  return v;
}

// The exact expected ||Q(v) - v||^2 / ||v||^2 of stochastic rounding on
// `levels` with L2 buckets (no randomness involved).
double ExpectedError(const std::vector<float>& v, std::size_t bucket, const std::vector<float>& levels) {
  double error = 0.0;
  double energy = 0.0;
  for (std::size_t start = 0; start < v.size(); start += bucket) {
    double norm_sq = 0.0;
    for (std::size_t i = start; i < start + bucket; ++i) norm_sq += static_cast<double>(v[i]) * v[i];
    const double norm = std::sqrt(norm_sq);
    energy += norm_sq;
    if (norm == 0.0) continue;
    for (std::size_t i = start; i < start + bucket; ++i) {
      const double r = std::min(1.0, std::fabs(static_cast<double>(v[i])) / norm);
      std::size_t j = 0;
      while (j + 2 < levels.size() && r > levels[j + 1]) ++j;
      error += (r - levels[j]) * (levels[j + 1] - r) * norm_sq;
    }
  }
  return error / energy;
}

TEST_CASE("the norm-weighted fit is deterministic and does not depend on the merge order") {
  // 80 buckets, more than the 64 kept: merging must drop the same ones.
  const std::vector<float> v = UnequalBuckets(5, 80);
  const std::size_t half = v.size() / 2 + 3 * 1024;  // unequal parts, cut at a bucket boundary
  auto whole = ComputeLevelStatistics(v.data(), v.size(), 1024, NormKind::kL2);
  auto a = ComputeLevelStatistics(v.data(), half, 1024, NormKind::kL2);
  auto b = ComputeLevelStatistics(v.data() + half, v.size() - half, 1024, NormKind::kL2);
  REQUIRE(whole.ok());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(whole->largest_buckets.size() == 64);
  LevelStatistics ab = *a, ba = *b;
  ab.Merge(*b);
  ba.Merge(*a);
  REQUIRE(ab.largest_buckets.size() == whole->largest_buckets.size());
  REQUIRE(ba.largest_buckets.size() == whole->largest_buckets.size());
  for (std::size_t j = 0; j < whole->largest_buckets.size(); ++j) {
    const BucketMoments& w = whole->largest_buckets[j];
    for (const LevelStatistics* merged : {&ab, &ba}) {
      const BucketMoments& m = merged->largest_buckets[j];
      CHECK(m.norm == w.norm);
      CHECK(m.count == w.count);
      CHECK(m.sum == w.sum);
      CHECK(m.sum_sq == w.sum_sq);
    }
    if (j > 0) CHECK_FALSE(LargerBucket(w, whole->largest_buckets[j - 1]));
  }
  // Same moments in the same order (checked above), so fitting the whole
  // twice and the merge once covers every order.
  for (bool amq : {false, true}) {
    auto fit = [&](const LevelStatistics& stats) {
      return amq ? FitAmqLevels(stats, 3, 2, LevelModel::kNormWeighted)
                 : FitAlqLevels(stats, 3, 2, LevelModel::kNormWeighted);
    };
    const Result<LevelTable> t1 = fit(*whole), t2 = fit(*whole), t3 = fit(ab);
    REQUIRE(t1.ok());
    REQUIRE(t3.ok());
    CHECK(StrictlyIncreasingFromZeroToOne(t1->levels));
    CHECK(t1->version == 2u);
    CHECK(std::memcmp(t1->levels.data(), t2->levels.data(), t1->levels.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(t1->levels.data(), t3->levels.data(), t1->levels.size() * sizeof(float)) == 0);
  }
  // Without bucket moments the norm-weighted fit has nothing to fit.
  LevelStatistics pooled_only = *whole;
  pooled_only.largest_buckets.clear();
  CHECK(FitAlqLevels(pooled_only, 3, 1, LevelModel::kNormWeighted).status().code() == StatusCode::kInvalidArgument);
  CHECK(FitAlqLevels(pooled_only, 3, 1).ok());
}

TEST_CASE("on heavy-tailed buckets with unequal norms the norm-weighted fit gives no more error than the pooled fit") {
  const std::vector<float> v = UnequalBuckets(6, 32);
  auto stats = ComputeLevelStatistics(v.data(), v.size(), 1024, NormKind::kL2);
  REQUIRE(stats.ok());
  for (const char* name : {"alq", "amq"}) {
    for (int bits : {3, 4}) {
      const std::string keys = std::string(name) + ":bits=" + std::to_string(bits) + ",b=1024";
      auto pooled = MakeAdaptiveCodec(keys);
      auto norm = MakeAdaptiveCodec(keys + ",model=norm");
      REQUIRE(pooled.ok());
      REQUIRE(norm.ok());
      CHECK((*pooled)->level_model() == LevelModel::kPooled);
      CHECK((*norm)->level_model() == LevelModel::kNormWeighted);
      const Result<LevelTable> pooled_table = FitLevelTable(**pooled, *stats, 1);
      const Result<LevelTable> norm_table = FitLevelTable(**norm, *stats, 1);
      REQUIRE(pooled_table.ok());
      REQUIRE(norm_table.ok());
      REQUIRE((*pooled)->SetLevelTable(*pooled_table).ok());
      REQUIRE((*norm)->SetLevelTable(*norm_table).ok());
      const double pooled_expected = ExpectedError(v, 1024, pooled_table->levels);
      const double norm_expected = ExpectedError(v, 1024, norm_table->levels);
      const double pooled_measured = CodecError(**pooled, v, 4);
      const double norm_measured = CodecError(**norm, v, 4);
      MESSAGE(keys << " on unequal buckets: normalized error pooled " << pooled_expected << " (measured "
                   << pooled_measured << "), norm-weighted " << norm_expected << " (measured " << norm_measured
                   << ")");
      CHECK(norm_expected <= pooled_expected);
      CHECK(norm_measured <= pooled_measured);
    }
  }
}

TEST_CASE("the norm-weighted alq codec is unbiased") {
  const std::vector<float> v = UnequalBuckets(7, 8);
  const std::vector<float>& part = v;
  auto stats = ComputeLevelStatistics(part.data(), part.size(), 1024, NormKind::kL2);
  REQUIRE(stats.ok());
  auto codec = MakeAdaptiveCodec("alq:bits=3,b=1024,model=norm");
  REQUIRE(codec.ok());
  CHECK((*codec)->spec() == "alq:bits=3,b=1024,model=norm,ef=off,ec=rans");
  const Result<LevelTable> table = FitLevelTable(**codec, *stats, 1);
  REQUIRE(table.ok());
  REQUIRE((*codec)->SetLevelTable(*table).ok());
  const uint32_t rounds = 128;
  std::vector<double> mean(part.size(), 0.0);
  std::vector<uint8_t> payload((*codec)->MaxEncodedSize(part.size()));
  std::vector<float> out(part.size());
  for (uint32_t round = 0; round < rounds; ++round) {
    CodecContext context;
    context.session_seed = 0xb1a5ull;
    context.round = round;
    auto size = (*codec)->Encode(part.data(), part.size(), context, payload.data(), payload.size());
    REQUIRE(size.ok());
    REQUIRE((*codec)->Decode(payload.data(), *size, context, out.data(), out.size()).ok());
    for (std::size_t i = 0; i < part.size(); ++i) mean[i] += out[i] / static_cast<double>(rounds);
  }
  double bias = 0.0;
  double energy = 0.0;
  for (std::size_t i = 0; i < part.size(); ++i) {
    bias += (mean[i] - part[i]) * (mean[i] - part[i]);
    energy += static_cast<double>(part[i]) * part[i];
  }
  // Unbiased: the mean's error is the single-shot error over the round count.
  const double single = ExpectedError(part, 1024, table->levels);
  MESSAGE("alq model=norm: mean of " << rounds << " decodes has normalized error " << bias / energy
                                     << ", single-shot expectation / rounds " << single / rounds);
  CHECK(bias / energy < 2.0 * single / rounds);
}

TEST_CASE("received level statistics are validated before they are merged") {
  std::vector<float> v(3000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<float>(i) * 0.37f);
  const LevelStatistics good = *ComputeLevelStatistics(v.data(), v.size(), 1024, NormKind::kL2);
  CHECK(ValidateLevelStatistics(good, 3000).ok());
  CHECK(ValidateLevelStatistics(LevelStatistics(), 0).ok());  // an all-zero update
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::function<void(LevelStatistics&)>> breaks = {
      [&](LevelStatistics& s) { s.count = nan; },
      [&](LevelStatistics& s) { s.count = inf; },
      [&](LevelStatistics& s) { s.count = -1; },
      [&](LevelStatistics& s) { s.count = 10.5; },
      [&](LevelStatistics& s) { s.count = 3001; },  // more coordinates than the update has
      [&](LevelStatistics& s) { s.sum = nan; },
      [&](LevelStatistics& s) { s.sum = s.count + 1; },
      [&](LevelStatistics& s) { s.sum_sq = -0.5; },
      [&](LevelStatistics& s) { s.sum_sq = s.sum + 1; },
      [&](LevelStatistics& s) { s.bucket_norms.assign(kMaxBucketNorms + 1, 1.0f); },
      [&](LevelStatistics& s) { s.bucket_norms[0] = std::numeric_limits<float>::infinity(); },
      [&](LevelStatistics& s) { s.bucket_norms.back() = 0; },
      [&](LevelStatistics& s) { std::reverse(s.bucket_norms.begin(), s.bucket_norms.end()); },
      [&](LevelStatistics& s) { s.largest_buckets.assign(kMaxMixtureBuckets + 1, s.largest_buckets[0]); },
      [&](LevelStatistics& s) { s.largest_buckets[0].norm = std::numeric_limits<float>::quiet_NaN(); },
      [&](LevelStatistics& s) { s.largest_buckets[0].count = 0; },
      [&](LevelStatistics& s) { s.largest_buckets[0].sum = inf; },
      [&](LevelStatistics& s) { s.largest_buckets[0].sum_sq = s.largest_buckets[0].sum + 1; },
      [&](LevelStatistics& s) { std::reverse(s.largest_buckets.begin(), s.largest_buckets.end()); },
  };
  REQUIRE(good.bucket_norms.size() == 3);
  REQUIRE(good.largest_buckets.size() == 3);
  for (std::size_t k = 0; k < breaks.size(); ++k) {
    INFO("case " << k);
    LevelStatistics bad = good;
    breaks[k](bad);
    CHECK(ValidateLevelStatistics(bad, 3000).code() == StatusCode::kInvalidArgument);
  }
}

TEST_CASE("an adaptive codec measures the statistics of its own buckets") {
  std::vector<float> v(2500);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::cos(static_cast<float>(i) * 0.11f) * 0.01f;
  std::unique_ptr<AdaptiveCodec> codec = std::move(MakeAdaptiveCodec("amq:bits=3,b=512").value());
  const LevelStatistics measured = *codec->MeasureLevelStatistics(v.data(), v.size());
  const LevelStatistics expected = *ComputeLevelStatistics(v.data(), v.size(), 512, NormKind::kL2);
  CHECK(measured.count == expected.count);
  CHECK(measured.sum == expected.sum);
  CHECK(measured.sum_sq == expected.sum_sq);
  CHECK(measured.bucket_norms == expected.bucket_norms);
  CHECK(measured.bucket_norms.size() == 5);
}

}  // namespace
}  // namespace fedrt
