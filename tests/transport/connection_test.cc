#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

#include "fedrt/transport/chunking.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/loopback.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/tcp.h"
#include "net_test_support.h"

namespace fedrt {
namespace transport {
namespace {

using testing::AckFrame;
using testing::EchoServer;
using testing::Eventually;
using testing::RawClient;
using testing::UpdateFrames;
using testing::Recorder;
using testing::WireBytes;

constexpr uint32_t kWait = 5000;

ConnectionOptions FastOptions() {
  ConnectionOptions options;
  options.io_timeout_ms = 2000;
  options.idle_timeout_ms = 5000;
  options.heartbeat_interval_ms = 0;
  return options;
}

TEST_CASE("tcp connections carry frames in order in both directions") {
  EventLoopThread loop;
  auto server = EchoServer();
  Result<std::shared_ptr<TcpListener>> listener =
      TcpListener::Listen(loop.loop(), "127.0.0.1", 0, FastOptions(), server);
  REQUIRE(listener.ok());
  CHECK((*listener)->port() != 0);
  auto client = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> connection =
      TcpConnectAndWait(loop.loop(), "127.0.0.1", (*listener)->port(), FastOptions(), client, kWait);
  REQUIRE(connection.ok());
  for (uint64_t i = 0; i < 50; ++i) REQUIRE((*connection)->Send(AckFrame(i)).ok());
  for (uint64_t i = 0; i < 50; ++i) {
    Result<Frame> frame = client->Pop(kWait);
    REQUIRE(frame.ok());
    Result<AckMessage> ack = DecodeAck(*frame);
    REQUIRE(ack.ok());
    CHECK(ack->round_id == i);
  }
  CHECK((*connection)->stats().frames_sent == 50);
  CHECK((*connection)->stats().frames_received == 50);
  (*connection)->Close();
  CHECK(client->WaitClosed(kWait));
  CHECK(client->close_reason().ok());
  CHECK(Eventually([&] { return server->closes_count() == 1; }));
  CHECK(server->closes()[0].code() == StatusCode::kUnavailable);
  (*listener)->Close();
}

TEST_CASE("a payload larger than the frame limit crosses tcp in chunks and is reassembled") {
  EventLoopThread loop;
  ConnectionOptions options = FastOptions();
  options.limits.max_frame_bytes = 128u << 10;
  std::vector<uint8_t> payload(1'500'007);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 131u);
  auto server = std::make_shared<Recorder>();
  auto reassembler = std::make_shared<Reassembler>(options.limits.max_payload_bytes);
  auto failures = std::make_shared<int>(0);
  server->on_frame = [&, reassembler, failures](Connection& connection, const Frame& frame) {
    Result<UpdateMessage> update = DecodeUpdate(frame, options.limits);
    if (!update.ok() || !reassembler->Add(update->payload).ok()) {
      ++*failures;
      return;
    }
    if (reassembler->complete()) (void)connection.Send(AckFrame(update->round_id));
  };
  Result<std::shared_ptr<TcpListener>> listener = TcpListener::Listen(loop.loop(), "127.0.0.1", 0, options, server);
  REQUIRE(listener.ok());
  auto client = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> connection =
      TcpConnectAndWait(loop.loop(), "127.0.0.1", (*listener)->port(), options, client, kWait);
  REQUIRE(connection.ok());
  Result<ChunkPlan> plan = ChunkPlan::Make(payload.size(), options.limits.MaxChunkBytes());
  REQUIRE(plan.ok());
  CHECK(plan->count() > 10);
  REQUIRE(testing::SendChunkedUpdate(**connection, 8, payload, options.limits).ok());
  Result<Frame> ack = client->Pop(kWait);
  REQUIRE(ack.ok());
  CHECK(DecodeAck(*ack)->round_id == 8);
  CHECK(*failures == 0);
  REQUIRE(reassembler->complete());
  CHECK(std::memcmp(reassembler->data(), payload.data(), payload.size()) == 0);
  (*connection)->Close();
  CHECK(client->WaitClosed(kWait));
}

TEST_CASE("a client that connects and sends nothing is closed at the idle deadline") {
  EventLoopThread loop;
  ConnectionOptions server_options = FastOptions();
  server_options.idle_timeout_ms = 150;
  auto server = std::make_shared<Recorder>();
  Result<std::shared_ptr<TcpListener>> listener =
      TcpListener::Listen(loop.loop(), "127.0.0.1", 0, server_options, server);
  REQUIRE(listener.ok());
  RawClient silent((*listener)->port());
  REQUIRE(silent.connected());
  REQUIRE(Eventually([&] { return server->closes_count() == 1; }));
  CHECK(server->closes()[0].code() == StatusCode::kDeadlineExceeded);
}

TEST_CASE("heartbeats keep a quiet connection alive past the idle deadline") {
  EventLoopThread loop;
  ConnectionOptions server_options = FastOptions();
  server_options.idle_timeout_ms = 300;
  ConnectionOptions client_options = FastOptions();
  client_options.heartbeat_interval_ms = 50;
  auto server = std::make_shared<Recorder>();
  Result<std::shared_ptr<TcpListener>> listener =
      TcpListener::Listen(loop.loop(), "127.0.0.1", 0, server_options, server);
  REQUIRE(listener.ok());
  auto client = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> connection =
      TcpConnectAndWait(loop.loop(), "127.0.0.1", (*listener)->port(), client_options, client, kWait);
  REQUIRE(connection.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  CHECK(server->closes_count() == 0);
  CHECK_FALSE((*connection)->closed());
  CHECK((*connection)->stats().heartbeats_sent >= 3);
  CHECK(server->frames() == 0);  // heartbeats never reach the handler
  (*connection)->Close();
  CHECK(client->WaitClosed(kWait));
}

// Sends `bytes` from a raw client and returns how the server closed it, while
// a well-behaved client on the same server keeps working.
Status ServerVerdictOn(const std::vector<uint8_t>& bytes, bool close_after, uint32_t io_timeout_ms = 2000) {
  EventLoopThread loop;
  ConnectionOptions options = FastOptions();
  options.io_timeout_ms = io_timeout_ms;
  auto server = EchoServer();
  Result<std::shared_ptr<TcpListener>> listener = TcpListener::Listen(loop.loop(), "127.0.0.1", 0, options, server);
  REQUIRE(listener.ok());
  auto good = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> good_connection =
      TcpConnectAndWait(loop.loop(), "127.0.0.1", (*listener)->port(), options, good, kWait);
  REQUIRE(good_connection.ok());
  RawClient bad((*listener)->port());
  REQUIRE(bad.connected());
  REQUIRE(bad.Write(bytes));
  if (close_after) bad.Close();
  REQUIRE(Eventually([&] { return server->closes_count() == 1; }));
  // The well-behaved device is unaffected.
  REQUIRE((*good_connection)->Send(AckFrame(99)).ok());
  Result<Frame> echo = good->Pop(kWait);
  REQUIRE(echo.ok());
  CHECK(DecodeAck(*echo)->round_id == 99);
  Status verdict = server->closes()[0];
  (*good_connection)->Close();
  CHECK(good->WaitClosed(kWait));
  return verdict;
}

TEST_CASE("a tcp connection that announces an oversized frame is closed without allocating it") {
  const std::vector<uint8_t> bytes = {0xFF, 0xFF, 0xFF, 0x7F, 1, 2, 3};
  CHECK(ServerVerdictOn(bytes, false).code() == StatusCode::kResourceExhausted);
}

TEST_CASE("a tcp connection with an initial frame limit refuses a larger prefix until its owner lifts it") {
  EventLoopThread loop;
  ConnectionOptions options = FastOptions();
  options.initial_max_frame_bytes = 512;
  // The owner lifts the limit when a connection's first frame arrives and
  // echoes every frame.
  auto server = std::make_shared<Recorder>();
  server->on_frame = [](Connection& connection, const Frame& frame) {
    connection.LiftInitialFrameLimit();
    (void)connection.Send(AckFrame(frame.size()));
  };
  Result<std::shared_ptr<TcpListener>> listener = TcpListener::Listen(loop.loop(), "127.0.0.1", 0, options, server);
  REQUIRE(listener.ok());
  LeaveMessage leave;
  const std::string reason(1000, 'r');
  leave.reason = reason;
  const std::vector<uint8_t> large = WireBytes(Encode(leave, FrameLimits()).value());
  REQUIRE(large.size() - kFramePrefixBytes > 512);

  // A prefix above the initial limit closes the connection: nothing lifted it.
  RawClient stranger((*listener)->port());
  REQUIRE(stranger.connected());
  REQUIRE(stranger.Write(std::vector<uint8_t>(large.begin(), large.begin() + kFramePrefixBytes)));
  REQUIRE(Eventually([&] { return server->closes_count() == 1; }));
  CHECK(server->closes()[0].code() == StatusCode::kResourceExhausted);
  CHECK(server->closes()[0].message().find("exceeds the limit of 512") != std::string::npos);

  // After a small first frame the owner lifted it: the same frame is taken.
  auto client = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> connection =
      TcpConnectAndWait(loop.loop(), "127.0.0.1", (*listener)->port(), FastOptions(), client, kWait);
  REQUIRE(connection.ok());
  REQUIRE((*connection)->Send(AckFrame(1)).ok());
  REQUIRE(client->Pop(kWait).ok());
  REQUIRE((*connection)->Send(Encode(leave, FrameLimits()).value()).ok());
  Result<Frame> echo = client->Pop(kWait);
  REQUIRE(echo.ok());
  CHECK(DecodeAck(*echo)->round_id == large.size() - kFramePrefixBytes);
  CHECK(server->closes_count() == 1);
  (*connection)->Close();
  CHECK(client->WaitClosed(kWait));

  options.initial_max_frame_bytes = options.limits.max_frame_bytes + 1;
  CHECK(TcpListener::Listen(loop.loop(), "127.0.0.1", 0, options, server).status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("a tcp connection closed in the middle of a frame is reported as corrupt") {
  std::vector<uint8_t> bytes = WireBytes(AckFrame(1));
  bytes.resize(bytes.size() - 3);
  CHECK(ServerVerdictOn(bytes, true).code() == StatusCode::kCorrupt);
}

TEST_CASE("a tcp frame that fails verification closes only that connection") {
  std::vector<uint8_t> bytes = WireBytes(AckFrame(1));
  for (std::size_t i = kFramePrefixBytes + 8; i < bytes.size(); ++i) bytes[i] = 0xEE;
  CHECK(ServerVerdictOn(bytes, false).code() == StatusCode::kCorrupt);
}

TEST_CASE("a tcp frame whose body stalls after the prefix hits the io deadline") {
  const std::vector<uint8_t> bytes = {100, 0, 0, 0, 1, 2};
  CHECK(ServerVerdictOn(bytes, false, 150).code() == StatusCode::kDeadlineExceeded);
}

TEST_CASE("a graceful close delivers every queued frame first") {
  EventLoopThread loop;
  auto server = std::make_shared<Recorder>();
  Result<std::shared_ptr<TcpListener>> listener =
      TcpListener::Listen(loop.loop(), "127.0.0.1", 0, FastOptions(), server);
  REQUIRE(listener.ok());
  auto client = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> connection =
      TcpConnectAndWait(loop.loop(), "127.0.0.1", (*listener)->port(), FastOptions(), client, kWait);
  REQUIRE(connection.ok());
  std::vector<uint8_t> payload(100000, 3);
  for (int i = 0; i < 20; ++i) {
    UpdateMessage m;
    m.codec_spec = "fp32";
    m.payload = {0, 1, payload.size(), 0, payload.data(), payload.size()};
    Result<OutFrame> frame = Encode(m, FrameLimits());
    REQUIRE(frame.ok());
    REQUIRE((*connection)->Send(*frame).ok());
  }
  (*connection)->Close();
  CHECK((*connection)->Send(AckFrame(1)).code() == StatusCode::kUnavailable);
  REQUIRE(Eventually([&] { return server->closes_count() == 1; }));
  CHECK(server->frames() == 20);
  CHECK(client->WaitClosed(kWait));
  CHECK(client->close_reason().ok());
}

TEST_CASE("connecting to a port nobody listens on fails with unavailable") {
  EventLoopThread loop;
  uint16_t port = 0;
  {
    Result<std::shared_ptr<TcpListener>> listener =
        TcpListener::Listen(loop.loop(), "127.0.0.1", 0, FastOptions(), std::make_shared<Recorder>());
    REQUIRE(listener.ok());
    port = (*listener)->port();
    (*listener)->Close();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Result<std::shared_ptr<Connection>> connection =
      TcpConnectAndWait(loop.loop(), "127.0.0.1", port, FastOptions(), std::make_shared<FrameQueue>(), kWait);
  REQUIRE_FALSE(connection.ok());
  CHECK(connection.status().code() == StatusCode::kUnavailable);
  CHECK_FALSE(TcpListener::Listen(loop.loop(), "not-an-address", 0, FastOptions(), std::make_shared<Recorder>()).ok());
}

TEST_CASE("one loop serves many devices at once") {
  EventLoopThread loop;
  auto server = EchoServer();
  Result<std::shared_ptr<TcpListener>> listener =
      TcpListener::Listen(loop.loop(), "127.0.0.1", 0, FastOptions(), server);
  REQUIRE(listener.ok());
  constexpr int kDevices = 40;
  std::vector<std::shared_ptr<FrameQueue>> queues;
  std::vector<std::shared_ptr<Connection>> connections;
  for (int i = 0; i < kDevices; ++i) {
    queues.push_back(std::make_shared<FrameQueue>());
    Result<std::shared_ptr<Connection>> c =
        TcpConnectAndWait(loop.loop(), "127.0.0.1", (*listener)->port(), FastOptions(), queues.back(), kWait);
    REQUIRE(c.ok());
    connections.push_back(*c);
  }
  for (int i = 0; i < kDevices; ++i) REQUIRE(connections[i]->Send(AckFrame(static_cast<uint64_t>(i))).ok());
  for (int i = 0; i < kDevices; ++i) {
    Result<Frame> echo = queues[i]->Pop(kWait);
    REQUIRE(echo.ok());
    CHECK(DecodeAck(*echo)->round_id == static_cast<uint64_t>(i));
  }
  CHECK((*listener)->stats().accepted == kDevices);
  for (auto& c : connections) c->Close();
  for (auto& q : queues) CHECK(q->WaitClosed(kWait));
}

TEST_CASE("loopback connections deliver frames in order and report closes on both ends") {
  EventLoopThread loop;
  auto a = std::make_shared<FrameQueue>();
  auto b = std::make_shared<FrameQueue>();
  auto ends = MakeLoopbackPair(loop.loop(), a, b);
  for (uint64_t i = 0; i < 10; ++i) REQUIRE(ends.first->Send(AckFrame(i)).ok());
  REQUIRE(ends.second->Send(AckFrame(77)).ok());
  for (uint64_t i = 0; i < 10; ++i) {
    Result<Frame> frame = b->Pop(kWait);
    REQUIRE(frame.ok());
    CHECK(DecodeAck(*frame)->round_id == i);
  }
  Result<Frame> back = a->Pop(kWait);
  REQUIRE(back.ok());
  CHECK(DecodeAck(*back)->round_id == 77);
  ends.first->Close();
  CHECK(a->WaitClosed(kWait));
  CHECK(b->WaitClosed(kWait));
  CHECK(a->close_reason().ok());
  CHECK(b->close_reason().code() == StatusCode::kUnavailable);
  CHECK(ends.first->Send(AckFrame(1)).code() == StatusCode::kUnavailable);
}

TEST_CASE("a loopback end that receives a malformed frame closes like a socket would") {
  EventLoopThread loop;
  auto a = std::make_shared<FrameQueue>();
  auto b = std::make_shared<FrameQueue>();
  auto ends = MakeLoopbackPair(loop.loop(), a, b);
  auto garbage = std::make_shared<std::vector<uint8_t>>(64, 0xAB);
  REQUIRE(ends.first->Send(OutFrame(garbage, garbage->data(), 64, MessageKind::kAck)).ok());
  CHECK(b->WaitClosed(kWait));
  CHECK(b->close_reason().code() == StatusCode::kCorrupt);
  CHECK(a->WaitClosed(kWait));
}

TEST_CASE("destroying the loop closes what is still open without leaking") {
  auto server = std::make_shared<Recorder>();
  auto client = std::make_shared<FrameQueue>();
  {
    EventLoopThread loop;
    Result<std::shared_ptr<TcpListener>> listener =
        TcpListener::Listen(loop.loop(), "127.0.0.1", 0, FastOptions(), server);
    REQUIRE(listener.ok());
    Result<std::shared_ptr<Connection>> connection =
        TcpConnectAndWait(loop.loop(), "127.0.0.1", (*listener)->port(), FastOptions(), client, kWait);
    REQUIRE(connection.ok());
    REQUIRE(Eventually([&] { return server->opened() == 1; }));
  }
  CHECK(client->close_reason().code() == StatusCode::kCancelled);
  CHECK(server->closes_count() == 1);
}

// Counts write completions, as a collective waiting for its sends does.
class SentCounter : public FrameQueue {
 public:
  void OnSent(Connection&) override { sent_.fetch_add(1); }
  int sent() const { return sent_.load(); }

 private:
  std::atomic<int> sent_{0};
};

TEST_CASE("ring chunks that borrow their payload cross tcp intact and release their slots once sent") {
  EventLoopThread loop;
  auto server = std::make_shared<Recorder>();
  std::vector<std::vector<uint8_t>> received;
  std::mutex received_mutex;
  server->on_frame = [&](Connection&, const Frame& frame) {
    Result<RingChunkMessage> m = DecodeRingChunk(frame, FrameLimits());
    if (!m.ok()) return;
    std::lock_guard<std::mutex> lock(received_mutex);
    received.emplace_back(m->payload.data, m->payload.data + m->payload.size);
  };
  Result<std::shared_ptr<TcpListener>> listener =
      TcpListener::Listen(loop.loop(), "127.0.0.1", 0, FastOptions(), server);
  REQUIRE(listener.ok());
  auto client = std::make_shared<SentCounter>();
  Result<std::shared_ptr<Connection>> connection =
      TcpConnectAndWait(loop.loop(), "127.0.0.1", (*listener)->port(), FastOptions(), client, kWait);
  REQUIRE(connection.ok());
  // Large enough that the socket takes several writes.
  std::vector<uint8_t> payload(3u << 20);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 13 + i / 4096);
  const std::size_t chunk = 1u << 20;
  std::vector<std::unique_ptr<FrameSlot>> slots;
  for (uint32_t k = 0; k < 3; ++k) {
    RingChunkMessage m;
    m.collective_id = 1;
    m.payload = {k, 3, payload.size(), k * chunk, payload.data() + k * chunk, chunk};
    slots.push_back(std::make_unique<FrameSlot>());
    Result<OutFrame> out = Encode(m, FrameLimits(), *slots.back(), PayloadMode::kBorrow);
    REQUIRE(out.ok());
    REQUIRE((*connection)->Send(std::move(*out)).ok());
  }
  CHECK(Eventually([&] {
    for (const auto& slot : slots) {
      if (slot->busy()) return false;
    }
    return true;
  }));
  CHECK(client->sent() >= 1);
  CHECK(Eventually([&] {
    std::lock_guard<std::mutex> lock(received_mutex);
    return received.size() == 3;
  }));
  {
    std::lock_guard<std::mutex> lock(received_mutex);
    for (uint32_t k = 0; k < received.size(); ++k) {
      CHECK(std::equal(received[k].begin(), received[k].end(), payload.begin() + k * chunk));
    }
  }
  (*connection)->Close();
  CHECK(client->WaitClosed(kWait));
  (*listener)->Close();
}

TEST_CASE("a closed connection releases the borrowed frames it had queued") {
  // A listening socket nobody accepts from or reads: the kernel completes the
  // connection, the socket buffers fill up and the rest of the frames stay
  // queued in the connection.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  EventLoopThread loop;
  auto client = std::make_shared<FrameQueue>();
  ConnectionOptions options = FastOptions();
  Result<std::shared_ptr<Connection>> connection =
      TcpConnectAndWait(loop.loop(), "127.0.0.1", ntohs(address.sin_port), options, client, kWait);
  REQUIRE(connection.ok());
  std::vector<uint8_t> payload(1u << 20, 5);
  std::vector<std::unique_ptr<FrameSlot>> slots;
  for (uint32_t k = 0; k < 40; ++k) {  // 40 MiB: more than loopback socket buffers hold
    RingChunkMessage m;
    m.payload = {0, 1, payload.size(), 0, payload.data(), payload.size()};
    slots.push_back(std::make_unique<FrameSlot>());
    Result<OutFrame> out = Encode(m, FrameLimits(), *slots.back(), PayloadMode::kBorrow);
    REQUIRE(out.ok());
    if (!(*connection)->Send(std::move(*out)).ok()) break;
  }
  bool some_queued = false;
  for (const auto& slot : slots) some_queued = some_queued || slot->busy();
  CHECK(some_queued);
  (*connection)->Abort(Status(StatusCode::kCancelled, "test"));
  CHECK(client->WaitClosed(kWait));
  CHECK(Eventually([&] {
    for (const auto& slot : slots) {
      if (slot->busy()) return false;
    }
    return true;
  }));
  ::close(fd);
}

// A listener on 127.0.0.1 whose connections go to `server`, and a client
// connected to it.
struct Connected {
  std::shared_ptr<TcpListener> listener;
  std::shared_ptr<FrameQueue> client = std::make_shared<FrameQueue>();
  std::shared_ptr<Connection> connection;
};

Connected ConnectTo(EventLoopThread& loop, std::shared_ptr<ConnectionHandler> server) {
  Connected c;
  Result<std::shared_ptr<TcpListener>> listener =
      TcpListener::Listen(loop.loop(), "127.0.0.1", 0, FastOptions(), std::move(server));
  REQUIRE(listener.ok());
  c.listener = *listener;
  Result<std::shared_ptr<Connection>> connection =
      TcpConnectAndWait(loop.loop(), "127.0.0.1", c.listener->port(), FastOptions(), c.client, kWait);
  REQUIRE(connection.ok());
  c.connection = *connection;
  return c;
}

// Places the payload of every raw ring chunk of collective 7 into `target`
// (at the chunk's offset), and records what it was offered and received.
class PlacingServer : public Recorder {
 public:
  explicit PlacingServer(std::size_t size) : target(size, 0) {}
  bool WantsPlacement(Connection&) override { return true; }
  uint8_t* PlacePayload(Connection&, const PayloadHead& head) override {
    std::lock_guard<std::mutex> lock(mutex);
    ++offered;
    if (head.kind != MessageKind::kRingChunk || head.tag != 7 || head.offset > target.size() ||
        head.size > target.size() - head.offset) {
      return nullptr;
    }
    return target.data() + head.offset;
  }
  void OnFrame(Connection& connection, Frame frame) override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      Result<RingChunkMessage> m = DecodeRingChunk(frame, FrameLimits());
      decoded_ok.push_back(m.ok());
      placed.push_back(frame.placed_payload() != nullptr);
      if (m.ok()) payloads.emplace_back(m->payload.data, m->payload.data + m->payload.size);
    }
    Recorder::OnFrame(connection, std::move(frame));
  }

  std::mutex mutex;
  std::vector<uint8_t> target;
  int offered = 0;
  std::vector<bool> decoded_ok, placed;
  std::vector<std::vector<uint8_t>> payloads;
};

TEST_CASE("a handler receives large raw ring chunk payloads straight into its memory") {
  EventLoopThread loop;
  const std::size_t chunk = 200000 + 3;  // the payload ends off the 16-byte grid: padding follows it
  auto server = std::make_shared<PlacingServer>(2 * chunk);
  Connected c = ConnectTo(loop, server);
  std::vector<uint8_t> payload(2 * chunk);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + i / 1000);
  // Placed: two chunks of collective 7. Not placed: collective 8 (the
  // handler declines), a codec chunk (never offered) and a small chunk.
  auto send = [&](uint64_t collective, uint32_t k, std::size_t size, std::string_view spec) {
    RingChunkMessage m;
    m.collective_id = collective;
    m.codec_spec = spec;
    m.payload = {k, 2, payload.size(), k * chunk, payload.data() + k * chunk, size};
    Result<OutFrame> out = Encode(m, FrameLimits());
    REQUIRE(out.ok());
    REQUIRE(c.connection->Send(std::move(*out)).ok());
  };
  send(7, 0, chunk, "");
  send(8, 1, chunk, "");
  send(7, 1, chunk, "fp16");
  send(7, 1, 1000, "");
  send(7, 1, chunk, "");
  CHECK(Eventually([&] { return server->frames() == 5; }));
  {
    std::lock_guard<std::mutex> lock(server->mutex);
    CHECK(server->offered == 3);  // the raw chunks of at least kMinPlacedFrameBytes
    CHECK(server->placed == std::vector<bool>{true, false, false, false, true});
    CHECK(server->decoded_ok == std::vector<bool>{true, true, true, true, true});
    REQUIRE(server->payloads.size() == 5);
    for (std::size_t i = 0; i < 5; ++i) {
      const uint32_t k = i == 0 ? 0 : 1;
      const std::size_t size = i == 3 ? 1000 : chunk;
      CHECK(server->payloads[i] ==
            std::vector<uint8_t>(payload.begin() + k * chunk, payload.begin() + k * chunk + size));
    }
    CHECK(server->target == payload);
  }
  CHECK(server->closes_count() == 0);
  c.connection->Close();
  CHECK(c.client->WaitClosed(kWait));
  c.listener->Close();
}

// Consumes the payload of every raw ring chunk of collective 7 (piece by
// piece, reassembled at the chunk's offset) and records the pieces.
class ConsumingServer : public Recorder {
 public:
  explicit ConsumingServer(std::size_t size) : target(size, 0) {}
  bool WantsPlacement(Connection&) override { return true; }
  bool ConsumesPayload(Connection&, const PayloadHead& head) override {
    std::lock_guard<std::mutex> lock(mutex);
    ++offered;
    if (head.kind != MessageKind::kRingChunk || head.tag != 7 || head.offset > target.size() ||
        head.size > target.size() - head.offset) {
      return false;
    }
    at = static_cast<std::size_t>(head.offset);  // at most target.size(), checked above
    return true;
  }
  void ConsumePayload(Connection&, const uint8_t* piece, std::size_t offset, std::size_t size) override {
    std::lock_guard<std::mutex> lock(mutex);
    pieces.push_back({offset, size});
    std::memcpy(target.data() + at + offset, piece, size);
  }
  void OnFrame(Connection& connection, Frame frame) override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      Result<RingChunkMessage> m = DecodeRingChunk(frame, FrameLimits());
      consumed.push_back(frame.payload_consumed());
      if (m.ok()) {
        sizes.push_back(m->payload.size);
        payloads.push_back(m->payload.data == nullptr
                               ? std::vector<uint8_t>()
                               : std::vector<uint8_t>(m->payload.data, m->payload.data + m->payload.size));
      }
    }
    Recorder::OnFrame(connection, std::move(frame));
  }

