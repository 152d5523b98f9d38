// Peer links shaped in user space (PeerOptions::link, transport/shaper.h)
// over real TCP on 127.0.0.1, one thread per rank: the shaping is real (a
// ring all-reduce moves its bytes at the links' rate, within 10%, as the
// shaper's own tests measure it), each hop pays both ends' delays, and the
// results are the same bits as on unshaped links.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/runtime/peer.h"
#include "fedrt/transport/link_profile.h"
#include "peer_ring.h"

namespace fedrt {
namespace {

using testing::PeerRing;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

peer::PeerOptions Shaped(const std::string& profile) {
  peer::PeerOptions options;
  Result<transport::LinkProfile> link = transport::ParseLinkProfile(profile);
  REQUIRE(link.ok());
  options.link = *link;
  return options;
}

std::vector<std::vector<float>> Inputs(std::size_t n, std::size_t size) {
  std::vector<std::vector<float>> data(n, std::vector<float>(size));
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < size; ++i) data[r][i] = static_cast<float>((i % 97) + r);
  }
  return data;
}

// Two peers, 2^16 floats: each sends half in the reduce-scatter and half in
// the all-gather, 256 KiB through its 4 Mbit/s uplink (0.52 s) while its
// downlink takes the other's; a hop's frame is paced once, not once per end.
TEST_CASE("a peer ring on user-space shaped links all-reduces at the links' rate within 10%") {
  const std::size_t size = std::size_t{1} << 16;
  PeerRing ring(2, Shaped("4mbit"));
  ring.FormAll();
  std::vector<std::vector<float>> data = Inputs(2, size);
  const auto start = std::chrono::steady_clock::now();
  for (const Status& s : ring.Reduce(ring.All(), data)) REQUIRE_MESSAGE(s.ok(), s.ToString());
  const double seconds = SecondsSince(start);
  const double expected = static_cast<double>(size * sizeof(float)) * 8 / 4e6;
  MESSAGE("all-reduce of " << size * sizeof(float) << " bytes: " << seconds << " s, expected " << expected << " s");
  CHECK(seconds == doctest::Approx(expected).epsilon(0.10));
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t i = 0; i < size; i += 4099) CHECK(data[r][i] == static_cast<float>(2 * (i % 97) + 1));
  }
}

// A 16-float all-reduce is a few bytes: what it takes is the delay of both
// ends of at least one hop (100 ms up at the sender, 100 ms down at the
// receiver).
TEST_CASE("a small all-reduce on delayed peer links waits for both ends' delays") {
  PeerRing ring(2, Shaped("unlimited,delay=100ms"));
  ring.FormAll();
  std::vector<std::vector<float>> data = Inputs(2, 16);
  const auto start = std::chrono::steady_clock::now();
  for (const Status& s : ring.Reduce(ring.All(), data)) REQUIRE_MESSAGE(s.ok(), s.ToString());
  const double seconds = SecondsSince(start);
  MESSAGE("16-float all-reduce on 100 ms links: " << seconds << " s");
  CHECK(seconds >= 0.2);
  for (std::size_t i = 0; i < 16; ++i) CHECK(data[0][i] == static_cast<float>(2 * i + 1));
  CHECK(data[0] == data[1]);
}

}  // namespace
}  // namespace fedrt
