// Heartbeats and the idle deadline of one connection (liveness.h).
#include "fedrt/transport/liveness.h"

#include <algorithm>

namespace fedrt {
namespace transport {

Liveness::Due Liveness::Poll(uint64_t now_ms) {
  if (receiving_) last_received_ms_ = now_ms;
  if (idle_timeout_ms_ != 0 && now_ms - last_received_ms_ >= idle_timeout_ms_) return Due::kIdle;
  if (heartbeat_interval_ms_ != 0 && now_ms - last_sent_ms_ >= heartbeat_interval_ms_) {
    last_sent_ms_ = now_ms;
    return Due::kHeartbeat;
  }
  return Due::kNothing;
}

uint64_t Liveness::NextDeadlineMs(uint64_t now_ms) const {
  uint64_t wait = kNever;
  // Deadlines already passed count as due now (0).
  const auto until = [now_ms](uint64_t since, uint32_t interval) {
    const uint64_t due = since + interval;
    return due > now_ms ? due - now_ms : 0;
  };
  if (heartbeat_interval_ms_ != 0) wait = std::min(wait, until(last_sent_ms_, heartbeat_interval_ms_));
  if (idle_timeout_ms_ != 0) wait = std::min(wait, until(LastReceived(now_ms), idle_timeout_ms_));
  return wait;
}

HeartbeatMessage Liveness::NextHeartbeat(uint64_t now_ns) {
  HeartbeatMessage beat;
  beat.sequence = ++heartbeat_sequence_;
  beat.sent_ns = now_ns;
  return beat;
}

Status Liveness::IdleTimeout(const std::string& peer) const {
  return Status(StatusCode::kDeadlineExceeded,
                "nothing received for " + std::to_string(idle_timeout_ms_) + " ms (" + peer + ")");
}

}  // namespace transport
}  // namespace fedrt
