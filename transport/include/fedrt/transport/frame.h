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
#include <vector>

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

class FrameBytesPool;

namespace internal {
// Frees frame storage, or hands it back to the pool it came from.
struct FrameBytesFree {
  std::shared_ptr<FrameBytesPool> pool;  // null: plain AlignedFree
  std::size_t capacity = 0;
  bool lent = false;  // the memory is a connection handler's (LendFrameStorage): nothing to free
  void operator()(uint8_t* p) const;
};
}  // namespace internal

// Owned receive storage: 16-byte aligned (FlatBuffers reads scalars in place).
// Allocation failure is reported, never thrown. Storage that came from a
// FrameBytesPool goes back to it when the FrameBytes is destroyed.
class FrameBytes {
 public:
  FrameBytes() = default;
  static Result<FrameBytes> Allocate(std::size_t size);
  // Connections only: `size` bytes of memory a handler lends
  // (ConnectionHandler::LendFrameStorage), 16-byte aligned; not freed.
  static FrameBytes Lent(uint8_t* data, std::size_t size);
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  std::size_t size() const { return size_; }

 private:
  friend class FrameBytesPool;
  std::unique_ptr<uint8_t, internal::FrameBytesFree> data_;
  std::size_t size_ = 0;
};

// Keeps the storage of large received frames for the next ones, so a stream
// of large frames (ring chunks, update chunks) lands in the same warm pages
// instead of freshly mapped ones (a page fault per 4 KiB otherwise costs more
// than the copy from the socket). Requests below kMinPooledBytes (or the
// pool's own minimum) are plain allocations. At most `max_kept_bytes` of free storage is kept; frames the
// application holds on to are simply not back yet, so the pool never grows
// past what the application itself keeps alive plus that bound.
// Thread-safety: Allocate and the release of its buffers are safe from any
// thread (frames are often destroyed on another thread than the reader's) in
// builds with threads (FEDRT_HAVE_THREADS); the core built without threads
// has no lock and one thread.
class FrameBytesPool : public std::enable_shared_from_this<FrameBytesPool> {
 public:
  static constexpr std::size_t kMinPooledBytes = 64u << 10;
  static std::shared_ptr<FrameBytesPool> Create(std::size_t max_kept_bytes);
  // Pooling requests of `min_pooled_bytes` and more (the loopback pools
  // every frame: its small ones are the common case).
  static std::shared_ptr<FrameBytesPool> Create(std::size_t max_kept_bytes, std::size_t min_pooled_bytes);
  ~FrameBytesPool();
  FrameBytesPool(const FrameBytesPool&) = delete;
  FrameBytesPool& operator=(const FrameBytesPool&) = delete;

  Result<FrameBytes> Allocate(std::size_t size);
  // Keeps `count` free buffers for requests of up to `bytes` ready (within
  // max_kept_bytes), so the first frames find them too.
  void Reserve(std::size_t count, std::size_t bytes);
  std::size_t kept_bytes() const;

  struct State;  // private to the transport library

 private:
  FrameBytesPool(std::size_t max_kept_bytes, std::size_t min_pooled_bytes);
  friend struct internal::FrameBytesFree;
  void Return(uint8_t* p, std::size_t capacity);
  std::unique_ptr<State> state_;
};

class Frame;
namespace internal {
// Connections only: records that the payload bytes at body offset `offset`
// (`size` bytes) were received into `placed` instead of the body.
void MarkPlaced(Frame& frame, uint8_t* placed, std::size_t offset, std::size_t size);
// Connections only: the payload bytes at body offset `offset` (`size` bytes)
// were handed to the handler piece by piece and are in neither the body nor
// anywhere else.
void MarkConsumed(Frame& frame, std::size_t offset, std::size_t size);
}  // namespace internal

// A received frame body that passed VerifyFrame.
//
// A ring chunk's payload may have been placed: received straight into the
// receiver's memory (ConnectionHandler::PlacePayload) instead of the body.
// The body then holds every byte but those (the verifier never reads a
// byte vector's contents), and DecodeRingChunk points the payload at the
// placed bytes.
class Frame {
 public:
  Frame() = default;
  Frame(Frame&&) noexcept = default;
  Frame& operator=(Frame&&) noexcept = default;

  MessageKind kind() const { return kind_; }
  const uint8_t* data() const { return bytes_.data(); }
  std::size_t size() const { return bytes_.size(); }
  // Where a placed payload went (null: not placed), its offset in the body
  // and its size.
  const uint8_t* placed_payload() const { return placed_; }
  std::size_t placed_offset() const { return placed_offset_; }
  std::size_t placed_size() const { return placed_size_; }
  // The payload was consumed (ConnectionHandler::ConsumePayload): the range
  // placed_offset()/placed_size() of the body was never written.
  bool payload_consumed() const { return consumed_; }

 private:
  friend Result<Frame> VerifyFrame(FrameBytes body, const FrameLimits& limits);
  friend void internal::MarkPlaced(Frame& frame, uint8_t* placed, std::size_t offset, std::size_t size);
  friend void internal::MarkConsumed(Frame& frame, std::size_t offset, std::size_t size);
  FrameBytes bytes_;
  MessageKind kind_ = MessageKind::kNone;
  const uint8_t* placed_ = nullptr;
  std::size_t placed_offset_ = 0;
  std::size_t placed_size_ = 0;
  bool consumed_ = false;
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
//
// The body is one contiguous buffer, or (a frame that borrows its payload)
// three pieces in wire order: head | payload | tail, where head and tail
// belong to `owner` and the payload bytes stay in the caller's memory. A
// borrowed payload is read when the frame is written, not when it is built:
// the caller keeps those bytes unchanged until every copy of the frame has
// been released (a connection releases its copy once the bytes are handed to
// the socket, or dropped at close; `owner`'s use count tells when).
class OutFrame {
 public:
  struct Piece {
    const uint8_t* data = nullptr;
    uint32_t size = 0;
  };

  OutFrame() = default;
  // Adopts a body owned by `owner` (kept alive as long as any copy).
  OutFrame(std::shared_ptr<const void> owner, const uint8_t* body, uint32_t body_size,
           MessageKind kind);
  // A body made of owner's head and tail around borrowed payload bytes.
  OutFrame(std::shared_ptr<const void> owner, Piece head, Piece payload, Piece tail, MessageKind kind);

  bool empty() const { return piece_count_ == 0; }
  MessageKind kind() const { return kind_; }
  const uint8_t* prefix() const { return prefix_; }
  // The contiguous body; for a frame with a borrowed payload, its head only.
  const uint8_t* body() const { return pieces_[0].data; }
  uint32_t body_size() const { return body_size_; }
  std::size_t wire_size() const { return kFramePrefixBytes + body_size_; }
  bool contiguous() const { return piece_count_ <= 1; }
  // The body in wire order: one piece, or head, payload, tail.
  std::size_t piece_count() const { return piece_count_; }
  const Piece& piece(std::size_t i) const { return pieces_[i]; }
  // Prefix and body bytes as a socket would carry them (tests, loopback).
  void AppendWireBytes(std::vector<uint8_t>* out) const;

 private:
  std::shared_ptr<const void> owner_;
  Piece pieces_[3];
  uint8_t piece_count_ = 0;
  uint32_t body_size_ = 0;
  MessageKind kind_ = MessageKind::kNone;
  uint8_t prefix_[kFramePrefixBytes] = {0, 0, 0, 0};
};

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_FRAME_H_
