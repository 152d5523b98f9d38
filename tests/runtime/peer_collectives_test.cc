// The collectives over the in-process loopback context (no sockets), one
// thread per rank: dense and fp16 ring all-reduce, IWP, gossip (full
// precision, Moniqua, CHOCO replicas), step agreement, and the failure of a
// rank in the middle of a collective.
// Inputs, references and tolerances: peer_checks.h, shared with the TCP tests.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/error_feedback.h"
#include "fedrt/codecs/tensor_set.h"
#include "fedrt/codecs/iwp.h"
#include "fedrt/codecs/moniqua.h"
#include "fedrt/platform/clock.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/runtime/collectives.h"
#include "fedrt/runtime/peer.h"
#include "peer_checks.h"
#include "peer_ring.h"

namespace fedrt {
namespace {

using testing::Input;
using testing::LoopbackRing;
using testing::Models;

TEST_CASE("dense ring all-reduce over the loopback of 2, 3 and 4 ranks equals the exact sum on every rank") {
  const std::size_t sizes[] = {0, 1, 7, 4096 + 3, 70001};
  for (int n = 2; n <= 4; ++n) {
    LoopbackRing ring(n, {}, /*chunk_floats=*/1000);
    ring.FormAll();
    for (std::size_t size : sizes) {
      INFO("ranks ", n, ", size ", size);
      testing::CheckRingSum(ring, n, size, 0);
      if (size > 0) CHECK(ring.groups[0]->last_stats().bytes_sent > 0);
    }
  }
}

TEST_CASE("dense all-reduce over the loopback of 1 to 4 ranks gives every rank the ring order's bits, small or not") {
  // Up to 16384 floats (64 KiB; 8192 with 4 ranks) SmallAllReduce sums;
  // above, the ring (chunks of 1000 floats). Both must give the bits of the
  // ring's order.
  const std::size_t sizes[] = {0, 1, 2, 3, 5, 7, 1001, 8192, 8193, 16383, 16384, 16385, 70001};
  for (int n = 1; n <= 4; ++n) {
    LoopbackRing ring(n, {}, /*chunk_floats=*/1000);
    ring.FormAll();
    for (std::size_t size : sizes) {
      for (uint32_t seed : {0u, 7u}) {
        INFO("ranks ", n, ", size ", size, ", seed ", seed);
        testing::CheckRingOrderSum(ring, size, seed);
        const uint64_t bytes = size * sizeof(float);
        const std::size_t limit = n == 4 ? 8192 : 16384;
        if (n > 1 && size > 0 && size <= limit) {
          // Every rank sends every other rank's vector or its own: p - 1 vectors.
          CHECK(ring.groups[0]->last_stats().bytes_sent == (n - 1) * bytes);
        } else if (n > 2 && size > limit) {
          // The ring's 2 (p - 1) / p of the vector (with 2 ranks that is one too).
          CHECK(ring.groups[0]->last_stats().bytes_sent < (n - 1) * bytes);
        }
      }
    }
  }
}

TEST_CASE("SmallAllReduce refuses a vector above its limit") {
  LoopbackRing ring(2);
  ring.FormAll();
  peer::SmallAllReduce small(ring.groups[0]->context());
  std::vector<float> x(peer::SmallAllReduce::kMaxLinkBytes / sizeof(float) + 1, 1.0f);
  const Status s = small.Run(x.data(), x.size());
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("at most 65536 bytes with 2 members") != std::string::npos);
}

TEST_CASE("fp16 hops over the loopback equal the reference of the same hops on every rank") {
  const std::size_t size = 2000 + 3;
  for (int n = 2; n <= 4; ++n) {
    INFO("ranks ", n);
    LoopbackRing ring(n, {}, /*chunk_floats=*/300);
    ring.FormAll();
    std::vector<std::vector<float>> data(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) data[static_cast<std::size_t>(r)] = Input(static_cast<uint32_t>(r), size);
    const std::vector<float> reference = testing::Fp16RingReference(data);
    for (auto& s : ring.Reduce(ring.All(), data, "fp16")) REQUIRE_MESSAGE(s.ok(), s.ToString());
    for (int r = 0; r < n; ++r) CHECK(data[static_cast<std::size_t>(r)] == reference);
  }
}

TEST_CASE("a codec that needs side information is refused by the compressed ring") {
  LoopbackRing ring(2);
  ring.FormAll();
  std::vector<std::vector<float>> data(2, std::vector<float>(64, 1.0f));
  for (auto& s : ring.Reduce(ring.All(), data, "moniqua:bits=1,theta=0.5")) {
    CHECK(s.code() == StatusCode::kInvalidArgument);
  }
}

// What AllGatherAllReduce must give: every rank's vector encoded once (its
// tensor table, error feedback unless the spec says ef=off), decoded and added in
// ring order, the context numbering collectives from 1 after Form.
struct GatheredReference {
  std::unique_ptr<TensorSetCodec> codec;
  std::vector<std::unique_ptr<ErrorFeedback>> feedback;

