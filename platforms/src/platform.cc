// Thin wrappers over the port, and Status helpers.
#include <cstdio>
#include <cstdlib>

#include "fedrt/platform/clock.h"
#include "fedrt/platform/memory.h"
#include "fedrt/platform/port.h"
#include "fedrt/platform/status.h"

namespace fedrt {

uint64_t MonotonicNanos() { return port::MonotonicNanos(); }

namespace {
class PortClock final : public Clock {
 public:
  uint64_t NowNanos() const override { return port::MonotonicNanos(); }
};
}  // namespace

const Clock& SystemClock() {
  static const PortClock clock;
  return clock;
}

void* AlignedAlloc(std::size_t bytes, std::size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) return nullptr;
  return port::AlignedAlloc(bytes, alignment);
}

void AlignedFree(void* pointer) {
  if (pointer != nullptr) port::AlignedFree(pointer);
}

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kOutOfRange: return "out_of_range";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kIoError: return "io_error";
    case StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kUnauthenticated: return "unauthenticated";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kCancelled: return "cancelled";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string text = StatusCodeName(code_);
  if (!message_.empty()) {
    text += ": ";
    text += message_;
  }
  return text;
}

namespace internal {
void DieOnBadResultAccess(const Status& status) {
  std::fprintf(stderr, "fedrt: value() called on an error Result (%s)\n", status.ToString().c_str());
  std::abort();
}
}  // namespace internal

}  // namespace fedrt
