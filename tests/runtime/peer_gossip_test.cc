// Gossip D-PSGD on the ring (one thread per rank, TCP on 127.0.0.1): the
// Metropolis mixing step with full-precision and Moniqua-coded models, and
// gossip with replicas (CHOCO) of 1-bit coded model differences.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/moniqua.h"
#include "fedrt/runtime/peer.h"
#include "fedrt/runtime/robust_aggregation.h"
#include "peer_checks.h"
#include "peer_ring.h"

namespace fedrt {
namespace {

using testing::Models;
using testing::PeerRing;

TEST_CASE("full-precision gossip averages each model with its two ring neighbours") {
  for (int n : {2, 3, 5}) {
    PeerRing ring(n);
    ring.FormAll();
    testing::CheckRingGossipStep(ring, n, 1000);
    // The mixing matrix is doubly stochastic: without gradients the mean stays.
  }
}

TEST_CASE("Moniqua gossip equals the mixing step on the decoded neighbours and reports wraps") {
  const int n = 4;
  const std::size_t d = 4096 + 3;
  const std::string spec = "moniqua:bits=1,theta=0.5";
  PeerRing ring(n);
  ring.FormAll();
  auto models = Models(n, d, 0.05f);  // neighbours well within theta
  auto before = models;
  std::vector<float> grad(d, 0.0f);
  std::vector<peer::GossipStats> stats(n);
  auto st = ring.Each(ring.All(), [&](uint32_t r) {
    return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.0f, spec, 3, &stats[r]);
  });
  for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  // Reference: encode every model with the same context, decode as the
  // receiver does, mix.
  for (int r = 0; r < n; ++r) {
    CHECK(models[r] == testing::MoniquaRingReference(before, r, spec, 3));
    CHECK(stats[r].bytes_sent < d / 8 * 2 + 1024);  // 1 bit per coordinate per neighbour
  }
  // Models far apart (beyond theta) wrap, and the step says so: many more
  // coordinates land near the wrap boundary than for close models (at 1 bit
  // the rounding alone puts some there).
  std::vector<uint64_t> close_wraps(n);
  for (int r = 0; r < n; ++r) close_wraps[r] = stats[r].wrap_count;
  auto far = Models(n, d, 2.0f);
  st = ring.Each(ring.All(), [&](uint32_t r) {
    return ring.groups[r]->GossipStep(far[r].data(), grad.data(), d, 0.0f, spec, 4, &stats[r]);
  });
  for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  for (int r = 0; r < n; ++r) CHECK(stats[r].wrap_count > 2 * close_wraps[r] + 100);
}

// Peer r minimizes f_r(x) = |x - b_r|^2 / 2 (gradient x - b_r, its own
// optimum b_r, as label-skewed peers have their own); the minimizer of the
// sum is the mean of the b_r. Runs `steps` gossip steps from x = 0 and
// returns every peer's model.
std::vector<std::vector<float>> GossipQuadratic(int n, std::size_t d, peer::GossipAlgorithm algorithm,
                                                const std::string& spec, float lr, int steps,
                                                std::vector<double>* optimum, uint64_t* wraps = nullptr,
                                                float d2_gain = 1.0f, float d2_leak = 0.0f) {
  PeerRing ring(n);
  ring.FormAll();
  for (auto& group : ring.groups) REQUIRE(group->SetGossipAlgorithm(algorithm, d2_gain, d2_leak).ok());
  std::vector<std::vector<float>> b(static_cast<std::size_t>(n), std::vector<float>(d));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  optimum->assign(d, 0.0);
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < d; ++i) {
      b[r][i] = u(rng);
      (*optimum)[i] += static_cast<double>(b[r][i]) / n;
    }
  }
  std::vector<std::vector<float>> x(static_cast<std::size_t>(n), std::vector<float>(d, 0.0f));
  std::vector<std::vector<float>> g(static_cast<std::size_t>(n), std::vector<float>(d, 0.0f));
  std::vector<peer::GossipStats> stats(static_cast<std::size_t>(n));
  if (wraps != nullptr) *wraps = 0;
  for (int step = 0; step < steps; ++step) {
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < d; ++i) g[r][i] = x[r][i] - b[r][i];
    }
    auto st = ring.Each(ring.All(), [&](uint32_t r) {
      return ring.groups[r]->GossipStep(x[r].data(), g[r].data(), d, lr, spec, static_cast<uint64_t>(step), &stats[r]);
    });
    for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
    if (wraps != nullptr) {
      for (const auto& s : stats) *wraps += s.wrap_count;
    }
  }
  return x;
}

