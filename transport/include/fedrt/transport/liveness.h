// Heartbeats and the idle deadline of one connection, sans-IO: the one
// implementation behind every binding (StreamConnection::Poll in stream.h,
// the TCP connection's liveness timer), and what a binding of one's own
// (an RTOS socket) can use too. The binding reports what moved and when, asks
// Poll(now) what is due, and sleeps NextDeadlineMs(now) before asking again;
// times are milliseconds of the binding's clock.
//
//   heartbeat: nothing was sent for heartbeat_interval_ms: send one
//              (HeartbeatMessage from NextHeartbeat), so the peer's idle
//              deadline does not pass while this side has nothing to say;
//   idle:      nothing arrived for idle_timeout_ms: the peer is gone or
//              stuck, close the connection with IdleTimeout().
// A zero interval turns that deadline off (ConnectionOptions' meaning).
//
// Thread-safety: none; one per connection, used on the thread that drives it.
#ifndef FEDRT_TRANSPORT_LIVENESS_H_
#define FEDRT_TRANSPORT_LIVENESS_H_

#include <cstdint>
#include <string>

#include "fedrt/platform/status.h"
#include "fedrt/transport/messages.h"

namespace fedrt {
namespace transport {

class Liveness {
 public:
  enum class Due {
    kNothing,
    kHeartbeat,  // send NextHeartbeat() (it counts as sent from now on)
    kIdle,       // close with IdleTimeout()
  };
  static constexpr uint64_t kNever = UINT64_MAX;

  Liveness(uint32_t heartbeat_interval_ms, uint32_t idle_timeout_ms)
      : heartbeat_interval_ms_(heartbeat_interval_ms), idle_timeout_ms_(idle_timeout_ms) {}

  // The connection opened: both intervals start at `now_ms`.
  void Start(uint64_t now_ms) { last_sent_ms_ = last_received_ms_ = now_ms; }
  // Bytes arrived from the peer.
  void OnReceived(uint64_t now_ms) { last_received_ms_ = now_ms; }
  // A frame went out (an asynchronous writer: its write completed).
  void OnSent(uint64_t now_ms) { last_sent_ms_ = now_ms; }
  // While a frame's body is being received in one operation whose own I/O
  // deadline bounds it (TCP), bytes are flowing although none is reported:
  // the idle interval restarts at every Poll until it ends.
  void set_receiving(bool receiving) { receiving_ = receiving; }

  // What is due at `now_ms`: the idle deadline first (a dead peer needs no
  // heartbeat). kHeartbeat moves the heartbeat interval on to `now_ms`
  // whether or not the binding sends it (one whose write is under way need
  // not: the peer hears bytes anyway).
  Due Poll(uint64_t now_ms);
  // Milliseconds from `now_ms` to the next deadline (0: one is due; kNever:
  // both are off).
  uint64_t NextDeadlineMs(uint64_t now_ms) const;

  // The next heartbeat (numbered 1, 2, ...), stamped `now_ns`.
  HeartbeatMessage NextHeartbeat(uint64_t now_ns);
  // Why an idle connection closes: kDeadlineExceeded naming the peer.
  Status IdleTimeout(const std::string& peer) const;

 private:
  uint64_t LastReceived(uint64_t now_ms) const { return receiving_ ? now_ms : last_received_ms_; }

  const uint32_t heartbeat_interval_ms_;
  const uint32_t idle_timeout_ms_;
  uint64_t last_sent_ms_ = 0;
  uint64_t last_received_ms_ = 0;
  bool receiving_ = false;
  uint64_t heartbeat_sequence_ = 0;
};

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_LIVENESS_H_
