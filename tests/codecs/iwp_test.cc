// Importance-weighted pruning: leader agreement, the threshold's kept
// fraction, conservation (every node keeps exactly what it did not send and
// nothing is lost over many steps, also when accumulating rate-scaled
// updates), warm-up, clipping, restoring a failed step and the index broadcast.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "fedrt/codecs/iwp.h"

namespace fedrt {
namespace {

// The fixed-quantile rule without probabilistic updates: every tensor keeps
// the step's fraction, by importance alone.
IwpOptions Quantile() {
  IwpOptions o;
  o.threshold = IwpThreshold::kQuantile;
  o.probabilistic = false;
  return o;
}

IwpAccumulator Make(std::size_t d, const IwpOptions& options = IwpOptions()) {
  REQUIRE(IwpAccumulator::Check(d, options).ok());
  return IwpAccumulator(d, options);
}

// d Gaussian gradient values and weights 0.1 + |Gaussian| (no weight near 0).
void GaussianGradientAndWeights(std::size_t d, unsigned seed, std::vector<float>* g, std::vector<float>* w) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  g->resize(d);
  w->resize(d);
  for (std::size_t i = 0; i < d; ++i) {
    (*g)[i] = normal(rng);
    (*w)[i] = 0.1f + std::fabs(normal(rng));
  }
}

TEST_CASE("every node computes the same leader and leaders spread over the nodes") {
  std::vector<int> count(5, 0);
  for (uint32_t step = 0; step < 5000; ++step) {
    const uint32_t leader = IwpLeader(42, step, 5);
    REQUIRE(leader < 5);
    CHECK(IwpLeader(42, step, 5) == leader);
    ++count[leader];
  }
  for (int c : count) CHECK(std::abs(c - 1000) < 150);  // ~4.7 sigma
  CHECK(IwpLeader(42, 0, 1) == 0);
}

TEST_CASE("the quantile threshold keeps about the target fraction by importance") {
  const std::size_t d = 200000;
  auto node = Make(d, Quantile());
  std::vector<float> g, w;
  GaussianGradientAndWeights(d, 1, &g, &w);
  REQUIRE(node.Accumulate(g.data()).ok());
  std::vector<uint32_t> indices;
  node.SelectIndices(w.data(), {7, 0, 3, 1}, &indices);
  const double kept = static_cast<double>(indices.size()) / d;
  MESSAGE("kept fraction " << kept << " target " << 1.0 / 64);
  CHECK(kept > 0.75 / 64);
  CHECK(kept < 1.25 / 64);
  CHECK(std::is_sorted(indices.begin(), indices.end()));
  // Every kept coordinate is at least as important as every dropped one.
  float min_kept = 1e30f, max_dropped = 0;
  std::vector<bool> in(d, false);
  for (uint32_t i : indices) in[i] = true;
  for (std::size_t i = 0; i < d; ++i) {
    const float importance = std::fabs(g[i]) / (std::fabs(w[i]) + 1e-8f);
    if (in[i]) min_kept = std::min(min_kept, importance);
    else max_dropped = std::max(max_dropped, importance);
  }
  CHECK(min_kept >= max_dropped);
}

TEST_CASE("each step every node keeps exactly what it did not send and nothing is lost") {
  const int nodes = 4;
  const std::size_t d = 3000;
  IwpOptions options;
  options.target_fraction = 1.0f / 16;
  options.sample_size = 512;
  std::vector<IwpAccumulator> ring;
  for (int n = 0; n < nodes; ++n) ring.push_back(Make(d, options));
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  std::vector<float> w(d);
  for (float& v : w) v = normal(rng);
  std::vector<std::vector<double>> sum_grad(nodes, std::vector<double>(d, 0)), sum_sent(nodes, std::vector<double>(d, 0));
  std::vector<uint32_t> indices;
  std::vector<float> g(d), values;
  for (uint32_t step = 0; step < 300; ++step) {
    std::vector<std::vector<float>> before(nodes);
    for (int n = 0; n < nodes; ++n) {
      for (std::size_t i = 0; i < d; ++i) {
        g[i] = normal(rng) * (1.0f + static_cast<float>(i % 7));
        sum_grad[n][i] += g[i];
      }
      REQUIRE(ring[n].Accumulate(g.data()).ok());
      before[n].assign(ring[n].accumulator(), ring[n].accumulator() + d);
    }
    const uint32_t leader = IwpLeader(99, step, nodes);
    ring[leader].SelectIndices(w.data(), {99, 0, step, leader}, &indices);
    REQUIRE_FALSE(indices.empty());
    // The broadcast survives its compact form.
    std::vector<uint8_t> wire(IwpMaxEncodedIndicesSize(indices.size()));
    auto size = EncodeIwpIndices(indices.data(), indices.size(), wire.data(), wire.size());
    REQUIRE(size.ok());
    std::vector<uint32_t> received(indices.size());
    REQUIRE(DecodeIwpIndices(wire.data(), *size, indices.size(), d, received.data()).ok());
    REQUIRE(received == indices);
    std::vector<bool> in(d, false);
    for (uint32_t i : received) in[i] = true;
    values.resize(received.size());
    for (int n = 0; n < nodes; ++n) {
      REQUIRE(ring[n].GatherAndZero(received.data(), received.size(), values.data()).ok());
      bool exact = true;
      for (std::size_t j = 0; j < received.size(); ++j) {
        exact = exact && values[j] == before[n][received[j]];
        sum_sent[n][received[j]] += values[j];
      }
      for (std::size_t i = 0; i < d; ++i) exact = exact && ring[n].accumulator()[i] == (in[i] ? 0.0f : before[n][i]);
      REQUIRE(exact);
    }
  }
  double worst = 0;
  for (int n = 0; n < nodes; ++n) {
    for (std::size_t i = 0; i < d; ++i) {
      worst = std::max(worst, std::fabs(sum_sent[n][i] + ring[n].accumulator()[i] - sum_grad[n][i]));
    }
  }
  MESSAGE("worst |sum sent + accumulator - sum gradients| = " << worst);
  CHECK(worst < 1e-2);  // float accumulation of ~300 gradients of size up to ~20
}

TEST_CASE("warm-up steps use the warm-up fraction and clipping bounds each gradient") {
  IwpOptions options;
  options.warmup_steps = 2;
  options.warmup_fraction = 1.0f;
  options.clip_norm = 1.0f;
  const std::size_t d = 1000;
  auto node = Make(d, options);
  std::vector<float> g(d), w(d, 1.0f);
  for (std::size_t i = 0; i < d; ++i) g[i] = (i % 2 == 0 ? 1.0f : -1.0f) * (1.0f + static_cast<float>(i % 10));
  REQUIRE(node.Accumulate(g.data()).ok());
  double norm = 0;
  for (std::size_t i = 0; i < d; ++i) norm += double{node.accumulator()[i]} * node.accumulator()[i];
  CHECK(std::sqrt(norm) == doctest::Approx(1.0).epsilon(1e-5));  // clipped from ~196
  std::vector<uint32_t> indices;
  node.SelectIndices(w.data(), {1, 0, 1, 0}, &indices);
  CHECK(indices.size() == d);  // dense during warm-up
  node.SelectIndices(w.data(), {1, 0, 2, 0}, &indices);
  CHECK(indices.size() < d);
}

TEST_CASE("exponential warm-up lowers the kept share geometrically from the warm-up fraction to the target") {
  IwpOptions options = Quantile();
  options.target_fraction = 1.0f / 64;
  options.warmup_fraction = 1.0f / 4;
  options.warmup_steps = 100;
  options.warmup_exponential = true;
  const std::size_t d = 100000;
  auto node = Make(d, options);
  CHECK(node.StepFraction(0) == 0.25f);
  CHECK(node.StepFraction(50) == doctest::Approx(1.0 / 16).epsilon(1e-6));  // the geometric mean
  CHECK(node.StepFraction(100) == 1.0f / 64);
  CHECK(node.StepFraction(5000) == 1.0f / 64);
  for (uint32_t t = 1; t < 100; ++t) CHECK(node.StepFraction(t) < node.StepFraction(t - 1));
  std::vector<float> g, w;
  GaussianGradientAndWeights(d, 7, &g, &w);
  REQUIRE(node.Accumulate(g.data()).ok());
  std::vector<uint32_t> indices;
  for (uint32_t t : {0u, 50u, 100u}) {
    node.SelectIndices(w.data(), {3, 0, t, 0}, &indices);
    const double kept = static_cast<double>(indices.size()) / d;
    MESSAGE("step " << t << " kept " << kept << " of " << node.StepFraction(t));
    CHECK(kept > 0.8 * node.StepFraction(t));
    CHECK(kept < 1.2 * node.StepFraction(t));
  }
  options.warmup_exponential = false;  // constant warm-up: the warm-up fraction throughout
  auto flat = Make(d, options);
  CHECK(flat.StepFraction(99) == 0.25f);
  CHECK(flat.StepFraction(100) == 1.0f / 64);
}

// Four nodes with momentum correction over 200 steps, accumulating at a rate
// (1, or decaying as a cosine schedule does): the velocity is u = m u + g,
// masked where sent, and what every node sent plus its accumulator equals
// the sum of rate * u.
void RunMomentumRing(bool decaying_rate) {
  const int nodes = 4;
  const std::size_t d = 2000;
  IwpOptions options;
  options.target_fraction = 1.0f / 16;
  options.sample_size = 512;
  options.momentum = 0.9f;
  std::vector<IwpAccumulator> ring;
  for (int n = 0; n < nodes; ++n) ring.push_back(Make(d, options));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> w(d);
  for (float& v : w) v = normal(rng);
  // Reference velocity in double, masked like the accumulator's.
  std::vector<std::vector<double>> u(nodes, std::vector<double>(d, 0)), sum_u(nodes, std::vector<double>(d, 0)),
      sum_sent(nodes, std::vector<double>(d, 0));
  std::vector<uint32_t> indices;
  std::vector<float> g(d), values;
  const uint32_t steps = 200;
  bool exact = true;
  for (uint32_t step = 0; step < steps; ++step) {
    const float rate =
        decaying_rate ? 0.05f * 0.5f * (1.0f + std::cos(3.14159265f * static_cast<float>(step) / steps)) + 1e-4f : 1.0f;
    for (int n = 0; n < nodes; ++n) {
      std::vector<float> before(ring[n].accumulator(), ring[n].accumulator() + d);
      for (std::size_t i = 0; i < d; ++i) {
        g[i] = normal(rng) * (1.0f + static_cast<float>(i % 5));
        u[n][i] = 0.9 * u[n][i] + g[i];
        sum_u[n][i] += double{rate} * u[n][i];
      }
      REQUIRE(ring[n].Accumulate(g.data(), rate).ok());
      // The same floats as the formula: a += rate * u.
      for (std::size_t i = 0; i < d; ++i) exact = exact && ring[n].accumulator()[i] == before[i] + rate * ring[n].velocity()[i];
    }
    const uint32_t leader = IwpLeader(5, step, nodes);
    ring[leader].SelectIndices(w.data(), {5, 0, step, leader}, &indices);
    REQUIRE_FALSE(indices.empty());
    values.resize(indices.size());
    for (int n = 0; n < nodes; ++n) {
      REQUIRE(ring[n].GatherAndZero(indices.data(), indices.size(), values.data()).ok());
      bool masked = true;
      for (std::size_t j = 0; j < indices.size(); ++j) {
        sum_sent[n][indices[j]] += values[j];
        masked = masked && ring[n].velocity()[indices[j]] == 0.0f && ring[n].accumulator()[indices[j]] == 0.0f;
        u[n][indices[j]] = 0;
      }
      REQUIRE(masked);
    }
  }
  CHECK(exact);
  double worst = 0, worst_u = 0, largest = 0;
  for (int n = 0; n < nodes; ++n) {
    for (std::size_t i = 0; i < d; ++i) {
      worst = std::max(worst, std::fabs(sum_sent[n][i] + ring[n].accumulator()[i] - sum_u[n][i]));
      worst_u = std::max(worst_u, std::fabs(ring[n].velocity()[i] - u[n][i]));
      largest = std::max(largest, std::fabs(sum_u[n][i]));
    }
  }
  MESSAGE("worst |sum sent + accumulator - sum rate * velocity| = " << worst << " of sums up to " << largest
                                                                      << ", velocity error " << worst_u);
  CHECK(largest > (decaying_rate ? 0.5 : 10.0));
  // Float accumulation of 200 velocities of size up to ~50 (10 x gradient),
  // times the rate.
  CHECK(worst < (decaying_rate ? 5e-3 : 5e-2));
  CHECK(worst_u < 1e-3);
}

TEST_CASE("momentum correction accumulates the velocity and masks it where sent so nothing is lost") {
  RunMomentumRing(false);
}

TEST_CASE("accumulating at a decaying rate adds rate times the velocity and nothing is lost") {
  RunMomentumRing(true);
}

TEST_CASE("accumulating at rate one gives the same floats as accumulating the gradient and bad rates are refused") {
  const std::size_t d = 777;
  for (float momentum : {0.0f, 0.9f}) {
    for (float clip : {0.0f, 3.0f}) {
      IwpOptions options;
      options.momentum = momentum;
      options.clip_norm = clip;
      auto plain = Make(d, options), rated = Make(d, options);
      std::mt19937 rng(5);
      std::normal_distribution<float> normal;
      std::vector<float> g(d);
      for (int step = 0; step < 5; ++step) {
        for (float& v : g) v = normal(rng);
        REQUIRE(plain.Accumulate(g.data()).ok());
        REQUIRE(rated.Accumulate(g.data(), 1.0f).ok());
      }
      CHECK(std::equal(plain.accumulator(), plain.accumulator() + d, rated.accumulator()));
    }
  }
  auto node = Make(d);
  std::vector<float> g(d, 1.0f);
  for (float rate : {-0.1f, NAN, INFINITY}) {
    CHECK(node.Accumulate(g.data(), rate).code() == StatusCode::kInvalidArgument);
  }
  REQUIRE(node.Accumulate(g.data(), 0.0f).ok());  // the end of a schedule: nothing added
  CHECK(std::all_of(node.accumulator(), node.accumulator() + d, [](float v) { return v == 0.0f; }));
  // Without momentum: a += (g * clip scale) * rate.
  REQUIRE(node.Accumulate(g.data(), 0.25f).ok());
  CHECK(node.accumulator()[d - 1] == 0.25f);
}

TEST_CASE("restoring what a failed step gathered gives back the accumulator and keeps the velocity masked") {
  const std::size_t d = 3000;
  for (float momentum : {0.0f, 0.9f}) {
    IwpOptions options;
    options.target_fraction = 1.0f / 8;
    options.momentum = momentum;
    auto node = Make(d, options);
    std::mt19937 rng(6);
    std::normal_distribution<float> normal;
    std::vector<float> g(d), w(d, 1.0f);
    for (int step = 0; step < 3; ++step) {
      for (float& v : g) v = normal(rng);
      REQUIRE(node.Accumulate(g.data(), 0.05f).ok());
    }
    std::vector<float> before(node.accumulator(), node.accumulator() + d);
    std::vector<float> velocity_before(node.velocity(), node.velocity() + (momentum > 0 ? d : 0));
    std::vector<uint32_t> indices;
    node.SelectIndices(w.data(), {1, 0, 3, 0}, &indices);
    REQUIRE(indices.size() > d / 16);
    std::vector<float> values(indices.size());
    REQUIRE(node.GatherAndZero(indices.data(), indices.size(), values.data()).ok());
    REQUIRE(node.Restore(indices.data(), indices.size(), values.data()).ok());
    CHECK(std::equal(before.begin(), before.end(), node.accumulator()));
    if (momentum > 0) {
      std::vector<bool> in(d, false);
      for (uint32_t i : indices) in[i] = true;
      bool masked = true;
      for (std::size_t i = 0; i < d; ++i) masked = masked && node.velocity()[i] == (in[i] ? 0.0f : velocity_before[i]);
      CHECK(masked);
    }
    const uint32_t out_of_range[] = {1, static_cast<uint32_t>(d)};
    const float two[] = {1.0f, 1.0f};
    CHECK(node.Restore(out_of_range, 2, two).code() == StatusCode::kOutOfRange);
    const uint32_t fine[] = {1, 2};
    const float not_finite[] = {1.0f, NAN};
    CHECK(node.Restore(fine, 2, not_finite).code() == StatusCode::kInvalidArgument);
    CHECK(std::equal(before.begin(), before.end(), node.accumulator()));  // refused: nothing changed
  }
}

TEST_CASE("per-tensor quantile thresholds keep about the target fraction of every tensor and small tensors whole") {
  // Three tensors of very different scales: one threshold for the whole
  // vector would keep only the loud one.
  const std::size_t sizes[] = {60000, 20000, 300};
  const float scales[] = {1e-3f, 1.0f, 1e-2f};
  const std::size_t d = sizes[0] + sizes[1] + sizes[2];
  IwpOptions options = Quantile();
  options.dense_below = 1000;
  auto node = Make(d, options);
  REQUIRE(node.SetTensors({sizes[0], sizes[1], sizes[2]}).ok());
  CHECK(node.SetTensors({sizes[0], sizes[1]}).code() == StatusCode::kInvalidArgument);
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  std::vector<float> g(d), w(d, 1.0f);
  std::size_t at = 0;
  for (int k = 0; k < 3; ++k) {
    for (std::size_t i = 0; i < sizes[k]; ++i, ++at) g[at] = scales[k] * normal(rng);
  }
  REQUIRE(node.Accumulate(g.data()).ok());
  std::vector<uint32_t> indices;
  node.SelectIndices(w.data(), {8, 0, 3, 1}, &indices);
  std::size_t kept[3] = {0, 0, 0};
  for (uint32_t i : indices) ++kept[i < sizes[0] ? 0 : (i < sizes[0] + sizes[1] ? 1 : 2)];
  for (int k = 0; k < 2; ++k) {
    const double share = static_cast<double>(kept[k]) / static_cast<double>(sizes[k]);
    MESSAGE("tensor " << k << " kept " << share << " target " << 1.0 / 64);
    CHECK(share > 0.7 / 64);
    CHECK(share < 1.3 / 64);
  }
  CHECK(kept[2] == sizes[2]);  // below dense_below: sent whole
  CHECK(std::is_sorted(indices.begin(), indices.end()));
}

TEST_CASE("iwp rejects bad options, bad gradients, bad indices and bad broadcasts") {
  IwpOptions bad;
  bad.target_fraction = 0;
  CHECK(IwpAccumulator::Check(10, bad).code() == StatusCode::kInvalidArgument);
  bad = IwpOptions();
  bad.eps = 0;
  CHECK(IwpAccumulator::Check(10, bad).code() == StatusCode::kInvalidArgument);
  bad = IwpOptions();
  bad.momentum = 1.0f;
  CHECK(IwpAccumulator::Check(10, bad).code() == StatusCode::kInvalidArgument);
  auto node = Make(10);
  std::vector<float> g(10, 0.0f);
  g[3] = NAN;
  CHECK(node.Accumulate(g.data()).code() == StatusCode::kInvalidArgument);
  const uint32_t out_of_range[] = {2, 10};
  float values[2];
  CHECK(node.GatherAndZero(out_of_range, 2, values).code() == StatusCode::kOutOfRange);
  const uint32_t unsorted[] = {5, 2};
  uint8_t wire[16];
  CHECK(EncodeIwpIndices(unsorted, 2, wire, sizeof wire).status().code() == StatusCode::kInvalidArgument);
  const uint8_t junk[] = {0, 0, 20};
  uint32_t decoded[1];
  CHECK(DecodeIwpIndices(junk, sizeof junk, 1, 10, decoded).code() == StatusCode::kCorrupt);
}

// Two tensors of equal mean importance: a flat one (|Gaussian|) and a bursty
// one (mostly small, a few very large: a high index of dispersion).
void FlatAndBursty(std::size_t n, std::vector<float>* g, std::vector<float>* w) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  g->assign(2 * n, 0.0f);
  w->assign(2 * n, 1.0f);
  for (std::size_t i = 0; i < n; ++i) (*g)[i] = normal(rng);
  for (std::size_t i = n; i < 2 * n; ++i) (*g)[i] = (u(rng) < 0.01f ? 60.0f : 0.2f) * normal(rng);
}

TEST_CASE("the dispersion threshold keeps the target share overall and fewer coordinates of a bursty tensor") {
  const std::size_t n = 100000;
  std::vector<float> g, w;
  FlatAndBursty(n, &g, &w);
  for (bool probabilistic : {true, false}) {
    INFO("probabilistic ", probabilistic);
    IwpOptions options;
    options.threshold = IwpThreshold::kDispersion;
    options.probabilistic = probabilistic;
    auto node = Make(2 * n, options);
    REQUIRE(node.SetTensors({n, n}).ok());
    REQUIRE(node.Accumulate(g.data()).ok());
    std::vector<uint32_t> indices;
    node.SelectIndices(w.data(), {5, 0, 9, 2}, &indices);
    std::size_t kept[2] = {0, 0};
    for (uint32_t i : indices) ++kept[i < n ? 0 : 1];
    const double overall = static_cast<double>(indices.size()) / (2.0 * n);
    MESSAGE("kept overall " << overall << ", flat " << kept[0] << ", bursty " << kept[1] << ", thresholds "
                            << node.thresholds()[0] << " / " << node.thresholds()[1]);
    CHECK(overall > 0.8 / 64);
    CHECK(overall < 1.2 / 64);
    CHECK(kept[1] < kept[0]);
    // Shares differ by at most 4x: no tensor starves.
    CHECK(kept[1] > kept[0] / 5);
    CHECK(std::is_sorted(indices.begin(), indices.end()));
    // The bursty tensor's threshold sits further above its mean.
    CHECK(node.thresholds()[1] > node.thresholds()[0]);
  }
  // The quantile rule keeps about the same share of both.
  auto quantile = Make(2 * n, Quantile());
  REQUIRE(quantile.SetTensors({n, n}).ok());
  REQUIRE(quantile.Accumulate(g.data()).ok());
  std::vector<uint32_t> indices;
  quantile.SelectIndices(w.data(), {5, 0, 9, 2}, &indices);
  std::size_t kept[2] = {0, 0};
  for (uint32_t i : indices) ++kept[i < n ? 0 : 1];
  CHECK(std::abs(static_cast<double>(kept[0]) - static_cast<double>(kept[1])) < 0.3 * static_cast<double>(kept[0]));
}

TEST_CASE("the probabilistic update takes a quarter of the kept share below a threshold that keeps the loudest") {
  // 2000 loud coordinates (importance 100) and 98,000 quiet ones (importance
  // 1) at 1/64: the threshold keeps the top three quarters of the share,
  // so it lands on the loud ones and keeps them all; the quiet ones are
  // sent with probability scale / tau each, about a quarter of the share in
  // all. (Sending them with probability I / tau and solving for the share
  // pushed tau to about 190, above every coordinate: the loud ones waited.)
  const std::size_t d = 100000;
  std::vector<float> g(d, 1.0f), w(d, 1.0f);
  for (std::size_t i = 0; i < d; i += 50) g[i] = 100.0f;
  IwpOptions options;
  options.threshold = IwpThreshold::kDispersion;
  options.probabilistic = true;
  options.target_fraction = 1.0f / 64;
  auto node = Make(d, options);
  REQUIRE(node.Accumulate(g.data()).ok());
  std::vector<uint32_t> indices;
  node.SelectIndices(w.data(), {2, 0, 4, 0}, &indices);
  const float tau = node.thresholds()[0];
  CHECK(tau == 100.0f);
  std::size_t quiet = 0, loud = 0;
  for (uint32_t i : indices) ++(i % 50 == 0 ? loud : quiet);
  const double expect = 0.25 * d / 64.0;
  MESSAGE("tau " << tau << ", loud kept " << loud << ", quiet kept " << quiet << " (expected " << expect << ")");
  CHECK(loud == d / 50);
  CHECK(std::abs(static_cast<double>(quiet) - expect) < 5 * std::sqrt(expect) + 1);
  // Without it, nothing below the threshold is sent.
  options.probabilistic = false;
  auto strict = Make(d, options);
  REQUIRE(strict.Accumulate(g.data()).ok());
  strict.SelectIndices(w.data(), {2, 0, 4, 0}, &indices);
  for (uint32_t i : indices) CHECK(i % 50 == 0);
}

}  // namespace
}  // namespace fedrt
