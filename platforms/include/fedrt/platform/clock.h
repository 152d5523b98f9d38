// Monotonic time for deadlines, throughput figures and progress reports.
// Never jumps with wall-clock changes. Thread-safe.
//
// Engines (device client, aggregator, peer trainer) never read the time
// themselves: they are given a Clock, so a test drives them with a manual one
// and firmware with its own tick counter.
#ifndef FEDRT_PLATFORM_CLOCK_H_
#define FEDRT_PLATFORM_CLOCK_H_

#include <cstdint>

#include "fedrt/platform/config.h"
#if FEDRT_HAVE_THREADS
#include <atomic>
#endif

namespace fedrt {

// Nanoseconds since an unspecified fixed point (the port's monotonic clock).
uint64_t MonotonicNanos();

// A source of monotonic time handed to engines. Implementations must be
// safe to call from any thread and never go backwards.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t NowNanos() const = 0;
  uint64_t NowMs() const { return NowNanos() / 1000000u; }
};

// The port's monotonic clock (MonotonicNanos).
const Clock& SystemClock();

// A clock that moves only when told to (tests, simulations). With threads
// (FEDRT_HAVE_THREADS) its time is atomic: a test may advance it while
// engines on other threads read it (a collective's rank threads, say).
// Without threads it is a plain counter for the one thread there is.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(uint64_t start_nanos = 0) : nanos_(start_nanos) {}
  uint64_t NowNanos() const override { return nanos_; }
  void AdvanceMs(uint64_t ms) { nanos_ += ms * 1000000u; }
  void SetNanos(uint64_t nanos) { nanos_ = nanos; }

 private:
#if FEDRT_HAVE_THREADS
  std::atomic<uint64_t> nanos_;
#else
  uint64_t nanos_;
#endif
};

// Measures elapsed time from construction or the last Restart().
class Stopwatch {
 public:
  Stopwatch() : start_(MonotonicNanos()) {}
  void Restart() { start_ = MonotonicNanos(); }
  uint64_t ElapsedNanos() const { return MonotonicNanos() - start_; }
  double ElapsedSeconds() const { return static_cast<double>(ElapsedNanos()) * 1e-9; }

 private:
  uint64_t start_;
};

}  // namespace fedrt

#endif  // FEDRT_PLATFORM_CLOCK_H_
