// The stream binding's join (stream_peer_context.h). Two contexts over an
// in-memory stream, one thread each: with their keys they join and then
// carry frames both ways; another key, a peer that joins as another rank, and
// a peer without keys on either end are refused, each naming the other rank.
// One context against a scripted stream (a manual clock, no thread): a frame
// that fails verification, a truncated join, a join and then the end of the
// stream, a proof that does not match, data where the join belongs, and
// silence past the join deadline, each failing the first collective with a
// status naming rank 1; nothing but the join (and the refusal) is written
// before the join completes. Runs in every preset (test_crypto.h: the
// example port's HMAC in the core).
#include <doctest/doctest.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/runtime/stream_peer_context.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/join.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/stream.h"
#include "test_crypto.h"

namespace fedrt::peer {
namespace {

using transport::Frame;
using transport::MessageKind;

// Every peer's key, and a key file where p1's differs.
constexpr char kKeys[] =
    "p0 000102030405060708090a0b0c0d0e0f10111213\n"
    "p1 202122232425262728292a2b2c2d2e2f30313233\n";
constexpr char kOtherP1[] =
    "p0 000102030405060708090a0b0c0d0e0f10111213\n"
    "p1 ff2122232425262728292a2b2c2d2e2f30313233\n";

transport::KeyStore Keys(const char* text) {
  Result<transport::KeyStore> keys = transport::KeyStore::Parse(text);
  REQUIRE(keys.ok());
  return std::move(*keys);
}

Result<transport::OutFrame> Ack(uint64_t id) {
  transport::AckMessage ack;
  ack.round_id = id;
  ack.acked = MessageKind::kUpdate;
  return transport::Encode(ack, transport::FrameLimits());
}

std::vector<uint8_t> Wire(const Result<transport::OutFrame>& frame) {
  REQUIRE(frame.ok());
  std::vector<uint8_t> bytes;
  frame->AppendWireBytes(&bytes);
  return bytes;
}

// The kinds of the frames in `bytes` (what a context wrote).
std::vector<MessageKind> Kinds(const std::vector<uint8_t>& bytes, std::vector<Frame>* frames = nullptr) {
  transport::FrameReader reader{transport::FrameLimits()};
  std::vector<MessageKind> kinds;
  REQUIRE(reader.Feed(bytes.data(), bytes.size(), [&](Frame f) {
                  kinds.push_back(f.kind());
                  if (frames != nullptr) frames->push_back(std::move(f));
                }).ok());
  return kinds;
}

Result<std::unique_ptr<CollectiveContext>> Formed(uint32_t rank, uint32_t peers, PeerStreams streams,
                                                  const transport::KeyStore* keys, const Clock* clock = nullptr) {
  ContextOptions options;
  options.join_timeout_ms = 5000;
  options.step_timeout_ms = 5000;
  options.clock = clock;
  StreamJoin join;
  join.keys = keys;
  join.crypto = &transport::TestCrypto();
  auto context = CreateStreamPeerContext(rank, peers, std::move(streams), options, transport::FrameLimits(), join);
  if (context.ok()) REQUIRE((*context)->Form({}).ok());
  return context;
}

// ---- Two contexts, one thread each ---------------------------------------------

// A two-way in-memory stream: side s writes to bytes_[s], reads bytes_[1 - s].
class Pipe {
 public:
  PeerStreams Side(int side) {
    PeerStreams s;
    s.write = [this, side](uint32_t, const uint8_t* data, std::size_t size) {
      std::lock_guard<std::mutex> lock(mutex_);
      bytes_[side].insert(bytes_[side].end(), data, data + size);
      moved_.notify_all();
      return Status::Ok();
    };
    s.read = [this, side](uint32_t, uint8_t* buffer, std::size_t capacity,
                          uint32_t timeout_ms) -> Result<std::size_t> {
      std::unique_lock<std::mutex> lock(mutex_);
      std::deque<uint8_t>& in = bytes_[1 - side];
      moved_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !in.empty(); });
      std::size_t n = 0;
      for (; n < capacity && !in.empty(); ++n) {
        buffer[n] = in.front();
        in.pop_front();
      }
      return n;
    };
    return s;
  }