  GatheredReference(const std::string& spec, const std::vector<std::size_t>& table, int n, std::size_t d)
      : codec(std::move(MakeUpdateCodec(std::move(MakeCodec(peer::AllGatherCodecSpec(spec).value()).value()), table).value())) {
    if (codec->wants_error_feedback()) {
      for (int r = 0; r < n; ++r) feedback.push_back(std::make_unique<ErrorFeedback>(d));
    }
  }

  std::vector<float> Sum(const std::vector<std::vector<float>>& data, uint32_t collective) {
    const std::size_t d = data[0].size();
    std::vector<float> sum(d, 0.0f);
    std::vector<std::vector<uint8_t>> payloads;
    for (std::size_t r = 0; r < data.size(); ++r) {
      std::vector<uint8_t> payload(codec->MaxEncodedSize(d));
      CodecContext c;
      c.round = collective;
      c.sender_id = static_cast<uint32_t>(r);
      Result<std::size_t> size = feedback.empty()
                                     ? codec->Encode(data[r].data(), d, c, payload.data(), payload.size())
                                     : feedback[r]->Encode(*codec, data[r].data(), d, c, payload.data(), payload.size());
      REQUIRE(size.ok());
      payload.resize(*size);
      payloads.push_back(std::move(payload));
    }
    for (std::size_t r = 0; r < data.size(); ++r) {
      CodecContext c;
      c.round = collective;
      c.sender_id = static_cast<uint32_t>(r);
      REQUIRE(codec->DecodeAccumulate(payloads[r].data(), payloads[r].size(), c, 1.0f, sum.data(), d).ok());
    }
    return sum;
  }
};

TEST_CASE("compressed all-reduce by all-gather equals the sum of every rank's decoded payload exactly") {
  const std::vector<std::size_t> table = {700, 50, 1200, 3};  // a model's tensors
  const std::size_t d = 700 + 50 + 1200 + 3;
  // ALQ and AMQ without a refit in these three rounds (the next test refits).
  for (const char* spec : {"dqsg:s=2", "dqsg:s=2,ef=off", "alq:bits=3,refit=100", "qsgd", "terngrad", "sign",
                           "amq:refit=100", "topk:k=0.05", "rtopk:k=0.05", "randk:k=0.05", "randk:k=0.05,ef=off"}) {
    for (int n : {2, 3, 4}) {
      INFO(spec, ", ranks ", n);
      LoopbackRing ring(n);
      ring.FormAll();
      for (auto& g : ring.groups) g->SetTensorTable(table);
      GatheredReference reference(spec, table, n, d);
      for (uint32_t round = 1; round <= 3; ++round) {
        std::vector<std::vector<float>> data(static_cast<std::size_t>(n));
        for (int r = 0; r < n; ++r) data[static_cast<std::size_t>(r)] = Input(static_cast<uint32_t>(r) + 10 * round, d);
        const std::vector<float> expect = reference.Sum(data, round);
        auto st = ring.Each(ring.All(), [&](uint32_t r) {
          return ring.groups[r]->CompressedAllReduce(data[r].data(), data[r].size(), spec);
        });
        for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
        for (int r = 0; r < n; ++r) REQUIRE(data[static_cast<std::size_t>(r)] == expect);
        // Each rank sent n - 1 payloads.
        CHECK(ring.groups[0]->last_stats().bytes_sent > 0);
        // Error feedback: each rank's residual is exactly the reference's.
        // Error feedback is on unless the spec turns it off.
        CHECK(reference.feedback.empty() == (std::string(spec).find("ef=off") != std::string::npos));
        if (reference.feedback.empty()) CHECK(ring.groups[0]->compressed_residual() == nullptr);
        for (int r = 0; r < n && !reference.feedback.empty(); ++r) {
          const float* residual = ring.groups[static_cast<std::size_t>(r)]->compressed_residual();
          REQUIRE(residual != nullptr);
          const float* want = reference.feedback[static_cast<std::size_t>(r)]->residual();
          CHECK(std::vector<float>(residual, residual + d) == std::vector<float>(want, want + d));
        }
      }
    }
  }
}

TEST_CASE("compressed all-reduce carries the error-feedback residual of a sparsifier into the next step") {
  const std::size_t d = 1000;
  LoopbackRing ring(2);
  ring.FormAll();
  // Rank 1 sends zeros, rank 0 one spike and a small constant: top-1 sends
  // the spike first, then (the spike gone) the constant piles up in the
  // residual until a coordinate of it is the largest and is sent.
  std::vector<std::vector<float>> data(2);
  auto run = [&] {
    data[0].assign(d, 0.01f);
    data[0][7] = 5.0f;
    data[1].assign(d, 0.0f);
    auto st = ring.Each(ring.All(), [&](uint32_t r) {
      return ring.groups[r]->CompressedAllReduce(data[r].data(), d, "topk:k=1");
    });
    for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  };
  run();
  CHECK(data[0][7] == 5.0f);
  const float* residual = ring.groups[0]->compressed_residual();
  REQUIRE(residual != nullptr);
  CHECK(residual[7] == 0.0f);
  CHECK(residual[0] == 0.01f);
  run();
  // Step 2 encodes 0.02 everywhere but the spike's place (5.0 again): the
  // spike is sent again, the residual doubles.
  CHECK(residual[0] == doctest::Approx(0.02f));
  CHECK(ring.groups[1]->compressed_residual()[0] == 0.0f);
  CHECK(data[0] == data[1]);
}

TEST_CASE("the compressed all-reduce turns error feedback on unless the spec names ef") {
  CHECK(peer::AllGatherCodecSpec("dqsg").value() == "dqsg:ef=on");
  CHECK(peer::AllGatherCodecSpec("dqsg:s=2").value() == "dqsg:s=2,ef=on");
  CHECK(peer::AllGatherCodecSpec("dqsg:s=2,ef=off").value() == "dqsg:s=2,ef=off");
  CHECK(peer::AllGatherCodecSpec("topk:ef=on,k=0.1").value() == "topk:ef=on,k=0.1");
  CHECK(peer::AllGatherCodecSpec("dqsg:s=").status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("the compressed all-reduce refuses a codec that needs side information") {
  LoopbackRing ring(2);
  ring.FormAll();
  std::vector<std::vector<float>> data(2, std::vector<float>(64, 1.0f));
  auto st = ring.Each(ring.All(), [&](uint32_t r) {
    return ring.groups[r]->CompressedAllReduce(data[r].data(), 64, "ndqsg");
  });
  for (auto& s : st) CHECK(s.code() == StatusCode::kInvalidArgument);
}

// Heavy-tailed like a gradient: most coordinates small, a few large.
std::vector<float> HeavyTailed(uint32_t seed, std::size_t d) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> z(0.0f, 1.0f);
  std::vector<float> v(d);
  for (auto& x : v) x = (z(rng) < 0 ? -1.0f : 1.0f) * 1e-3f * std::exp(1.5f * z(rng));
  return v;
}

// E||decode(encode(v)) - v||^2 over `rounds` dithers, tensor by tensor.
double QuantizationVariance(AdaptiveCodec& codec, const std::vector<std::size_t>& table, const std::vector<float>& v,
                            int rounds) {
  std::unique_ptr<TensorSetCodec> per_tensor = std::move(BorrowUpdateCodec(codec, table).value());
  std::vector<uint8_t> payload(per_tensor->MaxEncodedSize(v.size()));
  std::vector<float> out(v.size());
  double total = 0;
  for (int k = 0; k < rounds; ++k) {
    CodecContext c;
    c.round = static_cast<uint32_t>(k);
    Result<std::size_t> size = per_tensor->Encode(v.data(), v.size(), c, payload.data(), payload.size());
    REQUIRE(size.ok());
    REQUIRE(per_tensor->Decode(payload.data(), *size, c, out.data(), out.size()).ok());
    for (std::size_t i = 0; i < v.size(); ++i) total += (out[i] - v[i]) * static_cast<double>(out[i] - v[i]);
  }
  return total / rounds;
}

TEST_CASE("ALQ and AMQ in the ring refit their levels from the merged statistics every refit=N steps") {
  const std::vector<std::size_t> table = {3000, 1096};
  const std::size_t d = 4096;
  const int n = 4;
  for (const char* spec : {"alq:bits=3,refit=2", "amq:bits=3,refit=2", "alq:bits=3,refit=2,model=norm"}) {
    INFO(spec);
    LoopbackRing ring(n);
    ring.FormAll();
    for (auto& g : ring.groups) g->SetTensorTable(table);
    std::vector<LevelTable> seen;
    for (uint32_t step = 0; step < 4; ++step) {
      std::vector<std::vector<float>> data(n);
      for (int r = 0; r < n; ++r) data[static_cast<std::size_t>(r)] = HeavyTailed(100 * step + static_cast<uint32_t>(r), d);
      auto st = ring.Each(ring.All(), [&](uint32_t r) {
        return ring.groups[r]->CompressedAllReduce(data[r].data(), d, spec);
      });
      for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
      for (int r = 1; r < n; ++r) REQUIRE(data[static_cast<std::size_t>(r)] == data[0]);
      const LevelTable* levels = ring.groups[0]->compressed_level_table();
      REQUIRE(levels != nullptr);
      // Every member fitted the same table.
      for (int r = 1; r < n; ++r) {
        CHECK(ring.groups[static_cast<std::size_t>(r)]->compressed_level_table()->levels == levels->levels);
        CHECK(ring.groups[static_cast<std::size_t>(r)]->compressed_level_table()->version == levels->version);
      }
      seen.push_back(*levels);
    }
    // refit=2: version 0 for the first step, 1 after step 2, 2 after step 4.
    CHECK(seen[0].version == 0);
    CHECK(seen[1].version == 1);
    CHECK(seen[2].version == 1);
    CHECK(seen[3].version == 2);
    std::unique_ptr<AdaptiveCodec> initial = std::move(MakeAdaptiveCodec(spec).value());
    CHECK(seen[1].levels != initial->level_table().levels);
    // On the next step's update the fitted table has less rounding variance.
    std::unique_ptr<AdaptiveCodec> fitted = std::move(MakeAdaptiveCodec(spec).value());
    REQUIRE(fitted->SetLevelTable(seen[3]).ok());
    const std::vector<float> next = HeavyTailed(999, d);
    const double before = QuantizationVariance(*initial, table, next, 16);
    const double after = QuantizationVariance(*fitted, table, next, 16);
    MESSAGE(std::string(spec) << ": rounding variance, initial table " << before << ", fitted " << after);
    CHECK(after < before);
  }
}

TEST_CASE("IWP over the loopback of 3 ranks sums the leader's index set and keeps the models identical") {
  const int n = 3;
  const std::size_t d = 2000;
  LoopbackRing ring(n);
  ring.FormAll();
  IwpOptions io;
  io.target_fraction = 1.0f / 16;
  std::vector<std::unique_ptr<IwpAccumulator>> acc;
  for (int r = 0; r < n; ++r) acc.push_back(std::make_unique<IwpAccumulator>(d, io));
  std::vector<std::vector<float>> model(n, std::vector<float>(d, 0.5f));
  for (uint32_t step = 0; step < 20; ++step) {
    std::vector<std::vector<uint32_t>> idx(n);
    std::vector<std::vector<float>> sums(n), before(n);
    auto st = ring.Each(ring.All(), [&](uint32_t r) -> Status {
      std::vector<float> g = Input(r * 100 + step, d);
      FEDRT_RETURN_IF_ERROR(acc[r]->Accumulate(g.data(), 1.0f));
      before[r].assign(acc[r]->accumulator(), acc[r]->accumulator() + d);
      FEDRT_RETURN_IF_ERROR(ring.groups[r]->IwpAllReduce(*acc[r], model[r].data(), 5, step, &idx[r], &sums[r]));
      for (std::size_t j = 0; j < idx[r].size(); ++j) model[r][idx[r][j]] -= 0.01f * sums[r][j] / n;
      return Status::Ok();
    });
    for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
    for (int r = 1; r < n; ++r) {
      REQUIRE(idx[r] == idx[0]);
      REQUIRE(model[r] == model[0]);
    }
    REQUIRE(!idx[0].empty());
    // The sum at every index is the sum of what each rank had accumulated there.
    for (std::size_t j = 0; j < idx[0].size(); j += 7) {
      double expect = 0;
      for (int r = 0; r < n; ++r) expect += before[r][idx[0][j]];
      CHECK(sums[0][j] == doctest::Approx(expect).epsilon(1e-5));
    }
  }
}

TEST_CASE("full-precision gossip over the loopback mixes each model with its ring neighbours") {
  for (int n : {2, 3, 4}) {
    LoopbackRing ring(n);
    ring.FormAll();
    testing::CheckRingGossipStep(ring, n, 500);
  }
}

TEST_CASE("Moniqua gossip over the loopback equals the mixing step on the decoded neighbours") {
  const int n = 3;
  const std::size_t d = 1000 + 3;
  const std::string spec = "moniqua:bits=2,theta=0.5";
  LoopbackRing ring(n);
  ring.FormAll();
  auto models = Models(n, d, 0.05f);
  const auto before = models;
  std::vector<float> grad(d, 0.0f);
  std::vector<peer::GossipStats> stats(n);
  auto st = ring.Each(ring.All(), [&](uint32_t r) {
    return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.0f, spec, 9, &stats[r]);
  });
  for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  for (int r = 0; r < n; ++r) CHECK(models[r] == testing::MoniquaRingReference(before, r, spec, 9));
}

TEST_CASE("replica gossip over the loopback brings 1-bit models towards their mean and keeps the mean") {
  const int n = 4;
  const std::size_t d = 300;
  LoopbackRing ring(n);
  ring.FormAll();
  auto models = Models(n, d, 0.5f);
  std::vector<double> mean(d, 0.0);
  for (const auto& m : models) {
    for (std::size_t i = 0; i < d; ++i) mean[i] += m[i] / n;
  }
  auto spread = [&] {
    double worst = 0;
    for (std::size_t i = 0; i < d; ++i) {
      for (int r = 0; r < n; ++r) worst = std::max(worst, std::fabs(models[r][i] - mean[i]));
    }
    return worst;
  };
  const double start = spread();
  std::vector<float> grad(d, 0.0f);
  std::vector<peer::GossipStats> stats(n);
  for (uint64_t step = 0; step < 100; ++step) {
    auto st = ring.Each(ring.All(), [&](uint32_t r) {
      return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.0f, "choco+sign:b=100", step, &stats[r]);
    });
    for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  }
  double drift = 0;
  for (std::size_t i = 0; i < d; ++i) {
    double now = 0;
    for (int r = 0; r < n; ++r) now += models[r][i] / n;
    drift = std::max(drift, std::fabs(now - mean[i]));
  }
  MESSAGE("largest distance from the mean: " << start << " -> " << spread() << ", mean moved by " << drift);
  CHECK(spread() < 0.25 * start);
  CHECK(drift < 1e-5);
}

