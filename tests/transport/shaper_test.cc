// Link profiles (parsing, the model of one direction) and the user-space
// shaper over real TCP connections on 127.0.0.1.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/transport/event_loop.h"
#include "fedrt/transport/link_profile.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/shaper.h"
#include "fedrt/transport/tcp.h"
#include "net_test_support.h"

namespace fedrt {
namespace transport {
namespace {

TEST_CASE("a link profile parses rate, delay, loss and downlink and formats back to itself") {
  Result<LinkProfile> p = ParseLinkProfile("1mbit,delay=50ms,loss=1%,down=10mbit");
  REQUIRE(p.ok());
  CHECK(p->up_bits_per_second == 1000000);
  CHECK(p->down_bits_per_second == 10000000);
  CHECK(p->delay_ms == 50);
  CHECK(p->loss == doctest::Approx(0.01));
  CHECK(FormatLinkProfile(*p) == "1mbit,delay=50ms,loss=1%,down=10mbit");
  Result<LinkProfile> again = ParseLinkProfile(FormatLinkProfile(*p));
  REQUIRE(again.ok());
  CHECK(again->down_bits_per_second == p->down_bits_per_second);

  Result<LinkProfile> plain = ParseLinkProfile("512kbit");
  REQUIRE(plain.ok());
  CHECK(plain->down_bits_per_second == 512000);  // the downlink defaults to the uplink
  CHECK(plain->delay_ms == 0);
  CHECK(ParseLinkProfile("1.5mbit,delay=2s")->delay_ms == 2000);
  CHECK(ParseLinkProfile("1.5mbit,delay=2s")->up_bits_per_second == 1500000);
  CHECK(FormatLinkProfile(*ParseLinkProfile("1.5mbit")) == "1.5mbit");
}

TEST_CASE("a link profile with a wrong part is refused and the message names it") {
  for (const char* bad : {"", "1mb", "0mbit", "fast", "1mbit,delay=5x", "1mbit,loss=60%", "1mbit,delay=1ms,delay=2ms",
                          "1mbit,jitter=5ms", "1mbit,down=", "-1mbit"}) {
    Result<LinkProfile> p = ParseLinkProfile(bad);
    CHECK_MESSAGE(!p.ok(), bad);
    CHECK(p.status().code() == StatusCode::kInvalidArgument);
  }
  CHECK(ParseLinkProfile("1mbit,loss=60%").status().message().find("loss") != std::string::npos);
}

TEST_CASE("a link direction delivers n bytes in n over the rate, plus the delay, in order") {
  const uint64_t rate = 4000000;  // bits per second
  const std::size_t total = 256u << 10;
  for (uint32_t delay_ms : {0u, 50u}) {
    LinkDirection link(rate, delay_ms, 0, 1);
    uint64_t last = 0;
    for (std::size_t sent = 0; sent < total; sent += 32u << 10) {
      const uint64_t arrival = link.Transmit(1000, 32u << 10);  // all offered at once
      CHECK(arrival >= last);
      last = arrival;
    }
    const double expected_us = static_cast<double>(total) * 8e6 / static_cast<double>(rate) + delay_ms * 1000.0;
    // Only the bucket's first kLinkBurstBytes go at once.
    CHECK(static_cast<double>(last - 1000) == doctest::Approx(expected_us - kLinkBurstBytes * 2.0).epsilon(0.001));
  }
}

TEST_CASE("a link direction refills at its rate while idle and no faster") {
  LinkDirection link(8000000, 0, 0, 1);  // one byte per microsecond
  CHECK(link.Transmit(0, 1000) == 0);          // within the burst
  CHECK(link.Transmit(0, 4000) == 2000);       // 2000 tokens left: 2000 us for the rest
  CHECK(link.Transmit(1000000, 3000) == 1000000);  // a second later the bucket is full again, not fuller
  CHECK(link.Transmit(1000000, 1) == 1000001);
}

TEST_CASE("a lossy link direction costs each lost packet its bytes and a round trip, the same for the same seed") {
  LinkDirection lossless(1000000, 20, 0, 9);
  LinkDirection lossy(1000000, 20, 0.05, 9);
  LinkDirection same(1000000, 20, 0.05, 9);
  const uint64_t clean = lossless.Transmit(0, 1u << 20);
  const uint64_t slow = lossy.Transmit(0, 1u << 20);
  CHECK(same.Transmit(0, 1u << 20) == slow);
  const uint64_t lost = lossy.lost_packets();
  CHECK(lost > 20);   // about 36 of 725 packets at 5%
  CHECK(lost < 60);
  CHECK(slow - clean == lost * (kLinkPacketBytes * 8 + 40000));
}

TEST_CASE("a link direction forwards a paced message as it comes: a hop costs its time once, plus both delays") {
  // 1 byte per microsecond each way, 10 ms of delay each: the sender's
  // uplink, then the receiver's downlink.
  LinkDirection up(8000000, 10, 0, 1);
  LinkDirection down(8000000, 10, 0, 2);
  LinkDirection store(8000000, 10, 0, 2);
  const std::size_t bytes = 100000;
  const uint64_t at_far_end = up.Transmit(0, bytes);
  CHECK(at_far_end == bytes - kLinkBurstBytes + 10000);
  // Cut-through: the message's time once, and the second delay.
  CHECK(down.Forward(at_far_end, bytes) == at_far_end + 10000);
  // Store and forward charges the time again.
  CHECK(store.Transmit(at_far_end, bytes) == at_far_end + bytes - kLinkBurstBytes + 10000);
  // A slower downlink sets the pace of a stream: 10 messages of 10000 bytes
  // offered at 1 byte/us reach the far end of a 4 bit/us downlink 20000 us apart.
  LinkDirection fast(8000000, 0, 0, 1);
  LinkDirection slow(4000000, 0, 0, 2);
  uint64_t last = 0, previous = 0;
  for (int i = 0; i < 10; ++i) {
    previous = last;
    last = slow.Forward(fast.Transmit(0, 10000), 10000);
  }
  CHECK(last - previous == 20000);
  CHECK(last == doctest::Approx(10 * 20000.0).epsilon(0.05));
}

using testing::UpdateFrames;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A TCP connection on 127.0.0.1 whose client end is shaped with `profile`;
// the shaper is destroyed after the loop.
struct ShapedPair {
  explicit ShapedPair(const std::string& profile_text) {
    Result<LinkProfile> profile = ParseLinkProfile(profile_text);
    REQUIRE(profile.ok());
    shaper = std::make_unique<LinkShaper>(*profile, 1);
    loop = std::make_unique<EventLoopThread>();
    Result<std::shared_ptr<TcpListener>> made =
        TcpListener::Listen(loop->loop(), "127.0.0.1", 0, ConnectionOptions(), server);
    REQUIRE(made.ok());
    listener = *made;
    Result<std::shared_ptr<Connection>> inner = TcpConnectAndWait(loop->loop(), "127.0.0.1", listener->port(),
                                                                  ConnectionOptions(), shaper->Wrap(client), 5000);
    REQUIRE(inner.ok());
    link = shaper->Shaped(**inner);
    REQUIRE(link.get() != nullptr);
  }
  ~ShapedPair() {
    listener.reset();
    loop.reset();
  }