double FarthestFrom(const std::vector<std::vector<float>>& x, const std::vector<double>& point) {
  double far = 0;
  for (const auto& model : x) {
    for (std::size_t i = 0; i < point.size(); ++i) far = std::max(far, std::fabs(model[i] - point[i]));
  }
  return far;
}

// D-PSGD at a constant rate leaves every peer a distance of about
// lr |b_r - mean b| / (1 - lambda) from the sum's minimizer (the farthest
// 0.18 on a ring of 5, lr 0.1); D2 cancels the differing gradients and brings
// every peer to it (measured 3e-7 after 400 steps). Ring of 5: W's smallest
// eigenvalue is -0.21, above D2's -1/3.
TEST_CASE("D2 gossip brings every peer to the minimizer of the sum where D-PSGD keeps them apart") {
  const int n = 5;
  const std::size_t d = 200;
  std::vector<double> optimum;
  auto dpsgd = GossipQuadratic(n, d, peer::GossipAlgorithm::kDpsgd, "", 0.1f, 400, &optimum);
  auto d2 = GossipQuadratic(n, d, peer::GossipAlgorithm::kD2, "", 0.1f, 400, &optimum);
  const double dpsgd_far = FarthestFrom(dpsgd, optimum), d2_far = FarthestFrom(d2, optimum);
  MESSAGE("farthest from the minimizer after 400 steps: D-PSGD " << dpsgd_far << ", D2 " << d2_far);
  CHECK(dpsgd_far > 0.05);
  CHECK(d2_far < 1e-4);
}

// Moniqua on D2 (4 peers; ring of 4 at gamma 0.5: the mixing matrix's
// smallest eigenvalue 1/3, so D2 is stable) reaches the point fp32 D2
// reaches, within what its recovery error keeps the peers apart (8 bits,
// theta 0.5: delta B = 0.002; measured 0.0020 after 600 steps), with no
// wrap; so does the damped correction (gain 0.05: c settles only where the
// mixing correction is 0; slower, in about 1 / (0.05 * 0.5 * 2/3) = 60
// steps per e-fold; measured 0.0027). A leak keeps part of D-PSGD's
// distance (leak = gain: measured 0.090 against D-PSGD's 0.25).
TEST_CASE("Moniqua on D2 reaches the same point as full-precision D2, with the damped correction too") {
  const int n = 4;
  const std::size_t d = 200;
  std::vector<double> optimum;
  auto fp32 = GossipQuadratic(n, d, peer::GossipAlgorithm::kD2, "", 0.1f, 600, &optimum);
  uint64_t wraps = 0;
  auto moniqua = GossipQuadratic(n, d, peer::GossipAlgorithm::kD2, "moniqua:bits=8,theta=0.5,gamma=0.5,check=64", 0.1f,
                                 600, &optimum, &wraps);
  const double fp32_far = FarthestFrom(fp32, optimum), moniqua_far = FarthestFrom(moniqua, optimum);
  MESSAGE("farthest from the minimizer after 600 steps: fp32 D2 " << fp32_far << ", Moniqua 8-bit D2 " << moniqua_far);
  CHECK(fp32_far < 1e-4);
  CHECK(moniqua_far < 0.01);
  CHECK(wraps == 0);
  const std::string spec = "moniqua:bits=8,theta=0.5,gamma=0.5,check=64";
  auto damped = GossipQuadratic(n, d, peer::GossipAlgorithm::kD2, spec, 0.1f, 600, &optimum, &wraps, 0.05f, 0.0f);
  CHECK(wraps == 0);
  auto leaky = GossipQuadratic(n, d, peer::GossipAlgorithm::kD2, spec, 0.1f, 600, &optimum, &wraps, 0.05f, 0.05f);
  auto dpsgd = GossipQuadratic(n, d, peer::GossipAlgorithm::kDpsgd, spec, 0.1f, 600, &optimum, &wraps);
  const double damped_far = FarthestFrom(damped, optimum), leaky_far = FarthestFrom(leaky, optimum),
               dpsgd_far = FarthestFrom(dpsgd, optimum);
  MESSAGE("gain 0.05: " << damped_far << "; gain 0.05, leak 0.05: " << leaky_far << "; D-PSGD: " << dpsgd_far);
  CHECK(damped_far < 0.01);
  CHECK(leaky_far > 0.25 * dpsgd_far);
  CHECK(leaky_far < 0.75 * dpsgd_far);
}

