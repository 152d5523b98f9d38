// Thin wrappers over the port, and Status helpers.
#include <cstdio>
#include <cstdlib>

#include "fedrt/platform/clock.h"
#include "fedrt/platform/concat.h"
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

std::string_view MessagePiece::Decimal(uint64_t value, bool negative) {
  // Two's complement: the magnitude of a negative value is its negation.
  uint64_t magnitude = negative ? ~value + 1 : value;
  char* end = digits_ + sizeof digits_;
  char* p = end;
  do {
    *--p = static_cast<char>('0' + magnitude % 10);
    magnitude /= 10;
  } while (magnitude != 0);
  if (negative) *--p = '-';
  return std::string_view(p, static_cast<std::size_t>(end - p));
}

std::string Concat(std::initializer_list<MessagePiece> pieces) {
  std::size_t size = 0;
  for (const MessagePiece& piece : pieces) size += piece.text().size();
  std::string text;
  text.reserve(size);
  for (const MessagePiece& piece : pieces) text.append(piece.text());
  return text;
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
