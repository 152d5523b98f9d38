// libFuzzer target: the frame parser and every message decoder, fed untrusted
// bytes as a socket would deliver them, plus the chunk-sequence checks. Any
// crash, out-of-bounds read or sanitizer report is a bug; rejections are fine.
// Views that decode successfully must point inside the frame.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fedrt/transport/chunking.h"
#include "fedrt/transport/frame.h"
#include "fedrt/transport/messages.h"

namespace {

using namespace fedrt::transport;

void CheckInside(const Frame& frame, const ChunkView& chunk) {
  if (chunk.size == 0) return;
  if (chunk.data < frame.data() || chunk.data + chunk.size > frame.data() + frame.size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  FrameLimits limits;
  limits.max_frame_bytes = kMinFrameBytes;
  limits.max_payload_bytes = 1u << 20;
  fedrt::Result<Frame> frame = ParseFrame(data, size, limits);
  if (!frame.ok()) return 0;
  ChunkSequence sequence(limits.max_payload_bytes);
  switch (frame->kind()) {
    case MessageKind::kJoin: (void)DecodeJoin(*frame); break;
    case MessageKind::kChallenge: (void)DecodeChallenge(*frame); break;
    case MessageKind::kAuthenticate: (void)DecodeAuthenticate(*frame); break;
    case MessageKind::kJoinResponse: (void)DecodeJoinResponse(*frame); break;
    case MessageKind::kRoundInstructions: {
      auto m = DecodeRoundInstructions(*frame, limits);
      if (m.ok()) {
        CheckInside(*frame, m->payload);
        (void)sequence.Accept(m->payload);
      }
      break;
    }
    case MessageKind::kUpdate: {
      auto m = DecodeUpdate(*frame, limits);
      if (m.ok()) {
        CheckInside(*frame, m->payload);
        (void)sequence.Accept(m->payload);
      }
      break;
    }
    case MessageKind::kAck: (void)DecodeAck(*frame); break;
    case MessageKind::kLeave: (void)DecodeLeave(*frame); break;
    case MessageKind::kError: (void)DecodeError(*frame); break;
    case MessageKind::kHeartbeat: (void)DecodeHeartbeat(*frame); break;
    case MessageKind::kRingChunk: {
      auto m = DecodeRingChunk(*frame, limits);
      if (m.ok()) CheckInside(*frame, m->payload);
      break;
    }
    case MessageKind::kGossipModel: {
      auto m = DecodeGossipModel(*frame, limits);
      if (m.ok()) CheckInside(*frame, m->payload);
      break;
    }
    case MessageKind::kNone: std::abort();  // VerifyFrame never lets this through
  }
  return 0;
}
