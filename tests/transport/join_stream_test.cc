// The sans-IO join (join.h) and the stream binding (stream.h): no sockets, no
// threads, no event loop; a manual clock drives heartbeats and deadlines.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/join.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/stream.h"
#include "test_crypto.h"

namespace fedrt {
namespace transport {
namespace {

constexpr char kKeys[] =
    "board-1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
    "board-2 ffeeddccbbaa99887766554433221100\n";

KeyStore Fleet() {
  Result<KeyStore> store = KeyStore::Parse(kKeys);
  REQUIRE(store.ok());
  return std::move(*store);
}

// The frame a receiver would see for `out`.
Frame Receive(const OutFrame& out) {
  std::vector<uint8_t> wire;
  out.AppendWireBytes(&wire);
  Result<Frame> frame = ParseFrame(wire.data(), wire.size(), FrameLimits());
  REQUIRE(frame.ok());
  return std::move(*frame);
}

TEST_CASE("join client and server agree over frames and report what the other announced") {
  const KeyStore keys = Fleet();
  JoinClient client("board-1", *keys.Find("board-1"), TestCrypto(), FrameLimits());
  JoinServer server(keys, TestCrypto(), FrameLimits());
  JoinRequest request;
  request.codecs = {"fp32", "dqsg"};
  request.isa = "scalar";
  request.resume_round = 4;
  request.model_round = 3;
  Result<OutFrame> join = client.Start(request);
  REQUIRE(join.ok());
  JoinResult result;
  result.current_round = 7;
  result.heartbeat_interval_ms = 1500;
  Result<OutFrame> challenge = server.OnFrame(Receive(*join), result);
  REQUIRE(challenge.ok());
  CHECK(server.announced());
  CHECK(server.announcement().device_id == "board-1");
  CHECK(server.announcement().resume_round == 4);
  CHECK(server.announcement().model_round == 3);
  CHECK_FALSE(server.done());
  Result<OutFrame> proof = client.OnFrame(Receive(*challenge));
  REQUIRE(proof.ok());
  Result<OutFrame> response = server.OnFrame(Receive(*proof), result);
  REQUIRE(response.ok());
  CHECK(server.done());
  Result<OutFrame> end = client.OnFrame(Receive(*response));
  REQUIRE(end.ok());
  CHECK(end->empty());
  CHECK(client.done());
  CHECK(client.result().current_round == 7);
  CHECK(client.result().heartbeat_interval_ms == 1500);
}

TEST_CASE("join server refuses a wrong key and the client reports the server's error frame") {
  const KeyStore keys = Fleet();
  JoinClient client("board-1", Key(32, 0x5a), TestCrypto(), FrameLimits());
  JoinServer server(keys, TestCrypto(), FrameLimits());
  Result<OutFrame> challenge = server.OnFrame(Receive(client.Start(JoinRequest()).value()), JoinResult());
  REQUIRE(challenge.ok());
  Result<OutFrame> proof = client.OnFrame(Receive(*challenge));
  REQUIRE(proof.ok());
  Result<OutFrame> refused = server.OnFrame(Receive(*proof), JoinResult());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kUnauthenticated);
  CHECK_FALSE(server.done());
  // What the server sends back when it refuses: the client ends with that status.
  Result<OutFrame> error = EncodeStatus(refused.status(), FrameLimits());
  REQUIRE(error.ok());
  Result<OutFrame> after = client.OnFrame(Receive(*error));
  REQUIRE_FALSE(after.ok());
  CHECK(after.status().code() == StatusCode::kUnauthenticated);
  CHECK_FALSE(client.done());
}

TEST_CASE("join server refuses frames out of order, and a spent join stays spent") {
  const KeyStore keys = Fleet();
  JoinServer server(keys, TestCrypto(), FrameLimits());
  AuthenticateMessage early;
  Result<OutFrame> out = server.OnFrame(Receive(Encode(early, FrameLimits()).value()), JoinResult());
  REQUIRE_FALSE(out.ok());
  CHECK(out.status().code() == StatusCode::kUnauthenticated);
  JoinClient client("board-2", *keys.Find("board-2"), TestCrypto(), FrameLimits());
  out = server.OnFrame(Receive(client.Start(JoinRequest()).value()), JoinResult());
  CHECK(out.status().code() == StatusCode::kFailedPrecondition);

  JoinClient second("board-2", *keys.Find("board-2"), TestCrypto(), FrameLimits());
  REQUIRE(second.Start(JoinRequest()).ok());
  CHECK(second.Start(JoinRequest()).status().code() == StatusCode::kFailedPrecondition);
  HeartbeatMessage beat;
  Result<OutFrame> wrong = second.OnFrame(Receive(Encode(beat, FrameLimits()).value()));
  CHECK(wrong.status().code() == StatusCode::kCorrupt);
}

TEST_CASE("the largest frames of a join fit the pre-join frame limit") {
  // A Join with every field at its longest.
  const std::string id(kMaxDeviceIdBytes, 'd');
  std::vector<std::string> names;
  for (std::size_t i = 0; i < kMaxCodecs; ++i) {
    names.push_back(std::string(kMaxCodecNameBytes - 2, 'c') + std::to_string(i % 10) + "x");
  }
  JoinMessage join;
  join.device_id = id;
  for (const std::string& name : names) join.codecs.push_back(name);
  const std::string isa(kMaxIsaBytes, 'i');
  join.isa = isa;
  join.resume_round = UINT64_MAX;
  join.model_round = INT64_MAX;
  Result<OutFrame> largest_join = Encode(join, FrameLimits());
  REQUIRE(largest_join.ok());
  CHECK(largest_join->body_size() <= kMaxJoinFrameBytes);
  CHECK(largest_join->body_size() > kMaxJoinFrameBytes / 2);  // the limit is not far above it
  // An Error with the longest reason, an Authenticate, a heartbeat.
  Result<OutFrame> error = EncodeStatus(Status(StatusCode::kUnauthenticated, std::string(5000, 'r')), FrameLimits());
  REQUIRE(error.ok());
  CHECK(error->body_size() <= kMaxJoinFrameBytes);
  CHECK(Encode(AuthenticateMessage(), FrameLimits()).value().body_size() <= kMaxJoinFrameBytes);
  HeartbeatMessage beat;
  beat.sequence = UINT64_MAX;
  CHECK(Encode(beat, FrameLimits()).value().body_size() <= kMaxJoinFrameBytes);
}

// Records what a connection delivers.
class Recorder : public ConnectionHandler {
 public:
  void OnOpen(const std::shared_ptr<Connection>& connection) override { opened = connection != nullptr; }
  void OnFrame(Connection&, Frame frame) override { kinds.push_back(frame.kind()); }
  void OnClose(Connection&, const Status& reason) override {
    closed = true;
    close_reason = reason;
  }
  bool opened = false;
  bool closed = false;
  Status close_reason;
  std::vector<MessageKind> kinds;
};

TEST_CASE("frame reader takes frames split at every byte and rejects an oversized prefix") {
  std::vector<uint8_t> wire;
  AckMessage ack;
  ack.round_id = 9;
  Encode(ack, FrameLimits()).value().AppendWireBytes(&wire);
  LeaveMessage leave;
  leave.reason = "done";
  Encode(leave, FrameLimits()).value().AppendWireBytes(&wire);
  FrameReader reader{FrameLimits()};
  std::vector<MessageKind> kinds;
  for (uint8_t byte : wire) {
    REQUIRE(reader.Feed(&byte, 1, [&](Frame f) { kinds.push_back(f.kind()); }).ok());
  }
  CHECK(reader.idle());
  REQUIRE(kinds.size() == 2);
  CHECK(kinds[0] == MessageKind::kAck);
  CHECK(kinds[1] == MessageKind::kLeave);

  FrameReader strict{FrameLimits()};
  const uint8_t huge[4] = {0xff, 0xff, 0xff, 0x7f};
  const Status status = strict.Feed(huge, 4, [](Frame) {});
  CHECK(status.code() == StatusCode::kResourceExhausted);
  CHECK(strict.Feed(huge, 1, [](Frame) {}).code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("stream connection with an initial frame limit refuses a larger prefix until its owner lifts it") {
  ManualClock clock;
  ConnectionOptions options;
  // A Leave with a long reason, one byte above the initial limit.
  std::vector<uint8_t> wire;
  const std::string reason(1000, 'l');  // outlives the message, which only views it
  LeaveMessage leave;
  leave.reason = reason;
  OutFrame big = Encode(leave, FrameLimits()).value();
  REQUIRE(big.body_size() > 1000);
  options.initial_max_frame_bytes = static_cast<uint32_t>(big.body_size() - 1);
  big.AppendWireBytes(&wire);

  SUBCASE("refused before the lift, and nothing is allocated for the body") {
    auto handler = std::make_shared<Recorder>();
    auto connection = StreamConnection::Create("uart0", [](const uint8_t*, std::size_t) { return Status::Ok(); },
                                               handler, options, clock)
                          .value();
    connection->Open();
    const Status refused = connection->Receive(wire.data(), kFramePrefixBytes);  // the prefix alone
    CHECK(refused.code() == StatusCode::kResourceExhausted);
    CHECK(refused.message() == "frame of " + std::to_string(big.body_size()) + " bytes exceeds the limit of " +
                                   std::to_string(options.initial_max_frame_bytes));
    CHECK(handler->closed);
  }
  SUBCASE("accepted from the frame after the one whose handler lifts it, within one Receive") {
    // The owner lifts the limit when the first (small) frame arrives; the
    // large frame right behind it in the same bytes is then accepted.
    struct Lifter : Recorder {
      void OnFrame(Connection& connection, Frame frame) override {
        connection.LiftInitialFrameLimit();
        Recorder::OnFrame(connection, std::move(frame));
      }
    };
    auto handler = std::make_shared<Lifter>();
    auto connection = StreamConnection::Create("uart0", [](const uint8_t*, std::size_t) { return Status::Ok(); },
                                               handler, options, clock)
                          .value();
    connection->Open();
    std::vector<uint8_t> both;
    Encode(AckMessage(), FrameLimits()).value().AppendWireBytes(&both);
    both.insert(both.end(), wire.begin(), wire.end());
    REQUIRE(connection->Receive(both.data(), both.size()).ok());
    REQUIRE(handler->kinds.size() == 2);
    CHECK(handler->kinds[1] == MessageKind::kLeave);
    CHECK_FALSE(handler->closed);
  }
  SUBCASE("an initial limit above the frame limit is refused") {
    options.initial_max_frame_bytes = options.limits.max_frame_bytes + 1;
    CHECK(StreamConnection::Create("uart0", [](const uint8_t*, std::size_t) { return Status::Ok(); },
                                   std::make_shared<Recorder>(), options, clock)
              .status()
              .code() == StatusCode::kInvalidArgument);
  }
}

TEST_CASE("memory pipe delivers frames both ways in order and passes a close on") {
  ManualClock clock;
  auto a = std::make_shared<Recorder>();
  auto b = std::make_shared<Recorder>();
  Result<std::unique_ptr<MemoryPipe>> pipe = MemoryPipe::Create(a, b, ConnectionOptions(), clock);
  REQUIRE(pipe.ok());
  CHECK(a->opened);
  CHECK(b->opened);
  AckMessage ack;
  REQUIRE((*pipe)->a().Send(Encode(ack, FrameLimits()).value()).ok());
  REQUIRE((*pipe)->b().Send(Encode(LeaveMessage(), FrameLimits()).value()).ok());
  CHECK(b->kinds.empty());  // nothing moves before Pump
  CHECK((*pipe)->Pump());
  REQUIRE(b->kinds.size() == 1);
  CHECK(b->kinds[0] == MessageKind::kAck);
  REQUIRE(a->kinds.size() == 1);
  CHECK(a->kinds[0] == MessageKind::kLeave);
  (*pipe)->a().Close();
  CHECK(a->closed);
  CHECK(a->close_reason.ok());
  CHECK((*pipe)->Pump());
  CHECK(b->closed);
  CHECK(b->close_reason.code() == StatusCode::kUnavailable);
  CHECK((*pipe)->a().Send(Encode(ack, FrameLimits()).value()).code() == StatusCode::kUnavailable);
  CHECK_FALSE((*pipe)->Pump());
}

TEST_CASE("stream connection sends heartbeats when quiet, consumes them, and closes when idle") {
  ManualClock clock;
  auto a = std::make_shared<Recorder>();
  auto b = std::make_shared<Recorder>();
  ConnectionOptions options;
  options.heartbeat_interval_ms = 1000;
  options.idle_timeout_ms = 3000;
  Result<std::unique_ptr<MemoryPipe>> pipe = MemoryPipe::Create(a, b, options, clock);
  REQUIRE(pipe.ok());
  MemoryPipe& p = **pipe;
  CHECK(p.a().Poll() == 1000);
  clock.AdvanceMs(1000);
  p.a().Poll();  // a beats; b stays silent
  CHECK(p.a().stats().heartbeats_sent == 1);
  p.Pump();
  CHECK(p.b().stats().heartbeats_received == 1);
  CHECK(b->kinds.empty());  // heartbeats never reach the handler
  clock.AdvanceMs(1999);
  CHECK(p.a().Poll() == 1);  // 1 ms before the idle deadline
  CHECK_FALSE(p.a().closed());
  clock.AdvanceMs(1);
  // a heard nothing from b for 3000 ms: a closes with a deadline.
  CHECK(p.a().Poll() == 0);
  CHECK(p.a().closed());
  CHECK(a->close_reason.code() == StatusCode::kDeadlineExceeded);
}

TEST_CASE("stream connection closes on a corrupt frame and tells the peer why") {
  ManualClock clock;
  auto handler = std::make_shared<Recorder>();
  std::vector<uint8_t> written;
  Result<std::shared_ptr<StreamConnection>> connection = StreamConnection::Create(
      "uart0",
      [&written](const uint8_t* data, std::size_t size) {
        written.insert(written.end(), data, data + size);
        return Status::Ok();
      },
      handler, ConnectionOptions(), clock);
  REQUIRE(connection.ok());
  (*connection)->Open();
  const uint8_t garbage[12] = {8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  const Status status = (*connection)->Receive(garbage, sizeof(garbage));
  CHECK(status.code() == StatusCode::kCorrupt);
  CHECK((*connection)->closed());
  CHECK(handler->closed);
  CHECK(handler->close_reason.code() == StatusCode::kCorrupt);
  Result<Frame> error = ParseFrame(written.data(), written.size(), FrameLimits());
  REQUIRE(error.ok());
  CHECK(error->kind() == MessageKind::kError);
}

TEST_CASE("stream connection closes when its write fails and refuses TLS options") {
  ManualClock clock;
  auto handler = std::make_shared<Recorder>();
  Result<std::shared_ptr<StreamConnection>> connection = StreamConnection::Create(
      "uart0", [](const uint8_t*, std::size_t) { return Status(StatusCode::kIoError, "line down"); }, handler,
      ConnectionOptions(), clock);
  REQUIRE(connection.ok());
  (*connection)->Open();
  CHECK((*connection)->Send(Encode(AckMessage(), FrameLimits()).value()).code() == StatusCode::kIoError);
  CHECK(handler->closed);
  CHECK((*connection)->Flush(0).code() == StatusCode::kUnavailable);
  CHECK(StreamConnection::Create("x", nullptr, handler, ConnectionOptions(), clock).status().code() ==
        StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace transport
}  // namespace fedrt
