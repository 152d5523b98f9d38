// Ring all-reduce over real TCP on 127.0.0.1 (port 0), one thread per rank.
// Tolerance: peer_checks.h (1e-5 against the double sum; every peer must
// hold bit-identical results).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/iwp.h"
#include "fedrt/runtime/collectives.h"
#include "fedrt/runtime/peer.h"
#include "peer_checks.h"
#include "peer_ring.h"
#include "tls_test_support.h"

namespace fedrt {
namespace {

using testing::CheckRingSum;
using testing::Input;
using testing::PeerRing;

TEST_CASE("ring all-reduce of 2 to 8 peers equals the exact sum for awkward sizes") {
  const std::size_t sizes[] = {0, 1, 7, 4096 + 3, std::size_t{1} << 20};
  for (int n = 2; n <= 8; ++n) {
    peer::PeerOptions options;
    options.chunk_floats = 1000;  // several chunks per segment: exercises the pipeline
    PeerRing ring(n, options);
    ring.FormAll();
    for (std::size_t size : sizes) {
      if (size == (std::size_t{1} << 20) && n > 4 && n != 8) continue;  // keep the run short
      INFO("peers ", n, ", size ", size);
      CheckRingSum(ring, n, size, 0);
    }
  }
}

TEST_CASE("dense all-reduce over tcp gives every peer the ring order's bits, small or not") {
  // SmallAllReduce up to 16384 floats, above it the ring with its automatic
  // chunks (reduce-scatter pieces added as they arrive, all-gather placed).
  const std::size_t sizes[] = {1, 7, 16383, 16384, 16385, 300001};
  for (int n = 2; n <= 4; ++n) {
    PeerRing ring(n, peer::PeerOptions());
    ring.FormAll();
    for (std::size_t size : sizes) {
      INFO("peers ", n, ", size ", size);
      testing::CheckRingOrderSum(ring, size, 3);
    }
  }
}

TEST_CASE("ring all-reduce with the automatic chunk size adds megabyte chunks piece by piece and equals the exact sum") {
  // 2^20 + 3 floats: chunks of 1 MiB (several receive pieces each) and a
  // remainder too small to be taken piece by piece, over three collectives.
  const std::size_t size = (std::size_t{1} << 20) + 3;
  for (int n = 2; n <= 3; ++n) {
    PeerRing ring(n, peer::PeerOptions());
    ring.FormAll();
    for (uint32_t round = 0; round < 3; ++round) {
      INFO("peers ", n, ", round ", round);
      CheckRingSum(ring, n, size, 10 * round);
    }
  }
}

TEST_CASE("ring all-reduce over tls links with peer certificates equals the exact sum") {
  if (!transport::TlsSupported()) return;  // built with FEDRT_WITH_TLS=OFF
  transport::testing::TlsCredentials tls;
  REQUIRE_MESSAGE(tls.ok(), tls.status().ToString());
  peer::PeerOptions options;
  // Chunks of a whole segment (341 KiB): through the TLS stream the reduce-scatter payloads are added
  // into the vector in two pieces each and the all-gather payloads placed straight into it.
  options.chunk_floats = 1u << 17;
  options.tls = tls.ServerConfig();  // every peer presents the 127.0.0.1 certificate
  options.tls.ca_file = tls.files().ca_cert;
  const int n = 3;
  PeerRing ring(n, options);
  ring.FormAll();
  const std::size_t size = (std::size_t{1} << 18) + 5;
  std::vector<std::vector<float>> data(n);
  std::vector<double> exact(size, 0.0);
  for (int r = 0; r < n; ++r) {
    data[static_cast<std::size_t>(r)] = Input(static_cast<uint32_t>(r), size);
    for (std::size_t i = 0; i < size; ++i) exact[i] += data[static_cast<std::size_t>(r)][i];
  }
  for (auto& s : ring.Reduce(ring.All(), data)) REQUIRE_MESSAGE(s.ok(), s.ToString());
  double worst = 0;
  for (std::size_t i = 0; i < size; ++i) worst = std::max(worst, std::fabs(data[0][i] - exact[i]));
  CHECK(worst <= 1e-5);
  for (int r = 1; r < n; ++r) CHECK(data[static_cast<std::size_t>(r)] == data[0]);

  // A peer without the CA file cannot form a TLS group.
  peer::PeerOptions no_ca = options;
  no_ca.tls.ca_file.clear();
  std::vector<peer::PeerAddress> list = {{"p0", "127.0.0.1", 0}, {"p1", "127.0.0.1", 0}};
  auto group = peer::PeerGroup::Create(list, 0, PeerRing::Keys(2), no_ca);
  CHECK(group.status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("ring all-reduce whose all-gather chunks are received in place equals the exact sum") {
  // Chunks of 128 KiB are large enough to be placed straight into the vector
  // (transport kMinPlacedFrameBytes); each segment ends with a short chunk.
  const std::size_t sizes[] = {(std::size_t{1} << 17) + 5, (std::size_t{1} << 18) + 4099};
  for (int n = 2; n <= 4; ++n) {
    peer::PeerOptions options;
    options.chunk_floats = 1u << 15;
    PeerRing ring(n, options);
    ring.FormAll();
    for (int repeat = 0; repeat < 2; ++repeat) {
      for (std::size_t size : sizes) {
        std::vector<std::vector<float>> data(static_cast<std::size_t>(n));
        std::vector<double> exact(size, 0.0);
        for (int r = 0; r < n; ++r) {
          data[static_cast<std::size_t>(r)] = Input(static_cast<uint32_t>(r + 10 * repeat), size);
          for (std::size_t i = 0; i < size; ++i) exact[i] += data[static_cast<std::size_t>(r)][i];
        }
        auto st = ring.Each(ring.All(), [&](uint32_t r) { return ring.groups[r]->AllReduce(data[r].data(), size); });
        for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
        INFO("peers ", n, ", size ", size, ", repeat ", repeat);
        double worst = 0;
        for (std::size_t i = 0; i < size; ++i) worst = std::max(worst, std::fabs(data[0][i] - exact[i]));
        CHECK(worst <= 1e-5);
        for (int r = 1; r < n; ++r) CHECK(data[static_cast<std::size_t>(r)] == data[0]);
      }
    }
  }
}

TEST_CASE("fp16 ring all-reduce equals the reference of the same hops and is identical on every peer") {
  const int n = 4;
  const std::size_t size = 4096 + 3;
  peer::PeerOptions options;
  options.chunk_floats = 512;
  PeerRing ring(n, options);
  ring.FormAll();
  std::vector<std::vector<float>> data(n);
  for (int r = 0; r < n; ++r) data[r] = Input(static_cast<uint32_t>(r), size);
  // Reference: each partial sum crosses one fp16 hop (peer_checks.h).
  const std::vector<float> reference = testing::Fp16RingReference(data);
  auto st = ring.Each(ring.All(), [&](uint32_t r) { return ring.groups[r]->AllReduce(data[r].data(), size, "fp16"); });
  for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  for (int r = 0; r < n; ++r) CHECK(data[r] == reference);
  CHECK(ring.groups[0]->last_stats().bytes_sent < size * 4 / 2 * 2 * (n - 1) / n + 4096);
}

// 100 IWP steps on a ring of 3: every peer applies the reduced mean the same
// way, so models must stay bit-identical; what each peer sent plus its
// accumulator must equal the sum of what it accumulated (its gradients, or
// with momentum correction its velocities u = m u + g, masked where sent).
// With decaying_rate the peers accumulate updates, rate(step) * (u or g),
// with a rate that decays as a cosine schedule does, and apply the mean at
// rate 1 (fedrt peer's --iwp-accumulate update); else gradients, applied at 0.01.
void RunIwpRing(const IwpOptions& io, const std::vector<std::size_t>& tensors, bool decaying_rate = false) {
  const int n = 3;
  const std::size_t d = 3000;
  PeerRing ring(n);
  ring.FormAll();
  std::vector<std::unique_ptr<IwpAccumulator>> acc;
  std::vector<std::vector<float>> model(n, std::vector<float>(d, 0.5f));
  std::vector<std::vector<double>> accumulated(n, std::vector<double>(d, 0.0));
  std::vector<std::vector<double>> velocity(n, std::vector<double>(d, 0.0));
  std::vector<std::vector<double>> sent(n, std::vector<double>(d, 0.0));
  for (int r = 0; r < n; ++r) {
    REQUIRE(IwpAccumulator::Check(d, io).ok());
    acc.push_back(std::make_unique<IwpAccumulator>(d, io));
    if (!tensors.empty()) REQUIRE(acc.back()->SetTensors(tensors).ok());
  }
  for (uint32_t step = 0; step < 100; ++step) {
    const float rate = decaying_rate ? 0.05f * 0.5f * (1.0f + std::cos(3.14159265f * static_cast<float>(step) / 100)) + 1e-3f
                                     : 1.0f;
    auto st = ring.Each(ring.All(), [&](uint32_t r) -> Status {
      std::vector<float> g = Input(r * 1000 + step, d);
      for (std::size_t i = 0; i < d; ++i) {
        velocity[r][i] = io.momentum * velocity[r][i] + g[i];
        accumulated[r][i] += double{rate} * (io.momentum > 0 ? velocity[r][i] : g[i]);
      }
      Status s = acc[r]->Accumulate(g.data(), rate);
      if (!s.ok()) return s;
      std::vector<uint32_t> idx;
      std::vector<float> sums;
      // Every peer gathers its own values; recompute them from the
      // accumulator change to record what this peer sent.
      std::vector<float> before(acc[r]->accumulator(), acc[r]->accumulator() + d);
      s = ring.groups[r]->IwpAllReduce(*acc[r], model[r].data(), 99, step, &idx, &sums);
      if (!s.ok()) return s;
      for (uint32_t i : idx) {
        sent[r][i] += before[i];
        velocity[r][i] = 0;  // momentum factor masking
      }
      const float apply = decaying_rate ? 1.0f : 0.01f;
      for (std::size_t j = 0; j < idx.size(); ++j) model[r][idx[j]] -= apply * sums[j] / n;
      return Status::Ok();
    });
    for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
    for (int r = 1; r < n; ++r) REQUIRE(model[r] == model[0]);
  }
  for (int r = 0; r < n; ++r) {
    double worst = 0;
    for (std::size_t i = 0; i < d; ++i)
      worst = std::max(worst, std::fabs(sent[r][i] + acc[r]->accumulator()[i] - accumulated[r][i]));
    MESSAGE("rank " << r << ": worst |sent + accumulator - accumulated| = " << worst);
    CHECK(worst < (io.momentum > 0 ? 1e-2 : 1e-3));  // velocities are up to 1 / (1 - m) times larger
  }
}

TEST_CASE("IWP ring over 100 steps keeps sent plus accumulator equal to the gradient sum and models identical") {
  IwpOptions io;
  io.target_fraction = 1.0f / 16;
  RunIwpRing(io, {});
}

TEST_CASE("IWP ring with momentum correction and per-tensor thresholds conserves the velocity sum and keeps models identical") {
  IwpOptions io;
  io.target_fraction = 1.0f / 16;
  io.momentum = 0.9f;
  io.dense_below = 100;
  RunIwpRing(io, {2000, 50, 900, 50});
}

TEST_CASE("IWP ring accumulating updates under a decaying rate conserves the rate-scaled velocity sum and keeps models identical") {
  IwpOptions io;
  io.target_fraction = 1.0f / 16;
  io.momentum = 0.9f;
  io.dense_below = 100;
  RunIwpRing(io, {2000, 50, 900, 50}, /*decaying_rate=*/true);
}

TEST_CASE("IWP sums its selected coordinates on the ring, not the small vectors' way, which sends twice the bytes at 4 peers") {
  const int n = 4;
  const std::size_t d = 100000;
  IwpOptions io;
  io.target_fraction = 1.0f / 16;  // about 6,250 coordinates: 25 KB, small enough for SmallAllReduce at 4 peers
  PeerRing ring(n);
  ring.FormAll();
  std::vector<std::unique_ptr<IwpAccumulator>> acc;
  std::vector<std::vector<float>> model(n, std::vector<float>(d, 0.5f));
  std::vector<std::vector<uint32_t>> idx(n);
  std::vector<std::vector<float>> sums(n);
  for (int r = 0; r < n; ++r) acc.push_back(std::make_unique<IwpAccumulator>(d, io));
  auto st = ring.Each(ring.All(), [&](uint32_t r) -> Status {
    std::vector<float> g = Input(r * 1000, d);
    FEDRT_RETURN_IF_ERROR(acc[r]->Accumulate(g.data(), 1.0f));
    return ring.groups[r]->IwpAllReduce(*acc[r], model[r].data(), 99, 0, &idx[r], &sums[r]);
  });
  for (auto& s : st) REQUIRE_MESSAGE(s.ok(), s.ToString());
  const std::size_t k = idx[0].size();
  REQUIRE(k > 1000);
  REQUIRE(k * sizeof(float) * (n / 2) <= peer::SmallAllReduce::kMaxLinkBytes);  // Run would take the small way
  for (int r = 1; r < n; ++r) CHECK(sums[r] == sums[0]);
  // The small vectors' way sends (n - 1) k floats for the values alone; the
  // ring 2 (n - 1) / n k, plus the leader's indices passed on.
  const uint64_t small_values_bytes = static_cast<uint64_t>(n - 1) * k * sizeof(float);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << " sent " << ring.groups[r]->last_stats().bytes_sent << " bytes for " << k << " coordinates");
    CHECK(ring.groups[r]->last_stats().bytes_sent < small_values_bytes);
  }
}

}  // namespace
}  // namespace fedrt
