// Misbehaving devices (contract in fedrt/runtime/byzantine.h).
#include "fedrt/runtime/byzantine.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "fedrt/runtime/privacy.h"

namespace fedrt {

Result<ByzantineBehaviour> ParseByzantine(const std::string& text) {
  const std::size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  ByzantineBehaviour behaviour;
  if (name == "signflip") {
    behaviour.kind = ByzantineKind::kSignFlip;
  } else if (name == "scaled") {
    behaviour.kind = ByzantineKind::kScaled;
    behaviour.factor = 10;
  } else if (name == "random") {
    behaviour.kind = ByzantineKind::kRandom;
    behaviour.factor = 0.1;
  } else if (name == "stale") {
    behaviour.kind = ByzantineKind::kStale;
  } else {
    return InvalidArgument("unknown byzantine behaviour '" + text + "' (signflip[:k], scaled[:k], random[:s], stale)");
  }
  if (colon != std::string::npos) {
    const std::string argument = text.substr(colon + 1);
    errno = 0;
    char* end = nullptr;
    const double value = std::strtod(argument.c_str(), &end);
    if (behaviour.kind == ByzantineKind::kStale || argument.empty() || errno != 0 ||
        end != argument.c_str() + argument.size() || !(value > 0) || !std::isfinite(value)) {
      return InvalidArgument("byzantine behaviour '" + text + "': " +
                             (behaviour.kind == ByzantineKind::kStale ? "stale takes no argument"
                                                                      : "the argument must be a positive number"));
    }
    behaviour.factor = value;
  }
  return behaviour;
}

void ByzantineUpdate::Apply(uint32_t round, float* delta, std::size_t d) {
  switch (behaviour_.kind) {
    case ByzantineKind::kSignFlip:
    case ByzantineKind::kScaled: {
      const double k = behaviour_.kind == ByzantineKind::kSignFlip ? -behaviour_.factor : behaviour_.factor;
      for (std::size_t i = 0; i < d; ++i) delta[i] = static_cast<float>(k * static_cast<double>(delta[i]));
      break;
    }
    case ByzantineKind::kRandom: {
      std::vector<double> noise(d, 0.0);
      AddGaussianNoise(seed_, round, behaviour_.factor, noise.data(), d);
      for (std::size_t i = 0; i < d; ++i) delta[i] = static_cast<float>(noise[i]);
      break;
    }
    case ByzantineKind::kStale:
      if (first_.size() != d) first_.assign(delta, delta + d);
      std::copy(first_.begin(), first_.end(), delta);
      break;
  }
}

}  // namespace fedrt