TEST_CASE("D2 gossip refuses replica specs and a defense") {
  PeerRing ring(3);
  ring.FormAll();
  const std::size_t d = 64;
  std::vector<std::vector<float>> x(3, std::vector<float>(d, 0.0f));
  std::vector<float> grad(d, 0.0f);
  std::vector<peer::GossipStats> stats(3);
  for (auto& group : ring.groups) REQUIRE(group->SetGossipAlgorithm(peer::GossipAlgorithm::kD2).ok());
  for (float gain : {0.0f, 1.5f}) CHECK(ring.groups[0]->SetGossipAlgorithm(peer::GossipAlgorithm::kD2, gain).code() ==
                                        StatusCode::kInvalidArgument);
  CHECK(ring.groups[0]->SetGossipAlgorithm(peer::GossipAlgorithm::kD2, 0.05f, 1.0f).code() ==
        StatusCode::kInvalidArgument);
  auto st = ring.Each(ring.All(), [&](uint32_t r) {
    return ring.groups[r]->GossipStep(x[r].data(), grad.data(), d, 0.1f, "choco+sign:b=32", 0, &stats[r]);
  });
  for (auto& s : st) {
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("replica differences") != std::string::npos);
  }
  peer::GossipDefense clip;
  clip.clip = 1;
  for (auto& group : ring.groups) REQUIRE(group->SetGossipDefense(clip).ok());
  st = ring.Each(ring.All(), [&](uint32_t r) {
    return ring.groups[r]->GossipStep(x[r].data(), grad.data(), d, 0.1f, "", 0, &stats[r]);
  });
  for (auto& s : st) CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(peer::ParseGossipAlgorithm("d2").value() == peer::GossipAlgorithm::kD2);
  CHECK(peer::ParseGossipAlgorithm("dpsgd").value() == peer::GossipAlgorithm::kDpsgd);
  CHECK(peer::ParseGossipAlgorithm("d3").status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("replica gossip specs name a step size and an inner codec") {
  CHECK(peer::IsChocoSpec("choco+sign:b=512"));
  CHECK(peer::IsChocoSpec("choco:gamma=0.3+sign"));
  CHECK_FALSE(peer::IsChocoSpec("moniqua:bits=1,theta=0.1"));
  CHECK_FALSE(peer::IsChocoSpec("chocolate"));
  auto plain = peer::ParseChocoSpec("choco+sign:b=512");
  REQUIRE(plain.ok());
  CHECK(plain->gamma == 0.5f);
  CHECK(plain->codec == "sign:b=512");
  auto tuned = peer::ParseChocoSpec("choco:gamma=0.25+qsgd:s=1,b=64");
  REQUIRE(tuned.ok());
  CHECK(tuned->gamma == 0.25f);
  CHECK(tuned->codec == "qsgd:s=1,b=64");
  for (const char* bad : {"choco", "choco+", "choco:gamma=0+sign", "choco:gamma=2+sign", "choco:step=1+sign", "sign"}) {
    INFO(bad);
    CHECK(peer::ParseChocoSpec(bad).status().code() == StatusCode::kInvalidArgument);
  }
}

// CHOCO gossip keeps the mean of the models (the mixing matrix is doubly
// stochastic and every peer adds the same decoded q to its copies) and,
// through the public copies, sends the compression error again later, so
// 1-bit models converge to that mean. Tolerance: the largest distance from
// the mean starts at 0.69; after 300 steps with gamma 0.5 it is below 0.03
// (measured 0.011, and 7e-4 after 750 steps); the mean moves by rounding
// only (below 1e-5; measured 7e-7).
TEST_CASE("replica gossip with 1-bit scaled signs brings the models to their mean") {
  const int n = 4;
  const std::size_t d = 1000;
  PeerRing ring(n);
  ring.FormAll();
  auto models = Models(n, d, 0.5f);
  std::vector<double> mean(d, 0.0);
  for (const auto& m : models) {
    for (std::size_t i = 0; i < d; ++i) mean[i] += m[i] / n;
  }
  std::vector<float> grad(d, 0.0f);
  std::vector<peer::GossipStats> stats(n);
  for (uint64_t step = 0; step < 300; ++step) {
    auto st = ring.Each(ring.All(), [&](uint32_t r) {
      return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.0f, "choco+sign:b=100", step, &stats[r]);
    });
    for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  }
  double spread = 0, drift = 0;
  for (std::size_t i = 0; i < d; ++i) {
    double now = 0;
    for (int r = 0; r < n; ++r) {
      spread = std::max(spread, std::fabs(models[r][i] - mean[i]));
      now += models[r][i] / n;
    }
    drift = std::max(drift, std::fabs(now - mean[i]));
  }
  MESSAGE("after 300 steps: largest distance from the mean " << spread << ", mean moved by " << drift);
  CHECK(spread < 0.03);
  CHECK(drift < 1e-5);
  for (int r = 0; r < n; ++r) {
    CHECK(stats[r].wrap_count == 0);
    CHECK(stats[r].bytes_sent < 2 * (d / 8 + 10 * 4 + 200));  // 1 bit a coordinate and a scale per 100, per neighbour
  }
}