  std::mutex mutex;
  std::vector<uint8_t> target;
  std::size_t at = 0;
  int offered = 0;
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  std::vector<bool> consumed;
  std::vector<std::size_t> sizes;
  std::vector<std::vector<uint8_t>> payloads;
};

TEST_CASE("a handler takes large raw ring chunk payloads piece by piece as they arrive") {
  EventLoopThread loop;
  // Three pieces (the last one short, off the 4-byte grid), and one piece.
  const std::size_t big = 2 * kPayloadPieceBytes + 12345;
  const std::size_t small = 100001;
  auto server = std::make_shared<ConsumingServer>(big + small);
  Connected c = ConnectTo(loop, server);
  std::vector<uint8_t> payload(big + small);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 13 + i / 777);
  auto send = [&](uint64_t collective, uint64_t offset, std::size_t size) {
    RingChunkMessage m;
    m.collective_id = collective;
    m.payload = {0, 1, payload.size(), offset, payload.data() + offset, size};
    Result<OutFrame> out = Encode(m, FrameLimits());
    REQUIRE(out.ok());
    REQUIRE(c.connection->Send(std::move(*out)).ok());
  };
  send(7, 0, big);
  send(8, big, small);  // declined: received as usual
  send(7, big, small);
  CHECK(Eventually([&] { return server->frames() == 3; }));
  {
    std::lock_guard<std::mutex> lock(server->mutex);
    CHECK(server->offered == 3);
    CHECK(server->consumed == std::vector<bool>{true, false, true});
    const std::vector<std::pair<std::size_t, std::size_t>> pieces = {
        {0, kPayloadPieceBytes}, {kPayloadPieceBytes, kPayloadPieceBytes}, {2 * kPayloadPieceBytes, 12345}, {0, small}};
    CHECK(server->pieces == pieces);
    CHECK(server->sizes == std::vector<std::size_t>{big, small, small});
    REQUIRE(server->payloads.size() == 3);
    CHECK(server->payloads[0].empty());  // consumed: nothing left to read
    CHECK(server->payloads[1] == std::vector<uint8_t>(payload.begin() + static_cast<std::ptrdiff_t>(big), payload.end()));
    CHECK(server->payloads[2].empty());
    CHECK(server->target == payload);
  }
  CHECK(server->closes_count() == 0);
  c.connection->Close();
  CHECK(c.client->WaitClosed(kWait));
  c.listener->Close();
}

