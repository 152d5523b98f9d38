// Frame prefix, receive storage, and the verification every received frame
// goes through before anything reads it.
#include "fedrt/transport/frame.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fedrt/platform/config.h"
#include "fedrt/platform/memory.h"
#include "wire.h"
#include "fedrt/platform/concat.h"

#if FEDRT_HAVE_THREADS
#include <mutex>
#endif

namespace fedrt {
namespace transport {

Status FrameLimits::Validate() const {
  if (max_frame_bytes < kMinFrameBytes || max_frame_bytes > (1u << 30)) {
    return InvalidArgument(Concat({"max_frame_bytes ", max_frame_bytes, " outside [", kMinFrameBytes, ", 1 GiB]"}));
  }
  return Status::Ok();
}

const char* MessageKindName(MessageKind kind) {
  switch (kind) {
    case MessageKind::kNone: return "none";
    case MessageKind::kJoin: return "join";
    case MessageKind::kChallenge: return "challenge";
    case MessageKind::kAuthenticate: return "authenticate";
    case MessageKind::kJoinResponse: return "join_response";
    case MessageKind::kRoundInstructions: return "round_instructions";
    case MessageKind::kUpdate: return "update";
    case MessageKind::kAck: return "ack";
    case MessageKind::kLeave: return "leave";
    case MessageKind::kError: return "error";
    case MessageKind::kHeartbeat: return "heartbeat";
    case MessageKind::kRingChunk: return "ring_chunk";
    case MessageKind::kGossipModel: return "gossip_model";
  }
  return "unknown";
}

void WriteFramePrefix(uint32_t body_size, uint8_t prefix[kFramePrefixBytes]) {
  for (std::size_t i = 0; i < kFramePrefixBytes; ++i) {
    prefix[i] = static_cast<uint8_t>(body_size >> (8 * i));
  }
}

Result<uint32_t> ParseFramePrefix(const uint8_t prefix[kFramePrefixBytes], const FrameLimits& limits) {
  uint32_t size = 0;
  for (std::size_t i = 0; i < kFramePrefixBytes; ++i) size |= uint32_t{prefix[i]} << (8 * i);
  if (size == 0) return Corrupt("frame prefix announces an empty body");
  if (size > limits.max_frame_bytes) {
    return Status(StatusCode::kResourceExhausted,
                  Concat({"frame of ", size, " bytes exceeds the limit of ", limits.max_frame_bytes}));
  }
  return size;
}

void internal::FrameBytesFree::operator()(uint8_t* p) const {
  if (lent) return;
  if (pool) {
    pool->Return(p, capacity);
  } else {
    AlignedFree(p);
  }
}

namespace {

// The pool's lock. In a build with threads a frame is released on whichever
// thread holds it last (a collective's thread, the engine's, the event
// loop's), not on the reader's, and frames outlive their connection, so one
// pool per connection or per thread would not remove the sharing: the pool
// locks. The core without threads (FEDRT_HAVE_THREADS 0: a Cortex-M build,
// whose toolchain may have no <mutex>) has one thread and nothing to lock.
#if FEDRT_HAVE_THREADS
using PoolMutex = std::mutex;
using PoolLock = std::lock_guard<std::mutex>;
#else
struct PoolMutex {};
struct PoolLock {
  explicit PoolLock(PoolMutex&) {}
};
#endif

}  // namespace

struct FrameBytesPool::State {
  PoolMutex mutex;
  std::vector<std::pair<uint8_t*, std::size_t>> free;  // storage, capacity
  std::size_t kept = 0;
  std::size_t max_kept = 0;
  std::size_t min_pooled = FrameBytesPool::kMinPooledBytes;
  std::size_t granule = FrameBytesPool::kMinPooledBytes;  // capacities are multiples of it
};

namespace {

// The capacity a pooled buffer for `size` bytes gets: whole granules.
std::size_t CapacityFor(const FrameBytesPool::State& state, std::size_t size) {
  return std::max<std::size_t>(state.granule, (size + state.granule - 1) / state.granule * state.granule);
}

}  // namespace

std::shared_ptr<FrameBytesPool> FrameBytesPool::Create(std::size_t max_kept_bytes) {
  return Create(max_kept_bytes, kMinPooledBytes);
}

std::shared_ptr<FrameBytesPool> FrameBytesPool::Create(std::size_t max_kept_bytes, std::size_t min_pooled_bytes) {
  return std::shared_ptr<FrameBytesPool>(new FrameBytesPool(max_kept_bytes, min_pooled_bytes));
}

FrameBytesPool::FrameBytesPool(std::size_t max_kept_bytes, std::size_t min_pooled_bytes)
    : state_(std::make_unique<State>()) {
  state_->max_kept = max_kept_bytes;
  state_->min_pooled = min_pooled_bytes;
  state_->granule = std::max<std::size_t>(1024, std::min(min_pooled_bytes, kMinPooledBytes));
  state_->free.reserve(64);  // returns allocate nothing until this many are kept
}

FrameBytesPool::~FrameBytesPool() {
  for (const auto& f : state_->free) AlignedFree(f.first);
}

std::size_t FrameBytesPool::kept_bytes() const {
  PoolLock lock(state_->mutex);
  return state_->kept;
}

Result<FrameBytes> FrameBytesPool::Allocate(std::size_t size) {
  if (size < state_->min_pooled) return FrameBytes::Allocate(size);
  FrameBytes bytes;
  {
    // The smallest kept buffer that fits.
    PoolLock lock(state_->mutex);
    auto best = state_->free.end();
    for (auto it = state_->free.begin(); it != state_->free.end(); ++it) {
      if (it->second >= size && (best == state_->free.end() || it->second < best->second)) best = it;
    }
    if (best != state_->free.end()) {
      bytes.data_ = std::unique_ptr<uint8_t, internal::FrameBytesFree>(
          best->first, internal::FrameBytesFree{shared_from_this(), best->second});
      state_->kept -= best->second;
      *best = state_->free.back();
      state_->free.pop_back();
    }
  }
  if (!bytes.data_) {
    const std::size_t capacity = CapacityFor(*state_, size);
    uint8_t* p = static_cast<uint8_t*>(AlignedAlloc(capacity, 16));
    if (p == nullptr) {
      return Status(StatusCode::kResourceExhausted,
                    Concat({"cannot allocate ", size, " bytes for a frame"}));
    }
    bytes.data_ = std::unique_ptr<uint8_t, internal::FrameBytesFree>(p, internal::FrameBytesFree{shared_from_this(), capacity});
  }
  bytes.size_ = size;
  return bytes;
}

void FrameBytesPool::Reserve(std::size_t count, std::size_t bytes) {
  const std::size_t capacity = CapacityFor(*state_, bytes);
  for (std::size_t i = 0; i < count; ++i) {  // beyond max_kept_bytes, Return frees them again
    uint8_t* p = static_cast<uint8_t*>(AlignedAlloc(capacity, 16));
    if (p == nullptr) return;
    Return(p, capacity);
  }
}

void FrameBytesPool::Return(uint8_t* p, std::size_t capacity) {
  {
    PoolLock lock(state_->mutex);
    if (state_->kept + capacity <= state_->max_kept) {
      state_->free.emplace_back(p, capacity);
      state_->kept += capacity;
      return;
    }
  }
  AlignedFree(p);
}

Result<FrameBytes> FrameBytes::Allocate(std::size_t size) {
  FrameBytes bytes;
  bytes.data_.reset(static_cast<uint8_t*>(AlignedAlloc(size, 16)));
  if (!bytes.data_) {
    return Status(StatusCode::kResourceExhausted,
                  Concat({"cannot allocate ", size, " bytes for a frame"}));
  }
  bytes.size_ = size;
  return bytes;
}

FrameBytes FrameBytes::Lent(uint8_t* data, std::size_t size) {
  FrameBytes bytes;
  internal::FrameBytesFree lent;
  lent.lent = true;
  bytes.data_ = std::unique_ptr<uint8_t, internal::FrameBytesFree>(data, std::move(lent));
  bytes.size_ = size;
  return bytes;
}

namespace internal {
void MarkPlaced(Frame& frame, uint8_t* placed, std::size_t offset, std::size_t size) {
  frame.placed_ = placed;
  frame.placed_offset_ = offset;
  frame.placed_size_ = size;
}
void MarkConsumed(Frame& frame, std::size_t offset, std::size_t size) {
  frame.consumed_ = true;
  frame.placed_offset_ = offset;
  frame.placed_size_ = size;
}
}  // namespace internal

Result<Frame> VerifyFrame(FrameBytes body, const FrameLimits& limits) {
  if (body.size() == 0) return Corrupt("empty frame");
  if (body.size() > limits.max_frame_bytes) {
    return Status(StatusCode::kResourceExhausted, Concat({"frame of ", body.size(), " bytes exceeds the limit of ",
                                                          limits.max_frame_bytes}));
  }
  if (body.size() < 8 || !wire::EnvelopeBufferHasIdentifier(body.data())) {
    return Corrupt("frame does not carry the fedrt file identifier");
  }
  flatbuffers::Verifier::Options options;
  options.max_depth = 16;
  options.max_tables = 4096;
  flatbuffers::Verifier verifier(body.data(), body.size(), options);
  if (!wire::VerifyEnvelopeBuffer(verifier)) return Corrupt("frame failed FlatBuffers verification");
  const wire::Envelope* envelope = wire::GetEnvelope(body.data());
  const auto version = static_cast<uint16_t>(envelope->version());
  if (version != kProtocolVersion) {
    return Unsupported(Concat({"peer speaks protocol version ", version, ", this build speaks ", kProtocolVersion}));
  }
  const auto kind = static_cast<uint8_t>(envelope->message_type());
  if (kind == 0 || kind > kMaxMessageKind || envelope->message() == nullptr) {
    return Corrupt(Concat({"frame holds unknown message kind ", kind}));
  }
  Frame frame;
  frame.bytes_ = std::move(body);
  frame.kind_ = static_cast<MessageKind>(kind);
  return frame;
}

Result<Frame> ParseFrame(const uint8_t* wire, std::size_t size, const FrameLimits& limits) {
  if (size < kFramePrefixBytes) return Corrupt("truncated frame prefix");
  Result<uint32_t> body_size = ParseFramePrefix(wire, limits);
  if (!body_size.ok()) return body_size.status();
  const std::size_t available = size - kFramePrefixBytes;
  if (available < *body_size) {
    return Corrupt(Concat({"truncated frame: ", available, " of ", *body_size, " body bytes"}));
  }
  if (available > *body_size) return Corrupt("extra bytes after the frame");
  Result<FrameBytes> body = FrameBytes::Allocate(*body_size);
  if (!body.ok()) return body.status();
  std::memcpy(body->data(), wire + kFramePrefixBytes, *body_size);
  return VerifyFrame(std::move(*body), limits);
}

OutFrame::OutFrame(std::shared_ptr<const void> owner, const uint8_t* body, uint32_t body_size,
                   MessageKind kind)
    : owner_(std::move(owner)), piece_count_(body == nullptr ? 0 : 1), body_size_(body_size), kind_(kind) {
  pieces_[0] = {body, body_size};
  WriteFramePrefix(body_size, prefix_);
}

OutFrame::OutFrame(std::shared_ptr<const void> owner, Piece head, Piece payload, Piece tail, MessageKind kind)
    : owner_(std::move(owner)), piece_count_(3), body_size_(head.size + payload.size + tail.size), kind_(kind) {
  pieces_[0] = head;
  pieces_[1] = payload;
  pieces_[2] = tail;
  WriteFramePrefix(body_size_, prefix_);
}

void OutFrame::AppendWireBytes(std::vector<uint8_t>* out) const {
  out->insert(out->end(), prefix_, prefix_ + kFramePrefixBytes);
  for (std::size_t i = 0; i < piece_count_; ++i) {
    if (pieces_[i].size != 0) out->insert(out->end(), pieces_[i].data, pieces_[i].data + pieces_[i].size);
  }
}

}  // namespace transport
}  // namespace fedrt
