// NEON Moniqua kernels (see moniqua_kernels.h). AArch64: four coordinates at
// a time with vdivq_f32, vrndmq_f32 (floor) and vrndnq_f32 (nearest even),
// the scalar formulas in the same order, so results are bit-identical.
// ARMv7 NEON has no exact vector division and flushes denormals to zero, so
// there this variant is the scalar code. Tails: the scalar kernels.
#include <arm_neon.h>

#include "moniqua/moniqua_kernels.h"

namespace fedrt::neon {

#if defined(__aarch64__)

namespace {

// z = frac(x / b) in [0, 1]; 0 where not finite.
inline float32x4_t UnitFraction(float32x4_t x, float32x4_t b) {
  const float32x4_t t = vdivq_f32(x, b);
  const float32x4_t z = vsubq_f32(t, vrndmq_f32(t));
  const uint32x4_t in_range = vandq_u32(vcgeq_f32(z, vdupq_n_f32(0.0f)), vcleq_f32(z, vdupq_n_f32(1.0f)));
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(z), in_range));
}

// Four symbols s mod 2^b (s integral floats) to symbols[0..4).
inline void StoreSymbols(float32x4_t s, uint32x4_t mask, uint8_t* symbols) {
  const uint32x4_t q = vandq_u32(vreinterpretq_u32_s32(vcvtq_s32_f32(s)), mask);
  const uint16x4_t q16 = vmovn_u32(q);
  const uint8x8_t q8 = vmovn_u16(vcombine_u16(q16, q16));
  vst1_lane_u32(reinterpret_cast<uint32_t*>(static_cast<void*>(symbols)), vreinterpret_u32_u8(q8), 0);
}

inline float32x4_t LoadSymbols(const uint8_t* symbols) {
  const uint32x4_t s = {symbols[0], symbols[1], symbols[2], symbols[3]};
  return vcvtq_f32_u32(s);
}

// out = ((b q - y) mod_c b) + y for four coordinates; adds -1 to the lanes of
// *near whose |m| >= limit or m NaN (true = all ones).
inline void Recover(float32x4_t q, float32x4_t b, const float* y, float32x4_t limit, float* out, uint32x4_t* near) {
  const float32x4_t yi = vld1q_f32(y);
  const float32x4_t a = vsubq_f32(vmulq_f32(b, q), yi);
  const float32x4_t m = vsubq_f32(a, vmulq_f32(b, vrndnq_f32(vdivq_f32(a, b))));
  vst1q_f32(out, vaddq_f32(m, yi));
  *near = vsubq_u32(*near, vmvnq_u32(vcltq_f32(vabsq_f32(m), limit)));
}

}  // namespace

void MoniquaQuantize(const float* x, std::size_t n, float modulus, int bits, const uint32_t* words,
                     uint8_t* symbols) {
  const float32x4_t b = vdupq_n_f32(modulus);
  const float32x4_t levels = vdupq_n_f32(static_cast<float>(1u << bits));
  const uint32x4_t mask = vdupq_n_u32((1u << bits) - 1);
  const float32x4_t unit = vdupq_n_f32(0x1p-24f);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t scaled = vmulq_f32(UnitFraction(vld1q_f32(x + i), b), levels);
    float32x4_t s;
    if (words == nullptr) {
      s = vrndnq_f32(scaled);
    } else {
      const float32x4_t u = vmulq_f32(vcvtq_f32_u32(vshrq_n_u32(vld1q_u32(words + i), 8)), unit);
      s = vrndmq_f32(vaddq_f32(scaled, u));
    }
    StoreSymbols(s, mask, symbols + i);
  }
  scalar::MoniquaQuantize(x + i, n - i, modulus, bits, words == nullptr ? nullptr : words + i, symbols + i);
}

std::size_t MoniquaRecover(const uint8_t* symbols, std::size_t n, float modulus, int bits, const float* y,
                           float near_limit, float* out) {
  const float32x4_t b = vdupq_n_f32(modulus);
  const float32x4_t step = vdupq_n_f32(1.0f / static_cast<float>(1u << bits));
  const float32x4_t limit = vdupq_n_f32(near_limit);
  uint32x4_t near = vdupq_n_u32(0);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) Recover(vmulq_f32(LoadSymbols(symbols + i), step), b, y + i, limit, out + i, &near);
  std::size_t count = vaddvq_u32(near);
  return count + scalar::MoniquaRecover(symbols + i, n - i, modulus, bits, y + i, near_limit, out + i);
}

void MoniquaQuantizeDither(const float* x, std::size_t n, float modulus, int bits, const float* dither,
                           uint8_t* symbols) {
  const float32x4_t b = vdupq_n_f32(modulus);
  const float32x4_t levels = vdupq_n_f32(static_cast<float>(1u << bits));
  const uint32x4_t mask = vdupq_n_u32((1u << bits) - 1);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t scaled = vmulq_f32(UnitFraction(vld1q_f32(x + i), b), levels);
    StoreSymbols(vrndnq_f32(vaddq_f32(scaled, vld1q_f32(dither + i))), mask, symbols + i);
  }
  scalar::MoniquaQuantizeDither(x + i, n - i, modulus, bits, dither + i, symbols + i);
}

std::size_t MoniquaRecoverDither(const uint8_t* symbols, std::size_t n, float modulus, int bits, const float* dither,
                                 const float* y, float near_limit, float* out) {
  const float32x4_t b = vdupq_n_f32(modulus);
  const float32x4_t step = vdupq_n_f32(1.0f / static_cast<float>(1u << bits));
  const float32x4_t limit = vdupq_n_f32(near_limit);
  uint32x4_t near = vdupq_n_u32(0);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t q = vmulq_f32(vsubq_f32(LoadSymbols(symbols + i), vld1q_f32(dither + i)), step);
    Recover(q, b, y + i, limit, out + i, &near);
  }
  std::size_t count = vaddvq_u32(near);
  return count + scalar::MoniquaRecoverDither(symbols + i, n - i, modulus, bits, dither + i, y + i, near_limit, out + i);
}

#else  // ARMv7

void MoniquaQuantize(const float* x, std::size_t n, float modulus, int bits, const uint32_t* words,
                     uint8_t* symbols) {
  scalar::MoniquaQuantize(x, n, modulus, bits, words, symbols);
}

std::size_t MoniquaRecover(const uint8_t* symbols, std::size_t n, float modulus, int bits, const float* y,
                           float near_limit, float* out) {
  return scalar::MoniquaRecover(symbols, n, modulus, bits, y, near_limit, out);
}

void MoniquaQuantizeDither(const float* x, std::size_t n, float modulus, int bits, const float* dither,
                           uint8_t* symbols) {
  scalar::MoniquaQuantizeDither(x, n, modulus, bits, dither, symbols);
}

std::size_t MoniquaRecoverDither(const uint8_t* symbols, std::size_t n, float modulus, int bits, const float* dither,
                                 const float* y, float near_limit, float* out) {
  return scalar::MoniquaRecoverDither(symbols, n, modulus, bits, dither, y, near_limit, out);
}

#endif

}  // namespace fedrt::neon
