// The in-process binding of the collective context (collective_context.h,
// LoopbackPeerNetwork): the links of a formation are loopback connection
// pairs (transport/loopback.h), handed from the dialling context to the
// accepting one through a hub. No join: the hub knows who is who.
#include <algorithm>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fedrt/runtime/collective_context.h"
#include "fedrt/transport/loopback.h"
#include "peer/formation.h"
#include "peer/link_context.h"

namespace fedrt {
namespace peer {
namespace internal {

// Offers of links between the contexts of one network: the dialler makes a
// loopback pair and leaves the other end here; the accepting context takes
// it. Keyed by (accepting rank, dialling rank, generation).
struct LoopbackHub {
  LoopbackHub(transport::EventLoop& l, uint32_t n, const ContextOptions& o) : loop(l), peers(n), options(o) {}

  struct Offer {
    std::shared_ptr<Link> link;  // the dialling side's end
    bool taken = false;          // the accepting side made the pair
  };

  transport::EventLoop& loop;
  const uint32_t peers;
  const ContextOptions options;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, Offer> offers;
  std::vector<bool> connected = std::vector<bool>(peers, false);
};

namespace {

std::vector<std::string> LoopbackIds(uint32_t n) {
  std::vector<std::string> ids;
  for (uint32_t i = 0; i < n; ++i) ids.push_back(internal::PeerId(i));
  return ids;
}

// In-process links: another thread of this process hands every frame over,
// and a waiting member that polled would take CPU from it (ContextOptions::
// busy_poll_us is the TCP binding's).
ContextOptions WithoutBusyPoll(ContextOptions options) {
  options.busy_poll_us = 0;
  return options;
}

class LoopbackContext final : public LinkContext {
 public:
  LoopbackContext(std::shared_ptr<LoopbackHub> hub, uint32_t rank)
      : LinkContext(LoopbackIds(hub->peers), rank, WithoutBusyPoll(hub->options), transport::FrameLimits()),
        hub_(std::move(hub)) {}

  ~LoopbackContext() override {
    DropLinks("peer context destroyed", /*graceful=*/false);
    std::lock_guard<std::mutex> lock(hub_->mutex);
    for (auto it = hub_->offers.begin(); it != hub_->offers.end();) {
      // Offers to this rank will never be taken; those it made die with their pairs.
      it = std::get<0>(it->first) == rank() || std::get<1>(it->first) == rank() ? hub_->offers.erase(it) : ++it;
    }
    hub_->changed.notify_all();
  }

 protected:
  // Offers every dialled link first, then takes the offers made to it, then
  // waits for its own to be taken: no member waits on another that waits too.
  Status Connect(const std::vector<uint32_t>& dial, const std::vector<uint32_t>& accept, uint32_t generation,
                 Deadline deadline, std::vector<std::shared_ptr<Link>>* out,
                 std::vector<std::shared_ptr<Link>>* in) override {
    out->assign(dial.size(), nullptr);
    in->assign(accept.size(), nullptr);
    std::vector<std::shared_ptr<Link>> offered;
    std::unique_lock<std::mutex> lock(hub_->mutex);
    for (uint32_t to : dial) {
      offered.push_back(std::make_shared<Link>(signal()));  // the dialler's end reports to its own signal
      hub_->offers[{to, rank(), generation}] = {offered.back(), false};
    }
    hub_->changed.notify_all();
    Status accepted;
    for (std::size_t i = 0; i < accept.size(); ++i) {
      const auto key = std::make_tuple(rank(), accept[i], generation);
      WaitUntil(clock(), hub_->changed, lock, deadline, [&] { return hub_->offers.count(key) != 0; });
      auto it = hub_->offers.find(key);
      if (it == hub_->offers.end()) {
        accepted = Named(accept[i], Status(StatusCode::kDeadlineExceeded, "did not join within the deadline"));
        break;
      }
      auto ours = std::make_shared<Link>(signal());
      auto pair = transport::MakeLoopbackPair(hub_->loop, it->second.link, ours, limits());
      it->second.link->OnOpen(pair.first);
      ours->OnOpen(pair.second);
      it->second.taken = true;
      (*in)[i] = ours;
      hub_->changed.notify_all();
    }
    Status dialled;
    for (std::size_t i = 0; i < dial.size(); ++i) {
      const auto key = std::make_tuple(dial[i], rank(), generation);
      WaitUntil(clock(), hub_->changed, lock, deadline, [&] {
        auto it = hub_->offers.find(key);
        return it == hub_->offers.end() || it->second.taken;
      });
      auto it = hub_->offers.find(key);
      if (it == hub_->offers.end() || !it->second.taken) {
        if (dialled.ok()) {
          dialled = Named(dial[i], Status(StatusCode::kDeadlineExceeded, "not reachable within the join deadline"));
        }
        if (it != hub_->offers.end()) hub_->offers.erase(it);
        continue;
      }
      (*out)[i] = offered[i];
      hub_->offers.erase(it);
    }
    if (!dialled.ok()) return dialled;
    return accepted;
  }

 private:
  std::shared_ptr<LoopbackHub> hub_;
};

}  // namespace
}  // namespace internal

LoopbackPeerNetwork::LoopbackPeerNetwork(transport::EventLoop& loop, uint32_t peers, const ContextOptions& options)
    : hub_(std::make_shared<internal::LoopbackHub>(loop, peers, options)) {}

LoopbackPeerNetwork::~LoopbackPeerNetwork() = default;

Result<std::unique_ptr<CollectiveContext>> LoopbackPeerNetwork::Connect(uint32_t rank) {
  std::lock_guard<std::mutex> lock(hub_->mutex);
  if (rank >= hub_->peers) {
    return InvalidArgument("rank " + std::to_string(rank) + " is not in a network of " + std::to_string(hub_->peers));
  }
  if (hub_->connected[rank]) return InvalidArgument("rank " + std::to_string(rank) + " is connected already");
  hub_->connected[rank] = true;
  return std::unique_ptr<CollectiveContext>(std::make_unique<internal::LoopbackContext>(hub_, rank));
}

}  // namespace peer
}  // namespace fedrt
