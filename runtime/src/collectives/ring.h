// What the ring collectives share (dense_ring.cc, compressed_ring.cc,
// iwp_allreduce.cc): the segment and chunk geometry, the order of the ring's
// hops, and the checks of a received ring chunk.
//
// Wire use (transport/README.md, "Peer protocol"): data travels as RingChunk
// {collective, step, phase, source rank (original), segment, codec, chunk};
// chunks of one segment follow each other on one connection, in order.
#ifndef FEDRT_RUNTIME_SRC_COLLECTIVES_RING_H_
#define FEDRT_RUNTIME_SRC_COLLECTIVES_RING_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/collective_context.h"
#include "fedrt/runtime/collectives.h"
#include "fedrt/transport/messages.h"

namespace fedrt {
namespace peer {
namespace internal {

// kFailedPrecondition after a failure, or when the group is not a ring.
Status CheckRing(const CollectiveContext& context);

// One call of a ring collective: when it started, its deadline and number,
// and the group's size. A struct, not a structured binding: the collectives'
// lambdas capture it (C++17 lambdas cannot capture structured bindings).
struct RingCall {
  uint64_t start = 0;       // the context's clock at the call
  Deadline deadline = 0;    // the step's (CollectiveContext::StepDeadline)
  uint64_t collective = 0;  // NextCollectiveId(), taken on every call so every member numbers alike
  std::size_t p = 0;        // members
};

// What every ring collective does first: clears *stats, takes the call's
// deadline and number, then checks the ring (CheckRing's errors).
Result<RingCall> BeginRingCall(CollectiveContext& context, AllReduceStats* stats);

// What every ring collective does on success: the call's time into *stats,
// its bytes into *total_bytes_sent.
void EndRingCall(const CollectiveContext& context, const RingCall& call, AllReduceStats* stats,
                 uint64_t* total_bytes_sent);

// n floats over p ring positions: segment s is [begin(s), begin(s + 1)),
// cut into chunks of `chunk` floats (the last one shorter; an empty segment
// still has one, empty, chunk).
struct RingShape {
  std::size_t n = 0;
  std::size_t p = 1;
  std::size_t chunk = 1;

  // `chunk_floats` as RingAllReduce takes it (0: automatic), capped to what
  // fits one frame (codec headers need a little room).
  RingShape(std::size_t floats, std::size_t members, uint32_t chunk_floats, const transport::FrameLimits& limits);
  std::size_t begin(std::size_t s) const { return s * n / p; }
  std::size_t size(std::size_t s) const { return begin(s + 1) - begin(s); }
  uint32_t chunks(std::size_t s) const {
    return static_cast<uint32_t>(std::max<std::size_t>(1, (size(s) + chunk - 1) / chunk));
  }
  std::size_t chunk_offset(uint32_t k) const { return static_cast<std::size_t>(k) * chunk; }  // floats
  std::size_t chunk_size(std::size_t s, uint32_t k) const {
    return std::min(chunk, size(s) - std::min(size(s), chunk_offset(k)));
  }
};

// The segment ring position r receives at hop t of `phase` (reduce-scatter:
// r - t - 1; all-gather: r - t).
inline std::size_t ReceivedSegment(transport::RingPhase phase, std::size_t r, std::size_t p, std::size_t t) {
  return phase == transport::RingPhase::kReduceScatter ? (r + 2 * p - t - 1) % p : (r + 2 * p - t) % p;
}

// Runs the ring's hops in order:
//   send(phase, step, segment, chunk, decode_back) and
//   receive(phase, step, segment, chunk, add).
// Reduce-scatter: at step t this peer sends segment (r - t) and receives
// segment (r - t - 1), which it reduces and forwards at step t + 1 chunk by
// chunk, so the chunks flow around the ring without waiting for whole
// segments. After p - 1 steps it owns the full sum of segment (r + 1), which
// it sends on as the all-gather's first hop (decode_back: a codec's sender
// takes the decoded values too, so every peer ends with the same bits).
// All-gather: the reduced segments travel once more around the ring.
template <typename Send, typename Receive>
Status RunRing(const RingShape& shape, std::size_t r, Send send, Receive receive) {
  using transport::RingPhase;
  const std::size_t p = shape.p;
  for (uint32_t k = 0; k < shape.chunks(r); ++k) {
    FEDRT_RETURN_IF_ERROR(send(RingPhase::kReduceScatter, 0, r, k, false));
  }
  for (uint32_t t = 0; t + 1 < p; ++t) {
    const std::size_t s = ReceivedSegment(RingPhase::kReduceScatter, r, p, t);
    for (uint32_t k = 0; k < shape.chunks(s); ++k) {
      FEDRT_RETURN_IF_ERROR(receive(RingPhase::kReduceScatter, t, s, k, true));
      FEDRT_RETURN_IF_ERROR((t + 2 < p) ? send(RingPhase::kReduceScatter, t + 1, s, k, false)
                                        : send(RingPhase::kAllGather, 0, s, k, true));
    }
  }
  for (uint32_t t = 0; t + 1 < p; ++t) {
    const std::size_t s = ReceivedSegment(RingPhase::kAllGather, r, p, t);
    for (uint32_t k = 0; k < shape.chunks(s); ++k) {
      FEDRT_RETURN_IF_ERROR(receive(RingPhase::kAllGather, t, s, k, false));
      // Forward the received bytes as they are: re-encoding a decoded fp16
      // chunk gives the same payload, raw floats are copied.
      if (t + 2 < p) FEDRT_RETURN_IF_ERROR(send(RingPhase::kAllGather, t + 1, s, k, false));
    }
  }
  return Status::Ok();
}

// A ring chunk's fields for chunk k of segment s, sent by this peer (raw:
// the segment's bytes and the chunk's offset; the payload is the caller's).
transport::RingChunkMessage RingChunkHead(const CollectiveContext& context, const RingShape& shape,
                                          uint64_t collective, transport::RingPhase phase, uint32_t step,
                                          std::size_t s, uint32_t k);

// Sends `m` to the right neighbour in a free frame slot (kBorrow: the frame
// reads the payload when it is written). OK when that neighbour has left.
Status SendChunk(CollectiveContext& context, Deadline deadline, const transport::RingChunkMessage& m,
                 transport::PayloadMode mode);

// Receives the next frame from the left neighbour into *frame and decodes
// it into *out, which must be chunk k of segment s for (collective, phase,
// step): its source, index and count (raw chunks: segment size and offset
// too). Blames the left neighbour otherwise. out's payload points into
// *frame (or at a registered buffer, or is null when it was reduced there).
Status ReceiveChunk(CollectiveContext& context, Deadline deadline, const RingShape& shape, uint64_t collective,
                    transport::RingPhase phase, uint32_t step, std::size_t s, uint32_t k, transport::Frame* frame,
                    transport::RingChunkMessage* out);

// Waits, on every return from a ring collective, until no queued frame reads
// the caller's vector and nothing is written into it any more.
class ReleaseOnReturn {
 public:
  ReleaseOnReturn(CollectiveContext& context, Deadline deadline) : context_(context), deadline_(deadline) {}
  ~ReleaseOnReturn() { context_.ReleaseBuffers(deadline_); }
  ReleaseOnReturn(const ReleaseOnReturn&) = delete;
  ReleaseOnReturn& operator=(const ReleaseOnReturn&) = delete;

 private:
  CollectiveContext& context_;
  Deadline deadline_;
};

}  // namespace internal
}  // namespace peer
}  // namespace fedrt

#endif  // FEDRT_RUNTIME_SRC_COLLECTIVES_RING_H_
