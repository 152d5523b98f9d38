// CollectiveContext's helpers (collective_context.h), for every binding.
#include "fedrt/runtime/collective_context.h"

#include <string>

namespace fedrt {
namespace peer {

uint32_t CollectiveContext::left() const {
  const std::vector<uint32_t>& m = members();
  return m[(position() + m.size() - 1) % m.size()];
}

uint32_t CollectiveContext::right() const {
  const std::vector<uint32_t>& m = members();
  return m[(position() + 1) % m.size()];
}

Deadline CollectiveContext::DeadlineAfterMs(uint32_t ms) const {
  return clock().NowNanos() + uint64_t{ms} * 1000000u;
}

Deadline CollectiveContext::StepDeadline() const { return DeadlineAfterMs(step_timeout_ms()); }

Status CollectiveContext::CheckUsable() const {
  if (failed_rank() < 0) return Status::Ok();
  return Status(StatusCode::kFailedPrecondition,
                "the ring lost peer rank " + std::to_string(failed_rank()) + "; Form() again first");
}

Status CollectiveContext::Named(uint32_t rank, const Status& status) const {
  return Status(status.code(), Name(rank) + ": " + status.message());
}

}  // namespace peer
}  // namespace fedrt
