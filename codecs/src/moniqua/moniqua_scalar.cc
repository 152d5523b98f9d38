// Scalar reference of the Moniqua kernels (see moniqua_kernels.h): the
// specification's formulas in float32, in the order written.
#include <cmath>

#include "fedrt/codecs/philox.h"
#include "moniqua/moniqua_kernels.h"

namespace fedrt::scalar {
namespace {

// z = frac(x / B) in [0, 1]; 0 when not finite (|x / B| = Inf gives NaN).
inline float UnitFraction(float x, float modulus) {
  const float t = x / modulus;
  const float z = t - std::floor(t);
  return z >= 0.0f && z <= 1.0f ? z : 0.0f;
}

inline uint8_t Symbol(float s, uint32_t mask) {
  return static_cast<uint8_t>(static_cast<uint32_t>(static_cast<int32_t>(s)) & mask);
}

// out = ((B q - y) mod_c B) + y; returns 1 when |m| >= near_limit or m is NaN.
inline std::size_t Recover(float q, float modulus, float y, float near_limit, float* out) {
  const float a = modulus * q - y;
  const float m = a - modulus * std::nearbyint(a / modulus);
  *out = m + y;
  return !(std::fabs(m) < near_limit) ? 1 : 0;
}

}  // namespace

void MoniquaQuantize(const float* x, std::size_t n, float modulus, int bits, const uint32_t* words,
                     uint8_t* symbols) {
  const float levels = static_cast<float>(1u << bits);
  const uint32_t mask = (1u << bits) - 1;
  for (std::size_t i = 0; i < n; ++i) {
    const float z = UnitFraction(x[i], modulus);
    const float s = words == nullptr ? std::nearbyint(z * levels)
                                     : std::floor(z * levels + UniformFromWord(words[i]));
    symbols[i] = Symbol(s, mask);
  }
}

std::size_t MoniquaRecover(const uint8_t* symbols, std::size_t n, float modulus, int bits, const float* y,
                           float near_limit, float* out) {
  const float step = 1.0f / static_cast<float>(1u << bits);  // exact power of two
  std::size_t near = 0;
  for (std::size_t i = 0; i < n; ++i) {
    near += Recover(static_cast<float>(symbols[i]) * step, modulus, y[i], near_limit, out + i);
  }
  return near;
}

void MoniquaQuantizeDither(const float* x, std::size_t n, float modulus, int bits, const float* dither,
                           uint8_t* symbols) {
  const float levels = static_cast<float>(1u << bits);
  const uint32_t mask = (1u << bits) - 1;
  for (std::size_t i = 0; i < n; ++i) {
    symbols[i] = Symbol(std::nearbyint(UnitFraction(x[i], modulus) * levels + dither[i]), mask);
  }
}

std::size_t MoniquaRecoverDither(const uint8_t* symbols, std::size_t n, float modulus, int bits, const float* dither,
                                 const float* y, float near_limit, float* out) {
  const float step = 1.0f / static_cast<float>(1u << bits);
  std::size_t near = 0;
  for (std::size_t i = 0; i < n; ++i) {
    near += Recover((static_cast<float>(symbols[i]) - dither[i]) * step, modulus, y[i], near_limit, out + i);
  }
  return near;
}

}  // namespace fedrt::scalar
