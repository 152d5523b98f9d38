// DP-FedAvg helpers and the RDP accountant (contract in fedrt/runtime/privacy.h).
#include "fedrt/runtime/privacy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "fedrt/codecs/philox.h"

namespace fedrt {
namespace {

constexpr int kMaxOrder = 256;
constexpr double kInf = std::numeric_limits<double>::infinity();

// log(exp(a) + exp(b)) without overflow.
double LogAdd(double a, double b) {
  if (a == -kInf) return b;
  if (b == -kInf) return a;
  const double high = std::max(a, b);
  return high + std::log1p(std::exp(std::min(a, b) - high));
}

double LogBinomial(int n, int k) {
  return std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0);
}

}  // namespace

Status ValidateDpOptions(const DpOptions& o) {
  if (!(o.noise_multiplier > 0) || !std::isfinite(o.noise_multiplier)) {
    return InvalidArgument("the DP noise multiplier must be positive and finite");
  }
  if (!(o.clip > 0) || !std::isfinite(o.clip)) return InvalidArgument("DP needs a clip norm above 0 (--dp-clip)");
  if (!(o.delta > 0 && o.delta < 1)) return InvalidArgument("the DP delta must be between 0 and 1 (exclusive)");
  if (!(o.epsilon_budget >= 0) || !std::isfinite(o.epsilon_budget)) {
    return InvalidArgument("the DP epsilon budget must be finite and not negative (0: none)");
  }
  return Status::Ok();
}

// log A_alpha of Mironov et al. 2019 (Section 3.3) for integer alpha:
//   A_alpha = sum_{i=0}^{alpha} binom(alpha, i) (1-q)^(alpha-i) q^i exp((i^2 - i) / (2 sigma^2)),
// summed in log space; the RDP at order alpha is log A_alpha / (alpha - 1).
double SampledGaussianRdp(double q, double sigma, int alpha) {
  if (q <= 0) return 0;
  if (q >= 1) return alpha / (2 * sigma * sigma);
  double log_a = -kInf;
  for (int i = 0; i <= alpha; ++i) {
    const double log_term = LogBinomial(alpha, i) + i * std::log(q) + (alpha - i) * std::log1p(-q) +
                            (static_cast<double>(i) * i - i) / (2 * sigma * sigma);
    log_a = LogAdd(log_a, log_term);
  }
  return log_a / (alpha - 1);
}

// epsilon = rdp - (log(delta) + log(alpha)) / (alpha - 1) + log((alpha - 1) / alpha).
double RdpToEpsilon(const std::vector<int>& orders, const std::vector<double>& rdp, double delta) {
  // Nothing released (no round, or q = 0): no privacy spent, which the bound
  // below would not say (it is positive at RDP 0).
  if (std::all_of(rdp.begin(), rdp.end(), [](double r) { return r == 0; })) return 0;
  double best = kInf;
  for (std::size_t k = 0; k < orders.size() && k < rdp.size(); ++k) {
    const double alpha = orders[k];
    const double eps = rdp[k] - (std::log(delta) + std::log(alpha)) / (alpha - 1) + std::log((alpha - 1) / alpha);
    best = std::min(best, eps);
  }
  return std::max(0.0, best);
}

RdpAccountant::RdpAccountant() {
  for (int alpha = 2; alpha <= kMaxOrder; ++alpha) orders_.push_back(alpha);
  rdp_.assign(orders_.size(), 0.0);
}

void RdpAccountant::Compose(double q, double sigma, uint64_t steps) {
  for (std::size_t k = 0; k < orders_.size(); ++k) {
    rdp_[k] += static_cast<double>(steps) * SampledGaussianRdp(q, sigma, orders_[k]);
  }
}

Status RdpAccountant::Restore(const std::vector<double>& rdp) {
  if (rdp.size() != orders_.size()) {
    return InvalidArgument("saved privacy state has " + std::to_string(rdp.size()) + " orders, not " +
                           std::to_string(orders_.size()));
  }
  for (double r : rdp) {
    if (!(r >= 0) || std::isnan(r)) return InvalidArgument("saved privacy state holds a negative or NaN RDP");
  }
  rdp_ = rdp;
  return Status::Ok();
}

double RdpAccountant::Epsilon(double delta) const { return RdpToEpsilon(orders_, rdp_, delta); }

double RdpAccountant::EpsilonAfter(double q, double sigma, double delta) const {
  RdpAccountant next = *this;
  next.Compose(q, sigma);
  return next.Epsilon(delta);
}

void AddGaussianNoise(uint64_t seed, uint32_t round, double stddev, double* values, std::size_t d) {
  RandomStream stream;
  stream.seed = seed;
  stream.round = round;
  stream.purpose = RandomPurpose::kGaussianNoise;
  constexpr std::size_t kPairs = 256;  // values per block of words
  uint32_t words[kPairs * 4];
  const double two_pi = 6.283185307179586476925286766559;
  for (std::size_t first = 0; first < d; first += 2 * kPairs) {
    const std::size_t count = std::min(d - first, 2 * kPairs);
    const std::size_t pairs = (count + 1) / 2;
    PhiloxWords(stream, uint64_t{first} * 2, pairs * 4, words);
    for (std::size_t p = 0; p < pairs; ++p) {
      const uint64_t a = (uint64_t{words[4 * p]} << 32 | words[4 * p + 1]) >> 11;
      const uint64_t b = (uint64_t{words[4 * p + 2]} << 32 | words[4 * p + 3]) >> 11;
      const double u1 = (static_cast<double>(a) + 1.0) * 0x1p-53;  // (0, 1]: log is finite
      const double u2 = static_cast<double>(b) * 0x1p-53;
      const double radius = stddev * std::sqrt(-2.0 * std::log(u1));
      values[first + 2 * p] += radius * std::cos(two_pi * u2);
      if (2 * p + 1 < count) values[first + 2 * p + 1] += radius * std::sin(two_pi * u2);
    }
  }
}

}  // namespace fedrt