 private:
  std::mutex mutex_;
  std::condition_variable moved_;
  std::deque<uint8_t> bytes_[2];
};

struct Outcome {
  Status status;
  uint64_t received = 0;  // the Ack's id from the other end
};

// Sends an Ack numbered 100 + rank to `to`, then takes one from it.
Outcome Exchange(CollectiveContext& c, uint32_t to) {
  Outcome o;
  o.status = c.Send(to, Ack(100 + c.rank()));
  if (!o.status.ok()) return o;
  Result<Frame> frame = c.Receive(to, c.StepDeadline());
  if (!frame.ok()) {
    o.status = frame.status();
    return o;
  }
  Result<transport::AckMessage> ack = transport::DecodeAck(*frame);
  o.status = ack.status();
  if (ack.ok()) o.received = ack->round_id;
  return o;
}

// Contexts of ranks `a` and `b` (each of 2 peers) with `a_keys` / `b_keys`
// (null: none) on the two sides of a pipe, exchanging an Ack on two threads.
std::pair<Outcome, Outcome> RunPair(uint32_t a, const transport::KeyStore* a_keys, uint32_t b,
                                    const transport::KeyStore* b_keys) {
  Pipe pipe;
  auto ca = Formed(a, 2, pipe.Side(0), a_keys);
  auto cb = Formed(b, 2, pipe.Side(1), b_keys);
  REQUIRE(ca.ok());
  REQUIRE(cb.ok());
  Outcome oa, ob;
  std::thread ta([&] { oa = Exchange(**ca, 1 - a); });
  std::thread tb([&] { ob = Exchange(**cb, 1 - b); });
  ta.join();
  tb.join();
  MESSAGE("side a: " << oa.status.ToString() << "; side b: " << ob.status.ToString());
  return {oa, ob};
}

TEST_CASE("two streams with their keys join both ways and then carry frames") {
  const transport::KeyStore keys = Keys(kKeys);
  auto [a, b] = RunPair(0, &keys, 1, &keys);
  CHECK(a.status.ok());
  CHECK(b.status.ok());
  CHECK(a.received == 101);
  CHECK(b.received == 100);
}

TEST_CASE("without keys there is no join as before") {
  auto [a, b] = RunPair(0, nullptr, 1, nullptr);
  CHECK(a.status.ok());
  CHECK(b.status.ok());
  CHECK(a.received == 101);
}

TEST_CASE("another key is refused on both ends which name each other") {
  const transport::KeyStore keys = Keys(kKeys);
  const transport::KeyStore other = Keys(kOtherP1);
  auto [a, b] = RunPair(0, &keys, 1, &other);
  CHECK(a.status.code() == StatusCode::kUnauthenticated);
  CHECK(a.status.message().rfind("peer rank 1 (p1): ", 0) == 0);
  CHECK(b.status.code() == StatusCode::kUnauthenticated);
  CHECK(b.status.message().rfind("peer rank 0 (p0): ", 0) == 0);
}

TEST_CASE("a peer that joins as another rank is refused") {
  // Both ends believe they are rank 0 and that the stream leads to rank 1.
  const transport::KeyStore keys = Keys(kKeys);
  auto [a, b] = RunPair(0, &keys, 0, &keys);
  for (const Outcome& o : {a, b}) {
    CHECK(o.status.code() == StatusCode::kUnauthenticated);
    CHECK(o.status.message().find("peer rank 1 (p1): ") != std::string::npos);
    CHECK(o.status.message().find("joins as 'p0' on the stream to p1") != std::string::npos);
  }
}

