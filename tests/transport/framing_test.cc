#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "fedrt/transport/frame.h"
#include "fedrt/transport/messages.h"
#include "wire.h"

namespace fedrt {
namespace transport {
namespace {

std::vector<uint8_t> WireBytes(const OutFrame& frame) {
  std::vector<uint8_t> bytes(frame.prefix(), frame.prefix() + kFramePrefixBytes);
  bytes.insert(bytes.end(), frame.body(), frame.body() + frame.body_size());
  return bytes;
}

std::vector<uint8_t> HeartbeatWire() {
  HeartbeatMessage m;
  m.sequence = 7;
  m.sent_ns = 123456789;
  Result<OutFrame> frame = Encode(m, FrameLimits());
  REQUIRE(frame.ok());
  return WireBytes(*frame);
}

// A body built by hand, for frames the encoders refuse to produce.
std::vector<uint8_t> HandBuiltBody(uint16_t version, uint8_t kind) {
  flatbuffers::FlatBufferBuilder b;
  auto heartbeat = wire::CreateHeartbeat(b, 1, 2);
  auto envelope = wire::CreateEnvelope(b, static_cast<wire::ProtocolVersion>(version),
                                       static_cast<wire::Message>(kind), heartbeat.Union());
  wire::FinishEnvelopeBuffer(b, envelope);
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

std::vector<uint8_t> WithPrefix(const std::vector<uint8_t>& body) {
  std::vector<uint8_t> bytes(kFramePrefixBytes);
  WriteFramePrefix(static_cast<uint32_t>(body.size()), bytes.data());
  bytes.insert(bytes.end(), body.begin(), body.end());
  return bytes;
}

TEST_CASE("framing writes the size prefix as four little-endian bytes") {
  uint8_t prefix[kFramePrefixBytes];
  WriteFramePrefix(0x01020304u, prefix);
  CHECK(prefix[0] == 0x04);
  CHECK(prefix[1] == 0x03);
  CHECK(prefix[2] == 0x02);
  CHECK(prefix[3] == 0x01);
  FrameLimits limits;
  limits.max_frame_bytes = 1u << 30;
  Result<uint32_t> size = ParseFramePrefix(prefix, limits);
  REQUIRE(size.ok());
  CHECK(*size == 0x01020304u);
}

TEST_CASE("framing rejects a prefix larger than the frame limit") {
  FrameLimits limits;
  uint8_t prefix[kFramePrefixBytes];
  WriteFramePrefix(limits.max_frame_bytes + 1, prefix);
  Result<uint32_t> size = ParseFramePrefix(prefix, limits);
  REQUIRE_FALSE(size.ok());
  CHECK(size.status().code() == StatusCode::kResourceExhausted);
  WriteFramePrefix(0xFFFFFFFFu, prefix);
  CHECK(ParseFramePrefix(prefix, limits).status().code() == StatusCode::kResourceExhausted);
  WriteFramePrefix(limits.max_frame_bytes, prefix);
  CHECK(ParseFramePrefix(prefix, limits).ok());
}

TEST_CASE("framing rejects a prefix that announces an empty body") {
  const uint8_t prefix[kFramePrefixBytes] = {0, 0, 0, 0};
  CHECK(ParseFramePrefix(prefix, FrameLimits()).status().code() == StatusCode::kCorrupt);
}

TEST_CASE("framing parses a valid frame and reports its message kind") {
  const std::vector<uint8_t> bytes = HeartbeatWire();
  Result<Frame> frame = ParseFrame(bytes.data(), bytes.size(), FrameLimits());
  REQUIRE(frame.ok());
  CHECK(frame->kind() == MessageKind::kHeartbeat);
  CHECK(reinterpret_cast<std::uintptr_t>(frame->data()) % 16 == 0);
  Result<HeartbeatMessage> m = DecodeHeartbeat(*frame);
  REQUIRE(m.ok());
  CHECK(m->sequence == 7);
  CHECK(m->sent_ns == 123456789);
}

TEST_CASE("framing rejects a truncated frame at every length") {
  const std::vector<uint8_t> bytes = HeartbeatWire();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    Result<Frame> frame = ParseFrame(bytes.data(), n, FrameLimits());
    CHECK_FALSE(frame.ok());
    CHECK(frame.status().code() == StatusCode::kCorrupt);
  }
}

TEST_CASE("framing rejects extra bytes after a frame") {
  std::vector<uint8_t> bytes = HeartbeatWire();
  bytes.push_back(0);
  CHECK(ParseFrame(bytes.data(), bytes.size(), FrameLimits()).status().code() == StatusCode::kCorrupt);
}

TEST_CASE("framing rejects a body with the wrong file identifier") {
  std::vector<uint8_t> bytes = HeartbeatWire();
  // The identifier follows the 4-byte root offset at the start of the body.
  REQUIRE(std::memcmp(bytes.data() + kFramePrefixBytes + 4, "FDRT", 4) == 0);
  bytes[kFramePrefixBytes + 4] = 'X';
  Result<Frame> frame = ParseFrame(bytes.data(), bytes.size(), FrameLimits());
  REQUIRE_FALSE(frame.ok());
  CHECK(frame.status().code() == StatusCode::kCorrupt);
  CHECK(frame.status().message().find("identifier") != std::string::npos);
}

TEST_CASE("framing rejects a body that fails FlatBuffers verification") {
  std::vector<uint8_t> bytes = HeartbeatWire();
  // Root offset pointing far outside the buffer.
  bytes[kFramePrefixBytes + 0] = 0xF0;
  bytes[kFramePrefixBytes + 1] = 0xFF;
  Result<Frame> frame = ParseFrame(bytes.data(), bytes.size(), FrameLimits());
  REQUIRE_FALSE(frame.ok());
  CHECK(frame.status().code() == StatusCode::kCorrupt);
  CHECK(frame.status().message().find("verification") != std::string::npos);
}

TEST_CASE("framing rejects a frame from another protocol version") {
  const std::vector<uint8_t> bytes = WithPrefix(HandBuiltBody(2, 10));
  Result<Frame> frame = ParseFrame(bytes.data(), bytes.size(), FrameLimits());
  REQUIRE_FALSE(frame.ok());
  CHECK(frame.status().code() == StatusCode::kUnsupported);
  const std::vector<uint8_t> good = WithPrefix(HandBuiltBody(kProtocolVersion, 10));
  CHECK(ParseFrame(good.data(), good.size(), FrameLimits()).ok());
}

TEST_CASE("framing rejects an unknown message kind") {
  for (uint8_t kind : {uint8_t{0}, uint8_t{kMaxMessageKind + 1}, uint8_t{200}}) {
    const std::vector<uint8_t> bytes = WithPrefix(HandBuiltBody(kProtocolVersion, kind));
    Result<Frame> frame = ParseFrame(bytes.data(), bytes.size(), FrameLimits());
    CHECK_FALSE(frame.ok());
  }
}

TEST_CASE("framing rejects a body longer than the frame limit even without a prefix") {
  Result<FrameBytes> body = FrameBytes::Allocate(kMinFrameBytes + 1);
  REQUIRE(body.ok());
  FrameLimits limits;
  limits.max_frame_bytes = kMinFrameBytes;
  CHECK(VerifyFrame(std::move(*body), limits).status().code() == StatusCode::kResourceExhausted);
}

TEST_CASE("frame limits refuse a maximum below the minimum frame size") {
  FrameLimits limits;
  CHECK(limits.Validate().ok());
  limits.max_frame_bytes = kMinFrameBytes - 1;
  CHECK(limits.Validate().code() == StatusCode::kInvalidArgument);
  limits.max_frame_bytes = kMinFrameBytes;
  CHECK(limits.Validate().ok());
  CHECK(limits.MaxChunkBytes() > 0);
}

TEST_CASE("random and mutated bytes are rejected or decode without reading out of bounds") {
  std::mt19937 rng(1234);
  const std::vector<uint8_t> valid = HeartbeatWire();
  UpdateMessage update;
  update.codec_spec = "fp32";
  std::vector<uint8_t> payload(300, 0x5A);
  update.payload.total_size = payload.size();
  update.payload.size = payload.size();
  update.payload.data = payload.data();
  Result<OutFrame> update_frame = Encode(update, FrameLimits());
  REQUIRE(update_frame.ok());
  const std::vector<uint8_t> valid_update = WireBytes(*update_frame);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> bytes = (trial % 2 == 0) ? valid : valid_update;
    if (trial % 3 == 0) {
      bytes.resize(kFramePrefixBytes + 8 + rng() % 200);
      for (std::size_t i = kFramePrefixBytes; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(rng());
      std::memcpy(bytes.data() + kFramePrefixBytes + 4, "FDRT", 4);
    } else {
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        const std::size_t at = kFramePrefixBytes + rng() % (bytes.size() - kFramePrefixBytes);
        bytes[at] = static_cast<uint8_t>(rng());
      }
    }
    WriteFramePrefix(static_cast<uint32_t>(bytes.size() - kFramePrefixBytes), bytes.data());
    Result<Frame> frame = ParseFrame(bytes.data(), bytes.size(), FrameLimits());
    if (!frame.ok()) continue;
    ++accepted;
    // Whatever passed verification must decode or be refused cleanly.
    switch (frame->kind()) {
      case MessageKind::kHeartbeat: (void)DecodeHeartbeat(*frame); break;
      case MessageKind::kUpdate: {
        Result<UpdateMessage> m = DecodeUpdate(*frame, FrameLimits());
        if (m.ok() && m->payload.size != 0) {
          CHECK(m->payload.data >= frame->data());
          CHECK(m->payload.data + m->payload.size <= frame->data() + frame->size());
        }
        break;
      }
      default: (void)DecodeError(*frame); break;
    }
  }
  CHECK(accepted > 0);
}

TEST_CASE("a frame pool hands back the storage of released large frames and keeps a bounded amount") {
  auto pool = FrameBytesPool::Create(3u << 20);
  const uint8_t* first = nullptr;
  {
    Result<FrameBytes> a = pool->Allocate(1u << 20);
    REQUIRE(a.ok());
    CHECK(a->size() == (1u << 20));
    CHECK(reinterpret_cast<uintptr_t>(a->data()) % 16 == 0);
    first = a->data();
    CHECK(pool->kept_bytes() == 0);
  }
  CHECK(pool->kept_bytes() == (1u << 20));
  {
    Result<FrameBytes> b = pool->Allocate((1u << 20) - 100);  // fits the kept buffer
    REQUIRE(b.ok());
    CHECK(b->data() == first);
    CHECK(b->size() == (1u << 20) - 100);
    CHECK(pool->kept_bytes() == 0);
    Result<FrameBytes> c = pool->Allocate(2u << 20);  // nothing kept fits: fresh storage
    REQUIRE(c.ok());
    CHECK(c->data() != first);
    Result<FrameBytes> d = pool->Allocate(1u << 20);
    REQUIRE(d.ok());
  }
  // 1 + 2 + 1 MiB released, at most 3 MiB kept.
  CHECK(pool->kept_bytes() <= (3u << 20));
  CHECK(pool->kept_bytes() >= (2u << 20));
  Result<FrameBytes> small = pool->Allocate(100);  // small frames are not pooled
  REQUIRE(small.ok());
  CHECK(small->size() == 100);
}

TEST_CASE("frames from a pool outlive the pool's owner") {
  Result<FrameBytes> bytes = Status(StatusCode::kInternal, "unset");
  {
    auto pool = FrameBytesPool::Create(8u << 20);
    bytes = pool->Allocate(1u << 20);
    REQUIRE(bytes.ok());
  }
  bytes->data()[0] = 1;  // the storage keeps the pool alive
  bytes->data()[(1u << 20) - 1] = 2;
  CHECK(bytes->data()[0] + bytes->data()[(1u << 20) - 1] == 3);
}

}  // namespace
}  // namespace transport
}  // namespace fedrt
