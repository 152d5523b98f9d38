// Frames: the unit a fedrt connection sends and receives.
//
// On the wire a frame is a 4-byte little-endian body size followed by the
// body, one FlatBuffer (schema: transport/schema/fedrt.fbs, identifier "FDRT").
// This header is the trust boundary for received bytes:
//
//   ParseFramePrefix  the size is checked against FrameLimits before anything
//                     is allocated for the body;
//   VerifyFrame       the body goes through the FlatBuffers Verifier
//                     (identifier, offsets, depth), then the protocol version
//                     and the message kind are checked.
//
// Only a Frame (the result of VerifyFrame) can be decoded into a message
// (messages.h), and decoding applies the per-message semantic checks. Nothing
// from FlatBuffers or Asio is visible here.
//
// Ownership: OutFrame shares its immutable bytes (copying it is cheap; one
// encoded frame can be queued on many connections). Frame owns its bytes and
// is move-only; message views decoded from it point into it.
//
// Thread-safety: values. OutFrame may be shared across threads (immutable).
#ifndef FEDRT_TRANSPORT_FRAME_H_
#define FEDRT_TRANSPORT_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "fedrt/platform/status.h"

namespace fedrt {
namespace transport {

// Protocol version spoken by this build (ProtocolVersion.Current in the schema).
inline constexpr uint16_t kProtocolVersion = 1;

inline constexpr std::size_t kFramePrefixBytes = 4;
// Smallest configurable frame limit: room for every non-payload message with
// its largest allowed fields, plus a useful chunk.
inline constexpr uint32_t kMinFrameBytes = 64u << 10;
inline constexpr uint32_t kDefaultMaxFrameBytes = 4u << 20;
// Bytes reserved for the message fields around a chunk's payload bytes.
inline constexpr uint32_t kChunkOverheadBytes = 32u << 10;
// Largest payload (model, update) a chunked message may announce by default.
inline constexpr uint64_t kDefaultMaxPayloadBytes = uint64_t{1} << 32;

struct FrameLimits {
  // Largest body accepted or produced, excluding the 4-byte prefix.
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
  // Largest total_size a chunked payload may announce.
  uint64_t max_payload_bytes = kDefaultMaxPayloadBytes;

  // Payload bytes per chunk so that every chunk frame fits max_frame_bytes.
  uint32_t MaxChunkBytes() const { return max_frame_bytes - kChunkOverheadBytes; }
  // kInvalidArgument when max_frame_bytes < kMinFrameBytes or > 1 GiB.
  Status Validate() const;
};

// Values pinned to the schema's MessageKind (and its Message union).
enum class MessageKind : uint8_t {
  kNone = 0,
  kJoin = 1,
  kChallenge = 2,
  kAuthenticate = 3,
  kJoinResponse = 4,
  kRoundInstructions = 5,
  kUpdate = 6,
  kAck = 7,
  kLeave = 8,
  kError = 9,
  kHeartbeat = 10,
  kRingChunk = 11,
  kGossipModel = 12,
};
inline constexpr uint8_t kMaxMessageKind = 12;

// "join", "update", ...; "unknown" outside the enum.
const char* MessageKindName(MessageKind kind);

// Writes `body_size` as 4 little-endian bytes.
void WriteFramePrefix(uint32_t body_size, uint8_t prefix[kFramePrefixBytes]);

// Decodes a prefix. kResourceExhausted when the size exceeds the limit,
// kCorrupt when it is zero (no valid body is empty).
Result<uint32_t> ParseFramePrefix(const uint8_t prefix[kFramePrefixBytes], const FrameLimits& limits);

// Owned receive storage: 16-byte aligned (FlatBuffers reads scalars in place).
// Allocation failure is reported, never thrown.
class FrameBytes {
 public:
  FrameBytes() = default;
  static Result<FrameBytes> Allocate(std::size_t size);
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  std::size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> data_;
  std::size_t size_ = 0;
};

// A received frame body that passed VerifyFrame.
class Frame {
 public:
  Frame() = default;
  Frame(Frame&&) noexcept = default;
  Frame& operator=(Frame&&) noexcept = default;

  MessageKind kind() const { return kind_; }
  const uint8_t* data() const { return bytes_.data(); }
  std::size_t size() const { return bytes_.size(); }

 private:
  friend Result<Frame> VerifyFrame(FrameBytes body, const FrameLimits& limits);
  FrameBytes bytes_;
  MessageKind kind_ = MessageKind::kNone;
};

// The trust boundary: size limit, FlatBuffers Verifier, file identifier,
// protocol version, known message kind. kCorrupt, kResourceExhausted or
// kUnsupported (another protocol version) otherwise.
Result<Frame> VerifyFrame(FrameBytes body, const FrameLimits& limits);

// Parses one whole frame (prefix + body) from contiguous bytes, as a stream
// reader would: kCorrupt when the bytes are truncated or followed by extra
// bytes. Copies the body into fresh aligned storage.
Result<Frame> ParseFrame(const uint8_t* wire, std::size_t size, const FrameLimits& limits);

// An encoded frame ready to send: prefix and body, immutable, shared.
class OutFrame {
 public:
  OutFrame() = default;
  // Adopts a body owned by `owner` (kept alive as long as any copy).
  OutFrame(std::shared_ptr<const void> owner, const uint8_t* body, uint32_t body_size,
           MessageKind kind);

  bool empty() const { return body_ == nullptr; }
  MessageKind kind() const { return kind_; }
  const uint8_t* prefix() const { return prefix_; }
  const uint8_t* body() const { return body_; }
  uint32_t body_size() const { return body_size_; }
  std::size_t wire_size() const { return kFramePrefixBytes + body_size_; }

 private:
  std::shared_ptr<const void> owner_;
  const uint8_t* body_ = nullptr;
  uint32_t body_size_ = 0;
  MessageKind kind_ = MessageKind::kNone;
  uint8_t prefix_[kFramePrefixBytes] = {0, 0, 0, 0};
};

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_FRAME_H_