// Flush: "sent" means the frames left the process.


// A receiver and a sender on loops of their own, so either can be stopped.
struct TwoLoops {
  EventLoopThread receiver_loop;
  std::shared_ptr<Recorder> server = std::make_shared<Recorder>();
  std::shared_ptr<TcpListener> listener;
  EventLoopThread sender_loop;
  std::shared_ptr<FrameQueue> client = std::make_shared<FrameQueue>();
  std::shared_ptr<Connection> connection;

  explicit TwoLoops(const ConnectionOptions& sender_options) {
    Result<std::shared_ptr<TcpListener>> l =
        TcpListener::Listen(receiver_loop.loop(), "127.0.0.1", 0, FastOptions(), server);
    REQUIRE(l.ok());
    listener = *l;
    Result<std::shared_ptr<Connection>> c =
        TcpConnectAndWait(sender_loop.loop(), "127.0.0.1", listener->port(), sender_options, client, kWait);
    REQUIRE(c.ok());
    connection = *c;
  }
};

TEST_CASE("a tcp flush returns once the frames are written so the peer gets them after the sender stops") {
  TwoLoops loops(FastOptions());
  Recorder* server = loops.server.get();
  std::shared_ptr<Connection>* connection = &loops.connection;
  const std::vector<uint8_t> payload(1u << 20, 9);
  const int count = 12;
  for (OutFrame& frame : UpdateFrames(payload, count)) REQUIRE((*connection)->Send(std::move(frame)).ok());
  const Status flushed = (*connection)->Flush(0);
  REQUIRE_MESSAGE(flushed.ok(), flushed.ToString());
  // Written, not just queued: the counters move when a write completes.
  CHECK((*connection)->stats().frames_sent == static_cast<uint64_t>(count));
  // The sending process stops here (as a SIGSTOP or a crash would stop it):
  // what was flushed still reaches the peer; a frame still in the send queue
  // would not.
  loops.sender_loop.loop().Stop();
  CHECK(Eventually([&] { return server->frames() == static_cast<std::size_t>(count); }, kWait));
  loops.listener->Close();
}

