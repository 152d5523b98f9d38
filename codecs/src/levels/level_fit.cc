// The ALQ/AMQ level optimiser (level_fit.h): truncated-normal moment
// matching, the expected rounding variance V in closed form, ALQ coordinate
// descent and the AMQ multiplier search.
//
// Notation: f is N(mu, sigma^2) truncated to [0, 1]; x = (r - mu) / sigma is
// the standardized coordinate, phi and Q the standard normal pdf and upper
// tail. Integrals are taken against the parent normal's measure and divided
// by its mass on [0, 1] (z) where a normalized value is needed.
//
// Numerics: differences of normal probabilities are always formed from the
// tail on the same side (Mass), so nothing cancels catastrophically; the
// remaining cancellations (Mills-ratio terms) lose at most about x^2 in
// relative precision, and x stays below ~38 wherever phi(x) is not zero.
// Every loop has a fixed bound and stops on a condition that depends only on
// the values computed, so results are reproducible bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/codecs/level_fit.h"

namespace fedrt {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kMinSigma = 1e-6;
constexpr double kMaxSigma = 1e4;
constexpr double kMinMean = 1e-6;
// The widest truncated normal for a given mean has its parent mean this many
// sigmas beyond the nearer end of [0, 1] (coefficient of variation ~0.997 of
// the exponential limit, while every tail probability stays far from underflow).
constexpr double kMaxTailSigmas = 25.0;
constexpr int kMaxBisectionSteps = 200;  // a bound only: loops stop when the interval is exhausted
constexpr int kAlqSweeps = 30;
constexpr int kAmqGrid = 64;
constexpr int kAmqGoldenSteps = 64;

double Pdf(double x) { return kInvSqrt2Pi * std::exp(-0.5 * x * x); }
double UpperTail(double x) { return 0.5 * std::erfc(x * kInvSqrt2); }

// P(x0 < X < x1) for a standard normal X and x0 <= x1, from the tail on the
// side the interval lies on.
double Mass(double x0, double x1) {
  if (x0 >= 0.0) return UpperTail(x0) - UpperTail(x1);
  if (x1 <= 0.0) return UpperTail(-x1) - UpperTail(-x0);
  return 1.0 - UpperTail(-x0) - UpperTail(x1);
}

struct Moments {
  double mean;
  double variance;
};

Moments MomentsOf(double mu, double sigma) {
  const double a = -mu / sigma;
  const double b = (1.0 - mu) / sigma;
  const double z = Mass(a, b);
  const double pa = Pdf(a);
  const double pb = Pdf(b);
  const double shift = (pa - pb) / z;               // (mean - mu) / sigma
  const double second = 1.0 + (a * pa - b * pb) / z;  // E[(r - mu)^2] / sigma^2
  return {mu + sigma * shift, std::max(0.0, sigma * sigma * (second - shift * shift))};
}

// Bisection midpoint; geometric for a positive scale parameter.
double Mid(double lo, double hi) { return lo + 0.5 * (hi - lo); }
double GeometricMid(double lo, double hi) { return std::sqrt(lo * hi); }

// For mean <= 1/2: the mu in [-kMaxTailSigmas * sigma, mean] whose
// truncation has this mean (the mean grows with mu at fixed sigma); the lower
// end if even that is too large.
double MuForMean(double mean, double sigma) {
  double lo = -kMaxTailSigmas * sigma;
  double hi = mean;
  if (MomentsOf(lo, sigma).mean >= mean) return lo;
  for (int step = 0; step < kMaxBisectionSteps; ++step) {
    const double mid = Mid(lo, hi);
    if (mid <= lo || mid >= hi) break;
    if (MomentsOf(mid, sigma).mean < mean) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return Mid(lo, hi);
}

// Moment matching for mean in (0, 1/2].
TruncatedNormal FitLowerHalf(double mean, double variance) {
  // The largest sigma for which the mean is still reachable with mu >= -25
  // sigma: the mean of the widest member grows with sigma.
  double sigma_hi = kMaxSigma;
  if (MomentsOf(-kMaxTailSigmas * kMaxSigma, kMaxSigma).mean > mean) {
    double lo = kMinSigma;
    double hi = kMaxSigma;
    for (int step = 0; step < kMaxBisectionSteps; ++step) {
      const double mid = GeometricMid(lo, hi);
      if (mid <= lo || mid >= hi) break;
      if (MomentsOf(-kMaxTailSigmas * mid, mid).mean <= mean) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    sigma_hi = lo;
  }
  // Along the curve of matched means the variance grows with sigma.
  auto variance_at = [mean](double sigma) { return MomentsOf(MuForMean(mean, sigma), sigma).variance; };
  double sigma;
  if (variance <= variance_at(kMinSigma)) {
    sigma = kMinSigma;
  } else if (variance >= variance_at(sigma_hi)) {
    sigma = sigma_hi;
  } else {
    double lo = kMinSigma;
    double hi = sigma_hi;
    for (int step = 0; step < kMaxBisectionSteps; ++step) {
      const double mid = GeometricMid(lo, hi);
      if (mid <= lo || mid >= hi) break;
      if (variance_at(mid) < variance) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    sigma = GeometricMid(lo, hi);
  }
  return {MuForMean(mean, sigma), sigma};
}

// The distribution in standardized form, with its mass on [0, 1].
struct Standardized {
  explicit Standardized(const TruncatedNormal& f)
      : mu(f.mu), sigma(f.sigma), z(Mass(-f.mu / f.sigma, (1.0 - f.mu) / f.sigma)) {}
  double X(double r) const { return (r - mu) / sigma; }
  double mu;
  double sigma;
  double z;
};

// integral_a^b (r - a)(b - r) dN(r) / sigma^2 for the parent normal N; with
// xa, xb standardized: xb phi(xa) - xa phi(xb) - (1 + xa xb) P(xa < X < xb).
double SegmentVariance(const Standardized& f, double a, double b) {
  const double xa = f.X(a);
  const double xb = f.X(b);
  const double v = xb * Pdf(xa) - xa * Pdf(xb) - (1.0 + xa * xb) * Mass(xa, xb);
  return std::max(0.0, v);  // the integrand is >= 0; only rounding can go below
}

double Variance(const Standardized& f, const double* levels, std::size_t count) {
  double total = 0.0;
  for (std::size_t j = 0; j + 1 < count; ++j) total += SegmentVariance(f, levels[j], levels[j + 1]);
  return f.sigma * f.sigma * total / f.z;
}

// P(x0 < X < x1) as x0 varies below a fixed x1 (same expressions as Mass,
// with the fixed end's tail computed once).
class MassUpTo {
 public:
  explicit MassUpTo(double x1) : x1_(x1), upper_(UpperTail(x1)), lower_(x1 <= 0.0 ? UpperTail(-x1) : 0.0) {}
  double operator()(double x0) const {
    if (x0 >= 0.0) return UpperTail(x0) - upper_;
    if (x1_ <= 0.0) return lower_ - UpperTail(-x0);
    return 1.0 - UpperTail(-x0) - upper_;
  }

 private:
  double x1_;
  double upper_;
  double lower_;
};

// The pooled model: one truncated normal. Integrals in the parent normal's
// measure (not divided by z), as the closed forms above.
class PooledModel {
 public:
  explicit PooledModel(const TruncatedNormal& f) : f_(f) {}
  // P(a < r < c) and integral_a^c (r - a) dN(r), given that mass.
  double MassBetween(double a, double c) const { return Mass(f_.X(a), f_.X(c)); }
  double FirstMoment(double a, double c, double mass) const {
    return f_.sigma * (Pdf(f_.X(a)) - Pdf(f_.X(c))) + (f_.mu - a) * mass;
  }
  // x -> P(x < r < c) for a fixed c.
  class MassTo {
   public:
    MassTo(const Standardized& f, double c) : f_(f), mass_(f.X(c)) {}
    double operator()(double x) const { return mass_(f_.X(x)); }

   private:
    const Standardized& f_;
    MassUpTo mass_;
  };
  MassTo MassUpToLevel(double c) const { return MassTo(f_, c); }
  // The Newton step for a mass excess at x (excess / density).
  double NewtonStep(double excess, double x) const { return excess * f_.sigma / Pdf(f_.X(x)); }
  double Total() const { return f_.z; }
  double Variance(const double* levels, std::size_t count) const { return fedrt::Variance(f_, levels, count); }

 private:
  Standardized f_;
};

// The norm-weighted mixture sum_b w_b f_b (the "-N" model): every integral is
// the weighted sum of the components' normalized ones.
class MixtureModel {
  struct Part {
    Standardized f;
    double weight;
  };

 public:
  explicit MixtureModel(const std::vector<MixtureComponent>& components) {
    for (const MixtureComponent& c : components) parts_.push_back({Standardized(c.f), c.weight});
  }
  double MassBetween(double a, double c) const {
    double total = 0.0;
    for (const Part& p : parts_) total += p.weight * Mass(p.f.X(a), p.f.X(c)) / p.f.z;
    return total;
  }
  double FirstMoment(double a, double c, double /*mass*/) const {
    double total = 0.0;
    for (const Part& p : parts_) {
      const double xa = p.f.X(a);
      const double xc = p.f.X(c);
      total += p.weight * (p.f.sigma * (Pdf(xa) - Pdf(xc)) + (p.f.mu - a) * Mass(xa, xc)) / p.f.z;
    }
    return total;
  }
  class MassTo {
   public:
    MassTo(const std::vector<Part>& parts, double c) : parts_(parts) {
      for (const Part& p : parts) masses_.emplace_back(p.f.X(c));
    }
    double operator()(double x) const {
      double total = 0.0;
      for (std::size_t b = 0; b < parts_.size(); ++b) {
        total += parts_[b].weight * masses_[b](parts_[b].f.X(x)) / parts_[b].f.z;
      }
      return total;
    }

   private:
    const std::vector<Part>& parts_;
    std::vector<MassUpTo> masses_;
  };
  MassTo MassUpToLevel(double c) const { return MassTo(parts_, c); }
  double NewtonStep(double excess, double x) const {
    double density = 0.0;
    for (const Part& p : parts_) density += p.weight * Pdf(p.f.X(x)) / (p.f.sigma * p.f.z);
    return excess / density;  // Inf or NaN when 0: the caller bisects instead
  }
  double Total() const {
    double total = 0.0;
    for (const Part& p : parts_) total += p.weight;
    return total;
  }
  double Variance(const double* levels, std::size_t count) const {
    double total = 0.0;
    for (const Part& p : parts_) total += p.weight * fedrt::Variance(p.f, levels, count);
    return total;
  }

 private:
  std::vector<Part> parts_;
};

// The x in [a, c] minimising the two V terms around a level between a and c.
// dV/dx = integral_a^x (r - a) f - integral_x^c (c - r) f is increasing and
// vanishes where P(x < r < c) = integral_a^c (r - a) f dr / (c - a). Solved
// by Newton steps (the derivative is the density) kept inside a bisection
// bracket; it stops when no double strictly inside the bracket is left or
// Newton stands still.
template <typename Model>
double BestLevelBetween(const Model& f, double a, double c) {
  const double mass = f.MassBetween(a, c);
  if (!(mass > 0.0)) return Mid(a, c);  // no measurable mass: spread levels evenly
  const double first_moment = f.FirstMoment(a, c, mass);
  const double target = std::min(mass, std::max(0.0, first_moment / (c - a)));
  const auto mass_up_to_c = f.MassUpToLevel(c);
  double lo = a;
  double hi = c;
  double x = Mid(a, c);
  for (int step = 0; step < kMaxBisectionSteps; ++step) {
    const double excess = mass_up_to_c(x) - target;  // decreasing in x
    if (excess == 0.0) break;
    if (excess > 0.0) {
      lo = x;
    } else {
      hi = x;
    }
    double next = x + f.NewtonStep(excess, x);
    if (!(next > lo && next < hi)) next = Mid(lo, hi);
    if (next <= lo || next >= hi || next == x) break;
    x = next;
  }
  return x;
}

// The most levels a table has: s + 1 at kMaxLevelBits. The fits work in
// arrays of this size on the stack (1 KiB each), so fitting allocates nothing.
constexpr std::size_t kMaxTableLevels = (std::size_t{1} << (kMaxLevelBits - 1));

// Strictly increasing from exactly 0 to exactly 1 (in double).
void MakeIncreasing(double* l, std::size_t count) {
  const std::size_t s = count - 1;
  l[0] = 0.0;
  l[s] = 1.0;
  for (std::size_t j = 1; j < s; ++j) l[j] = std::max(l[j], std::nextafter(l[j - 1], 2.0));
  for (std::size_t j = s - 1; j >= 1; --j) l[j] = std::min(l[j], std::nextafter(l[j + 1], -1.0));
}

template <typename Model>
void CoordinateDescent(const Model& f, double* l, std::size_t count) {
  for (int sweep = 0; sweep < kAlqSweeps; ++sweep) {
    bool moved = false;
    for (std::size_t j = 1; j + 1 < count; ++j) {
      const double x = BestLevelBetween(f, l[j - 1], l[j + 1]);
      moved = moved || x != l[j];
      l[j] = x;
    }
    if (!moved) break;
  }
}

// r with P(r' < r) = q z, found by bisection on [0, 1].
template <typename Model>
double Quantile(const Model& f, double q) {
  const double target = q * f.Total();
  double lo = 0.0;
  double hi = 1.0;
  for (int step = 0; step < kMaxBisectionSteps; ++step) {
    const double mid = Mid(lo, hi);
    if (mid <= lo || mid >= hi) break;
    if (f.MassBetween(0.0, mid) < target) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return Mid(lo, hi);
}

// {0, p^(s-1), ..., p, 1} by repeated multiplication from the top, into l[0..s].
void ExponentialTableInto(int s, double p, double* l) {
  l[static_cast<std::size_t>(s)] = 1.0;
  for (int j = s - 1; j >= 1; --j) l[static_cast<std::size_t>(j)] = l[static_cast<std::size_t>(j) + 1] * p;
  l[0] = 0.0;
}

// ALQ's levels into best[0..s] (s + 1 of them), with `scratch` for 3 (s + 1)
// doubles: the three starts.
template <typename Model>
std::size_t AlqLevelsInto(const Model& standard, int s, double* best, double* scratch) {
  s = std::max(1, s);
  const std::size_t n = static_cast<std::size_t>(s) + 1;
  double* starts[3] = {scratch, scratch + n, scratch + 2 * n};
  for (int j = 0; j <= s; ++j) {
    const std::size_t k = static_cast<std::size_t>(j);
    starts[0][k] = Quantile(standard, static_cast<double>(j) / s);
    starts[1][k] = static_cast<double>(j) / s;
  }
  ExponentialTableInto(s, 0.5, starts[2]);
  bool have_best = false;
  double best_variance = 0.0;
  for (double* levels : {starts[0], starts[1], starts[2]}) {
    MakeIncreasing(levels, n);
    CoordinateDescent(standard, levels, n);
    MakeIncreasing(levels, n);
    const double v = standard.Variance(levels, n);
    if (!have_best || v < best_variance) {
      std::copy(levels, levels + n, best);
      have_best = true;
      best_variance = v;
    }
  }
  return n;
}

template <typename Model>
std::vector<double> AlqLevelsOf(const Model& standard, int s) {
  const std::size_t n = static_cast<std::size_t>(std::max(1, s)) + 1;
  std::vector<double> best(n);
  std::vector<double> scratch(3 * n);
  AlqLevelsInto(standard, s, best.data(), scratch.data());
  return best;
}

// AMQ's multiplier, with `l` for s + 1 doubles of scratch.
template <typename Model>
double AmqMultiplierInto(const Model& standard, int s, double* l) {
  if (s <= 1) return 0.5;
  auto variance_at = [&](double p) {
    ExponentialTableInto(s, p, l);
    return standard.Variance(l, static_cast<std::size_t>(s) + 1);
  };
  double best_p = 0.5;
  double best_v = variance_at(best_p);
  int best_k = kAmqGrid / 2;
  for (int k = 1; k < kAmqGrid; ++k) {
    const double p = static_cast<double>(k) / kAmqGrid;
    const double v = variance_at(p);
    if (v < best_v) {
      best_p = p;
      best_v = v;
      best_k = k;
    }
  }
  // Golden-section search on the two grid cells around the best grid point.
  constexpr double kInvPhi = 0.61803398874989484820;
  double lo = std::max(static_cast<double>(best_k - 1) / kAmqGrid, 1.0 / 1024);
  double hi = std::min(static_cast<double>(best_k + 1) / kAmqGrid, 1.0 - 1.0 / 1024);
  double x1 = hi - kInvPhi * (hi - lo);
  double x2 = lo + kInvPhi * (hi - lo);
  double v1 = variance_at(x1);
  double v2 = variance_at(x2);
  for (int step = 0; step < kAmqGoldenSteps; ++step) {
    if (v1 < best_v) {
      best_p = x1;
      best_v = v1;
    }
    if (v2 < best_v) {
      best_p = x2;
      best_v = v2;
    }
    if (v1 <= v2) {
      hi = x2;
      x2 = x1;
      v2 = v1;
      x1 = hi - kInvPhi * (hi - lo);
      v1 = variance_at(x1);
    } else {
      lo = x1;
      x1 = x2;
      v1 = v2;
      x2 = lo + kInvPhi * (hi - lo);
      v2 = variance_at(x2);
    }
  }
  return best_p;
}

template <typename Model>
double AmqMultiplierOf(const Model& standard, int s) {
  std::vector<double> l(static_cast<std::size_t>(std::max(1, s)) + 1);
  return AmqMultiplierInto(standard, s, l.data());
}

}  // namespace

int LevelsForBits(int bits) {
  if (bits < kMinLevelBits || bits > kMaxLevelBits) return 0;
  return (1 << (bits - 1)) - 1;
}

TruncatedNormal FitTruncatedNormal(double mean, double variance) {
  if (std::isnan(mean) || std::isnan(variance)) return {0.5, 1.0};
  mean = std::min(1.0 - kMinMean, std::max(kMinMean, mean));
  variance = std::max(0.0, variance);
  if (mean <= 0.5) return FitLowerHalf(mean, variance);
  // Mirror r -> 1 - r: same variance, mean 1 - mean, parent mean 1 - mu.
  const TruncatedNormal mirrored = FitLowerHalf(1.0 - mean, variance);
  return {1.0 - mirrored.mu, mirrored.sigma};
}

Result<TruncatedNormal> FitTruncatedNormal(const LevelStatistics& stats) {
  if (!(stats.count > 0.0) || !std::isfinite(stats.count) || !std::isfinite(stats.sum) ||
      !std::isfinite(stats.sum_sq)) {
    return InvalidArgument("level fit: statistics are empty or not finite");
  }
  const double mean = stats.sum / stats.count;
  const double variance = stats.sum_sq / stats.count - mean * mean;
  return FitTruncatedNormal(mean, variance);
}

void TruncatedNormalMoments(const TruncatedNormal& f, double* mean, double* variance) {
  const Moments m = MomentsOf(f.mu, f.sigma);
  *mean = m.mean;
  *variance = m.variance;
}

double RoundingVariance(const TruncatedNormal& f, const double* levels, std::size_t count) {
  if (count < 2) return 0.0;
  return Variance(Standardized(f), levels, count);
}

double RoundingVariance(const TruncatedNormal& f, const std::vector<float>& levels) {
  const std::vector<double> wide(levels.begin(), levels.end());
  return RoundingVariance(f, wide.data(), wide.size());
}

std::vector<double> AlqLevels(const TruncatedNormal& f, int s) { return AlqLevelsOf(PooledModel(f), s); }

std::vector<double> AlqLevels(const std::vector<MixtureComponent>& mixture, int s) {
  return AlqLevelsOf(MixtureModel(mixture), s);
}

double AmqMultiplier(const TruncatedNormal& f, int s) { return AmqMultiplierOf(PooledModel(f), s); }

double AmqMultiplier(const std::vector<MixtureComponent>& mixture, int s) {
  return AmqMultiplierOf(MixtureModel(mixture), s);
}

double RoundingVariance(const std::vector<MixtureComponent>& mixture, const std::vector<float>& levels) {
  const std::vector<double> wide(levels.begin(), levels.end());
  if (wide.size() < 2) return 0.0;
  return MixtureModel(mixture).Variance(wide.data(), wide.size());
}

Result<std::vector<MixtureComponent>> FitNormWeightedMixture(const LevelStatistics& stats) {
  double norms = 0.0;
  for (const BucketMoments& b : stats.largest_buckets) {
    if (!(b.count > 0.0) || !std::isfinite(b.sum) || !std::isfinite(b.sum_sq) || !std::isfinite(b.norm) ||
        !(b.norm > 0.0f)) {
      return InvalidArgument("level fit: bucket moments are empty or not finite");
    }
    norms += b.norm;
  }
  if (stats.largest_buckets.empty() || !(norms > 0.0) || !std::isfinite(norms)) {
    return InvalidArgument("level fit: the norm-weighted model needs per-bucket moments");
  }
  std::vector<MixtureComponent> mixture;
  for (const BucketMoments& b : stats.largest_buckets) {
    const double mean = b.sum / b.count;
    MixtureComponent c;
    c.weight = static_cast<double>(b.norm) / norms;
    c.f = FitTruncatedNormal(mean, b.sum_sq / b.count - mean * mean);
    mixture.push_back(c);
  }
  return mixture;
}

LevelTable RoundLevelTable(const std::vector<double>& levels, uint32_t version) {
  LevelTable table;
  RoundLevelTableInto(levels.data(), levels.size(), version, &table);
  return table;
}

void RoundLevelTableInto(const double* levels, std::size_t count, uint32_t version, LevelTable* out) {
  LevelTable& table = *out;
  table.version = version;
  const std::size_t s = count < 2 ? 1 : count - 1;
  table.levels.assign(s + 1, 0.0f);
  table.levels[s] = 1.0f;
  constexpr float kGap = 0x1p-24f;
  for (std::size_t j = 1; j < s; ++j) {
    const float lowest = table.levels[j - 1] + kGap;
    const float highest = 1.0f - static_cast<float>(s - j) * kGap;
    table.levels[j] = std::min(highest, std::max(lowest, static_cast<float>(levels[j])));
  }
}

namespace {

// Checks the arguments shared by both fits; *s receives the level count.
Status CheckFitArguments(const char* codec, int bits, uint32_t next_version, int* s) {
  *s = LevelsForBits(bits);
  if (*s == 0) return InvalidArgument(std::string(codec) + ": bits must be in [2, 8]");
  if (next_version == 0) {
    return InvalidArgument(std::string(codec) + ": a fitted table needs a version above 0");
  }
  return Status::Ok();
}

}  // namespace

Status FitAlqLevelsInto(const LevelStatistics& stats, int bits, uint32_t next_version, LevelModel model,
                        LevelTable* out) {
  int s = 0;
  FEDRT_RETURN_IF_ERROR(CheckFitArguments("alq", bits, next_version, &s));
  if (model == LevelModel::kNormWeighted) {
    auto mixture = FitNormWeightedMixture(stats);
    FEDRT_RETURN_IF_ERROR(mixture.status());
    const std::vector<double> levels = AlqLevels(*mixture, s);
    RoundLevelTableInto(levels.data(), levels.size(), next_version, out);
    return Status::Ok();
  }
  Result<TruncatedNormal> f = FitTruncatedNormal(stats);
  FEDRT_RETURN_IF_ERROR(f.status());
  double levels[kMaxTableLevels];
  double scratch[3 * kMaxTableLevels];
  const std::size_t n = AlqLevelsInto(PooledModel(*f), s, levels, scratch);
  RoundLevelTableInto(levels, n, next_version, out);
  return Status::Ok();
}

Status FitAmqLevelsInto(const LevelStatistics& stats, int bits, uint32_t next_version, LevelModel model,
                        LevelTable* out) {
  int s = 0;
  FEDRT_RETURN_IF_ERROR(CheckFitArguments("amq", bits, next_version, &s));
  double p = 0.5;
  if (model == LevelModel::kNormWeighted) {
    auto mixture = FitNormWeightedMixture(stats);
    FEDRT_RETURN_IF_ERROR(mixture.status());
    p = AmqMultiplier(*mixture, s);
  } else {
    Result<TruncatedNormal> f = FitTruncatedNormal(stats);
    FEDRT_RETURN_IF_ERROR(f.status());
    double scratch[kMaxTableLevels];
    p = AmqMultiplierInto(PooledModel(*f), s, scratch);
  }
  double levels[kMaxTableLevels];
  ExponentialTableInto(s, p, levels);
  RoundLevelTableInto(levels, static_cast<std::size_t>(s) + 1, next_version, out);
  return Status::Ok();
}

Result<LevelTable> FitAlqLevels(const LevelStatistics& stats, int bits, uint32_t next_version, LevelModel model) {
  LevelTable table;
  FEDRT_RETURN_IF_ERROR(FitAlqLevelsInto(stats, bits, next_version, model, &table));
  return table;
}

Result<LevelTable> FitAmqLevels(const LevelStatistics& stats, int bits, uint32_t next_version, LevelModel model) {
  LevelTable table;
  FEDRT_RETURN_IF_ERROR(FitAmqLevelsInto(stats, bits, next_version, model, &table));
  return table;
}

}  // namespace fedrt
