// Scalar reference of the Moniqua kernels (see moniqua_kernels.h): the
// specification's formulas in float32, in the order written.
#include <cmath>

#include "fedrt/codecs/philox.h"
#include "moniqua/moniqua_kernels.h"

namespace fedrt::scalar {

void MoniquaQuantize(const float* x, std::size_t n, float modulus, int bits, const uint32_t* words,
                     uint8_t* symbols) {
  const float levels = static_cast<float>(1u << bits);
  const uint32_t mask = (1u << bits) - 1;
  for (std::size_t i = 0; i < n; ++i) {
    const float t = x[i] / modulus;
    float z = t - std::floor(t);
    if (!(z >= 0.0f && z <= 1.0f)) z = 0.0f;  // |t| = Inf gives NaN
    const float s = words == nullptr ? std::nearbyint(z * levels)
                                     : std::floor(z * levels + UniformFromWord(words[i]));
    symbols[i] = static_cast<uint8_t>(static_cast<uint32_t>(static_cast<int32_t>(s)) & mask);
  }
}

std::size_t MoniquaRecover(const uint8_t* symbols, std::size_t n, float modulus, int bits, const float* y,
                           float near_limit, float* out) {
  const float step = 1.0f / static_cast<float>(1u << bits);  // exact power of two
  std::size_t near = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float q = static_cast<float>(symbols[i]) * step;
    const float a = modulus * q - y[i];
    const float m = a - modulus * std::nearbyint(a / modulus);
    out[i] = m + y[i];
    near += !(std::fabs(m) < near_limit) ? 1 : 0;  // NaN counts
  }
  return near;
}

}  // namespace fedrt::scalar
