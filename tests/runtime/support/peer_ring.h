// Groups of peers in one process for the peer tests, one thread per rank (as
// the ranks would be separate processes):
//   PeerRing      TCP contexts: every rank listens on 127.0.0.1 port 0 and
//                 learns the others' ports;
//   LoopbackRing  loopback contexts (no sockets), on one event loop thread.
#ifndef FEDRT_TESTS_SUPPORT_PEER_RING_H_
#define FEDRT_TESTS_SUPPORT_PEER_RING_H_

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fedrt/runtime/collective_context.h"
#include "fedrt/runtime/peer.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/event_loop.h"

namespace fedrt::testing {

// What both kinds of group offer: one PeerGroup per rank and ways to run a
// function on every member at once.
struct PeerGroups {
  std::vector<std::unique_ptr<peer::PeerGroup>> groups;

  std::vector<uint32_t> All() const {
    std::vector<uint32_t> m;
    for (uint32_t i = 0; i < groups.size(); ++i) m.push_back(i);
    return m;
  }

  // Runs fn(rank) on one thread per rank in `members`; each rank's status.
  template <typename Fn>
  std::vector<Status> Each(const std::vector<uint32_t>& members, Fn fn) {
    std::vector<Status> result(groups.size());
    std::vector<std::thread> threads;
    for (uint32_t r : members) threads.emplace_back([&, r] { result[r] = fn(r); });
    for (auto& t : threads) t.join();
    return result;
  }

  std::vector<Status> Form(const std::vector<uint32_t>& members) {
    return Each(members, [&](uint32_t r) { return groups[r]->Form(members); });
  }
  void FormAll() {
    for (auto& s : Form(All())) REQUIRE_MESSAGE(s.ok(), s.ToString());
  }
  std::vector<Status> Reduce(const std::vector<uint32_t>& members, std::vector<std::vector<float>>& data,
                             const std::string& codec = "") {
    return Each(members, [&](uint32_t r) { return groups[r]->AllReduce(data[r].data(), data[r].size(), codec); });
  }
};

struct PeerRing : PeerGroups {
  transport::KeyStore keys;

  explicit PeerRing(int n, const peer::PeerOptions& options = {}) : keys(Keys(n)) {
    std::vector<peer::PeerAddress> list;
    for (int i = 0; i < n; ++i) list.push_back({"p" + std::to_string(i), "127.0.0.1", 0});
    std::vector<std::unique_ptr<peer::TcpPeerContext>> contexts;
    for (int i = 0; i < n; ++i) {
      auto c = peer::TcpPeerContext::Create(list, static_cast<uint32_t>(i), keys, options);
      REQUIRE_MESSAGE(c.ok(), c.status().ToString());
      contexts.push_back(std::move(*c));
    }
    for (auto& c : contexts) {
      for (int i = 0; i < n; ++i) c->SetPort(static_cast<uint32_t>(i), contexts[static_cast<std::size_t>(i)]->port());
    }
    for (auto& c : contexts) {
      groups.push_back(std::make_unique<peer::PeerGroup>(std::unique_ptr<peer::CollectiveContext>(std::move(c)),
                                                         options.chunk_floats));
    }
  }

  // One key per peer (distinct keys, so a mix-up would fail the join).
  static transport::KeyStore Keys(int n) {
    std::string text;
    for (int i = 0; i < n; ++i) {
      char line[96];
      std::snprintf(line, sizeof line, "p%d 00112233445566778899aabbccddee%02x\n", i, i);
      text += line;
    }
    return transport::KeyStore::Parse(text).value();
  }
};

// The event loop first: it outlives every context (contexts are destroyed
// with `groups`, before it).
struct LoopbackLoop {
  transport::EventLoopThread loop;
};

struct LoopbackRing : LoopbackLoop, PeerGroups {
  std::unique_ptr<peer::LoopbackPeerNetwork> network;

  explicit LoopbackRing(int n, const peer::ContextOptions& options = {}, uint32_t chunk_floats = 0)
      : network(std::make_unique<peer::LoopbackPeerNetwork>(loop.loop(), static_cast<uint32_t>(n), options)) {
    for (int i = 0; i < n; ++i) {
      auto c = network->Connect(static_cast<uint32_t>(i));
      REQUIRE_MESSAGE(c.ok(), c.status().ToString());
      groups.push_back(std::make_unique<peer::PeerGroup>(std::move(*c), chunk_floats));
    }
  }
};

}  // namespace fedrt::testing

#endif  // FEDRT_TESTS_SUPPORT_PEER_RING_H_
