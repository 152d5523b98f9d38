// Failure handling of the peer ring (one thread per rank, TCP on 127.0.0.1):
// a dead peer and a stalled peer make every survivor fail the step naming the
// same rank within the step deadline, and the survivors re-form the ring.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fedrt/codecs/iwp.h"
#include "fedrt/runtime/peer.h"
#include "fedrt/transport/auth.h"
#include "peer_ring.h"

namespace fedrt {
namespace {

using Clock = std::chrono::steady_clock;

using testing::PeerRing;

std::vector<std::vector<float>> Ones(std::size_t n, std::size_t d) {
  std::vector<std::vector<float>> v(n);
  for (std::size_t r = 0; r < n; ++r) v[r].assign(d, static_cast<float>(r + 1));
  return v;
}

void CheckSurvivorsBlame(PeerRing& ring, const std::vector<uint32_t>& survivors,
                         const std::vector<Status>& st, int culprit) {
  for (uint32_t r : survivors) {
    INFO("rank ", r, ": ", st[r].ToString());
    CHECK_FALSE(st[r].ok());
    CHECK(ring.groups[r]->FailedRank() == culprit);
    CHECK(st[r].message().find("peer rank " + std::to_string(culprit)) != std::string::npos);
  }
}

TEST_CASE("a dead peer makes the others fail the step naming its rank and the ring re-forms with 3") {
  peer::PeerOptions options;
  options.step_timeout_ms = 3000;
  options.join_timeout_ms = 5000;
  // 5000 floats: SmallAllReduce (at most 8192 with 4 peers); 30000: the ring.
  for (std::size_t size : {std::size_t{5000}, std::size_t{30000}}) {
    INFO("size ", size);
    PeerRing ring(4, options);
    for (auto& s : ring.Form({0, 1, 2, 3})) REQUIRE_MESSAGE(s.ok(), s.ToString());
    auto data = Ones(4, size);
    for (auto& s : ring.Reduce({0, 1, 2, 3}, data)) REQUIRE(s.ok());
    CHECK(data[3][size - 1] == 10.0f);

    ring.groups[2].reset();  // rank 2's process is gone: its sockets close
    const std::vector<uint32_t> survivors = {0, 1, 3};
    const auto start = Clock::now();
    auto st = ring.Reduce(survivors, data);
    const auto elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    CheckSurvivorsBlame(ring, survivors, st, 2);
    CHECK(elapsed < 3.0 + 0.75 + 10.0);  // deadline, grace, scheduling slack: no hang

    for (auto& s : ring.Form(survivors)) REQUIRE_MESSAGE(s.ok(), s.ToString());
    data = Ones(4, size);
    for (uint32_t r : survivors) {
      CHECK(ring.groups[r]->members() == survivors);
    }
    auto again = ring.Reduce(survivors, data);
    for (uint32_t r : survivors) REQUIRE_MESSAGE(again[r].ok(), again[r].ToString());
    for (uint32_t r : survivors) CHECK(data[r][0] == 1.0f + 2.0f + 4.0f);
  }
}

TEST_CASE("a stalled peer is named by every other peer within the step deadline") {
  peer::PeerOptions options;
  // A step deadline of 4 s gives the survivors a 1 s grace to pass their
  // "waits on" reports round the ring; with less, a CPU-starved machine (a
  // loaded CI runner) delivered rank 3's report after the grace and ranks 0
  // and 1 blamed rank 3.
  options.step_timeout_ms = 4000;
  PeerRing ring(4, options);
  for (auto& s : ring.Form({0, 1, 2, 3})) REQUIRE_MESSAGE(s.ok(), s.ToString());
  auto data = Ones(4, 5000);
  const std::vector<uint32_t> others = {0, 1, 3};  // rank 2 never joins the step
  const auto start = Clock::now();
  auto st = ring.Reduce(others, data);
  const auto elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  CheckSurvivorsBlame(ring, others, st, 2);
  // No hang: the step ends at its deadline plus the grace. The bound allows
  // scheduling delays on a loaded machine; a hang would run far past it.
  CHECK(elapsed < 4.0 + 1.0 + 10.0);
}

TEST_CASE("a peer whose key is wrong is refused and named") {
  peer::PeerOptions options;
  options.join_timeout_ms = 1500;
  std::vector<peer::PeerAddress> list = {{"p0", "127.0.0.1", 0}, {"p1", "127.0.0.1", 0}};
  auto good = transport::KeyStore::Parse("p0 00112233445566778899aabbccddeeff\np1 00112233445566778899aabbccddeeff\n").value();
  auto bad = transport::KeyStore::Parse("p0 00112233445566778899aabbccddeeff\np1 ffffffffffffffffffffffffffffffff\n").value();
  auto g0 = peer::TcpPeerContext::Create(list, 0, good, options);
  auto g1 = peer::TcpPeerContext::Create(list, 1, bad, options);
  REQUIRE(g0.ok());
  REQUIRE(g1.ok());
  (*g0)->SetPort(1, (*g1)->port());
  (*g1)->SetPort(0, (*g0)->port());
  Status s0, s1;
  std::thread t([&] { s1 = (*g1)->Form({}); });
  s0 = (*g0)->Form({});
  t.join();
  CHECK_FALSE(s0.ok());
  CHECK_FALSE(s1.ok());
  CHECK(s0.message().find("peer rank 1") != std::string::npos);
}

TEST_CASE("an IWP step that fails hands back what each survivor gathered so its accumulator keeps it") {
  peer::PeerOptions options;
  options.step_timeout_ms = 2000;
  PeerRing ring(4, options);
  for (auto& s : ring.Form({0, 1, 2, 3})) REQUIRE_MESSAGE(s.ok(), s.ToString());
  const std::size_t d = 5000;
  IwpOptions iwp;
  iwp.target_fraction = 0.1f;
  iwp.momentum = 0.9f;  // momentum correction, as fedrt peer runs IWP by default
  std::vector<std::unique_ptr<IwpAccumulator>> acc;
  std::vector<float> weights(d, 1.0f), grad(d);
  for (int r = 0; r < 4; ++r) {
    acc.push_back(std::make_unique<IwpAccumulator>(d, iwp));
    for (std::size_t i = 0; i < d; ++i) grad[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(r) * 13) % 101) - 50.0f;
    REQUIRE(acc.back()->Accumulate(grad.data(), 0.05f).ok());
  }
  std::vector<std::vector<float>> before(4);
  for (int r = 0; r < 4; ++r) before[r].assign(acc[r]->accumulator(), acc[r]->accumulator() + d);
  ring.groups[2].reset();
  const std::vector<uint32_t> survivors = {0, 1, 3};
  std::vector<std::vector<uint32_t>> indices(4);
  std::vector<std::vector<float>> sums(4);
  uint64_t seed = 7;
  while (IwpLeader(seed, 0, 4) == 2) ++seed;  // a survivor leads: it gathers before the sum fails
  auto st = ring.Each(survivors, [&](uint32_t r) {
    return ring.groups[r]->IwpAllReduce(*acc[r], weights.data(), seed, 0, &indices[r], &sums[r]);
  });
  CHECK(!sums[IwpLeader(seed, 0, 4)].empty());
  CheckSurvivorsBlame(ring, survivors, st, 2);
  for (uint32_t r : survivors) {
    INFO("rank ", r, " gathered ", sums[r].size());
    if (!sums[r].empty()) {
      REQUIRE(sums[r].size() == indices[r].size());
      for (std::size_t j = 0; j < indices[r].size(); ++j) {
        CHECK(acc[r]->accumulator()[indices[r][j]] == 0.0f);
        CHECK(acc[r]->velocity()[indices[r][j]] == 0.0f);
      }
      REQUIRE(acc[r]->Restore(indices[r].data(), sums[r].size(), sums[r].data()).ok());
    }
    CHECK(std::equal(before[r].begin(), before[r].end(), acc[r]->accumulator()));
  }
}

}  // namespace
}  // namespace fedrt
