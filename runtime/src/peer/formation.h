// What every binding of the collective context (collective_context.h) does
// the same way, whatever moves its bytes: the gossip neighbours of a
// formation and the text of failure reports. The link context (TCP,
// loopback) and the stream context (the application's streams) share it.
#ifndef FEDRT_RUNTIME_SRC_PEER_FORMATION_H_
#define FEDRT_RUNTIME_SRC_PEER_FORMATION_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fedrt/runtime/collective_context.h"

namespace fedrt {
namespace peer {
namespace internal {

// The prefix of every failure report and of Name(rank).
inline constexpr const char kFailurePrefix[] = "peer rank ";

// The id a peer joins and holds its key under when the binding names peers
// by rank (the loopback, the application's streams): "p<rank>".
inline std::string PeerId(uint32_t rank) { return "p" + std::to_string(rank); }

// The members of a formation: `members` sorted and without repeats (every
// rank of the peer list when empty), which must include `rank` and name only
// ranks below `peer_count`. Returns this peer's position in `*ring`.
inline Result<std::size_t> FormationMembers(const std::vector<uint32_t>& members, uint32_t rank,
                                            uint32_t peer_count, std::vector<uint32_t>* ring) {
  *ring = members;
  if (ring->empty()) {
    for (uint32_t r = 0; r < peer_count; ++r) ring->push_back(r);
  }
  std::sort(ring->begin(), ring->end());
  ring->erase(std::unique(ring->begin(), ring->end()), ring->end());
  const auto self = std::find(ring->begin(), ring->end(), rank);
  if (self == ring->end() || ring->back() >= peer_count) {
    return InvalidArgument("ring members must be ranks of the peer list and include this peer");
  }
  return static_cast<std::size_t>(self - ring->begin());
}

// The gossip neighbours of the member at `position` of `members` (ascending
// original ranks), in the order gossip mixes them: on the ring the left then
// the right one (one neighbour, weight 1/2, with two members; 1/3 each with
// more); on a graph ascending by node with Metropolis weights. Empty for one
// member.
inline std::vector<Neighbour> FormationNeighbours(GossipGraph graph, const std::vector<uint32_t>& members,
                                                  std::size_t position) {
  std::vector<Neighbour> neighbours;
  const std::size_t p = members.size();
  if (p <= 1) return neighbours;
  if (graph == GossipGraph::kRing) {
    const uint32_t left = members[(position + p - 1) % p];
    const uint32_t right = members[(position + 1) % p];
    if (p == 2) {
      neighbours.push_back({left, 0.5f});
    } else {
      neighbours.push_back({left, 1.0f / 3.0f});
      neighbours.push_back({right, 1.0f / 3.0f});
    }
    return neighbours;
  }
  const auto nodes = GraphNeighbours(graph, static_cast<uint32_t>(p));
  const std::vector<double> w = MetropolisWeights(nodes);
  for (uint32_t j : nodes[position]) neighbours.push_back({members[j], static_cast<float>(w[position * p + j])});
  return neighbours;
}

// A failure report (collective_context.h): "peer rank R failed: ..." or
// "peer rank A waits on peer rank B".
struct Report {
  bool failed = false;  // false: a suspicion
  int a = -1;           // failed rank, or the waiting rank
  int b = -1;           // the rank waited on
};

inline bool ParseRank(std::string_view text, std::size_t* at, int* rank) {
  const std::size_t n = sizeof(kFailurePrefix) - 1;
  if (text.compare(*at, n, kFailurePrefix) != 0) return false;
  std::size_t i = *at + n;
  int value = 0;
  const std::size_t start = i;
  for (; i < text.size() && i < start + 6 && text[i] >= '0' && text[i] <= '9'; ++i) {
    value = value * 10 + (text[i] - '0');
  }
  if (i == start) return false;
  *rank = value;
  *at = i;
  return true;
}

inline bool ParseReport(std::string_view text, Report* report) {
  std::size_t at = 0;
  if (!ParseRank(text, &at, &report->a)) return false;
  constexpr std::string_view kFailed = " failed";
  constexpr std::string_view kWaits = " waits on ";
  if (text.compare(at, kFailed.size(), kFailed) == 0) {
    report->failed = true;
    return true;
  }
  if (text.compare(at, kWaits.size(), kWaits) != 0) return false;
  at += kWaits.size();
  report->failed = false;
  return ParseRank(text, &at, &report->b);
}

}  // namespace internal
}  // namespace peer
}  // namespace fedrt

#endif  // FEDRT_RUNTIME_SRC_PEER_FORMATION_H_