  // Seconds until `count` frames of `payload` have crossed: up, until Flush
  // returns once the link has carried every byte; down, until the last one
  // reaches the application. `wire_bytes` gets their size on the wire.
  double Up(const std::vector<uint8_t>& payload, int count, std::size_t* wire_bytes) {
    *wire_bytes = 0;
    const auto start = std::chrono::steady_clock::now();
    for (OutFrame& frame : UpdateFrames(payload, count)) {
      *wire_bytes += frame.wire_size();
      REQUIRE(link->Send(std::move(frame)).ok());
    }
    REQUIRE(link->Flush(10000).ok());
    const double seconds = SecondsSince(start);
    for (int i = 0; i < count; ++i) REQUIRE(server->Pop(5000).ok());
    return seconds;
  }
  double Down(const std::vector<uint8_t>& payload, int count) {
    std::shared_ptr<Connection> server_end = server->connection();
    REQUIRE(server_end.get() != nullptr);
    const auto start = std::chrono::steady_clock::now();
    for (OutFrame& frame : UpdateFrames(payload, count)) REQUIRE(server_end->Send(std::move(frame)).ok());
    for (int i = 0; i < count; ++i) REQUIRE(client->Pop(5000).ok());
    return SecondsSince(start);
  }

  std::unique_ptr<LinkShaper> shaper;
  std::unique_ptr<EventLoopThread> loop;
  std::shared_ptr<FrameQueue> server = std::make_shared<FrameQueue>();
  std::shared_ptr<FrameQueue> client = std::make_shared<FrameQueue>();
  std::shared_ptr<TcpListener> listener;
  std::shared_ptr<Connection> link;
};

// The one timed check issue 17 asks for: bytes over time on a shaped link
// are the rate, within 10%, both ways. 256 KiB at 4 Mbit/s: about 0.52 s.
TEST_CASE("the user-space shaper carries n bytes in n over the rate within 10% up and down over tcp") {
  ShapedPair pair("4mbit");
  CHECK(pair.client->connection().get() == pair.link.get());  // the application only ever sees the shaped connection
  const std::vector<uint8_t> payload(32u << 10, 7);
  std::size_t wire_bytes = 0;
  const double up = pair.Up(payload, 8, &wire_bytes);
  const double expected = static_cast<double>(wire_bytes) * 8 / 4e6;
  MESSAGE("uplink: " << wire_bytes << " bytes in " << up << " s, expected " << expected << " s");
  CHECK(up == doctest::Approx(expected).epsilon(0.10));
  const double down = pair.Down(payload, 8);
  MESSAGE("downlink: " << wire_bytes << " bytes in " << down << " s, expected " << expected << " s");
  CHECK(down == doctest::Approx(expected).epsilon(0.10));

  pair.link->Close();
  CHECK(pair.client->WaitClosed(5000));
  CHECK(pair.client->close_reason().ok());
}

// The delay line: the same transfer takes n over the rate plus the one-way
// delay (within 10%, the delay being most of the margin's worth thrice
// over), and a frame of a few bytes takes at least the delay, both ways.
TEST_CASE("the user-space shaper adds its one-way delay to n over the rate, up and down over tcp") {
  ShapedPair pair("4mbit,delay=200ms");
  const std::vector<uint8_t> tiny(16, 1);  // the delay is all there is to see
  std::size_t tiny_bytes = 0;
  const double tiny_up = pair.Up(tiny, 1, &tiny_bytes);
  const double tiny_down = pair.Down(tiny, 1);
  MESSAGE("a 16-byte frame: " << tiny_up << " s up, " << tiny_down << " s down, delay 0.2 s");
  CHECK(tiny_up >= 0.2);
  CHECK(tiny_down >= 0.2);

  const std::vector<uint8_t> payload(32u << 10, 7);
  std::size_t wire_bytes = 0;
  const double up = pair.Up(payload, 8, &wire_bytes);
  const double expected = static_cast<double>(wire_bytes) * 8 / 4e6 + 0.2;
  MESSAGE("uplink: " << wire_bytes << " bytes in " << up << " s, expected " << expected << " s");
  CHECK(up == doctest::Approx(expected).epsilon(0.10));
  const double down = pair.Down(payload, 8);
  MESSAGE("downlink: " << wire_bytes << " bytes in " << down << " s, expected " << expected << " s");
  CHECK(down == doctest::Approx(expected).epsilon(0.10));
}

TEST_CASE("a shaped connection that is aborted drops what it holds and its flush says so") {
  ShapedPair pair("64kbit");
  const std::vector<uint8_t> payload(32u << 10, 7);
  for (OutFrame& frame : UpdateFrames(payload, 2)) REQUIRE(pair.link->Send(std::move(frame)).ok());  // 8 s at 64 kbit/s
  CHECK(pair.link->Flush(50).code() == StatusCode::kDeadlineExceeded);
  pair.link->Abort(Status(StatusCode::kCancelled, "test"), false);
  CHECK(pair.link->Send(UpdateFrames(payload, 1)[0]).code() == StatusCode::kUnavailable);
  CHECK(pair.client->WaitClosed(5000));
  CHECK(pair.client->close_reason().code() == StatusCode::kCancelled);
}

}  // namespace
}  // namespace transport
}  // namespace fedrt
