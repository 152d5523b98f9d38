// libFuzzer target: the frame parser and every message decoder, fed untrusted
// bytes as a socket would deliver them, plus the chunk-sequence checks. Any
// crash, out-of-bounds read or sanitizer report is a bug; rejections are fine.
//
// The input is a frame's body: the harness puts the size prefix in front, so
// a mutation that grows or shrinks the body is still a whole frame and
// reaches the FlatBuffers Verifier and the decoders (the prefix alone is
// checked on the input's first four bytes as well). Checked besides: views
// that decode successfully point inside the frame, and a decoded message
// that encodes again decodes again (what one side accepts the other can send).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fedrt/transport/chunking.h"
#include "fedrt/transport/frame.h"
#include "fedrt/transport/messages.h"

namespace {

using namespace fedrt::transport;

void CheckInside(const Frame& frame, const ChunkView& chunk) {
  if (chunk.size == 0) return;
  if (chunk.data < frame.data() || chunk.data + chunk.size > frame.data() + frame.size()) std::abort();
}

// A message that decoded and encodes again must decode again.
template <typename Message, typename Decode>
void CheckReencodes(const Message& m, const FrameLimits& limits, Decode decode) {
  fedrt::Result<OutFrame> out = Encode(m, limits);
  if (!out.ok()) return;
  std::vector<uint8_t> wire;
  out->AppendWireBytes(&wire);
  fedrt::Result<Frame> again = ParseFrame(wire.data(), wire.size(), limits);
  if (!again.ok() || !decode(*again).ok()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  FrameLimits limits;
  limits.max_frame_bytes = kMinFrameBytes;
  limits.max_payload_bytes = 1u << 20;
  if (size >= kFramePrefixBytes) (void)ParseFramePrefix(data, limits);
  if (size == 0 || size > limits.max_frame_bytes) return 0;
  std::vector<uint8_t> wire(kFramePrefixBytes + size);
  WriteFramePrefix(static_cast<uint32_t>(size), wire.data());
  std::memcpy(wire.data() + kFramePrefixBytes, data, size);
  fedrt::Result<Frame> frame = ParseFrame(wire.data(), wire.size(), limits);
  if (!frame.ok()) return 0;
  ChunkSequence sequence(limits.max_payload_bytes);
  const auto with_limits = [&limits](auto decode) { return [&limits, decode](const Frame& f) { return decode(f, limits); }; };
  switch (frame->kind()) {
    case MessageKind::kJoin: {
      auto m = DecodeJoin(*frame);
      if (m.ok()) CheckReencodes(*m, limits, DecodeJoin);
      break;
    }
    case MessageKind::kChallenge: {
      auto m = DecodeChallenge(*frame);
      if (m.ok()) CheckReencodes(*m, limits, DecodeChallenge);
      break;
    }
    case MessageKind::kAuthenticate: {
      auto m = DecodeAuthenticate(*frame);
      if (m.ok()) CheckReencodes(*m, limits, DecodeAuthenticate);
      break;
    }
    case MessageKind::kJoinResponse: {
      auto m = DecodeJoinResponse(*frame);
      if (m.ok()) CheckReencodes(*m, limits, DecodeJoinResponse);
      break;
    }
    case MessageKind::kRoundInstructions: {
      auto m = DecodeRoundInstructions(*frame, limits);
      if (m.ok()) {
        CheckInside(*frame, m->payload);
        (void)sequence.Accept(m->payload);
        CheckReencodes(*m, limits, with_limits(DecodeRoundInstructions));
      }
      break;
    }
    case MessageKind::kUpdate: {
      auto m = DecodeUpdate(*frame, limits);
      if (m.ok()) {
        CheckInside(*frame, m->payload);
        (void)sequence.Accept(m->payload);
        // DecodeUpdate is overloaded (the in-place form too): name the one returning a Result.
        using DecodeToResult = fedrt::Result<UpdateMessage> (*)(const Frame&, const FrameLimits&);
        CheckReencodes(*m, limits, with_limits(static_cast<DecodeToResult>(DecodeUpdate)));
      }
      break;
    }
    case MessageKind::kAck: {
      auto m = DecodeAck(*frame);
      if (m.ok()) CheckReencodes(*m, limits, DecodeAck);
      break;
    }
    case MessageKind::kLeave: {
      auto m = DecodeLeave(*frame);
      if (m.ok()) CheckReencodes(*m, limits, DecodeLeave);
      break;
    }
    case MessageKind::kError: {
      auto m = DecodeError(*frame);
      if (m.ok()) {
        (void)ToStatus(*m);
        CheckReencodes(*m, limits, DecodeError);
      }
      break;
    }
    case MessageKind::kHeartbeat: {
      auto m = DecodeHeartbeat(*frame);
      if (m.ok()) CheckReencodes(*m, limits, DecodeHeartbeat);
      break;
    }
    case MessageKind::kRingChunk: {
      auto m = DecodeRingChunk(*frame, limits);
      if (m.ok()) {
        CheckInside(*frame, m->payload);
        CheckReencodes(*m, limits, with_limits(DecodeRingChunk));
      }
      break;
    }
    case MessageKind::kGossipModel: {
      auto m = DecodeGossipModel(*frame, limits);
      if (m.ok()) {
        CheckInside(*frame, m->payload);
        CheckReencodes(*m, limits, with_limits(DecodeGossipModel));
      }
      break;
    }
    case MessageKind::kNone: std::abort();  // VerifyFrame never lets this through
  }
  return 0;
}
