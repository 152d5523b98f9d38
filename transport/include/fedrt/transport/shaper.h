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
// one device's link, not one connection's.
//
// Ownership: the LinkShaper owns a thread that releases held frames; destroy
// it after the EventLoop of its connections (it drops what it still holds).
// The wrapped connections keep the shaper's state alive, never the
// LinkShaper object.
// Thread-safety: as connection.h, except that the handler's OnFrame and
// OnClose run on the shaper's thread (OnOpen and OnSent on the loop's): use
// it with handlers that take frames from any thread, such as FrameQueue.
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
  // Starts the shaper's thread. `seed` draws the losses (the same seed, the
  // same losses for the same traffic).
  LinkShaper(const LinkProfile& profile, uint64_t seed);
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
