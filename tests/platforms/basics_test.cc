#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/platform/concat.h"
#include "fedrt/platform/log.h"
#include "fedrt/platform/memory.h"
#include "fedrt/platform/status.h"

namespace fedrt {
namespace {

TEST_CASE("the monotonic clock never goes backwards") {
  uint64_t previous = MonotonicNanos();
  for (int i = 0; i < 10000; ++i) {
    const uint64_t now = MonotonicNanos();
    CHECK(now >= previous);
    previous = now;
  }
  Stopwatch watch;
  volatile double sink = 0;
  for (int i = 0; i < 100000; ++i) sink = sink + i;
  CHECK(watch.ElapsedNanos() > 0);
}

TEST_CASE("aligned allocation honours the alignment, including for zero bytes") {
  for (std::size_t alignment : {8u, 16u, 32u, 64u, 128u, 4096u}) {
    for (std::size_t bytes : {0u, 1u, 63u, 64u, 1000u}) {
      void* p = AlignedAlloc(bytes, alignment);
      REQUIRE(p != nullptr);
      CHECK(reinterpret_cast<std::uintptr_t>(p) % alignment == 0);
      AlignedFree(p);
    }
  }
  CHECK(AlignedAlloc(64, 48) == nullptr);  // not a power of two
  AlignedFree(nullptr);                    // allowed, does nothing
}

TEST_CASE("aligned arrays are zeroed, movable and report allocation failure") {
  AlignedArray<float> a(1000);
  REQUIRE(a.ok());
  CHECK(a.size() == 1000);
  CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % kSimdAlignment == 0);
  for (float v : a) CHECK(v == 0.0f);
  a[7] = 3.0f;
  AlignedArray<float> b = std::move(a);
  CHECK(b[7] == 3.0f);
  CHECK_FALSE(a.ok());  // NOLINT: moved-from is empty by contract
  AlignedArray<double> huge;
  CHECK_FALSE(huge.Resize(static_cast<std::size_t>(-1) / 4));
  CHECK_FALSE(huge.ok());
  CHECK(huge.size() == 0);
}

TEST_CASE("status carries a code and a message and prints both") {
  Status ok;
  CHECK(ok.ok());
  CHECK(ok.ToString() == "ok");
  Status bad = Corrupt("CRC mismatch");
  CHECK_FALSE(bad.ok());
  CHECK(bad.code() == StatusCode::kCorrupt);
  CHECK(bad.ToString() == "corrupt: CRC mismatch");
  // Pinned values: these numbers are part of the C API and the wire protocol.
  CHECK(static_cast<int>(StatusCode::kInvalidArgument) == 1);
  CHECK(static_cast<int>(StatusCode::kCorrupt) == 3);
  CHECK(static_cast<int>(StatusCode::kCancelled) == 13);
}

Result<std::vector<int>> MakeVector(int n) {
  if (n < 0) return InvalidArgument("negative size");
  return std::vector<int>(static_cast<std::size_t>(n), 1);
}

Status UsesReturnIfError(int n, int* out) {
  auto result = MakeVector(n);
  FEDRT_RETURN_IF_ERROR(result.status());
  *out = static_cast<int>(result->size());
  return Status::Ok();
}

TEST_CASE("Concat joins text and integers written as std::to_string writes them") {
  const std::string name = "dqsg";
  CHECK(Concat({"codec '", name, "' needs ", std::size_t{4096}, " bytes"}) == "codec 'dqsg' needs 4096 bytes");
  CHECK(Concat({std::string_view("round "), uint8_t{7}, ", rank ", int16_t{-3}}) == "round 7, rank -3");
  CHECK(Concat({0, "|", 0u}) == "0|0");
  const int64_t low = std::numeric_limits<int64_t>::min();
  const uint64_t high = std::numeric_limits<uint64_t>::max();
  CHECK(Concat({low, " ", high}) == std::to_string(low) + " " + std::to_string(high));
  CHECK(Concat({std::numeric_limits<int32_t>::min()}) == std::to_string(std::numeric_limits<int32_t>::min()));
  CHECK(Concat({}).empty());
}

TEST_CASE("result holds either a value or the reason there is none") {
  auto good = MakeVector(3);
  REQUIRE(good.ok());
  CHECK(good->size() == 3);
  auto copy = good;
  CHECK(copy.value().size() == 3);
  auto bad = MakeVector(-1);
  CHECK_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  int n = 0;
  CHECK(UsesReturnIfError(5, &n).ok());
  CHECK(n == 5);
  CHECK(UsesReturnIfError(-1, &n).code() == StatusCode::kInvalidArgument);
}

struct Captured {
  std::vector<std::string> lines;
  std::vector<LogLevel> levels;
};

void CaptureHook(LogLevel level, const char* message, void* user) {
  auto* captured = static_cast<Captured*>(user);
  captured->lines.emplace_back(message);
  captured->levels.push_back(level);
}

TEST_CASE("the log hook receives formatted lines at or above the level") {
  Captured captured;
  SetLogHook(&CaptureHook, &captured);
  SetLogLevel(LogLevel::kWarning);
  Log(LogLevel::kInfo, "dropped %d", 1);
  Log(LogLevel::kWarning, "kept %d of %s", 2, "three");
  Log(LogLevel::kError, "%s", std::string(2000, 'x').c_str());
  SetLogHook(nullptr, nullptr);
  SetLogLevel(LogLevel::kInfo);
  REQUIRE(captured.lines.size() == 2);
  CHECK(captured.lines[0] == "kept 2 of three");
  CHECK(captured.levels[0] == LogLevel::kWarning);
  CHECK(captured.lines[1].size() == 1023);  // truncated, never overflowing
}

}  // namespace
}  // namespace fedrt
