// DQSG's defining property (codecs/README.md): with the
// subtractive dither the error w' - w is uniform on [-scale/2, scale/2],
// independent of w, with variance scale^2/12. Fixed seeds; each bound is
// also checked to REJECT two wrong decoders (no dither subtraction, dither
// added with the wrong sign), so the test cannot pass vacuously.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "dqsg/dqsg_kernels.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/philox.h"

namespace fedrt {
namespace {

constexpr std::size_t kD = 1 << 16;

struct ErrorStats {
  double ks = 0;             // Kolmogorov-Smirnov distance of z to U[-1/2, 1/2]
  double mean = 0;           // of z
  double second_moment = 0;  // E z^2, should be 1/12
  double corr_w = 0;         // corr(z, w)
  double corr_position = 0;  // corr(z^2, |w/scale - round(w/scale)|): dependence on where w falls
};

double Correlation(const std::vector<double>& a, const std::vector<double>& b) {
  const double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ma += a[i];
    mb += b[i];
  }
  ma /= n;
  mb /= n;
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return sab / std::sqrt(saa * sbb);
}

// z = (decoded - w) / scale.
ErrorStats Measure(const std::vector<float>& w, const std::vector<float>& decoded, float scale) {
  ErrorStats stats;
  std::vector<double> z(w.size()), wd(w.size()), z2(w.size()), position(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    z[i] = (static_cast<double>(decoded[i]) - w[i]) / scale;
    wd[i] = w[i];
    z2[i] = z[i] * z[i];
    const double x = static_cast<double>(w[i]) / scale;
    position[i] = std::fabs(x - std::nearbyint(x));
    stats.mean += z[i];
    stats.second_moment += z2[i];
  }
  const double n = static_cast<double>(w.size());
  stats.mean /= n;
  stats.second_moment /= n;
  stats.corr_w = Correlation(z, wd);
  stats.corr_position = Correlation(z2, position);
  std::vector<double> sorted = z;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const double cdf = std::min(1.0, std::max(0.0, sorted[i] + 0.5));
    stats.ks = std::max({stats.ks, std::fabs(cdf - static_cast<double>(i) / n),
                         std::fabs(cdf - static_cast<double>(i + 1) / n)});
  }
  return stats;
}

// The acceptance region; every bound is several standard errors wide for n = 2^16:
// KS critical value at alpha = 0.001 is 1.95/sqrt(n) = 0.0076; sd(z) = 0.289,
// sd(z^2) = 0.0745; a correlation's sd is 1/sqrt(n) = 0.0039.
bool LooksUniformAndIndependent(const ErrorStats& s, std::string* why) {
  const double root_n = std::sqrt(static_cast<double>(kD));
  *why = "ks " + std::to_string(s.ks) + " mean " + std::to_string(s.mean) + " E z^2 " +
         std::to_string(s.second_moment) + " corr(z,w) " + std::to_string(s.corr_w) + " corr(z^2,pos) " +
         std::to_string(s.corr_position);
  return s.ks < 1.95 / root_n && std::fabs(s.mean) < 5 * 0.289 / root_n &&
         std::fabs(s.second_moment - 1.0 / 12) < 5 * 0.0745 / root_n && std::fabs(s.corr_w) < 5 / root_n &&
         std::fabs(s.corr_position) < 5 / root_n;
}

std::vector<float> Input(uint32_t seed) {
  // Heavy-ish tails and a spread of magnitudes, as gradients have.
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(kD);
  for (float& x : w) x = normal(rng) * (rng() % 4 == 0 ? 3.0f : 0.5f);
  return w;
}

CodecContext Context() {
  CodecContext context;
  context.session_seed = 0xD15C0u;
  context.round = 2;
  context.tensor_id = 9;
  context.sender_id = 1;
  return context;
}

TEST_CASE("dqsg error is uniform on half a step either side and independent of the input") {
  for (int s : {1, 2, 5}) {
    INFO("s " << s);
    auto codec = MakeCodec("dqsg:s=" + std::to_string(s));
    REQUIRE(codec.ok());
    const auto w = Input(static_cast<uint32_t>(s));
    std::vector<uint8_t> payload((*codec)->MaxEncodedSize(kD));
    auto size = (*codec)->Encode(w.data(), kD, Context(), payload.data(), payload.size());
    REQUIRE(size.ok());
    std::vector<float> decoded(kD);
    REQUIRE((*codec)->Decode(payload.data(), *size, Context(), decoded.data(), kD).ok());
    const float scale = scalar::MaxAbs(w.data(), kD) / static_cast<float>(s);
    std::string why;
    const ErrorStats stats = Measure(w, decoded, scale);
    CHECK_MESSAGE(LooksUniformAndIndependent(stats, &why), why);
    MESSAGE("s=" << s << ": " << why);
    // Per-coordinate variance scale^2 / 12.
    CHECK(stats.second_moment * scale * scale == doctest::Approx(scale * scale / 12.0).epsilon(0.02));
  }
}

TEST_CASE("the uniformity bounds reject decoders without dither subtraction or with the wrong sign") {
  const int s = 2;
  const auto w = Input(77);
  const float scale = scalar::MaxAbs(w.data(), kD) / static_cast<float>(s);
  RandomStream stream;
  stream.seed = 1234;
  std::vector<float> u(kD);
  PhiloxDither(stream, 0, kD, u.data());
  std::vector<uint8_t> symbols(kD);
  scalar::Quantize(w.data(), u.data(), kD, scale, s, symbols.data());
  std::vector<float> right(kD), no_subtraction(kD), wrong_sign(kD);
  for (std::size_t i = 0; i < kD; ++i) {
    const float q = static_cast<float>(static_cast<int>(symbols[i]) - s);
    right[i] = (q - u[i]) * scale;
    no_subtraction[i] = q * scale;
    wrong_sign[i] = (q + u[i]) * scale;
  }
  std::string why;
  CHECK_MESSAGE(LooksUniformAndIndependent(Measure(w, right, scale), &why), why);
  CHECK_FALSE_MESSAGE(LooksUniformAndIndependent(Measure(w, no_subtraction, scale), &why), why);
  MESSAGE("no subtraction: " << why);
  CHECK_FALSE_MESSAGE(LooksUniformAndIndependent(Measure(w, wrong_sign, scale), &why), why);
  MESSAGE("wrong sign: " << why);
}

}  // namespace
}  // namespace fedrt