TEST_CASE("gossip on a loopback torus applies the Metropolis mixing matrix and ring collectives refuse it") {
  const int n = 6;
  const std::size_t d = 64;
  peer::ContextOptions options;
  options.graph = peer::GossipGraph::kTorus;
  LoopbackRing ring(n, options);
  ring.FormAll();
  auto models = Models(n, d, 1.0f);
  const auto before = models;
  std::vector<float> grad(d, 0.0f);
  std::vector<peer::GossipStats> stats(n);
  auto st = ring.Each(ring.All(), [&](uint32_t r) {
    return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.0f, "", 1, &stats[r]);
  });
  for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  for (int r = 0; r < n; ++r) CHECK(testing::MetropolisDistance(before, models[r], r, peer::GossipGraph::kTorus) < 1e-5);
  std::vector<float> x(4, 1.0f);
  CHECK(ring.groups[0]->AllReduce(x.data(), x.size()).code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("after a loopback re-formation every rank agrees on the furthest step") {
  for (peer::GossipGraph graph : {peer::GossipGraph::kRing, peer::GossipGraph::kTorus}) {
    for (int n : {2, 3, 4}) {
      peer::ContextOptions options;
      options.graph = graph;
      LoopbackRing ring(n, options);
      ring.FormAll();
      ring.FormAll();
      std::vector<uint64_t> agreed(static_cast<std::size_t>(n), 0);
      auto st = ring.Each(ring.All(), [&](uint32_t r) -> Status {
        auto a = ring.groups[r]->AgreeStep(r == static_cast<uint32_t>(n - 1) ? 8 : 7);
        if (!a.ok()) return a.status();
        agreed[r] = *a;
        return Status::Ok();
      });
      for (int r = 0; r < n; ++r) {
        INFO("graph ", static_cast<int>(graph), " ranks ", n, " rank ", r);
        REQUIRE_MESSAGE(st[static_cast<std::size_t>(r)].ok(), st[static_cast<std::size_t>(r)].ToString());
        CHECK(agreed[static_cast<std::size_t>(r)] == 8);
      }
    }
  }
}

// Rank 2's context is destroyed (its links close) while the others wait in
// the collective for what it would send: every survivor fails naming rank 2,
// and the survivors re-form and reduce again.
TEST_CASE("a loopback rank failing mid-collective gives every survivor the same failed rank") {
  // 3000 floats: SmallAllReduce (dense) or the ring (fp16); 20000: the ring.
  for (const auto& [codec, size] : {std::pair<std::string, std::size_t>{"", 3000}, {"", 20000}, {"fp16", 3000}}) {
    INFO("codec '", codec, "', size ", size);
    peer::ContextOptions options;
    options.step_timeout_ms = 5000;
    LoopbackRing ring(4, options, /*chunk_floats=*/100);
    ring.FormAll();
    std::vector<std::vector<float>> data(4, std::vector<float>(size, 1.0f));
    for (auto& s : ring.Reduce(ring.All(), data, codec)) REQUIRE_MESSAGE(s.ok(), s.ToString());
    const std::vector<uint32_t> survivors = {0, 1, 3};
    auto st = ring.Each(ring.All(), [&](uint32_t r) -> Status {
      if (r == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the others are waiting by now, mostly
        ring.groups[2].reset();
        return Status::Ok();
      }
      return ring.groups[r]->AllReduce(data[r].data(), data[r].size(), codec);
    });
    for (uint32_t r : survivors) {
      INFO("rank ", r, ": ", st[r].ToString());
      CHECK_FALSE(st[r].ok());
      CHECK(ring.groups[r]->FailedRank() == 2);
      CHECK(st[r].message().find("peer rank 2") != std::string::npos);
      // Until the group re-forms, collectives refuse to run.
      std::vector<float> x(4, 1.0f);
      CHECK(ring.groups[r]->AllReduce(x.data(), x.size(), codec).code() == StatusCode::kFailedPrecondition);
    }
    for (auto& s : ring.Form(survivors)) REQUIRE_MESSAGE(s.ok(), s.ToString());
    for (uint32_t r : survivors) {
      CHECK(ring.groups[r]->members() == survivors);
      data[r].assign(size, static_cast<float>(r + 1));
    }
    auto again = ring.Reduce(survivors, data, codec);
    for (uint32_t r : survivors) {
      REQUIRE_MESSAGE(again[r].ok(), again[r].ToString());
      CHECK(data[r][0] == 1.0f + 2.0f + 4.0f);
      CHECK(data[r] == data[0]);
    }
  }
}

TEST_CASE("a loopback gossip neighbour failing on a torus is named by the survivors that need it") {
  peer::ContextOptions options;
  options.graph = peer::GossipGraph::kTorus;
  options.step_timeout_ms = 5000;
  LoopbackRing ring(6, options);  // 2 x 3: rank 2's neighbours are 0, 1 and 5
  ring.FormAll();
  const std::size_t d = 50;
  auto models = Models(6, d, 0.5f);
  std::vector<float> grad(d, 0.0f);
  std::vector<peer::GossipStats> stats(6);
  auto st = ring.Each(ring.All(), [&](uint32_t r) -> Status {
    if (r == 2) {
      ring.groups[2].reset();
      return Status::Ok();
    }
    return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.0f, "", 4, &stats[r]);
  });
  for (uint32_t r : {0u, 1u, 5u}) {
    INFO("rank ", r, ": ", st[r].ToString());
    CHECK_FALSE(st[r].ok());
    CHECK(ring.groups[r]->FailedRank() == 2);
  }
  for (uint32_t r : {3u, 4u}) {
    if (!st[r].ok()) CHECK(ring.groups[r]->FailedRank() == 2);  // a forwarded report, or done before it
  }
  const std::vector<uint32_t> survivors = {0, 1, 3, 4, 5};
  for (auto& s : ring.Form(survivors)) REQUIRE_MESSAGE(s.ok(), s.ToString());
  st = ring.Each(survivors, [&](uint32_t r) {
    return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.0f, "", 4, &stats[r]);
  });
  for (uint32_t r : survivors) CHECK_MESSAGE(st[r].ok(), st[r].ToString());
}

