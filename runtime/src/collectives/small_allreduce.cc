// Dense fp32 all-reduce of small vectors (collectives.h, SmallAllReduce).
//
// Small vectors are latency-bound: every hop costs wake-ups on both sides
// (the collective's thread, the event loops'), and the ring takes 2 (p - 1)
// of them in sequence. Here every member's whole vector travels both ways
// round the ring at once, ceil((p - 1) / 2) hops in sequence, and each
// member sums the p vectors itself. The links are the ring's (a member only
// talks to its two neighbours), so there is no recursive doubling.
//
// The sum is added in the ring's order (RingAllReduce): segment s of the
// ring's geometry (RingShape) starts with position s's values and adds
// positions s + 1, s + 2, ... in turn; float addition commutes, so these are
// the bits the ring would give, on every member.
#include <algorithm>
#include <cstring>
#include <string>

#include "collectives/ring.h"
#include "fedrt/codecs/reduce.h"
#include "fedrt/runtime/collectives.h"

namespace fedrt {
namespace peer {

using transport::RingPhase;

SmallAllReduce::SmallAllReduce(CollectiveContext& context) : context_(context) {}

SmallAllReduce::~SmallAllReduce() = default;

bool SmallAllReduce::Fits(std::size_t n, std::size_t p, const transport::FrameLimits& limits) {
  const std::size_t bytes = n * sizeof(float);
  return bytes * std::max<std::size_t>(1, p / 2) <= kMaxLinkBytes && bytes + 4096 <= limits.MaxChunkBytes();
}

namespace {

// The longest vector of at most d floats that Fits p members.
std::size_t LargestFitting(std::size_t d, std::size_t p, const transport::FrameLimits& limits) {
  const std::size_t by_link = SmallAllReduce::kMaxLinkBytes / std::max<std::size_t>(1, p / 2) / sizeof(float);
  const std::size_t by_frame = (limits.MaxChunkBytes() - 4096) / sizeof(float);
  return std::min({d, by_link, by_frame});
}

}  // namespace

Result<std::size_t> SmallAllReduce::RequiredBytes(const CollectiveShape& shape) {
  if (shape.members <= 1) return std::size_t{0};
  return shape.members * LargestFitting(shape.d, shape.members, shape.limits) * sizeof(float);
}

Status SmallAllReduce::Bind(void* memory, std::size_t size, const CollectiveShape& shape) {
  Result<std::size_t> needed = RequiredBytes(shape);
  if (!needed.ok()) return needed.status();
  FEDRT_RETURN_IF_ERROR(internal::CheckCollectiveMemory(memory, size, *needed, alignof(float), "SmallAllReduce"));
  vectors_.Bind(static_cast<float*>(memory), *needed / sizeof(float));
  return Status::Ok();
}

Status SmallAllReduce::Run(float* data, std::size_t n) {
  auto call = internal::BeginRingCall(context_, &stats_);
  if (!call.ok()) return call.status();
  const std::size_t p = call->p;
  if (p == 1 || n == 0) return Status::Ok();
  if (!Fits(n, p, context_.limits())) {
    return InvalidArgument("SmallAllReduce takes at most " + std::to_string(kMaxLinkBytes / (p / 2)) +
                           " bytes with " + std::to_string(p) + " members, not " + std::to_string(n * sizeof(float)));
  }
  // On every return from here on, no queued frame may still read vectors_.
  internal::ReleaseOnReturn release_on_return(context_, call->deadline);
  const std::size_t r = context_.position();
  // Vectors from the left come from positions r - 1, ..., r - a, those from
  // the right from r + 1, ..., r + b (two members: one neighbour, the left).
  const std::size_t a = p / 2;
  const std::size_t b = (p - 1) / 2;
  float* const vectors = vectors_.Resize(p * n);
  auto vector_of = [&](std::size_t position) { return vectors + position * n; };
  std::memcpy(vector_of(r), data, n * sizeof(float));

  // Sends position `author`'s vector at hop `hop` to neighbour `to`,
  // borrowing it from vectors_ (ReleaseOnReturn waits until it is written).
  auto send = [&](uint32_t to, uint32_t hop, std::size_t author) -> Status {
    transport::RingChunkMessage m;
    m.collective_id = call->collective;
    m.step = hop;
    m.phase = RingPhase::kAllGather;
    m.source_rank = context_.rank();
    m.segment = static_cast<uint32_t>(author);
    m.payload.index = 0;
    m.payload.count = 1;
    m.payload.total_size = n * sizeof(float);
    m.payload.offset = 0;
    m.payload.data = reinterpret_cast<const uint8_t*>(vector_of(author));
    m.payload.size = n * sizeof(float);
    auto slot = context_.FreeSlot(to, call->deadline, "a small all-reduce vector");
    if (!slot.ok()) return slot.status();
    if (*slot == nullptr) return Status::Ok();  // the neighbour has left
    stats_.bytes_sent += m.payload.size;
    return context_.Send(to, Encode(m, context_.limits(), **slot, transport::PayloadMode::kBorrow));
  };
  // Receives position `author`'s vector at hop `hop` from neighbour `from`
  // into its place in vectors_.
  auto receive = [&](uint32_t from, uint32_t hop, std::size_t author) -> Status {
    auto received = context_.Receive(from, call->deadline);
    if (!received.ok()) return received.status();
    const transport::Frame frame = std::move(*received);
    auto m = transport::DecodeRingChunk(frame, context_.limits());
    if (!m.ok()) return context_.Fail(static_cast<int>(from), context_.Named(from, m.status()));
    if (m->collective_id != call->collective || m->phase != RingPhase::kAllGather || m->step != hop ||
        m->segment != author || m->source_rank != from || !m->codec_spec.empty() || m->payload.count != 1 ||
        m->payload.index != 0 || m->payload.offset != 0 || m->payload.data == nullptr ||
        m->payload.size != n * sizeof(float) || m->payload.total_size != n * sizeof(float)) {
      return context_.Fail(static_cast<int>(from),
                           context_.Named(from, Corrupt("unexpected all-reduce vector (collective " +
                                                        std::to_string(m->collective_id) + ", hop " +
                                                        std::to_string(m->step) + ", position " +
                                                        std::to_string(m->segment) + ")")));
    }
    std::memcpy(vector_of(author), m->payload.data, n * sizeof(float));
    return Status::Ok();
  };

  const uint32_t left = context_.left();
  const uint32_t right = context_.right();
  if (a > 0) FEDRT_RETURN_IF_ERROR(send(right, 0, r));
  if (b > 0) FEDRT_RETURN_IF_ERROR(send(left, 0, r));
  for (std::size_t d = 1; d <= a || d <= b; ++d) {
    const uint32_t hop = static_cast<uint32_t>(d - 1);
    if (d <= a) {
      const std::size_t author = (r + p - d) % p;
      FEDRT_RETURN_IF_ERROR(receive(left, hop, author));
      if (d < a) FEDRT_RETURN_IF_ERROR(send(right, hop + 1, author));
    }
    if (d <= b) {
      const std::size_t author = (r + d) % p;
      FEDRT_RETURN_IF_ERROR(receive(right, hop, author));
      if (d < b) FEDRT_RETURN_IF_ERROR(send(left, hop + 1, author));
    }
  }

  // The ring's order: segment s from position s on.
  const internal::RingShape shape(n, p, 0, context_.limits());
  for (std::size_t s = 0; s < p; ++s) {
    const std::size_t begin = shape.begin(s);
    const std::size_t len = shape.size(s);
    if (len == 0) continue;
    std::memcpy(data + begin, vector_of(s) + begin, len * sizeof(float));
    for (std::size_t j = 1; j < p; ++j) AddFloats(vector_of((s + j) % p) + begin, len, data + begin);
  }
  internal::EndRingCall(context_, *call, &stats_, &total_bytes_sent_);
  return Status::Ok();
}

}  // namespace peer
}  // namespace fedrt
