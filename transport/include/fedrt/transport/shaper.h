// The user-space link shaper: a connection binding that gives a connection
// the rate, delay and loss of a LinkProfile (link_profile.h), for machines
// where the kernel cannot shape (no root, no qdisc) and for tests.
//
// It wraps the handler given to TcpConnect, TcpListener or MakeLoopbackPair:
// every connection opened with the wrapped handler is wrapped in turn, and
// the application's handler sees the shaped connection only. A frame the
// application Sends is handed to the real connection when the uplink's
// LinkDirection says its last byte has arrived at the far end; a frame the
// real connection receives reaches the application's handler when the
// downlink's model says it has arrived. Order is kept both ways; a close
// reaches the handler after the frames received before it. Heartbeats of the
// real connection are not shaped (they are a few bytes). Flush waits for the
// frames held by the shaper, then flushes the real connection, so "sent"
// means what it means on a real link of that rate.
//
// All connections of one LinkShaper share its two directions: the shaper is
// one device's (or one peer's) link, not one connection's.
//
// A frame Sent moves into the real connection when it is released (the
// shaper keeps no copy), so a FrameSlot's frame stops being busy once the
// real connection has written it, which OnSent reports as usual. Payload
// placement and consumption (connection.h) are not offered through the
// shaper: its frames reach the handler whole.
//
// Ownership: the LinkShaper owns a thread that releases held frames; destroy
// it after the EventLoop of its connections (it drops what it still holds).
// The wrapped connections keep the shaper's state alive, never the
// LinkShaper object.
// Thread-safety: as connection.h, except that the handler's OnFrame and
// OnClose run on the shaper's thread (OnOpen and OnSent on the loop's): use
// it with handlers that take frames from any thread under their own lock,
// such as FrameQueue and the peer topology's links.
#ifndef FEDRT_TRANSPORT_SHAPER_H_
#define FEDRT_TRANSPORT_SHAPER_H_

#include <cstdint>
#include <memory>

#include "fedrt/transport/connection.h"
#include "fedrt/transport/link_profile.h"

namespace fedrt {
namespace transport {

class LinkShaper {
 public:
  // How frames reach this shaper's connections. kUnshaped: the far end
  // sends as fast as it can (the aggregator of a star, for a device's
  // shaper), so a received frame is held for its whole time at the
  // downlink's rate from when it arrived (LinkDirection::Transmit).
  // kShaped: the far end shapes its own uplink (every peer of a shaped peer
  // topology), so a frame arrives paced and the downlink passes it on as it
  // comes (LinkDirection::Forward): a hop costs a frame's time once, at the
  // slower of the two links, and both ends' delays, as the kernel shaper's
  // veth pairs give it.
  enum class FarEnd { kUnshaped, kShaped };

  // Starts the shaper's thread. `seed` draws the losses (the same seed, the
  // same losses for the same traffic).
  LinkShaper(const LinkProfile& profile, uint64_t seed, FarEnd far_end = FarEnd::kUnshaped);
  ~LinkShaper();
  LinkShaper(const LinkShaper&) = delete;
  LinkShaper& operator=(const LinkShaper&) = delete;

  // A handler to open connections with in place of `handler`.
  std::shared_ptr<ConnectionHandler> Wrap(std::shared_ptr<ConnectionHandler> handler);
  // The shaped connection wrapping `inner` (one opened with a handler from
  // Wrap), or nullptr when there is none (not wrapped, or closed).
  std::shared_ptr<Connection> Shaped(const Connection& inner) const;

  struct Core;  // the state wrapped connections share; defined in shaper.cc

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_SHAPER_H_