// A learning rate: the step is x - lr g before the exchange, so with equal
// models and equal gradients every peer takes exactly the plain SGD step.
TEST_CASE("replica gossip of equal models with equal gradients is the plain SGD step") {
  const int n = 3;
  const std::size_t d = 257;
  PeerRing ring(n);
  ring.FormAll();
  std::vector<std::vector<float>> models(n, std::vector<float>(d));
  for (std::size_t i = 0; i < d; ++i) models[0][i] = models[1][i] = models[2][i] = 0.01f * static_cast<float>(i) - 1.0f;
  std::vector<float> grad(d, 0.5f);
  std::vector<peer::GossipStats> stats(n);
  for (uint64_t step = 0; step < 5; ++step) {
    auto st = ring.Each(ring.All(), [&](uint32_t r) {
      return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.1f, "choco:gamma=0.7+sign:b=64", step, &stats[r]);
    });
    for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  }
  for (std::size_t i = 0; i < d; ++i) {
    const float plain = 0.01f * static_cast<float>(i) - 1.0f - 5 * 0.05f;
    CHECK(models[0][i] == models[1][i]);
    CHECK(models[1][i] == models[2][i]);
    CHECK(std::fabs(models[0][i] - plain) < 1e-5);
  }
}

}  // namespace
}  // namespace fedrt