TEST_CASE("a tcp flush reports a deadline while the peer reads nothing and unavailable once the connection closes") {
  ConnectionOptions options = FastOptions();
  options.io_timeout_ms = 0;  // no write deadline: only the test closes this connection
  TwoLoops loops(options);
  std::shared_ptr<Connection>* connection = &loops.connection;
  loops.receiver_loop.loop().Stop();  // nothing reads on the other side from now on
  const std::vector<uint8_t> payload(1u << 20, 4);
  for (OutFrame& frame : UpdateFrames(payload, 40)) REQUIRE((*connection)->Send(std::move(frame)).ok());

  const Status late = (*connection)->Flush(50);
  CHECK(late.code() == StatusCode::kDeadlineExceeded);
  CHECK_FALSE((*connection)->closed());

  Status waited;
  std::thread flusher([&] { waited = (*connection)->Flush(0); });
  (*connection)->Abort(Status(StatusCode::kCancelled, "closed by the test"));
  flusher.join();
  CHECK(waited.code() == StatusCode::kUnavailable);
  CHECK(waited.message().find("closed before") != std::string::npos);
  CHECK(waited.message().find("closed by the test") != std::string::npos);
  // Later flushes say the same: those frames never left.
  CHECK((*connection)->Flush(0).code() == StatusCode::kUnavailable);
  CHECK(loops.client->WaitClosed(kWait));
}