TEST_CASE("a stalled loopback rank is named by every other rank after the step deadline") {
  peer::ContextOptions options;
  options.step_timeout_ms = 2000;  // a 500 ms grace for the suspicions
  for (std::size_t size : {std::size_t{1000}, std::size_t{20000}}) {  // SmallAllReduce, the ring
    LoopbackRing ring(4, options);
    ring.FormAll();
    std::vector<std::vector<float>> data(4, std::vector<float>(size, 1.0f));
    auto st = ring.Reduce({0, 1, 3}, data);  // rank 2 never joins the step
    for (uint32_t r : {0u, 1u, 3u}) {
      INFO("size ", size, ", rank ", r, ": ", st[r].ToString());
      CHECK_FALSE(st[r].ok());
      CHECK(ring.groups[r]->FailedRank() == 2);
    }
  }
}

TEST_CASE("a loopback ring step on a manual clock fails naming the silent peer once the clock passes the deadline") {
  // An hour's step deadline: only the manual clock can reach it, so the step
  // ends because the test moves the clock, not because real time passed.
  ManualClock clock;
  peer::ContextOptions options;
  options.step_timeout_ms = 3600u * 1000u;
  options.clock = &clock;
  LoopbackRing ring(2, options);
  ring.FormAll();
  std::vector<float> data(1000, 1.0f);
  std::atomic<bool> done{false};
  Status status;
  std::thread rank0([&] {
    status = ring.groups[0]->AllReduce(data.data(), data.size(), "");  // rank 1 stays silent
    done = true;
  });
  uint64_t advanced_ms = 0;
  while (!done) {
    clock.AdvanceMs(60000);
    advanced_ms += 60000;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // lets rank 0 read the clock
  }
  rank0.join();
  INFO(status.ToString());
  CHECK(status.code() == StatusCode::kDeadlineExceeded);
  CHECK(status.message().find("peer rank 1 (p1)") != std::string::npos);
  CHECK(ring.groups[0]->FailedRank() == 1);
  CHECK(advanced_ms >= options.step_timeout_ms);
}

}  // namespace
}  // namespace fedrt
