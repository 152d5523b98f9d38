// The training core's pseudo-random numbers: xoshiro256** seeded through
// splitmix64. Same seed, same sequence on every platform and build (integer
// arithmetic; the float and double helpers are exact conversions, and
// Normal/Gamma use libm, which is fixed for one build).
// Not thread-safe: one Rng per user.
#ifndef FEDRT_RUNTIME_TRAIN_RANDOM_H_
#define FEDRT_RUNTIME_TRAIN_RANDOM_H_

#include <cstddef>
#include <cstdint>

namespace fedrt {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  // Two seeds mixed, for derived streams (seed, purpose).
  Rng(uint64_t seed, uint64_t stream);

  uint64_t Next();
  // Uniform in [0, 1) with 53 bits.
  double UniformDouble() { return static_cast<double>(Next() >> 11) * 0x1p-53; }
  // Uniform integer in [0, bound), unbiased (rejection); bound > 0.
  uint64_t Below(uint64_t bound);
  double Normal();              // standard normal (Box-Muller)
  double Gamma(double shape);   // Gamma(shape, 1), shape > 0 (Marsaglia-Tsang)

  // Fisher-Yates shuffle of values[0 .. count).
  template <typename T>
  void Shuffle(T* values, std::size_t count) {
    for (std::size_t i = count; i > 1; --i) {
      const std::size_t j = static_cast<std::size_t>(Below(i));
      T tmp = values[i - 1];
      values[i - 1] = values[j];
      values[j] = tmp;
    }
  }

 private:
  uint64_t s_[4];
};

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_TRAIN_RANDOM_H_
