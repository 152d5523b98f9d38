// What the ring collectives share (ring.h).
#include "collectives/ring.h"

#include <string>
#include <utility>

namespace fedrt {
namespace peer {
namespace internal {

Status CheckRing(const CollectiveContext& context) {
  FEDRT_RETURN_IF_ERROR(context.CheckUsable());
  if (context.graph() != GossipGraph::kRing && context.members().size() > 1) {
    return Status(StatusCode::kFailedPrecondition, "ring collectives need a group formed as a ring");
  }
  return Status::Ok();
}

Result<RingCall> BeginRingCall(CollectiveContext& context, AllReduceStats* stats) {
  RingCall call;
  call.start = context.clock().NowNanos();
  call.deadline = context.StepDeadline();
  *stats = AllReduceStats{};
  call.collective = context.NextCollectiveId();
  FEDRT_RETURN_IF_ERROR(CheckRing(context));
  call.p = context.members().size();
  return call;
}

void EndRingCall(const CollectiveContext& context, const RingCall& call, AllReduceStats* stats,
                 uint64_t* total_bytes_sent) {
  stats->seconds = static_cast<double>(context.clock().NowNanos() - call.start) * 1e-9;
  *total_bytes_sent += stats->bytes_sent;
}

RingShape::RingShape(std::size_t floats, std::size_t members, uint32_t chunk_floats,
                     const transport::FrameLimits& limits)
    : n(floats), p(members) {
  const std::size_t frame_floats = (limits.MaxChunkBytes() - 4096) / sizeof(float);
  std::size_t want = chunk_floats;
  // Automatic: a whole segment, as far as a frame takes it (collectives.h).
  if (want == 0) want = std::max<std::size_t>((n + p - 1) / p, 1);
  chunk = std::max<std::size_t>(1, std::min<std::size_t>(want, frame_floats));
}

transport::RingChunkMessage RingChunkHead(const CollectiveContext& context, const RingShape& shape,
                                          uint64_t collective, transport::RingPhase phase, uint32_t step,
                                          std::size_t s, uint32_t k) {
  transport::RingChunkMessage m;
  m.collective_id = collective;
  m.step = step;
  m.phase = phase;
  m.source_rank = context.rank();
  m.segment = static_cast<uint32_t>(s);
  m.payload.index = k;
  m.payload.count = shape.chunks(s);
  m.payload.total_size = shape.size(s) * sizeof(float);
  m.payload.offset = shape.chunk_offset(k) * sizeof(float);
  return m;
}

Status SendChunk(CollectiveContext& context, Deadline deadline, const transport::RingChunkMessage& m,
                 transport::PayloadMode mode) {
  const uint32_t to = context.right();
  auto slot = context.FreeSlot(to, deadline, "a ring chunk");
  if (!slot.ok()) return slot.status();
  if (*slot == nullptr) return Status::Ok();  // the neighbour has left
  return context.Send(to, Encode(m, context.limits(), **slot, mode));
}

Status ReceiveChunk(CollectiveContext& context, Deadline deadline, const RingShape& shape, uint64_t collective,
                    transport::RingPhase phase, uint32_t step, std::size_t s, uint32_t k, transport::Frame* frame,
                    transport::RingChunkMessage* out) {
  const uint32_t from = context.left();
  auto received = context.Receive(from, deadline);
  if (!received.ok()) return received.status();
  *frame = std::move(*received);
  auto m = transport::DecodeRingChunk(*frame, context.limits());
  if (!m.ok()) return context.Fail(static_cast<int>(from), context.Named(from, m.status()));
  const auto& p = m->payload;
  const bool raw = m->codec_spec.empty();
  if (m->collective_id != collective || m->phase != phase || m->step != step || m->segment != s ||
      m->source_rank != from || p.index != k || p.count != shape.chunks(s) ||
      (raw && (p.total_size != shape.size(s) * sizeof(float) || p.offset != shape.chunk_offset(k) * sizeof(float)))) {
    return context.Fail(static_cast<int>(from),
                        context.Named(from, Corrupt("unexpected ring chunk (collective " +
                                                    std::to_string(m->collective_id) + ", step " +
                                                    std::to_string(m->step) + ", segment " +
                                                    std::to_string(m->segment) + ", chunk " +
                                                    std::to_string(p.index) + ")")));
  }
  *out = *m;
  return Status::Ok();
}

}  // namespace internal
}  // namespace peer
}  // namespace fedrt
