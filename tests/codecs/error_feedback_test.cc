// Error feedback: over many steps nothing is lost, sum(decoded) + residual
// equals sum(inputs) up to float rounding, for several codecs.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/error_feedback.h"

namespace fedrt {
namespace {

TEST_CASE("error feedback loses nothing over a thousand steps") {
  constexpr std::size_t kD = 256;
  constexpr int kSteps = 1000;
  for (const char* spec : {"dqsg:s=1", "dqsg:s=2,b=64,ec=pack", "ndqsg:s1=3,rho=3", "fp16", "bf16", "fp32"}) {
    INFO("codec " << std::string(spec));
    auto codec = MakeCodec(spec);
    REQUIRE(codec.ok());
    ErrorFeedback feedback(kD);
    std::vector<uint8_t> payload((*codec)->MaxEncodedSize(kD));
    std::vector<float> decoded(kD);
    std::vector<double> sum_inputs(kD, 0.0), sum_decoded(kD, 0.0), rounding(kD, 0.0);
    std::mt19937 rng(17);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> g(kD), p(kD);
    for (int step = 0; step < kSteps; ++step) {
      for (std::size_t i = 0; i < kD; ++i) {
        g[i] = normal(rng) * (i % 10 == 0 ? 100.0f : 1.0f) + 0.01f;  // a drift that EF must carry
        p[i] = g[i] + feedback.residual()[i];
      }
      CodecContext context;
      context.session_seed = 5;
      context.round = static_cast<uint32_t>(step);
      auto size = feedback.Encode(**codec, g.data(), kD, context, payload.data(), payload.size());
      REQUIRE(size.ok());
      // The receiver's view (NDQSG: side information = the sender's p, see the header).
      const float* side = (*codec)->needs_side_info() ? p.data() : nullptr;
      REQUIRE((*codec)->Decode(payload.data(), *size, context, decoded.data(), kD, side).ok());
      for (std::size_t i = 0; i < kD; ++i) {
        sum_inputs[i] += g[i];
        sum_decoded[i] += decoded[i];
        // p = g + e and e' = p - decoded are each rounded once: half an ulp of each result.
        rounding[i] += 0x1p-24 * (std::fabs(p[i]) + std::fabs(feedback.residual()[i]));
      }
    }
    double worst = 0;
    for (std::size_t i = 0; i < kD; ++i) {
      const double gap = std::fabs(sum_decoded[i] + feedback.residual()[i] - sum_inputs[i]);
      // Tolerance: the accumulated float rounding of the two operations per step (plus 1e-9 for the double sums).
      REQUIRE(gap <= rounding[i] + 1e-9 * std::fabs(sum_inputs[i]) + 1e-12);
      worst = std::fmax(worst, gap / (rounding[i] + 1e-30));
    }
    MESSAGE(std::string(spec) << ": worst gap / rounding bound " << worst);
  }
}

TEST_CASE("error feedback carries the residual and keeps it on an encode error") {
  auto codec = MakeCodec("dqsg:s=1");
  REQUIRE(codec.ok());
  ErrorFeedback feedback(4);
  const float g[4] = {1.0f, 0.3f, -0.2f, 0.0f};
  std::vector<uint8_t> payload((*codec)->MaxEncodedSize(4));
  REQUIRE(feedback.Encode(**codec, g, 4, CodecContext(), payload.data(), payload.size()).ok());
  const std::vector<float> residual(feedback.residual(), feedback.residual() + 4);
  float bad[4] = {1.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f, 0.0f};
  CHECK(feedback.Encode(**codec, bad, 4, CodecContext(), payload.data(), payload.size()).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(std::vector<float>(feedback.residual(), feedback.residual() + 4) == residual);
  CHECK(feedback.Encode(**codec, g, 3, CodecContext(), payload.data(), payload.size()).status().code() ==
        StatusCode::kInvalidArgument);
  feedback.Reset();
  for (std::size_t i = 0; i < 4; ++i) CHECK(feedback.residual()[i] == 0.0f);
}

}  // namespace
}  // namespace fedrt
