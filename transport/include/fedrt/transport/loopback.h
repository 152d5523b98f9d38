// An in-process transport with the Connection interface, for unit tests of
// code that talks over connections (roles, collectives) without sockets.
//
// Each Send checks the frame's prefix and copies its body as a TCP reader
// would, and verifies it (frame.h) before handing it over, so malformed
// frames are caught the same way (the other end closes); frames arrive in
// order. The copy is made during Send (a borrowed payload is read then), into
// storage the sending end keeps for its next frames, and the delivery is
// posted in a kept block: steady traffic allocates nothing.
// Close() on one end delivers the queued frames, then OnClose(OK) there and
// OnClose(kUnavailable) on the other end. Deadlines and heartbeats are not
// simulated (nothing can stall in memory).
//
// Thread-safety: as connection.h.
#ifndef FEDRT_TRANSPORT_LOOPBACK_H_
#define FEDRT_TRANSPORT_LOOPBACK_H_

#include <memory>
#include <utility>

#include "fedrt/transport/connection.h"
#include "fedrt/transport/event_loop.h"

namespace fedrt {
namespace transport {

// Creates two connected ends on `loop`; `a_handler` hears what the second end
// sends, `b_handler` what the first sends. OnOpen of both runs on the loop.
std::pair<std::shared_ptr<Connection>, std::shared_ptr<Connection>> MakeLoopbackPair(
    EventLoop& loop, std::shared_ptr<ConnectionHandler> a_handler,
    std::shared_ptr<ConnectionHandler> b_handler, const FrameLimits& limits = FrameLimits());

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_LOOPBACK_H_