TEST_CASE("a peer without keys and one with them fail clearly and name each other") {
  const transport::KeyStore keys = Keys(kKeys);
  auto [a, b] = RunPair(0, &keys, 1, nullptr);
  CHECK(a.status.code() == StatusCode::kUnauthenticated);
  CHECK(a.status.message().rfind("peer rank 1 (p1): ", 0) == 0);
  CHECK(a.status.message().find("where the join was expected") != std::string::npos);
  CHECK(b.status.code() == StatusCode::kUnauthenticated);
  CHECK(b.status.message().rfind("peer rank 0 (p0): ", 0) == 0);
  CHECK(b.status.message().find("this peer has none") != std::string::npos);
}

// ---- One context against a scripted stream ------------------------------------------

// Rank 0 of 2 whose stream to rank 1 reads `script` (one read per piece;
// an error piece fails the read), then stays silent (reads advance the
// clock by their timeout); what it writes is kept.
struct Scripted {
  std::vector<Result<std::vector<uint8_t>>> script;
  std::size_t next = 0;
  std::vector<uint8_t> written;
  ManualClock clock;

  PeerStreams Streams() {
    PeerStreams s;
    s.write = [this](uint32_t to, const uint8_t* data, std::size_t size) {
      CHECK(to == 1);
      written.insert(written.end(), data, data + size);
      return Status::Ok();
    };
    s.read = [this](uint32_t, uint8_t* buffer, std::size_t capacity, uint32_t timeout_ms) -> Result<std::size_t> {
      if (next == script.size()) {
        clock.AdvanceMs(timeout_ms);
        return std::size_t{0};
      }
      const Result<std::vector<uint8_t>>& piece = script[next++];
      if (!piece.ok()) return piece.status();
      REQUIRE(piece->size() <= capacity);
      std::copy(piece->begin(), piece->end(), buffer);
      return piece->size();
    };
    return s;
  }

  // The first collective's send: the join runs before it.
  Status Run(const transport::KeyStore& keys) {
    auto context = Formed(0, 2, Streams(), &keys, &clock);
    REQUIRE(context.ok());
    const Status status = (*context)->Send(1, Ack(7));
    MESSAGE(status.ToString());
    CHECK((*context)->failed_rank() == (status.ok() ? -1 : 1));
    return status;
  }
};

// Rank 1's Join, as a neighbour with `keys` would send it.
std::vector<uint8_t> JoinFrom(const std::string& id, const transport::KeyStore& keys) {
  transport::JoinClient client(id, *keys.Find(id), transport::TestCrypto(), transport::FrameLimits());
  transport::JoinRequest request;
  request.resume_round = 1;
  return Wire(client.Start(request));
}

const Status kClosed(StatusCode::kUnavailable, "closed");

