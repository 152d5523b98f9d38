// Step agreement after a re-formation (collectives.h, AgreeStep):
// max-flooding over the group's links. In each of (members - 1) rounds (at
// least the diameter of any connected graph over them) every member sends the
// largest step it knows to each neighbour and takes the largest it hears. One
// GossipModel frame per link and round, codec spec "step", the step in the
// step field and no payload.
#include <algorithm>

#include "fedrt/runtime/collectives.h"

namespace fedrt {
namespace peer {
namespace {

constexpr const char kAgreeStepSpec[] = "step";

}  // namespace

Result<uint64_t> AgreeStep(CollectiveContext& context, uint64_t step) {
  const Deadline deadline = context.StepDeadline();
  FEDRT_RETURN_IF_ERROR(context.CheckUsable());
  const std::vector<Neighbour>& neighbours = context.neighbours();
  uint64_t agreed = step;
  for (std::size_t round = 0; round + 1 < context.members().size(); ++round) {
    const uint64_t known = agreed;
    for (std::size_t i = neighbours.size(); i-- > 0;) {
      transport::GossipModelMessage m;
      m.step = known;
      m.source_rank = context.rank();
      m.codec_spec = kAgreeStepSpec;
      m.payload.index = 0;
      m.payload.count = 1;
      // In a frame slot of the link: a theta refresh (Moniqua) runs this
      // in the steady state, which allocates nothing.
      auto slot = context.FreeSlot(neighbours[i].rank, deadline, "the agreed step");
      if (!slot.ok()) return slot.status();
      if (*slot == nullptr) continue;  // that neighbour has left
      FEDRT_RETURN_IF_ERROR(
          context.Send(neighbours[i].rank, Encode(m, context.limits(), **slot, transport::PayloadMode::kCopy)));
    }
    for (const Neighbour& neighbour : neighbours) {
      const uint32_t from = neighbour.rank;
      auto frame = context.Receive(from, deadline);
      if (!frame.ok()) return frame.status();
      auto m = transport::DecodeGossipModel(*frame, context.limits());
      if (!m.ok()) return context.Fail(static_cast<int>(from), context.Named(from, m.status()));
      if (m->codec_spec != kAgreeStepSpec || m->source_rank != from || m->payload.size != 0) {
        return context.Fail(static_cast<int>(from),
                            context.Named(from, Corrupt("expected its step after the re-formation")));
      }
      agreed = std::max(agreed, m->step);
    }
  }
  return agreed;
}

}  // namespace peer
}  // namespace fedrt
