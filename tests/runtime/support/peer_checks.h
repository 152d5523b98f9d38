// Inputs and reference results the collectives tests share, over either
// binding (peer_ring.h: TCP or loopback).
//
// Tolerance of the dense sums: the ring adds each coordinate's p inputs in
// ring order in float; the reference adds them in double. With inputs in
// [-1, 1] the error is below p * 2^-24 * sum|x_i| <= p^2 * 6e-8, so 1e-5 for
// p <= 8 is safe. Every peer must hold bit-identical results (the
// all-gather copies bytes).
#ifndef FEDRT_TESTS_SUPPORT_PEER_CHECKS_H_
#define FEDRT_TESTS_SUPPORT_PEER_CHECKS_H_

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/moniqua.h"
#include "fedrt/runtime/collective_context.h"
#include "peer_ring.h"

namespace fedrt::testing {

// n floats uniform in [-1, 1), the same for the same seed.
inline std::vector<float> Input(uint32_t seed, std::size_t n) {
  std::mt19937 rng(1234 + seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// n models of d floats: one random base plus an offset in [-spread, spread]
// per coordinate and model.
inline std::vector<std::vector<float>> Models(int n, std::size_t d, float spread) {
  std::vector<std::vector<float>> m(static_cast<std::size_t>(n));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> base(-1.0f, 1.0f), off(-spread, spread);
  std::vector<float> b(d);
  for (auto& x : b) x = base(rng);
  for (auto& v : m) {
    v = b;
    for (auto& x : v) x += off(rng);
  }
  return m;
}

// Every peer of `ring` all-reduces its Input(rank + seed, size); the result
// must be the exact sum (double) within 1e-5 and identical on every peer.
inline void CheckRingSum(PeerGroups& ring, int n, std::size_t size, uint32_t seed) {
  std::vector<std::vector<float>> data(static_cast<std::size_t>(n));
  std::vector<double> exact(size, 0.0);
  for (int r = 0; r < n; ++r) {
    data[static_cast<std::size_t>(r)] = Input(static_cast<uint32_t>(r) + seed, size);
    for (std::size_t i = 0; i < size; ++i) exact[i] += data[static_cast<std::size_t>(r)][i];
  }
  auto st = ring.Each(ring.All(), [&](uint32_t r) { return ring.groups[r]->AllReduce(data[r].data(), size); });
  for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  double worst = 0;
  for (std::size_t i = 0; i < size; ++i) worst = std::max(worst, std::fabs(data[0][i] - exact[i]));
  CHECK(worst <= 1e-5);
  for (int r = 1; r < n; ++r) CHECK(data[static_cast<std::size_t>(r)] == data[0]);
}

// The dense all-reduce's sum, in its order (collectives.h, SmallAllReduce):
// coordinates of segment s ([s size / p, (s + 1) size / p)) added in float
// from ring position s on, wrapping; data[i] is position i's vector.
inline std::vector<float> RingOrderSum(const std::vector<std::vector<float>>& data) {
  const std::size_t p = data.size();
  const std::size_t size = data[0].size();
  std::vector<float> sum(size);
  for (std::size_t s = 0; s < p; ++s) {
    for (std::size_t i = s * size / p; i < (s + 1) * size / p; ++i) {
      float acc = data[s][i];
      for (std::size_t j = 1; j < p; ++j) acc += data[(s + j) % p][i];
      sum[i] = acc;
    }
  }
  return sum;
}

// Every member of `ring` (all of them, ranks in order) all-reduces its
// Input(rank + seed, size): every one must hold RingOrderSum's bits.
inline void CheckRingOrderSum(PeerGroups& ring, std::size_t size, uint32_t seed) {
  std::vector<std::vector<float>> data;
  for (uint32_t r = 0; r < ring.groups.size(); ++r) data.push_back(Input(r + seed, size));
  const std::vector<float> expected = size == 0 ? std::vector<float>() : RingOrderSum(data);
  for (auto& s : ring.Reduce(ring.All(), data)) REQUIRE_MESSAGE(s.ok(), s.ToString());
  for (std::size_t r = 0; r < data.size(); ++r) {
    INFO("rank ", r);
    REQUIRE(data[r].size() == expected.size());
    if (size != 0) CHECK(std::memcmp(data[r].data(), expected.data(), size * sizeof(float)) == 0);  // no memcmp of null
  }
}

// What an fp16 ring all-reduce of `data` (one vector per rank) gives every
// peer: each partial sum crosses one fp16 hop, i.e. is rounded to fp16
// before the next peer adds its (exact) value; the final sum is rounded to
// fp16 once by its owner. The ring visits segment s's owners in order s,
// s+1, ..., s+p-1 (positions), so the reference follows that.
inline std::vector<float> Fp16RingReference(const std::vector<std::vector<float>>& data) {
  const std::size_t n = data.size();
  const std::size_t size = data[0].size();
  auto codec = MakeCodec("fp16").value();
  auto round_fp16 = [&](float x) {
    std::vector<uint8_t> buf(codec->MaxEncodedSize(1));
    auto sz = codec->Encode(&x, 1, {}, buf.data(), buf.size());
    float y = 0;
    REQUIRE(codec->Decode(buf.data(), *sz, {}, &y, 1).ok());
    return y;
  };
  std::vector<float> reference(size);
  for (std::size_t i = 0; i < size; ++i) {
    std::size_t seg = 0;
    while ((seg + 1) * size / n <= i) ++seg;
    float acc = round_fp16(data[seg][i]);
    for (std::size_t h = 1; h < n; ++h) {
      acc = acc + data[(seg + h) % n][i];
      if (h + 1 < n) acc = round_fp16(acc);
    }
    reference[i] = round_fp16(acc);
  }
  return reference;
}

// One full-precision gossip step (step 7, lr 0.1, every gradient 0.25) on a
// ring of n averages each model with its two ring neighbours (Metropolis:
// 1/3 each, 1/2 with two peers) and sends one model to each neighbour.
inline void CheckRingGossipStep(PeerGroups& ring, int n, std::size_t d) {
  auto models = Models(n, d, 0.5f);
  const auto before = models;
  std::vector<float> grad(d, 0.25f);
  std::vector<peer::GossipStats> stats(static_cast<std::size_t>(n));
  auto st = ring.Each(ring.All(), [&](uint32_t r) {
    return ring.groups[r]->GossipStep(models[r].data(), grad.data(), d, 0.1f, "", 7, &stats[r]);
  });
  for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  for (int r = 0; r < n; ++r) {
    const std::size_t left = static_cast<std::size_t>((r + n - 1) % n), right = static_cast<std::size_t>((r + 1) % n);
    const float w = n == 2 ? 0.5f : 1.0f / 3.0f;
    double worst = 0;
    for (std::size_t i = 0; i < d; ++i) {
      double expect = before[r][i] + w * (before[left][i] - before[r][i]) - 0.1 * 0.25;
      if (n > 2) expect += w * (before[right][i] - before[r][i]);
      worst = std::max(worst, std::fabs(expect - models[r][i]));
    }
    INFO("peers ", n, " rank ", r);
    CHECK(worst < 1e-6);
    CHECK(stats[r].wrap_count == 0);
    CHECK(stats[r].bytes_sent == d * 4 * (n == 2 ? 1 : 2));
  }
}

// The model of ring rank r after a Moniqua gossip step of `spec` at step
// `round` without gradient, from the models `before`: every model encoded
// with the same context, decoded as the receiver does, mixed.
inline std::vector<float> MoniquaRingReference(const std::vector<std::vector<float>>& before, int r,
                                               const std::string& spec, uint32_t round) {
  const int n = static_cast<int>(before.size());
  const std::size_t d = before[0].size();
  auto codec = MakeCodec(spec).value();
  auto decode = [&](int from, std::vector<float>* out) {
    std::vector<uint8_t> payload(codec->MaxEncodedSize(d));
    CodecContext c;
    c.round = round;
    c.sender_id = static_cast<uint32_t>(from);
    auto size = codec->Encode(before[static_cast<std::size_t>(from)].data(), d, c, payload.data(), payload.size());
    REQUIRE(size.ok());
    out->resize(d);
    std::size_t wraps = 0;
    REQUIRE(MoniquaDecode(*codec, payload.data(), *size, c, before[static_cast<std::size_t>(r)].data(), out->data(),
                          d, -1.0f, &wraps)
                .ok());
  };
  std::vector<float> self, left, right;
  decode(r, &self);
  decode((r + n - 1) % n, &left);
  decode((r + 1) % n, &right);
  MoniquaNeighbour mix[2] = {{left.data(), 1.0f / 3}, {right.data(), 1.0f / 3}};
  std::vector<float> expect = before[static_cast<std::size_t>(r)];
  const std::vector<float> grad(d, 0.0f);
  MoniquaMixStep(expect.data(), self.data(), mix, 2, 0.0f, grad.data(), d);
  return expect;
}

// The largest distance of `after` (rank r's model) from one Metropolis
// mixing step of the models `before` on `graph`.
inline double MetropolisDistance(const std::vector<std::vector<float>>& before, const std::vector<float>& after,
                                 int r, peer::GossipGraph graph) {
  const int n = static_cast<int>(before.size());
  const auto w = peer::MetropolisWeights(peer::GraphNeighbours(graph, static_cast<uint32_t>(n)));
  double worst = 0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    double expect = 0;
    for (int j = 0; j < n; ++j) expect += w[static_cast<std::size_t>(r * n + j)] * before[static_cast<std::size_t>(j)][i];
    worst = std::max(worst, std::fabs(expect - after[i]));
  }
  return worst;
}

}  // namespace fedrt::testing

#endif  // FEDRT_TESTS_SUPPORT_PEER_CHECKS_H_