TEST_CASE("a malformed or cut-short handshake fails the first collective naming the rank") {
  const transport::KeyStore keys = Keys(kKeys);
  const std::vector<uint8_t> join = JoinFrom("p1", keys);

  SUBCASE("a frame that fails verification") {
    Scripted s;
    // The FlatBuffer's identifier ("FDRT", after the size prefix and the
    // root offset) damaged.
    std::vector<uint8_t> damaged(join.begin(), join.begin() + 8);
    damaged.push_back('X');
    damaged.insert(damaged.end(), join.begin() + 9, join.end());
    s.script = {damaged};
    const Status status = s.Run(keys);
    CHECK(status.code() == StatusCode::kCorrupt);
    CHECK(status.message().rfind("peer rank 1 (p1): during the join: ", 0) == 0);
  }
  SUBCASE("bytes that are no frame at all") {
    Scripted s;
    s.script = {std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o', ',', ' ', 'p', 'e', 'e', 'r', '!'}};
    const Status status = s.Run(keys);
    CHECK(!status.ok());
    CHECK(status.message().rfind("peer rank 1 (p1): during the join: ", 0) == 0);
  }
  SUBCASE("a join cut short by the end of the stream") {
    Scripted s;
    s.script = {std::vector<uint8_t>(join.begin(), join.begin() + join.size() / 2), kClosed};
    const Status status = s.Run(keys);
    CHECK(status.code() == StatusCode::kUnavailable);
    CHECK(status.message().rfind("peer rank 1 (p1): during the join: ", 0) == 0);
  }
  SUBCASE("a join and then the end of the stream") {
    Scripted s;
    s.script = {join, kClosed};
    const Status status = s.Run(keys);
    CHECK(status.code() == StatusCode::kUnavailable);
    CHECK(status.message().rfind("peer rank 1 (p1): during the join: ", 0) == 0);
    CHECK(Kinds(s.written) == std::vector<MessageKind>{MessageKind::kJoin, MessageKind::kChallenge});
  }
  SUBCASE("a proof that does not match") {
    Scripted s;
    transport::AuthenticateMessage forged;  // a MAC of zeros
    s.script = {join, Wire(transport::Encode(forged, transport::FrameLimits()))};
    const Status status = s.Run(keys);
    CHECK(status.code() == StatusCode::kUnauthenticated);
    CHECK(status.message().rfind("peer rank 1 (p1): refused its join: ", 0) == 0);
    std::vector<Frame> frames;
    CHECK(Kinds(s.written, &frames) ==
          std::vector<MessageKind>{MessageKind::kJoin, MessageKind::kChallenge, MessageKind::kError});
    auto error = transport::DecodeError(frames.back());
    REQUIRE(error.ok());
    CHECK(std::string(error->message).rfind("refused the join of peer rank 1 (p1): ", 0) == 0);
  }
  SUBCASE("a join as another rank") {
    Scripted s;
    s.script = {JoinFrom("p0", keys)};
    const Status status = s.Run(keys);
    CHECK(status.code() == StatusCode::kUnauthenticated);
    CHECK(status.message().find("joins as 'p0' on the stream to p1") != std::string::npos);
  }
  SUBCASE("data where the join belongs") {
    Scripted s;
    s.script = {Wire(Ack(1))};
    const Status status = s.Run(keys);
    CHECK(status.code() == StatusCode::kUnauthenticated);
    CHECK(status.message().find("where the join was expected") != std::string::npos);
    // The collective's Ack never went out: only the join and the refusal.
    CHECK(Kinds(s.written) == std::vector<MessageKind>{MessageKind::kJoin, MessageKind::kError});
  }
  SUBCASE("silence past the join deadline") {
    Scripted s;
    const Status status = s.Run(keys);
    CHECK(status.code() == StatusCode::kDeadlineExceeded);
    CHECK(status.message().find("did not complete the join within 5000 ms") != std::string::npos);
  }
}

TEST_CASE("a peer without keys that hears a join says why and fails naming the rank") {
  const transport::KeyStore keys = Keys(kKeys);
  Scripted s;
  s.script = {JoinFrom("p1", keys)};
  ContextOptions options;
  options.clock = &s.clock;
  auto context = CreateStreamPeerContext(0, 2, s.Streams(), options);
  REQUIRE(context.ok());
  REQUIRE((*context)->Form({}).ok());
  Result<Frame> frame = (*context)->Receive(1, (*context)->StepDeadline());
  REQUIRE(!frame.ok());
  CHECK(frame.status().code() == StatusCode::kUnauthenticated);
  CHECK(frame.status().message().rfind("peer rank 1 (p1): starts a join", 0) == 0);
  std::vector<Frame> frames;
  REQUIRE(Kinds(s.written, &frames) == std::vector<MessageKind>{MessageKind::kError});
  auto error = transport::DecodeError(frames[0]);
  REQUIRE(error.ok());
  CHECK(std::string(error->message).find("has no key") != std::string::npos);
}

TEST_CASE("keys without the id of this peer are refused at creation") {
  const transport::KeyStore keys = Keys("p1 202122232425262728292a2b2c2d2e2f30313233\n");
  Pipe pipe;
  StreamJoin join;
  join.keys = &keys;
  join.crypto = &transport::TestCrypto();
  auto context = CreateStreamPeerContext(0, 2, pipe.Side(0), ContextOptions(), transport::FrameLimits(), join);
  REQUIRE(!context.ok());
  CHECK(context.status().code() == StatusCode::kInvalidArgument);
  CHECK(context.status().message().find("'p0'") != std::string::npos);
}

}  // namespace
}  // namespace fedrt::peer
