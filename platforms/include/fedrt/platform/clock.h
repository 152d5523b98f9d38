// Monotonic time for deadlines, throughput figures and progress reports.
// Never jumps with wall-clock changes. Thread-safe.
#ifndef FEDRT_PLATFORM_CLOCK_H_
#define FEDRT_PLATFORM_CLOCK_H_

#include <cstdint>

namespace fedrt {

// Nanoseconds since an unspecified fixed point (the port's monotonic clock).
uint64_t MonotonicNanos();

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
