// Liveness (transport/liveness.h), the heartbeat and idle logic every
// connection binding shares, driven by a manual clock: no sleeping, no I/O.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "fedrt/platform/clock.h"
#include "fedrt/transport/liveness.h"

namespace fedrt {
namespace transport {
namespace {

using Due = Liveness::Due;

TEST_CASE("liveness asks for a heartbeat after an interval without sending and counts it as sent") {
  ManualClock clock(5000u * 1000000u);
  Liveness l(1000, 0);
  l.Start(clock.NowMs());
  clock.AdvanceMs(999);
  CHECK(l.Poll(clock.NowMs()) == Due::kNothing);
  CHECK(l.NextDeadlineMs(clock.NowMs()) == 1);
  clock.AdvanceMs(1);
  CHECK(l.Poll(clock.NowMs()) == Due::kHeartbeat);
  CHECK(l.Poll(clock.NowMs()) == Due::kNothing);  // the interval starts again
  CHECK(l.NextDeadlineMs(clock.NowMs()) == 1000);
  clock.AdvanceMs(500);
  l.OnSent(clock.NowMs());  // a frame went out: no heartbeat needed until 1000 ms after it
  clock.AdvanceMs(999);
  CHECK(l.Poll(clock.NowMs()) == Due::kNothing);
  clock.AdvanceMs(1);
  CHECK(l.Poll(clock.NowMs()) == Due::kHeartbeat);
  const HeartbeatMessage first = l.NextHeartbeat(clock.NowNanos());
  const HeartbeatMessage second = l.NextHeartbeat(clock.NowNanos() + 7);
  CHECK(first.sequence == 1);
  CHECK(second.sequence == 2);
  CHECK(second.sent_ns == clock.NowNanos() + 7);
}

TEST_CASE("liveness reports the idle deadline once nothing arrived for the timeout, before any heartbeat") {
  ManualClock clock;
  Liveness l(100, 3000);
  l.Start(clock.NowMs());
  clock.AdvanceMs(2000);
  l.OnReceived(clock.NowMs());
  l.OnSent(clock.NowMs());
  clock.AdvanceMs(2999);
  CHECK(l.Poll(clock.NowMs()) == Due::kHeartbeat);
  CHECK(l.NextDeadlineMs(clock.NowMs()) == 1);  // the idle deadline is nearer than the next heartbeat
  clock.AdvanceMs(1);
  CHECK(l.Poll(clock.NowMs()) == Due::kIdle);
  CHECK(l.NextDeadlineMs(clock.NowMs()) == 0);
  const Status why = l.IdleTimeout("memory:a");
  CHECK(why.code() == StatusCode::kDeadlineExceeded);
  CHECK(why.message() == "nothing received for 3000 ms (memory:a)");
}

TEST_CASE("liveness holds the idle deadline while a frame body is being received") {
  ManualClock clock;
  Liveness l(0, 3000);
  l.Start(clock.NowMs());
  l.set_receiving(true);
  clock.AdvanceMs(10000);  // a long body, bounded by the binding's own I/O deadline
  CHECK(l.Poll(clock.NowMs()) == Due::kNothing);
  CHECK(l.NextDeadlineMs(clock.NowMs()) == 3000);
  l.set_receiving(false);
  clock.AdvanceMs(2999);
  CHECK(l.Poll(clock.NowMs()) == Due::kNothing);
  clock.AdvanceMs(1);
  CHECK(l.Poll(clock.NowMs()) == Due::kIdle);
}

TEST_CASE("liveness with both intervals off never has anything due") {
  ManualClock clock;
  Liveness l(0, 0);
  l.Start(clock.NowMs());
  clock.AdvanceMs(1u << 30);
  CHECK(l.Poll(clock.NowMs()) == Due::kNothing);
  CHECK(l.NextDeadlineMs(clock.NowMs()) == Liveness::kNever);
}

}  // namespace
}  // namespace transport
}  // namespace fedrt