namespace fedrt {
namespace {

// Re-formed peers may be a step apart: one that finished the failed step
// before the failure is ahead of those that did not. AgreeStep gives every
// member the furthest step, also across several hops of a larger ring and
// on a torus.
TEST_CASE("after a re-formation every gossip peer gets the furthest step of the survivors") {
  for (peer::GossipGraph graph : {peer::GossipGraph::kRing, peer::GossipGraph::kTorus}) {
    for (int n : {2, 3, 6}) {
      peer::PeerOptions options;
      options.graph = graph;
      PeerRing ring(n, options);
      ring.FormAll();
      ring.FormAll();  // a re-formation (the second generation)
      std::vector<uint64_t> agreed(static_cast<std::size_t>(n), 0);
      // One peer, as far from rank 0 as the graph allows, is one step ahead.
      const uint32_t ahead = static_cast<uint32_t>(n / 2);
      auto st = ring.Each(ring.All(), [&](uint32_t r) -> Status {
        auto a = ring.groups[r]->AgreeStep(r == ahead ? 22 : 21);
        if (!a.ok()) return a.status();
        agreed[r] = *a;
        return Status::Ok();
      });
      for (int r = 0; r < n; ++r) {
        INFO("graph ", static_cast<int>(graph), " peers ", n, " rank ", r, ": ", st[static_cast<std::size_t>(r)].ToString());
        REQUIRE(st[static_cast<std::size_t>(r)].ok());
        CHECK(agreed[static_cast<std::size_t>(r)] == 22);
      }
      // The links carry gossip as before.
      const std::size_t d = 64;
      auto models = Models(n, d, 0.5f);
      std::vector<float> grad(d, 0.0f);
      std::vector<peer::GossipStats> stats(static_cast<std::size_t>(n));
      st = ring.Each(ring.All(), [&](uint32_t r) {
        return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.1f, "", 22, &stats[r]);
      });
      for (auto& s : st) CHECK_MESSAGE(s.ok(), s.ToString());
    }
  }
}

// The last step of a run: a ring neighbour that finished and left (Close:
// Leave, then its close) has nothing more to send; the peers still taking
// their last step skip it (its weight stays with them), they do not report
// it as failed.
TEST_CASE("a ring gossip neighbour that finished and left is skipped, not reported as failed") {
  const int n = 3;
  const std::size_t d = 100;
  peer::PeerOptions options;
  options.step_timeout_ms = 5000;
  PeerRing ring(n, options);
  ring.FormAll();
  auto models = Models(n, d, 0.5f);
  std::vector<float> grad(d, 0.0f);
  std::vector<peer::GossipStats> stats(n);
  auto st = ring.Each(ring.All(), [&](uint32_t r) {
    return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.1f, "", 0, &stats[r]);
  });
  for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  const auto before = models;
  // Rank 0 is done; ranks 1 and 2 take one more step.
  st = ring.Each(ring.All(), [&](uint32_t r) {
    if (r == 0) return ring.groups[0]->Close();
    Status s = ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.1f, "", 1, &stats[r]);
    (void)ring.groups[r]->Close();
    return s;
  });
  for (uint32_t r = 1; r < 3; ++r) {
    INFO("rank ", r, ": ", st[r].ToString());
    REQUIRE(st[r].ok());
    CHECK(ring.groups[r]->FailedRank() == -1);
    const uint32_t other = 3 - r;
    for (std::size_t i = 0; i < d; ++i) {
      CHECK(models[r][i] == doctest::Approx(before[r][i] + (before[other][i] - before[r][i]) / 3.0f).epsilon(1e-6));
    }
  }
}

}  // namespace
}  // namespace fedrt

namespace fedrt {
namespace {

// Gossip of `models` (one step, no gradient) with `spec` on a fresh ring of
// n peers, each given `table` (empty: none).
std::vector<std::vector<float>> GossipOnce(std::vector<std::vector<float>> models, const std::string& spec,
                                           const std::vector<std::size_t>& table) {
  const int n = static_cast<int>(models.size());
  const std::size_t d = models[0].size();
  testing::PeerRing ring(n);
  ring.FormAll();
  for (int r = 0; r < n; ++r) ring.groups[r]->SetTensorTable(table);
  std::vector<float> grad(d, 0.0f);
  std::vector<peer::GossipStats> stats(static_cast<std::size_t>(n));
  auto st = ring.Each(ring.All(), [&](uint32_t r) {
    return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.0f, spec, 2, &stats[r]);
  });
  for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  return models;
}

TEST_CASE("gossip with a tensor table sends one dqsg scale per tensor, so a small tensor keeps its precision") {
  const int n = 3;
  const std::vector<std::size_t> table = {2000, 50, 500};
  std::size_t d = 0;
  for (std::size_t t : table) d += t;
  auto models = testing::Models(n, d, 0.1f);
  // The middle tensor is 1000 times smaller than the others (a bias, say).
  for (auto& m : models) {
    for (std::size_t i = 2000; i < 2050; ++i) m[i] *= 1e-3f;
  }
  const auto exact = GossipOnce(models, "", {});
  const auto per_tensor = GossipOnce(models, "dqsg:s=2", table);
  const auto one_scale = GossipOnce(models, "dqsg:s=2", {});
  double norm = 0, e_tensor = 0, e_one = 0;
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 2000; i < 2050; ++i) {
      norm += std::pow(static_cast<double>(exact[r][i]), 2);
      e_tensor += std::pow(static_cast<double>(per_tensor[r][i]) - exact[r][i], 2);
      e_one += std::pow(static_cast<double>(one_scale[r][i]) - exact[r][i], 2);
    }
  }
  MESSAGE("small tensor, error / norm: per tensor " << e_tensor / norm << ", one scale " << e_one / norm);
  CHECK(e_tensor < 0.1 * norm);
  CHECK(e_one > 10 * norm);
}

