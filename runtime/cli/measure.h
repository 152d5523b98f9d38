// Measurement helpers shared by `fedrt codec stats` and `fedrt bench`.
#ifndef FEDRT_RUNTIME_CLI_MEASURE_H_
#define FEDRT_RUNTIME_CLI_MEASURE_H_

#include <time.h>

#include <cstddef>

#include "fedrt/platform/clock.h"

namespace fedrt::cli {

// Runs `work` until at least `min_seconds` have passed (and at least once);
// returns seconds per call. With `warm_up`, one untimed call first pages in
// buffers and warms caches.
template <typename Work>
double SecondsPerCall(Work work, double min_seconds, bool warm_up) {
  if (warm_up) work();
  int calls = 0;
  Stopwatch watch;
  do {
    work();
    ++calls;
  } while (watch.ElapsedSeconds() < min_seconds);
  return watch.ElapsedSeconds() / calls;
}

// As SecondsPerCall, in CPU seconds of the calling thread: on a machine shared
// with other jobs this counts only the time the work itself was running.
template <typename Work>
double CpuSecondsPerCall(Work work, double min_seconds, bool warm_up) {
  if (warm_up) work();
  const auto now = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  int calls = 0;
  const double start = now();
  do {
    work();
    ++calls;
  } while (now() - start < min_seconds);
  return (now() - start) / calls;
}

// ||decoded - input||^2 / ||input||^2 in double; 0 for an all-zero input.
inline double NormalizedError(const float* decoded, const float* input, std::size_t d) {
  double error = 0, energy = 0;
  for (std::size_t i = 0; i < d; ++i) {
    const double diff = double{decoded[i]} - double{input[i]};
    error += diff * diff;
    energy += double{input[i]} * double{input[i]};
  }
  return energy > 0 ? error / energy : 0.0;
}

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_MEASURE_H_
