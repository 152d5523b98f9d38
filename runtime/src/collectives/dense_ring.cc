// Dense fp32 ring all-reduce (collectives.h, RingAllReduce).
//
// No copy of the vector is made on either side where the binding allows it:
// raw chunks are sent straight from the caller's vector (the frames borrow
// it, PayloadMode::kBorrow), reduce-scatter chunks are added into it piece
// by piece as they arrive and all-gather chunks are received straight into
// it (registered buffers). Chunks the binding delivers whole (small ones, the
// loopback) are added or copied from their frames.
#include <algorithm>
#include <cstring>

#include "collectives/ring.h"
#include "common/block_carver.h"
#include "fedrt/codecs/reduce.h"
#include "fedrt/runtime/collectives.h"

namespace fedrt {
namespace peer {
namespace {

using transport::RingPhase;

// A reduce-scatter piece: whole floats (pieces are multiples of 4 bytes
// apart, and the piece buffer is 64-byte aligned), added into the vector.
void AddPiece(const uint8_t* piece, std::size_t size, uint8_t* into) {
  AddFloats(static_cast<const float*>(static_cast<const void*>(piece)), size / sizeof(float),
            static_cast<float*>(static_cast<void*>(into)));
}

// The registered buffers a ring of up to shape.d floats lists at most: every
// chunk received in both phases. A shorter vector has shorter segments and
// chunks no larger, so no more chunks per segment than d's.
std::size_t MaxRegisteredBuffers(const CollectiveShape& shape) {
  const std::size_t p = shape.members;
  if (p <= 1 || shape.d == 0) return 0;
  const internal::RingShape ring(shape.d, p, shape.chunk_floats, shape.limits);
  std::size_t most = 1;
  for (std::size_t s = 0; s < p; ++s) most = std::max<std::size_t>(most, ring.chunks(s));
  return 2 * (p - 1) * most;
}

}  // namespace

Result<std::size_t> RingAllReduce::RequiredBytes(const CollectiveShape& shape) {
  Result<std::size_t> small = SmallAllReduce::RequiredBytes(shape);
  if (!small.ok()) return small.status();
  return AlignUp(MaxRegisteredBuffers(shape) * sizeof(RegisteredBuffer), kCollectiveAlignment) + *small;
}

Status RingAllReduce::Bind(void* memory, std::size_t size, const CollectiveShape& shape) {
  Result<std::size_t> needed = RequiredBytes(shape);
  if (!needed.ok()) return needed.status();
  FEDRT_RETURN_IF_ERROR(
      internal::CheckCollectiveMemory(memory, size, *needed, kCollectiveAlignment, "RingAllReduce"));
  const std::size_t count = MaxRegisteredBuffers(shape);
  const std::size_t list = AlignUp(count * sizeof(RegisteredBuffer), kCollectiveAlignment);
  auto* base = static_cast<unsigned char*>(memory);
  buffers_.Bind(static_cast<RegisteredBuffer*>(memory), count);
  return small_.Bind(*needed > list ? base + list : nullptr, *needed - list, shape);
}

RingAllReduce::RingAllReduce(CollectiveContext& context, uint32_t chunk_floats)
    : context_(context), chunk_floats_(chunk_floats), small_(context) {}

RingAllReduce::~RingAllReduce() = default;

Status RingAllReduce::Run(float* data, std::size_t n) {
  if (n != 0 && SmallAllReduce::Fits(n, context_.members().size(), context_.limits())) {
    Status s = small_.Run(data, n);
    stats_ = small_.stats();
    if (s.ok()) total_bytes_sent_ += stats_.bytes_sent;
    return s;
  }
  return RunFewestBytes(data, n);
}

Status RingAllReduce::RunFewestBytes(float* data, std::size_t n) {
  auto call = internal::BeginRingCall(context_, &stats_);
  if (!call.ok()) return call.status();
  const std::size_t p = call->p;
  if (p == 1 || n == 0) return Status::Ok();
  // On every return from here on, no queued frame may still read `data`.
  internal::ReleaseOnReturn release_on_return(context_, call->deadline);
  const internal::RingShape shape(n, p, chunk_floats_, context_.limits());
  const std::size_t r = context_.position();
  const uint32_t from = context_.left();
  auto chunk_begin = [&](std::size_t s, uint32_t k) { return data + shape.begin(s) + shape.chunk_offset(k); };

  // Raw chunks go straight into the vector: reduce-scatter ones are added as
  // they arrive, all-gather ones stored, in the order the left neighbour
  // sends them.
  std::size_t listed = 0;
  for (RingPhase phase : {RingPhase::kReduceScatter, RingPhase::kAllGather}) {
    for (uint32_t t = 0; t + 1 < p; ++t) {
      const std::size_t s = internal::ReceivedSegment(phase, r, p, t);
      for (uint32_t k = 0; k < shape.chunks(s); ++k) {
        const std::size_t bytes = shape.chunk_size(s, k) * sizeof(float);
        if (bytes < transport::kMinPlacedFrameBytes / 2) continue;  // never offered
        RegisteredBuffer b;
        b.head.kind = transport::MessageKind::kRingChunk;
        b.head.tag = call->collective;
        b.head.stage = static_cast<uint32_t>(phase);
        b.head.source = from;
        b.head.step = t;
        b.head.segment = static_cast<uint32_t>(s);
        b.head.index = k;
        b.head.offset = shape.chunk_offset(k) * sizeof(float);
        b.head.size = bytes;
        b.data = reinterpret_cast<uint8_t*>(chunk_begin(s, k));
        b.reduce = phase == RingPhase::kReduceScatter ? AddPiece : nullptr;
        buffers_.Resize(listed + 1)[listed] = b;
        ++listed;
      }
    }
  }
  context_.ExpectPayloads(from, buffers_.data(), listed);

  // Sends chunk k of segment s (its current values) for (phase, step), from
  // the vector itself: the frame borrows the bytes until it is written
  // (ReleaseOnReturn waits for that).
  auto send = [&](RingPhase phase, uint32_t step, std::size_t s, uint32_t k, bool) -> Status {
    transport::RingChunkMessage m = internal::RingChunkHead(context_, shape, call->collective, phase, step, s, k);
    m.payload.data = reinterpret_cast<const uint8_t*>(chunk_begin(s, k));
    m.payload.size = shape.chunk_size(s, k) * sizeof(float);
    stats_.bytes_sent += m.payload.size;
    return internal::SendChunk(context_, call->deadline, m, transport::PayloadMode::kBorrow);
  };

  // Receives chunk k of segment s for (phase, step) and adds it (reduce) or
  // stores it (gather).
  auto receive = [&](RingPhase phase, uint32_t step, std::size_t s, uint32_t k, bool add) -> Status {
    transport::Frame frame;
    transport::RingChunkMessage m;
    FEDRT_RETURN_IF_ERROR(
        internal::ReceiveChunk(context_, call->deadline, shape, call->collective, phase, step, s, k, &frame, &m));
    float* begin = chunk_begin(s, k);
    const std::size_t len = shape.chunk_size(s, k);
    if (m.payload.size != len * sizeof(float)) {
      return context_.Fail(static_cast<int>(from), context_.Named(from, Corrupt("ring chunk of the wrong size")));
    }
    if (add && m.payload.data == nullptr) {
      // Already added as it arrived (a registered buffer).
    } else if (add) {
      // Payload bytes start 16-byte aligned in the verified frame, so they
      // are read in place as floats.
      AddFloats(static_cast<const float*>(static_cast<const void*>(m.payload.data)), len, begin);
    } else if (m.payload.data == nullptr) {
      return context_.Fail(static_cast<int>(from),
                           context_.Named(from, Corrupt("all-gather chunk without its payload")));
    } else if (m.payload.data != reinterpret_cast<const uint8_t*>(begin)) {
      std::memcpy(begin, m.payload.data, len * sizeof(float));  // not placed
    }
    return Status::Ok();
  };

  FEDRT_RETURN_IF_ERROR(internal::RunRing(shape, r, send, receive));
  internal::EndRingCall(context_, *call, &stats_, &total_bytes_sent_);
  return Status::Ok();
}

}  // namespace peer
}  // namespace fedrt
