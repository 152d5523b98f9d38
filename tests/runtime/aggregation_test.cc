#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/runtime/aggregation.h"

namespace fedrt {
namespace {

TEST_CASE("the accumulator computes the sample-weighted mean of encoded updates") {
  auto codec = MakeCodec("fp32");
  REQUIRE(codec.ok());
  UpdateAccumulator accumulator(3);
  const std::vector<std::vector<float>> updates = {{1, 2, 3}, {3, 2, 1}};
  const float weights[] = {100, 300};
  for (uint32_t sender = 0; sender < 2; ++sender) {
    CodecContext context;
    context.sender_id = sender;
    std::vector<uint8_t> payload((*codec)->MaxEncodedSize(3));
    auto size = (*codec)->Encode(updates[sender].data(), 3, context, payload.data(), payload.size());
    REQUIRE(size.ok());
    REQUIRE(accumulator.AddEncoded(**codec, payload.data(), *size, context, weights[sender]).ok());
  }
  const auto mean = accumulator.Mean();
  CHECK(mean[0] == doctest::Approx(2.5));
  CHECK(mean[1] == doctest::Approx(2.0));
  CHECK(mean[2] == doctest::Approx(1.5));
  CHECK(accumulator.count() == 2);
}

TEST_CASE("the accumulator sums in double so a huge finite update with a huge weight does not overflow the round") {
  UpdateAccumulator accumulator(2);
  const float honest[] = {1, -1};
  const float huge[] = {3e38f, 0};  // finite; a float sum of it times any weight above 1.2 is Inf
  REQUIRE(accumulator.AddDecoded(honest, 100).ok());
  REQUIRE(accumulator.AddDecoded(huge, 4294967296.0).ok());
  REQUIRE(accumulator.AddDecoded(honest, 100).ok());
  const std::vector<float> mean = accumulator.Mean();
  CHECK(std::isfinite(mean[0]));
  CHECK(mean[0] == doctest::Approx(3e38 * 4294967296.0 / (4294967296.0 + 200)).epsilon(1e-6));
  CHECK(mean[1] == doctest::Approx(-200 / (4294967296.0 + 200)));
  CHECK(accumulator.total_weight() == 4294967296.0 + 200);
}

TEST_CASE("an update's norm is computed without overflow and checked against the bound") {
  const std::vector<float> unit = {0.6f, 0.8f};
  CHECK(UpdateNorm(unit.data(), 2) == doctest::Approx(1.0));
  const std::vector<float> huge(4, 3e38f);  // the squares overflow a float, not a double
  CHECK(UpdateNorm(huge.data(), 4) == doctest::Approx(6e38));
  CHECK(CheckUpdateNorm(unit.data(), 2, 1.001).ok());
  CHECK(CheckUpdateNorm(huge.data(), 4, 0).ok());  // 0: no bound
  const Status refused = CheckUpdateNorm(huge.data(), 4, 1e4);
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK(refused.message() == "update norm 6e+38 exceeds the limit of 10000");
  const std::vector<float> over = {0.6f, 0.81f};
  CHECK(CheckUpdateNorm(over.data(), 2, 1.0).code() == StatusCode::kInvalidArgument);
  // Every coordinate counts, the ones past the last whole group of the
  // running sums too: 1..19 squared sum to 2470.
  std::vector<float> ramp(19);
  for (std::size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i + 1);
  for (std::size_t d = 0; d <= ramp.size(); ++d) {
    CAPTURE(d);
    const double sum_sq = static_cast<double>(d * (d + 1) * (2 * d + 1)) / 6.0;
    CHECK(UpdateNorm(ramp.data(), d) == doctest::Approx(std::sqrt(sum_sq)).epsilon(1e-15));
  }
  // A non-finite coordinate anywhere makes the norm fail the bound.
  for (std::size_t at : {0, 7, 8, 18}) {
    std::vector<float> bad = ramp;
    bad[at] = at % 2 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    CHECK_FALSE(CheckUpdateNorm(bad.data(), bad.size(), 1e30).ok());
  }
}

TEST_CASE("a corrupt or non-finite update leaves the accumulator unchanged") {
  auto codec = MakeCodec("fp32");
  REQUIRE(codec.ok());
  UpdateAccumulator accumulator(2);
  const float good[] = {1, 1};
  REQUIRE(accumulator.AddDecoded(good, 1).ok());
  std::vector<uint8_t> garbage(60, 0xAB);
  CHECK_FALSE(accumulator.AddEncoded(**codec, garbage.data(), garbage.size(), CodecContext(), 1).ok());
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(), 0};
  CHECK(accumulator.AddDecoded(bad, 1).code() == StatusCode::kInvalidArgument);
  CHECK(accumulator.AddDecoded(good, 0).code() == StatusCode::kInvalidArgument);
  CHECK(accumulator.count() == 1);
  CHECK(accumulator.Mean() == std::vector<float>{1, 1});
}

TEST_CASE("a partial sum adds to the accumulator as its updates would, and a bad one changes nothing") {
  const float a[] = {1, 2}, b[] = {3, -2};
  UpdateAccumulator whole(2), part(2), combined(2);
  REQUIRE(whole.AddDecoded(a, 2).ok());
  REQUIRE(whole.AddDecoded(b, 1).ok());
  REQUIRE(part.AddDecoded(b, 1).ok());
  REQUIRE(combined.AddDecoded(a, 2).ok());
  REQUIRE(combined.AddPartial(part.sum(), 2, part.total_weight(), part.count()).ok());
  CHECK(combined.count() == 2);
  CHECK(combined.total_weight() == 3);
  CHECK(combined.Mean() == whole.Mean());
  CHECK(combined.AddPartial(part.sum(), 1, 1, 1).code() == StatusCode::kInvalidArgument);
  CHECK(combined.AddPartial(part.sum(), 2, 0, 1).code() == StatusCode::kInvalidArgument);
  CHECK(combined.AddPartial(part.sum(), 2, std::numeric_limits<double>::infinity(), 1).code() ==
        StatusCode::kInvalidArgument);
  CHECK(combined.AddPartial(part.sum(), 2, 0, 0).ok());  // nothing to add
  CHECK(combined.count() == 2);
  CHECK(combined.Mean() == whole.Mean());
}

TEST_CASE("fedavg adds the mean delta and fedavgm accumulates momentum") {
  const float delta[] = {1.0f, -2.0f};
  float global_avg[] = {0, 0};
  ServerOptimizer fedavg({ServerOptimizerKind::kFedAvg}, 2);
  REQUIRE(fedavg.Apply(delta, global_avg).ok());
  CHECK(global_avg[0] == 1.0f);
  CHECK(global_avg[1] == -2.0f);

  ServerOptimizerOptions options;
  options.kind = ServerOptimizerKind::kFedAvgM;
  options.momentum = 0.5f;
  ServerOptimizer fedavgm(options, 2);
  float global[] = {0, 0};
  REQUIRE(fedavgm.Apply(delta, global).ok());  // v = 1
  REQUIRE(fedavgm.Apply(delta, global).ok());  // v = 1.5
  CHECK(global[0] == doctest::Approx(2.5));
  CHECK(fedavgm.first_moment()[0] == doctest::Approx(1.5));
}

TEST_CASE("fedadam steps by about the learning rate in the direction of a steady delta") {
  ServerOptimizerOptions options;
  options.kind = ServerOptimizerKind::kFedAdam;
  options.learning_rate = 0.01f;
  ServerOptimizer adam(options, 2);
  const float delta[] = {0.5f, -0.001f};
  float global[] = {0, 0};
  for (int i = 0; i < 200; ++i) REQUIRE(adam.Apply(delta, global).ok());
  // Reference: Reddi et al.'s FedAdam (no bias correction), in double.
  double m = 0, v = 0, x = 0;
  for (int i = 0; i < 200; ++i) {
    m = 0.9 * m + 0.1 * 0.5;
    v = 0.99 * v + 0.01 * 0.25;
    x += 0.01 * m / (std::sqrt(v) + 1e-3);
  }
  CHECK(global[0] == doctest::Approx(x).epsilon(1e-4));
  // Adam normalises magnitudes: a delta 500x smaller still moves the
  // coordinate at a comparable speed (slower, as tau is not negligible next to 0.001).
  CHECK(global[1] < -0.2f * global[0]);
}

TEST_CASE("server optimizer state restores only with matching sizes") {
  ServerOptimizerOptions options;
  options.kind = ServerOptimizerKind::kFedAdam;
  ServerOptimizer adam(options, 3);
  CHECK(adam.Restore({1, 2, 3}, {1, 1, 1}).ok());
  CHECK(adam.first_moment()[2] == 3.0f);
  CHECK(adam.Restore({1, 2}, {1, 1, 1}).code() == StatusCode::kInvalidArgument);
  CHECK(ParseServerOptimizer("fedadam").ok());
  CHECK_FALSE(ParseServerOptimizer("adam").ok());
}

TEST_CASE("device sampling honours fraction, minimum and over-selection deterministically") {
  std::vector<uint32_t> devices;
  for (uint32_t i = 0; i < 100; ++i) devices.push_back(i * 3);
  SamplingOptions options;
  options.fraction = 0.1;
  options.minimum = 5;
  options.over_selection = 0.3;
  const auto a = SampleDevices(devices, options, 42, 7);
  CHECK(a.size() == 13);  // ceil(10) -> 10, + ceil(3) over-selected
  CHECK(std::set<uint32_t>(a.begin(), a.end()).size() == a.size());
  for (uint32_t id : a) CHECK(id % 3 == 0);
  CHECK(SampleDevices(devices, options, 42, 7) == a);
  CHECK(SampleDevices(devices, options, 42, 8) != a);
  options.fraction = 0.01;
  options.over_selection = 0;
  CHECK(SampleDevices(devices, options, 42, 7).size() == 5);  // the minimum
  options.minimum = 500;
  CHECK(SampleDevices(devices, options, 42, 7).size() == 100);  // capped at n
}

TEST_CASE("over many rounds every device is sampled about equally often") {
  std::vector<uint32_t> devices(20);
  for (uint32_t i = 0; i < 20; ++i) devices[i] = i;
  SamplingOptions options;
  options.fraction = 0.25;
  std::vector<int> counts(20, 0);
  for (uint32_t round = 0; round < 2000; ++round) {
    for (uint32_t id : SampleDevices(devices, options, 1, round)) ++counts[id];
  }
  // Expected 500 each; binomial sd ~19; 5 sd bound.
  for (int c : counts) CHECK(std::abs(c - 500) < 100);
}

}  // namespace
}  // namespace fedrt