TEST_CASE("gossip refuses a model whose size is not its tensor table's") {
  testing::PeerRing ring(2);
  ring.FormAll();
  std::vector<float> model(10, 0.0f), grad(10, 0.0f);
  ring.groups[0]->SetTensorTable({4, 5});
  peer::GossipStats stats;
  CHECK(ring.groups[0]->GossipStep(model.data(), grad.data(), 10, 0.0f, "dqsg", 1, &stats).code() ==
        StatusCode::kInvalidArgument);
}

// Rank 0 of a 3-ring sends its model times -1000 (a sign-flipping, scaled
// hostile peer); lr 0 and no gradient, so one step is the mixing alone.
std::vector<std::vector<float>> StepWithHostileRank0(const peer::GossipDefense& defense,
                                                     const std::vector<std::vector<float>>& models,
                                                     const std::string& codec = "") {
  const int n = 3;
  const std::size_t d = models[0].size();
  PeerRing ring(n);
  ring.FormAll();
  auto out = models;
  std::vector<float> grad(d, 0.0f);
  ring.groups[0]->SetGossipSendTransform([](uint64_t, float* values, std::size_t size) {
    for (std::size_t k = 0; k < size; ++k) values[k] *= -1000.0f;
  });
  for (int r = 0; r < n; ++r) REQUIRE(ring.groups[static_cast<std::size_t>(r)]->SetGossipDefense(defense).ok());
  std::vector<peer::GossipStats> stats(n);
  auto st = ring.Each(ring.All(), [&](uint32_t r) {
    return ring.groups[r]->GossipStep(out[r].data(), grad.data(), d, 0.0f, codec, 1, &stats[r]);
  });
  for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  return out;
}

double Distance(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const double diff = static_cast<double>(a[k]) - static_cast<double>(b[k]);
    sum += diff * diff;
  }
  return std::sqrt(sum);
}

TEST_CASE("gossip with the median moves each coordinate half way to the middle of the own and the neighbours' models, so one hostile neighbour cannot move it far") {
  const std::size_t d = 1000;
  const auto models = Models(3, d, 0.05f);
  peer::GossipDefense mean;
  const auto pulled = StepWithHostileRank0(mean, models);
  peer::GossipDefense median;
  median.rule = ParseAggregationRule("median").value();
  const auto held = StepWithHostileRank0(median, models);
  for (int r : {1, 2}) {
    INFO("rank ", r);
    // Ring of 3: every rank's neighbours are the other two, weights 1/3.
    std::vector<float> expected(d);
    const int other = r == 1 ? 2 : 1;
    for (std::size_t k = 0; k < d; ++k) {
      float v[3] = {models[r][k], -1000.0f * models[0][k], models[other][k]};
      std::sort(v, v + 3);
      expected[k] = models[r][k] + 0.5f * (v[1] - models[r][k]);
    }
    CHECK(held[r] == expected);
    CHECK(Distance(held[r], models[r]) < 0.1 * Distance(pulled[r], models[r]));
    MESSAGE("rank " << r << " moved " << Distance(pulled[r], models[r]) << " with the mean, "
                    << Distance(held[r], models[r]) << " with the median");
  }
  // The hostile rank's own model mixes what it heard honestly.
  CHECK(Distance(held[0], models[0]) < 1.0);
}

