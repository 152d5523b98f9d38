// IEEE 754 binary16 conversions for sparsifier values (v=fp16), scalar and
// exact: float -> half rounds to nearest, ties to even; values beyond the
// largest half (65504) saturate to +-65504 instead of becoming Inf, so a
// payload never carries Inf (error feedback keeps the excess). half -> float
// is exact. Internal to fedrt_codecs; a local copy until the shared fp16
// kernels land.
#ifndef FEDRT_CODECS_SPARSE_HALF_H_
#define FEDRT_CODECS_SPARSE_HALF_H_

#include <cstdint>
#include <cstring>

namespace fedrt::codec_internal {

inline uint16_t FloatToHalfSaturating(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t a = f & 0x7fffffffu;
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7bffu);  // rounds to >= 65520: saturate
  if (a >= 0x38800000u) {                                              // normal half
    const uint32_t mant = a & 0x7fffffu;
    uint32_t h = ((a >> 23) - 112) << 10 | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carries into the exponent correctly
    if (h > 0x7bffu) h = 0x7bffu;
    return static_cast<uint16_t>(sign | h);
  }
  if (a < 0x33000000u) return sign;  // below half the smallest subnormal: +-0 (exactly half rounds to even 0)
  // Subnormal half: value = m * 2^-24 with m < 1024.
  const int shift = 126 - static_cast<int>(a >> 23);  // 14..24 for exponents 102..112
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  uint32_t h = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t f;
  if (exponent == 0x1f) {
    f = sign | 0x7f800000u | (mant << 13);
  } else if (exponent != 0) {
    f = sign | ((exponent + 112) << 23) | (mant << 13);
  } else {
    // Subnormal or zero: exact in float.
    const float v = static_cast<float>(mant) * 0x1p-24f;
    std::memcpy(&f, &v, 4);
    f |= sign;
  }
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

}  // namespace fedrt::codec_internal

#endif  // FEDRT_CODECS_SPARSE_HALF_H_
