// The RDP accountant against published values, and the DP noise.
//
// Published values: the RDP of the Poisson-sampled Gaussian (q = 0.01,
// sigma = 2.5, 50 steps) at orders 5, 50 and 100, the pure-DP conversion
// (RDP 1.1 at orders 2..32, delta 1e-5 -> epsilon 1.32783806176) and the
// Gaussian mechanism calibrated to (1, 1e-6)-DP (sigma 4.530877117) are the
// expected values of dp_accounting's rdp_privacy_accountant_test.py
// (google/differential-privacy, the accountant of TensorFlow Privacy):
// test_compute_rdp_poisson_sampled_gaussian,
// test_compute_epsilon_delta_pure_dp and test_compute_epsilon_delta_gaussian.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "fedrt/runtime/privacy.h"

namespace fedrt {
namespace {

TEST_CASE("the sampled Gaussian RDP matches the published values of dp_accounting") {
  CHECK(50 * SampledGaussianRdp(0.01, 2.5, 5) == doctest::Approx(2.18075656e-03).epsilon(1e-4));
  CHECK(50 * SampledGaussianRdp(0.01, 2.5, 50) == doctest::Approx(2.38460375e-02).epsilon(1e-4));
  CHECK(50 * SampledGaussianRdp(0.01, 2.5, 100) == doctest::Approx(1.67416308e02).epsilon(1e-4));
  // Without sampling it is the Gaussian mechanism's alpha / (2 sigma^2); q = 0 spends nothing.
  CHECK(SampledGaussianRdp(1.0, 2.0, 7) == doctest::Approx(7.0 / 8.0));
  CHECK(SampledGaussianRdp(0.0, 2.0, 7) == 0.0);
}

TEST_CASE("RDP converts to epsilon as dp_accounting does") {
  std::vector<int> orders;
  for (int a = 2; a <= 32; ++a) orders.push_back(a);
  CHECK(RdpToEpsilon(orders, std::vector<double>(orders.size(), 1.1), 1e-5) == doctest::Approx(1.32783806176));
  // The Gaussian mechanism with sigma 4.530877117 is (1, 1e-6)-DP.
  RdpAccountant gaussian;
  gaussian.Compose(1.0, 4.530877117);
  CHECK(gaussian.Epsilon(1e-6) == doctest::Approx(1.0).epsilon(1e-5));
}

TEST_CASE("the accountant composes rounds and grows epsilon with them") {
  RdpAccountant once, twice, batched;
  CHECK(once.Epsilon(1e-5) == 0.0);
  once.Compose(0.1, 1.0);
  twice.Compose(0.1, 1.0);
  twice.Compose(0.1, 1.0);
  batched.Compose(0.1, 1.0, 2);
  CHECK(once.Epsilon(1e-5) > 0);
  CHECK(twice.Epsilon(1e-5) > once.Epsilon(1e-5));
  CHECK(batched.Epsilon(1e-5) == doctest::Approx(twice.Epsilon(1e-5)));
  CHECK(once.EpsilonAfter(0.1, 1.0, 1e-5) == doctest::Approx(twice.Epsilon(1e-5)));
  // More noise, less epsilon; a smaller delta, more.
  RdpAccountant noisy;
  noisy.Compose(0.1, 2.0, 2);
  CHECK(noisy.Epsilon(1e-5) < twice.Epsilon(1e-5));
  CHECK(twice.Epsilon(1e-8) > twice.Epsilon(1e-5));
}

TEST_CASE("DP options are checked") {
  DpOptions ok;
  ok.noise_multiplier = 1;
  ok.clip = 1;
  CHECK(ValidateDpOptions(ok).ok());
  DpOptions bad = ok;
  bad.clip = 0;
  CHECK_FALSE(ValidateDpOptions(bad).ok());
  bad = ok;
  bad.delta = 1;
  CHECK_FALSE(ValidateDpOptions(bad).ok());
  bad = ok;
  bad.noise_multiplier = std::nan("");
  CHECK_FALSE(ValidateDpOptions(bad).ok());
  bad = ok;
  bad.epsilon_budget = -1;
  CHECK_FALSE(ValidateDpOptions(bad).ok());
}

TEST_CASE("the DP noise is Gaussian with the asked deviation and reproducible from its seed and round") {
  const std::size_t d = 200001;  // odd: the last Box-Muller pair is half used
  std::vector<double> a(d, 0.0), b(d, 0.0), c(d, 0.0);
  AddGaussianNoise(42, 3, 2.0, a.data(), d);
  AddGaussianNoise(42, 3, 2.0, b.data(), d);
  AddGaussianNoise(42, 4, 2.0, c.data(), d);
  CHECK(a == b);
  CHECK(a != c);
  double sum = 0, sum_sq = 0, fourth = 0;
  for (double v : a) {
    CHECK(std::isfinite(v));
    sum += v;
    sum_sq += v * v;
    fourth += v * v * v * v;
  }
  const double mean = sum / d;
  const double variance = sum_sq / d - mean * mean;
  CHECK(std::fabs(mean) < 0.02);                          // 5 standard errors (2 / sqrt(d) = 0.0045)
  CHECK(std::sqrt(variance) == doctest::Approx(2.0).epsilon(0.01));
  CHECK(fourth / d / (variance * variance) == doctest::Approx(3.0).epsilon(0.05));  // Gaussian kurtosis
  CHECK(a[d - 1] != 0.0);
}

}  // namespace
}  // namespace fedrt
