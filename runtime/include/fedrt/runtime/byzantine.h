// Misbehaving devices, for testing robust aggregation: a transformation of a
// device's update (its model delta) before it is encoded. `fedrt sim
// --byzantine N:KIND` gives it to N devices through the hidden `fedrt device
// --byzantine KIND`; an application sets it as DeviceHooks::transform_update.
//
//   signflip[:k]   sends -k * delta (k = 1: the sign flipped)
//   scaled[:k]     sends k * delta (default k = 10)
//   random[:s]     sends Gaussian noise N(0, s^2) per coordinate instead (default
//                  s = 0.1, far larger than an honest coordinate), drawn from a
//                  Philox stream of (seed, round), so a run is reproducible
//   stale          sends the update of the first round it trained, every round
//
// Thread-safety: a ByzantineUpdate is used by one device on one thread.
#ifndef FEDRT_RUNTIME_BYZANTINE_H_
#define FEDRT_RUNTIME_BYZANTINE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt {

enum class ByzantineKind { kSignFlip, kScaled, kRandom, kStale };

struct ByzantineBehaviour {
  ByzantineKind kind = ByzantineKind::kSignFlip;
  double factor = 1;  // signflip: k; scaled: k; random: s (unused by stale)
};

// "signflip[:k]", "scaled[:k]", "random[:s]" (k, s positive and finite) or
// "stale"; kInvalidArgument naming the forms.
Result<ByzantineBehaviour> ParseByzantine(const std::string& text);

class ByzantineUpdate {
 public:
  ByzantineUpdate(ByzantineBehaviour behaviour, uint64_t seed) : behaviour_(behaviour), seed_(seed) {}
  // Replaces delta[0..d) by what this device sends for `round`.
  void Apply(uint32_t round, float* delta, std::size_t d);

 private:
  ByzantineBehaviour behaviour_;
  uint64_t seed_;
  std::vector<float> first_;  // stale: the first update
};

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_BYZANTINE_H_
