// Scalar reference fp16 / bf16 converters, integer arithmetic only (so the
// result does not depend on the FPU's denormal or rounding modes).
//
// float -> fp16, for a = |x| (bits) after saturation to 65504:
//   normal result (a >= 2^-14): rebias the exponent and round the 13 dropped
//     mantissa bits to nearest-even by adding 0xFFF + (lowest kept bit); a
//     carry into the exponent is the correct result;
//   subnormal result: the value in units of 2^-24 is m * 2^(e - 126) for the
//     24-bit significand m; shift right and round to nearest-even by hand
//     (rounding up to 1024 gives 0x0400, the smallest normal, as it should).
// float -> bf16: keep the high 16 bits, rounding the low 16 to nearest-even
// (a carry into the exponent is correct; subnormals need no special case).
#include <cstring>

#include "half/half_kernels.h"

namespace fedrt::scalar {
namespace {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t OneFloatToFp16(float f) {
  const uint32_t x = Bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7FFFFFFFu;
  if (a > kFp16MaxAsFloatBits) a = kFp16MaxAsFloatBits;
  if (a >= 0x38800000u) {  // >= 2^-14: normal fp16
    a += 0xFFFu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((a - 0x38000000u) >> 13));
  }
  const uint32_t e = a >> 23;
  if (e < 102) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u) != 0)) ++q;
  return static_cast<uint16_t>(sign | q);
}

inline float OneFp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu;
  uint32_t m = h & 0x3FFu;
  if (e == 0) {
    if (m == 0) return FromBits(sign);
    e = 113;  // normalise the subnormal: value m * 2^-24
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --e;
    }
    return FromBits(sign | (e << 23) | ((m & 0x3FFu) << 13));
  }
  if (e == 0x1F) return FromBits(sign | 0x7F800000u | (m << 13));
  return FromBits(sign | ((e + 112) << 23) | (m << 13));
}

inline uint16_t OneFloatToBf16(float f) {
  const uint32_t x = Bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7FFFFFFFu;
  if (a > kBf16MaxAsFloatBits) a = kBf16MaxAsFloatBits;
  a += 0x7FFFu + ((a >> 16) & 1u);
  return static_cast<uint16_t>(sign | (a >> 16));
}

}  // namespace

void FloatToFp16(const float* in, std::size_t n, uint16_t* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = OneFloatToFp16(in[i]);
}

void Fp16ToFloat(const uint16_t* in, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = OneFp16ToFloat(in[i]);
}

void FloatToBf16(const float* in, std::size_t n, uint16_t* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = OneFloatToBf16(in[i]);
}

void Bf16ToFloat(const uint16_t* in, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = FromBits(static_cast<uint32_t>(in[i]) << 16);
}

}  // namespace fedrt::scalar