// Every peer of an even ring minimises h/2 |x|^2 from alternating models
// (+1, -1, +1, -1 per coordinate), the two colour classes of the bipartite
// ring. Returns the largest |x| over the peers after `steps` gossip steps.
float AlternatingRingAfter(const std::string& rule, int steps) {
  const int n = 4;
  const std::size_t d = 64;
  const float lr = 0.1f, h = 1.0f;
  PeerRing ring(n);
  ring.FormAll();
  peer::GossipDefense defense;
  defense.rule = ParseAggregationRule(rule).value();
  for (auto& group : ring.groups) REQUIRE(group->SetGossipDefense(defense).ok());
  std::vector<std::vector<float>> x(n, std::vector<float>(d));
  for (int r = 0; r < n; ++r) std::fill(x[r].begin(), x[r].end(), r % 2 == 0 ? 1.0f : -1.0f);
  std::vector<std::vector<float>> grad(n, std::vector<float>(d));
  std::vector<peer::GossipStats> stats(n);
  for (int t = 0; t < steps; ++t) {
    for (int r = 0; r < n; ++r) {
      for (std::size_t k = 0; k < d; ++k) grad[r][k] = h * x[r][k];
    }
    auto st = ring.Each(ring.All(), [&](uint32_t r) {
      return ring.groups[r]->GossipStep(x[r].data(), grad[r].data(), d, lr, "", static_cast<uint64_t>(t), &stats[r]);
    });
    for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  }
  float largest = 0;
  for (const auto& model : x) {
    for (float v : model) largest = std::max(largest, std::fabs(v));
  }
  return largest;
}

TEST_CASE("gossip with a robust rule does not swap the two sides of an even ring: the disagreement shrinks as with the mean") {
  // Each peer's neighbours hold the other side's value, so the plain median
  // is that value: the sides would swap every step and the gradient taken
  // before the swap would push the disagreement up by 1 + lr h a step
  // (1.1^20 = 6.7). Half way to the median they meet.
  for (const char* rule : {"median", "trimmed-mean:0.34", "mean"}) {
    INFO(rule);
    CHECK(AlternatingRingAfter(rule, 20) < 0.5f);
  }
  CHECK(AlternatingRingAfter("median", 1) < 0.11f);  // the midpoint 0, then one step: 0.1
}

TEST_CASE("gossip with a clip bounds how far each neighbour's model moves this peer's") {
  const std::size_t d = 1000;
  const auto models = Models(3, d, 0.05f);
  peer::GossipDefense clipped;
  clipped.clip = 0.01;
  const auto out = StepWithHostileRank0(clipped, models);
  for (int r : {1, 2}) {
    // Two neighbours at weight 1/3, each deviation at most 0.01.
    CHECK(Distance(out[r], models[r]) <= 2.0 / 3.0 * 0.01 * (1 + 1e-5));
    CHECK(Distance(out[r], models[r]) > 0.001);
  }
  // A plain codec recovers the neighbours' models: the defense applies.
  const auto coded = StepWithHostileRank0(clipped, models, "fp16");
  CHECK(Distance(coded[1], models[1]) <= 2.0 / 3.0 * 0.01 * 1.01);
}

TEST_CASE("gossip refuses a defense it cannot apply: a rule needing more models than the neighbourhood, a codec that hides the models, a bad clip") {
  PeerRing ring(3);
  ring.FormAll();
  std::vector<float> model(10, 0.0f), grad(10, 0.0f);
  peer::GossipStats stats;
  peer::GossipDefense krum;
  krum.rule = ParseAggregationRule("krum:1").value();  // 2F + 3 = 5 models; a ring peer has 3
  REQUIRE(ring.groups[0]->SetGossipDefense(krum).ok());
  Status s = ring.groups[0]->GossipStep(model.data(), grad.data(), 10, 0.0f, "", 1, &stats);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("krum:1 needs 5 models per gossip step; this peer has 2 neighbours") != std::string::npos);
  peer::GossipDefense median;
  median.rule = ParseAggregationRule("median").value();
  REQUIRE(ring.groups[0]->SetGossipDefense(median).ok());
  for (const char* codec : {"moniqua:bits=1,theta=0.5", "choco+sign:b=16"}) {
    s = ring.groups[0]->GossipStep(model.data(), grad.data(), 10, 0.0f, codec, 1, &stats);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("does not recover the neighbours' models") != std::string::npos);
  }
  peer::GossipDefense bad;
  bad.clip = -1;
  CHECK(ring.groups[0]->SetGossipDefense(bad).code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedrt
