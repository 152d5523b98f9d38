// Gossip graphs: the ring and 2-D torus neighbour lists, their Metropolis
// mixing matrices, and D-PSGD over TCP on a torus (one thread per rank).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fedrt/runtime/peer.h"
#include "peer_checks.h"
#include "peer_ring.h"

namespace fedrt {
namespace {

using peer::GossipGraph;
using testing::PeerRing;

TEST_CASE("torus shapes are as square as the node count allows") {
  uint32_t r = 0, c = 0;
  peer::TorusShape(4, &r, &c);
  CHECK((r == 2 && c == 2));
  peer::TorusShape(6, &r, &c);
  CHECK((r == 2 && c == 3));
  peer::TorusShape(9, &r, &c);
  CHECK((r == 3 && c == 3));
  peer::TorusShape(12, &r, &c);
  CHECK((r == 3 && c == 4));
  peer::TorusShape(7, &r, &c);
  CHECK((r == 1 && c == 7));
}

TEST_CASE("a 3 by 3 torus links every node to its four grid neighbours with wrap-around") {
  const auto n = peer::GraphNeighbours(GossipGraph::kTorus, 9);
  REQUIRE(n.size() == 9);
  CHECK(n[0] == std::vector<uint32_t>{1, 2, 3, 6});
  CHECK(n[4] == std::vector<uint32_t>{1, 3, 5, 7});
  CHECK(n[8] == std::vector<uint32_t>{2, 5, 6, 7});
  // A 2 x 2 torus has each wrap-around edge once: degree 2.
  const auto small = peer::GraphNeighbours(GossipGraph::kTorus, 4);
  CHECK(small[0] == std::vector<uint32_t>{1, 2});
  CHECK(small[3] == std::vector<uint32_t>{1, 2});
  const auto ring = peer::GraphNeighbours(GossipGraph::kRing, 5);
  CHECK(ring[0] == std::vector<uint32_t>{1, 4});
  CHECK(peer::GraphNeighbours(GossipGraph::kRing, 2)[1] == std::vector<uint32_t>{0});
  CHECK(peer::GraphNeighbours(GossipGraph::kRing, 1)[0].empty());
}

TEST_CASE("Metropolis mixing matrices of rings and tori are symmetric and doubly stochastic") {
  for (GossipGraph graph : {GossipGraph::kRing, GossipGraph::kTorus}) {
    for (uint32_t n = 1; n <= 16; ++n) {
      const auto neighbours = peer::GraphNeighbours(graph, n);
      const std::vector<double> w = peer::MetropolisWeights(neighbours);
      REQUIRE(w.size() == std::size_t{n} * n);
      INFO("graph ", graph == GossipGraph::kRing ? "ring" : "torus", " n ", n);
      for (uint32_t i = 0; i < n; ++i) {
        double row = 0, column = 0;
        for (uint32_t j = 0; j < n; ++j) {
          CHECK(w[i * n + j] == w[j * n + i]);
          CHECK(w[i * n + j] >= 0.0);
          row += w[i * n + j];
          column += w[j * n + i];
          const bool linked = std::find(neighbours[i].begin(), neighbours[i].end(), j) != neighbours[i].end();
          if (i != j && !linked) CHECK(w[i * n + j] == 0.0);
          if (linked) CHECK(w[i * n + j] > 0.0);
        }
        CHECK(row == doctest::Approx(1.0).epsilon(1e-12));
        CHECK(column == doctest::Approx(1.0).epsilon(1e-12));
        CHECK(w[i * n + i] > 0.0);
      }
    }
  }
  // Mixed degrees: a path 0 - 1 - 2 (degrees 1, 2, 1).
  const std::vector<double> w = peer::MetropolisWeights({{1}, {0, 2}, {1}});
  CHECK(w[0 * 3 + 1] == doctest::Approx(1.0 / 3));
  CHECK(w[0 * 3 + 0] == doctest::Approx(2.0 / 3));
  CHECK(w[1 * 3 + 1] == doctest::Approx(1.0 / 3));
}

std::vector<std::vector<float>> Targets(int n, std::size_t d) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::vector<float>> b(static_cast<std::size_t>(n), std::vector<float>(d));
  for (auto& v : b) {
    for (auto& x : v) x = u(rng);
  }
  return b;
}

TEST_CASE("the mixing time of Moniqua's bound follows the gossip matrix's second eigenvalue") {
  using peer::GossipGraph;
  const auto slem = [](GossipGraph graph, uint32_t n) {
    return peer::SecondLargestEigenvalueModulus(peer::MetropolisWeights(peer::GraphNeighbours(graph, n)), n);
  };
  // Ring with weights 1/3: eigenvalues 1/3 + 2/3 cos(2 pi k / n).
  const double pi = std::acos(-1.0);
  CHECK(slem(GossipGraph::kRing, 8) == doctest::Approx(1.0 / 3 + 2.0 / 3 * std::cos(2 * pi / 8)).epsilon(1e-12));
  CHECK(slem(GossipGraph::kRing, 4) == doctest::Approx(1.0 / 3).epsilon(1e-12));
  // 3 x 3 torus, weights 1/5: 1/5 + 2/5 (cos(2 pi a / 3) + cos(2 pi b / 3)); largest non-trivial modulus 0.4.
  CHECK(slem(GossipGraph::kTorus, 9) == doctest::Approx(0.4).epsilon(1e-12));
  CHECK(slem(GossipGraph::kRing, 2) == doctest::Approx(0.0).epsilon(1e-12));
  // All eigenvalues, ascending: the most negative one sets the 1-bit rule's
  // cap on gamma (ring: 1/3 - 2/3 = -1/3; 2 x 4 torus, weights 1/4 with
  // the up and down neighbour the same: 1/4 (1 - 2 - 1) = -1/2).
  const auto lowest = [](GossipGraph graph, uint32_t n) {
    return peer::SymmetricEigenvalues(peer::MetropolisWeights(peer::GraphNeighbours(graph, n)), n).front();
  };
  CHECK(lowest(GossipGraph::kRing, 8) == doctest::Approx(-1.0 / 3).epsilon(1e-12));
  CHECK(lowest(GossipGraph::kTorus, 8) == doctest::Approx(-0.5).epsilon(1e-12));
  CHECK(peer::SymmetricEigenvalues(peer::MetropolisWeights(peer::GraphNeighbours(GossipGraph::kRing, 8)), 8).back() ==
        doctest::Approx(1.0).epsilon(1e-12));
  // t_mix = ceil(ln(2n) / (1 - lambda)).
  CHECK(peer::MixingTime(slem(GossipGraph::kRing, 8), 8) == 15);  // ln 16 / 0.1953 = 14.2
  CHECK(peer::MixingTime(1.0 / 3, 4) == 4);                          // ln 8 / (2/3) = 3.1
  CHECK(peer::MixingTime(0.5, 1) == 1);
  CHECK(peer::MixingTime(1.0, 8) == UINT32_MAX);  // a graph that never mixes
  // theta = c * lr * G * t_mix.
  CHECK(peer::MoniquaTheta(2.0, 0.05, 3.0, 15) == doctest::Approx(4.5));
  // A larger ring mixes more slowly, so its bound is wider.
  CHECK(peer::MixingTime(slem(GossipGraph::kRing, 16), 16) > peer::MixingTime(slem(GossipGraph::kRing, 8), 8));
}

TEST_CASE("one full-precision torus gossip step applies the Metropolis mixing matrix") {
  const int n = 6;  // 2 x 3: degree 3, weight 1/4
  const std::size_t d = 257;
  peer::PeerOptions options;
  options.graph = GossipGraph::kTorus;
  PeerRing ring(n, options);
  ring.FormAll();
  auto models = Targets(n, d);
  const auto before = models;
  std::vector<float> grad(d, 0.0f);
  std::vector<peer::GossipStats> stats(n);
  auto st = ring.Each(ring.All(), [&](uint32_t r) {
    return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.0f, "", 1, &stats[r]);
  });
  for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  for (int r = 0; r < n; ++r) {
    INFO("rank ", r);
    CHECK(testing::MetropolisDistance(before, models[r], r, GossipGraph::kTorus) < 1e-5);
    CHECK(stats[r].bytes_sent == d * 4 * 3);  // one model to each of three neighbours
  }
  // Ring collectives need the ring's links.
  std::vector<float> x(4, 1.0f);
  CHECK(ring.groups[0]->AllReduce(x.data(), x.size()).code() == StatusCode::kFailedPrecondition);
}

// D-PSGD on f_i(x) = |x - b_i|^2 / 2: the peers' models approach the mean of
// the b_i, the minimizer of the sum, on the torus as on the ring.
double GossipDistance(GossipGraph graph, int n, const std::string& codec) {
  const std::size_t d = 64;
  peer::PeerOptions options;
  options.graph = graph;
  PeerRing ring(n, options);
  ring.FormAll();
  const auto b = Targets(n, d);
  std::vector<double> mean(d, 0.0);
  for (const auto& v : b) {
    for (std::size_t i = 0; i < d; ++i) mean[i] += static_cast<double>(v[i]) / n;
  }
  std::vector<std::vector<float>> x(static_cast<std::size_t>(n), std::vector<float>(d, 0.0f));
  std::vector<std::vector<float>> g(static_cast<std::size_t>(n), std::vector<float>(d));
  std::vector<peer::GossipStats> stats(n);
  for (uint64_t step = 0; step < 150; ++step) {
    const float lr = 0.5f / (1.0f + 0.1f * static_cast<float>(step));
    auto st = ring.Each(ring.All(), [&](uint32_t r) {
      for (std::size_t i = 0; i < d; ++i) g[r][i] = x[r][i] - b[r][i];
      return ring.groups[r]->GossipStep(x[r].data(), g[r].data(), d, lr, codec, step, &stats[r]);
    });
    for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  }
  double worst = 0;
  for (const auto& v : x) {
    double dist = 0;
    for (std::size_t i = 0; i < d; ++i) dist += (v[i] - mean[i]) * (v[i] - mean[i]);
    worst = std::max(worst, std::sqrt(dist));
  }
  return worst;
}

TEST_CASE("torus gossip of 4 and 6 peers converges on a quadratic objective like the ring") {
  for (int n : {4, 6}) {
    INFO("peers ", n);
    const double start = std::sqrt(64.0 / 3.0);  // |b_i| at x = 0, about
    const double torus = GossipDistance(GossipGraph::kTorus, n, "");
    const double ring = GossipDistance(GossipGraph::kRing, n, "");
    // What is left is D-PSGD's bias at the last learning rate, for both.
    CHECK(torus < 0.1 * start);
    CHECK(ring < 0.1 * start);
    CHECK(torus <= 1.2 * ring + 1e-3);
    if (n == 6) {
      const double moniqua = GossipDistance(GossipGraph::kTorus, n, "moniqua:bits=8,theta=1");
      CHECK(moniqua < torus + 0.05);
    }
  }
}

TEST_CASE("a dead peer on a torus is named by every survivor and the graph re-forms over the other five") {
  peer::PeerOptions options;
  options.graph = GossipGraph::kTorus;
  options.step_timeout_ms = 3000;
  options.join_timeout_ms = 5000;
  PeerRing ring(6, options);  // 2 x 3: rank 2's neighbours are 0, 1 and 5; 3 and 4 are not
  ring.FormAll();
  const std::size_t d = 100;
  auto models = Targets(6, d);
  std::vector<float> grad(d, 0.0f);
  std::vector<peer::GossipStats> stats(6);
  ring.groups[2].reset();  // its process is gone: its sockets close
  const std::vector<uint32_t> survivors = {0, 1, 3, 4, 5};
  const auto start = std::chrono::steady_clock::now();
  auto st = ring.Each(survivors, [&](uint32_t r) {
    return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.0f, "", 5, &stats[r]);
  });
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(elapsed < 3.0 + 1.5);
  for (uint32_t r : survivors) {
    INFO("rank ", r, ": ", st[r].ToString());
    // Rank 2's neighbours cannot finish the step. Ranks 3 and 4 do not need
    // rank 2 for it: they may finish it before the forwarded failure report
    // reaches them, and otherwise they fail naming the same rank.
    const bool neighbour = r == 0 || r == 1 || r == 5;
    if (neighbour) CHECK_FALSE(st[r].ok());
    if (!st[r].ok()) {
      CHECK(ring.groups[r]->FailedRank() == 2);
      CHECK(st[r].message().find("peer rank 2") != std::string::npos);
    }
  }
  for (auto& s : ring.Form(survivors)) REQUIRE_MESSAGE(s.ok(), s.ToString());
  const auto before = models;
  st = ring.Each(survivors, [&](uint32_t r) {
    return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.0f, "", 5, &stats[r]);
  });
  for (uint32_t r : survivors) REQUIRE_MESSAGE(st[r].ok(), st[r].ToString());
  // Five nodes: a 1 x 5 torus, the ring 0 1 3 4 5, 1/3 each (the weights are
  // recomputed: the 2 x 3 torus had 1/4).
  for (std::size_t p = 0; p < survivors.size(); ++p) {
    const uint32_t r = survivors[p], left = survivors[(p + 4) % 5], right = survivors[(p + 1) % 5];
    for (std::size_t i = 0; i < d; i += 9) {
      const double expect = (before[r][i] + before[left][i] + before[right][i]) / 3.0;
      CHECK(models[r][i] == doctest::Approx(expect).epsilon(1e-5));
    }
  }
}

}  // namespace
}  // namespace fedrt
