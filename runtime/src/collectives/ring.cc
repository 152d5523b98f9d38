// What the ring collectives share (ring.h).
#include "collectives/ring.h"

#include <string>

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

RingShape::RingShape(std::size_t floats, std::size_t members, uint32_t chunk_floats,
                     const transport::FrameLimits& limits)
    : n(floats), p(members) {
  const std::size_t frame_floats = (limits.MaxChunkBytes() - 4096) / sizeof(float);
  std::size_t want = chunk_floats;
  if (want == 0) want = std::min<std::size_t>(std::max<std::size_t>((n + p - 1) / p / p, 1u << 18), 1u << 20);
  chunk = std::max<std::size_t>(1, std::min<std::size_t>(want, frame_floats));
}

Status ExpectChunk(CollectiveContext& context, const transport::Frame& frame, uint64_t collective,
                   transport::RingPhase phase, uint32_t step, uint32_t segment, uint32_t index, uint32_t count,
                   uint64_t total, uint64_t offset, transport::RingChunkMessage* out) {
  const uint32_t from = context.left();
  auto m = transport::DecodeRingChunk(frame, context.limits());
  if (!m.ok()) return context.Fail(static_cast<int>(from), context.Named(from, m.status()));
  const auto& p = m->payload;
  const bool raw = m->codec_spec.empty();
  if (m->collective_id != collective || m->phase != phase || m->step != step || m->segment != segment ||
      m->source_rank != from || p.index != index || p.count != count ||
      (raw && (p.total_size != total || p.offset != offset))) {
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