TEST_CASE("with direct sends raised a large frame is in the socket when send returns") {
  ConnectionOptions options = FastOptions();
  options.direct_send_max_bytes = std::size_t{1} << 30;
  TwoLoops loops(options);
  const std::vector<uint8_t> payload(3u << 20, 3);  // more than the socket takes at once
  std::vector<OutFrame> frames = UpdateFrames(payload, 3);
  uint64_t wire = 0;
  for (OutFrame& frame : frames) {
    wire += frame.wire_size();
    REQUIRE(loops.connection->Send(std::move(frame)).ok());
    // Written by this thread, not handed to the loop: counted at once.
    CHECK(loops.connection->stats().bytes_sent == wire);
  }
  CHECK(Eventually([&] { return loops.server->frames() == 3; }, kWait));
  loops.listener->Close();
}

TEST_CASE("a direct send waiting for room ends when the connection is aborted") {
  ConnectionOptions options = FastOptions();
  options.io_timeout_ms = 0;  // no write deadline: only the abort ends the wait
  options.direct_send_max_bytes = std::size_t{1} << 30;
  TwoLoops loops(options);
  loops.receiver_loop.loop().Stop();  // nothing reads on the other side from now on
  const std::vector<uint8_t> payload(1u << 20, 5);
  std::vector<OutFrame> frames = UpdateFrames(payload, 64);
  std::atomic<bool> done{false};
  Status failed;
  std::thread sender([&] {
    for (OutFrame& frame : frames) {
      Status s = loops.connection->Send(std::move(frame));
      if (!s.ok()) {
        failed = s;
        break;
      }
    }
    done = true;
  });
  // The socket fills; the sender waits for room (a queued send would return).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_FALSE(done.load());
  loops.connection->Abort(Status(StatusCode::kCancelled, "closed by the test"));
  CHECK(Eventually([&] { return done.load(); }, kWait));
  sender.join();
  CHECK_FALSE(failed.ok());
  CHECK(loops.client->WaitClosed(kWait));
}

