// Frame prefix, receive storage, and the verification every received frame
// goes through before anything reads it.
#include "fedrt/transport/frame.h"

#include <cstring>
#include <string>

#include "fedrt/platform/memory.h"
#include "wire.h"

namespace fedrt {
namespace transport {

Status FrameLimits::Validate() const {
  if (max_frame_bytes < kMinFrameBytes || max_frame_bytes > (1u << 30)) {
    return InvalidArgument("max_frame_bytes " + std::to_string(max_frame_bytes) +
                           " outside [" + std::to_string(kMinFrameBytes) + ", 1 GiB]");
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
                  "frame of " + std::to_string(size) + " bytes exceeds the limit of " +
                      std::to_string(limits.max_frame_bytes));
  }
  return size;
}

void FrameBytes::Free::operator()(uint8_t* p) const { AlignedFree(p); }

Result<FrameBytes> FrameBytes::Allocate(std::size_t size) {
  FrameBytes bytes;
  bytes.data_.reset(static_cast<uint8_t*>(AlignedAlloc(size, 16)));
  if (!bytes.data_) {
    return Status(StatusCode::kResourceExhausted,
                  "cannot allocate " + std::to_string(size) + " bytes for a frame");
  }
  bytes.size_ = size;
  return bytes;
}

Result<Frame> VerifyFrame(FrameBytes body, const FrameLimits& limits) {
  if (body.size() == 0) return Corrupt("empty frame");
  if (body.size() > limits.max_frame_bytes) {
    return Status(StatusCode::kResourceExhausted, "frame of " + std::to_string(body.size()) +
                                                      " bytes exceeds the limit of " +
                                                      std::to_string(limits.max_frame_bytes));
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
    return Unsupported("peer speaks protocol version " + std::to_string(version) +
                       ", this build speaks " + std::to_string(kProtocolVersion));
  }
  const auto kind = static_cast<uint8_t>(envelope->message_type());
  if (kind == 0 || kind > kMaxMessageKind || envelope->message() == nullptr) {
    return Corrupt("frame holds unknown message kind " + std::to_string(kind));
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
    return Corrupt("truncated frame: " + std::to_string(available) + " of " +
                   std::to_string(*body_size) + " body bytes");
  }
  if (available > *body_size) return Corrupt("extra bytes after the frame");
  Result<FrameBytes> body = FrameBytes::Allocate(*body_size);
  if (!body.ok()) return body.status();
  std::memcpy(body->data(), wire + kFramePrefixBytes, *body_size);
  return VerifyFrame(std::move(*body), limits);
}

OutFrame::OutFrame(std::shared_ptr<const void> owner, const uint8_t* body, uint32_t body_size,
                   MessageKind kind)
    : owner_(std::move(owner)), body_(body), body_size_(body_size), kind_(kind) {
  WriteFramePrefix(body_size, prefix_);
}

}  // namespace transport
}  // namespace fedrt
