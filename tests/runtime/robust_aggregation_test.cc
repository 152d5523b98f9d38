// Robust aggregation rules on hand-computed cases: weighted median, trimmed
// mean, Krum and multi-krum, ties, too few updates, and finite results from
// extreme finite inputs.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "fedrt/runtime/byzantine.h"
#include "fedrt/runtime/robust_aggregation.h"

namespace fedrt {
namespace {

AggregationRule Rule(const std::string& text) {
  Result<AggregationRule> rule = ParseAggregationRule(text);
  REQUIRE_MESSAGE(rule.ok(), rule.status().ToString());
  return *rule;
}

// Combines rows (one update each) with `weights`; d = row length.
std::vector<float> Combine(const std::string& rule, const std::vector<std::vector<float>>& rows,
                           const std::vector<double>& weights, AggregationDetail* detail = nullptr) {
  std::vector<const float*> updates;
  for (const auto& row : rows) updates.push_back(row.data());
  std::vector<float> out(rows.front().size(), -7.0f);
  const Status status = Aggregate(Rule(rule), updates, weights, out.size(), out.data(), detail);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return out;
}

TEST_CASE("aggregation rules parse their forms and refuse the rest") {
  CHECK(Rule("mean").kind == AggregationKind::kMean);
  CHECK(Rule("median").kind == AggregationKind::kMedian);
  CHECK(Rule("trimmed-mean:0.25").trim_fraction == 0.25);
  CHECK(Rule("krum:2").byzantine == 2);
  CHECK(Rule("multi-krum:0").kind == AggregationKind::kMultiKrum);
  CHECK(AggregationRuleName(Rule("trimmed-mean:0.25")) == "trimmed-mean:0.25");
  CHECK(AggregationRuleName(Rule("multi-krum:2")) == "multi-krum:2");
  for (const char* bad : {"", "avg", "trimmed-mean", "trimmed-mean:0.5", "trimmed-mean:-0.1", "trimmed-mean:x",
                          "krum:1.5", "krum:-1", "krum:", "multi-krum:2x", "median:1", "trimmed-mean:nan"}) {
    CAPTURE(bad);
    CHECK(ParseAggregationRule(bad).status().code() == StatusCode::kInvalidArgument);
  }
  CHECK_FALSE(HoldsUpdates(Rule("mean")));
  CHECK(HoldsUpdates(Rule("median")));
  CHECK(MinimumUpdates(Rule("krum:2")) == 7);
  CHECK(MinimumUpdates(Rule("trimmed-mean:0.4")) == 1);
}

TEST_CASE("the median is the coordinate-wise median, the weighted median with weights") {
  // Odd count: the middle value per coordinate.
  CHECK(Combine("median", {{1, 10}, {2, 20}, {100, -5}}, {1, 1, 1}) == std::vector<float>{2, 10});
  // Even count, equal weights: the midpoint of the two middle values.
  CHECK(Combine("median", {{1, 10}, {2, 20}, {100, -5}, {3, 0}}, {1, 1, 1, 1}) == std::vector<float>{2.5f, 5});
  // Weights 1, 1, 5 of 7: the heavy update holds the weighted median.
  CHECK(Combine("median", {{1, 10}, {2, 20}, {100, -5}}, {1, 1, 5}) == std::vector<float>{100, -5});
  // Exactly half the weight below a value: the midpoint; more than half: the value.
  CHECK(Combine("median", {{0}, {4}}, {2, 2}) == std::vector<float>{2});
  CHECK(Combine("median", {{0}, {4}}, {1, 3}) == std::vector<float>{4});
  // Ties: equal values are the median whatever their weights.
  CHECK(Combine("median", {{5}, {5}, {5}, {1}}, {1, 2, 3, 4}) == std::vector<float>{5});
}

TEST_CASE("the trimmed mean drops floor(F n) values per side and weights the rest by samples") {
  const std::vector<std::vector<float>> rows = {{1, 10}, {2, 20}, {100, -5}, {3, 0}};
  // n = 4, F = 0.25: one value trimmed per side; (2 + 3) / 2 and (0 + 10) / 2.
  CHECK(Combine("trimmed-mean:0.25", rows, {1, 1, 1, 1}) == std::vector<float>{2.5f, 5});
  // The kept values weighted: coordinate 0 keeps 2 (weight 3) and 3 (weight 1): 9 / 4;
  // coordinate 1 keeps 0 (weight 1) and 10 (weight 1).
  CHECK(Combine("trimmed-mean:0.25", rows, {1, 3, 1, 1}) == std::vector<float>{2.25f, 5});
  // floor(0.2 * 4) = 0: the plain weighted mean.
  CHECK(Combine("trimmed-mean:0.2", rows, {1, 1, 1, 1}) == std::vector<float>{26.5f, 6.25f});
  // Ties at the cut: equal values, so whichever is dropped gives the same mean.
  CHECK(Combine("trimmed-mean:0.25", {{7}, {7}, {7}, {7}}, {1, 2, 3, 4}) == std::vector<float>{7});
}

TEST_CASE("krum picks the update closest to its n - f - 2 nearest, multi-krum averages the n - f best") {
  // n = 5, f = 1: two nearest neighbours. Scores: 0 -> 1 + 4 = 5, 1 -> 1 + 1 = 2,
  // 2 -> 2, 3 -> 5, 100 -> 97^2 + 98^2 = 19013.
  const std::vector<std::vector<float>> rows = {{0}, {1}, {2}, {3}, {100}};
  AggregationDetail detail;
  // A tie (1 and 2 score 2): the earlier update.
  CHECK(Combine("krum:1", rows, {1, 1, 1, 1, 1}, &detail) == std::vector<float>{1});
  CHECK(detail.selected == std::vector<std::size_t>{1});
  CHECK(detail.scores == std::vector<double>{5, 2, 2, 5, 19013});
  // Krum ignores the weights.
  CHECK(Combine("krum:1", rows, {1, 1, 1, 1, 1000}) == std::vector<float>{1});
  // Multi-krum: the m = 4 lowest scores, everything but the outlier.
  CHECK(Combine("multi-krum:1", rows, {1, 1, 1, 1, 1}, &detail) == std::vector<float>{1.5f});
  CHECK(detail.selected == std::vector<std::size_t>{0, 1, 2, 3});
  // ... weighted by samples: (0 * 1 + 1 * 1 + 2 * 1 + 3 * 5) / 8.
  CHECK(Combine("multi-krum:1", rows, {1, 1, 1, 5, 1}) == std::vector<float>{2.25f});
  // Two dimensions: the outlying update is far in one coordinate only.
  CHECK(Combine("krum:0", {{0, 0}, {0, 1}, {0, 50}}, {1, 1, 1}) == std::vector<float>{0, 0});
}

TEST_CASE("a rule refuses too few updates, bad weights and values that are not finite") {
  std::vector<float> a = {1}, b = {2}, c = {3}, d = {4};
  std::vector<float> out = {-1};
  const Status few = Aggregate(Rule("krum:1"), {a.data(), b.data(), c.data(), d.data()}, {1, 1, 1, 1}, 1, out.data());
  CHECK(few.code() == StatusCode::kInvalidArgument);
  CHECK(few.message() == "krum:1 needs at least 5 updates (2F + 3), got 4");
  CHECK(out[0] == -1);  // untouched
  CHECK_FALSE(Aggregate(Rule("median"), {}, {}, 1, out.data()).ok());
  CHECK_FALSE(Aggregate(Rule("median"), {a.data()}, {0}, 1, out.data()).ok());
  CHECK_FALSE(Aggregate(Rule("median"), {a.data()}, {1, 2}, 1, out.data()).ok());
  std::vector<float> nan = {std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> inf = {std::numeric_limits<float>::infinity()};
  for (const char* rule : {"mean", "median", "trimmed-mean:0.2", "multi-krum:0"}) {
    CAPTURE(rule);
    CHECK_FALSE(Aggregate(Rule(rule), {a.data(), b.data(), nan.data()}, {1, 1, 1}, 1, out.data()).ok());
    CHECK_FALSE(Aggregate(Rule(rule), {a.data(), b.data(), inf.data()}, {1, 1, 1}, 1, out.data()).ok());
  }
  CHECK(out[0] == -1);
}

TEST_CASE("extreme finite updates give finite results under every rule") {
  const float big = std::numeric_limits<float>::max();
  const std::vector<std::vector<float>> rows = {{big, -big}, {-big, big}, {big, big}, {-big, -big}, {big, -big}};
  for (const char* rule : {"mean", "median", "trimmed-mean:0.2", "krum:1", "multi-krum:1"}) {
    CAPTURE(rule);
    const std::vector<float> out = Combine(rule, rows, {1, 2, 3, 4, 5});
    for (float v : out) CHECK(std::isfinite(v));
  }
  // The midpoint of -max and max is 0, not an overflow.
  CHECK(Combine("median", {{big}, {-big}}, {1, 1}) == std::vector<float>{0});
}

TEST_CASE("clipping scales an update down to the norm and leaves a smaller one alone") {
  std::vector<float> update = {3, 4};
  CHECK(ClipToNorm(update.data(), 2, 1.0) == doctest::Approx(0.2));
  CHECK(update[0] == doctest::Approx(0.6f));
  CHECK(update[1] == doctest::Approx(0.8f));
  std::vector<float> small = {0.3f, 0.4f};
  CHECK(ClipToNorm(small.data(), 2, 1.0) == 1.0);
  CHECK(small == std::vector<float>{0.3f, 0.4f});
}

TEST_CASE("byzantine behaviours parse and transform an update as documented") {
  CHECK(ParseByzantine("signflip").value().factor == 1);
  CHECK(ParseByzantine("signflip:4").value().factor == 4);
  CHECK(ParseByzantine("scaled").value().factor == 10);
  CHECK(ParseByzantine("random").value().kind == ByzantineKind::kRandom);
  for (const char* bad : {"", "flip", "signflip:", "signflip:-1", "scaled:x", "stale:2", "random:0"}) {
    CAPTURE(bad);
    CHECK(ParseByzantine(bad).status().code() == StatusCode::kInvalidArgument);
  }
  const auto apply = [](const char*, uint32_t round, std::vector<float> delta, ByzantineUpdate* state) {
    state->Apply(round, delta.data(), delta.size());
    return delta;
  };
  ByzantineUpdate flip(ParseByzantine("signflip:2").value(), 1);
  CHECK(apply("signflip:2", 0, {1, -3}, &flip) == std::vector<float>{-2, 6});
  ByzantineUpdate scaled(ParseByzantine("scaled").value(), 1);
  CHECK(apply("scaled", 0, {1, -3}, &scaled) == std::vector<float>{10, -30});
  ByzantineUpdate stale(ParseByzantine("stale").value(), 1);
  CHECK(apply("stale", 0, {1, 2}, &stale) == std::vector<float>{1, 2});
  CHECK(apply("stale", 1, {5, 6}, &stale) == std::vector<float>{1, 2});
  ByzantineUpdate random(ParseByzantine("random:0.5").value(), 9), again(ParseByzantine("random:0.5").value(), 9);
  const std::vector<float> noise = apply("random", 3, std::vector<float>(1000, 1.0f), &random);
  CHECK(noise == apply("random", 3, std::vector<float>(1000, 7.0f), &again));  // the update is not used
  double sum_sq = 0;
  for (float v : noise) sum_sq += static_cast<double>(v) * v;
  CHECK(std::sqrt(sum_sq / 1000) == doctest::Approx(0.5).epsilon(0.1));
}

}  // namespace
}  // namespace fedrt