// The loop thread's voluntary context switches so far (it slept in the
// kernel), or -1 where /proc does not say.
long VoluntarySwitches(long tid) {
  std::FILE* f = std::fopen(("/proc/self/task/" + std::to_string(tid) + "/status").c_str(), "r");
  if (f == nullptr) return -1;
  long count = -1;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "voluntary_ctxt_switches: %ld", &count) == 1) break;
  }
  std::fclose(f);
  return count;
}

// `round_trips` acks sent and their echoes received on a connection with
// `busy_poll_us`; returns how often the client's loop thread slept meanwhile.
long SleepsOverRoundTrips(uint32_t busy_poll_us, int round_trips) {
  ConnectionOptions options = FastOptions();
  options.busy_poll_us = busy_poll_us;
  EventLoopThread server_loop;
  auto server = EchoServer();
  Result<std::shared_ptr<TcpListener>> listener =
      TcpListener::Listen(server_loop.loop(), "127.0.0.1", 0, FastOptions(), server);
  REQUIRE(listener.ok());
  EventLoopThread loop;
  auto client = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> connection =
      TcpConnectAndWait(loop.loop(), "127.0.0.1", (*listener)->port(), options, client, kWait);
  REQUIRE(connection.ok());
  std::atomic<long> tid{0};
  loop.loop().Post([&] { tid = static_cast<long>(::syscall(SYS_gettid)); });
  REQUIRE(Eventually([&] { return tid.load() != 0; }));
  // One round trip first: the loop is then polling (or asleep) as it will be.
  REQUIRE((*connection)->Send(AckFrame(0)).ok());
  REQUIRE(client->Pop(kWait).ok());
  const long before = VoluntarySwitches(tid.load());
  for (int i = 1; i <= round_trips; ++i) {
    REQUIRE((*connection)->Send(AckFrame(static_cast<uint64_t>(i))).ok());
    Result<Frame> echo = client->Pop(kWait);
    REQUIRE(echo.ok());
    Result<AckMessage> ack = DecodeAck(*echo);
    REQUIRE(ack.ok());
    CHECK(ack->round_id == static_cast<uint64_t>(i));
  }
  const long after = VoluntarySwitches(tid.load());
  (*connection)->Close();
  CHECK(client->WaitClosed(kWait));
  (*listener)->Close();
  return before < 0 || after < 0 ? -1 : after - before;
}

TEST_CASE("a busy-polling connection's loop answers without sleeping and still stops at once") {
  constexpr int kRoundTrips = 200;
  // Without busy polling the loop sleeps in the kernel while each echo is on
  // its way; with it (a window longer than the test) it keeps polling.
  const long sleeping = SleepsOverRoundTrips(0, kRoundTrips);
  const auto start = std::chrono::steady_clock::now();
  const long polling = SleepsOverRoundTrips(60u * 1000 * 1000, kRoundTrips);
  // ...and the loops stopped when their threads were joined, well inside the
  // minute of polling they had been asked for.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  if (sleeping < 0 || polling < 0) {
    MESSAGE("/proc does not give the loop thread's context switches here: not compared");
    return;
  }
  CHECK(sleeping >= kRoundTrips / 2);
  CHECK(polling < kRoundTrips / 10);
}

TEST_CASE("a loopback flush returns after the peer's handler holds the frames") {
  EventLoopThread loop;
  auto a = std::make_shared<FrameQueue>();
  auto b = std::make_shared<FrameQueue>();
  auto ends = MakeLoopbackPair(loop.loop(), a, b);
  for (uint64_t i = 0; i < 10; ++i) REQUIRE(ends.first->Send(AckFrame(i)).ok());
  REQUIRE(ends.first->Flush(0).ok());
  for (uint64_t i = 0; i < 10; ++i) {
    Result<Frame> frame = b->Pop(0);  // already there: no waiting
    REQUIRE_MESSAGE(frame.ok(), frame.status().ToString());
    CHECK(DecodeAck(*frame)->round_id == i);
  }

  // A frame accepted while the peer is closing never arrives: the flush says so.
  std::mutex gate;
  std::unique_lock<std::mutex> hold(gate);
  loop.loop().Post([&gate] { std::lock_guard<std::mutex> wait(gate); });  // the loop waits for the test
  ends.second->Close();
  REQUIRE(ends.first->Send(AckFrame(99)).ok());
  hold.unlock();
  const Status lost = ends.first->Flush(0);
  CHECK(lost.code() == StatusCode::kUnavailable);
  CHECK(lost.message().find("1 queued frame was written") != std::string::npos);
  CHECK(a->WaitClosed(kWait));
}

TEST_CASE("a flush on the loop's own thread is refused instead of waiting on itself") {
  EventLoopThread loop;
  auto a = std::make_shared<FrameQueue>();
  auto b = std::make_shared<FrameQueue>();
  auto ends = MakeLoopbackPair(loop.loop(), a, b);
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  Status status;
  loop.loop().Post([&] {
    Status s = ends.first->Flush(0);
    std::lock_guard<std::mutex> lock(mutex);
    status = std::move(s);
    done = true;
    done_cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mutex);
  REQUIRE(done_cv.wait_for(lock, std::chrono::milliseconds(kWait), [&] { return done; }));
  CHECK(status.code() == StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace transport
}  // namespace fedrt
