// NEON DQSG / NDQSG kernels, four coordinates per vector.
// AArch64: division is FDIV (correctly rounded), rounding FRINTN (vrndnq_f32,
// half to even), no fused multiply-add (-ffp-contract=off and no vfma), and
// the default FPCR keeps subnormals: every value equals the scalar reference.
// ARMv7: NEON has no division and always flushes subnormals to zero (inputs
// and results), rounding to nearest even otherwise. max_abs works on integer
// bit patterns and runs in NEON. dequantize runs in NEON when the bucket's
// scale is at least 2^-102: then no operand or result can be subnormal
// (q - u is 0 or at least 2^-24 in magnitude, so a nonzero product is at
// least 2^-126), and every operation is the IEEE one; smaller scales use the
// scalar reference (VFP, IEEE). The dividing kernels (quantize, nested
// quantize and dequantize) multiply by the reciprocal and keep a block of 16
// only when a distance-to-tie test proves the same rounding; dequantize-
// accumulate keeps a block only when no lane can have been flushed; other
// blocks, and scales outside [2^-100, 2^100], run the scalar reference (the
// proofs are next to the ARMv7 kernels below).
// Tails (fewer than one iteration): the scalar kernels.
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "dqsg/dqsg_kernels.h"
#if !defined(__aarch64__)
#include "common/neon_armv7.h"
#endif

namespace fedrt::neon {

float MaxAbs(const float* w, std::size_t n) {
  const uint32x4_t abs_mask = vdupq_n_u32(0x7FFFFFFFu);
  uint32x4_t best = vdupq_n_u32(0);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) best = vmaxq_u32(best, vandq_u32(vreinterpretq_u32_f32(vld1q_f32(w + i)), abs_mask));
  uint32x2_t pair = vpmax_u32(vget_low_u32(best), vget_high_u32(best));
  pair = vpmax_u32(pair, pair);
  const float vector_max = vget_lane_f32(vreinterpret_f32_u32(pair), 0);
  const float tail_max = scalar::MaxAbs(w + i, n - i);
  // Compare as bit patterns: ARMv7 NEON/VFP comparisons could flush subnormals.
  const uint32_t vector_bits = vget_lane_u32(pair, 0);
  uint32_t tail_bits;
  std::memcpy(&tail_bits, &tail_max, sizeof tail_bits);
  return tail_bits > vector_bits ? tail_max : vector_max;
}

namespace {

// Symbols i..i+3 minus `offset`, as floats (exact: small integers).
inline float32x4_t LoadLevels(const uint8_t* symbols, int32x4_t offset) {
  uint32_t word;
  std::memcpy(&word, symbols, sizeof word);  // exactly four bytes: never past the array
  const uint16x4_t wide = vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(word))));
  return vcvtq_f32_s32(vsubq_s32(vreinterpretq_s32_u32(vmovl_u16(wide)), offset));
}

// (q - u) * scale for four coordinates; ARMv7 callers guarantee scale >= 2^-102.
inline void DequantizeVectors(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s,
                              float* out, std::size_t* done) {
  const float32x4_t scale_v = vdupq_n_f32(scale);
  const int32x4_t offset = vdupq_n_s32(s);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t q = LoadLevels(symbols + i, offset);
    vst1q_f32(out + i, vmulq_f32(vsubq_f32(q, vld1q_f32(u + i)), scale_v));
  }
  *done = i;
}

}  // namespace

#if defined(__aarch64__)
constexpr bool kFlushesSubnormals = false;
#else
constexpr bool kFlushesSubnormals = true;
#endif

void Dequantize(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s, float* out) {
  std::size_t i = 0;
  // ARMv7: only scales for which nothing can be subnormal (file comment).
  if (!kFlushesSubnormals || scale >= 0x1p-102f) DequantizeVectors(symbols, u, n, scale, s, out, &i);
  scalar::Dequantize(symbols + i, u + i, n - i, scale, s, out + i);
}

#if defined(__aarch64__)
namespace {

// Writes four int32 symbol lanes (each in [0, 255]) as bytes.
inline void StoreSymbols4(int32x4_t symbols, uint8_t* out) {
  const uint16x4_t narrow = vmovn_u32(vreinterpretq_u32_s32(symbols));
  const uint8x8_t bytes = vmovn_u16(vcombine_u16(narrow, narrow));
  const uint32_t word = vget_lane_u32(vreinterpret_u32_u8(bytes), 0);
  std::memcpy(out, &word, sizeof word);
}

}  // namespace

void Quantize(const float* w, const float* u, std::size_t n, float scale, int s, uint8_t* symbols) {
  const float32x4_t scale_v = vdupq_n_f32(scale);
  const float32x4_t hi = vdupq_n_f32(static_cast<float>(s));
  const float32x4_t lo = vdupq_n_f32(-static_cast<float>(s));
  const int32x4_t offset = vdupq_n_s32(s);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t t = vaddq_f32(vdivq_f32(vld1q_f32(w + i), scale_v), vld1q_f32(u + i));
    const float32x4_t q = vminq_f32(vmaxq_f32(vrndnq_f32(t), lo), hi);
    StoreSymbols4(vaddq_s32(vcvtq_s32_f32(q), offset), symbols + i);
  }
  scalar::Quantize(w + i, u + i, n - i, scale, s, symbols + i);
}

void DequantizeAccumulate(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s,
                          float weight, float* acc) {
  const float32x4_t scale_v = vdupq_n_f32(scale);
  const float32x4_t weight_v = vdupq_n_f32(weight);
  const int32x4_t offset = vdupq_n_s32(s);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t value = vmulq_f32(vsubq_f32(LoadLevels(symbols + i, offset), vld1q_f32(u + i)), scale_v);
    vst1q_f32(acc + i, vaddq_f32(vld1q_f32(acc + i), vmulq_f32(weight_v, value)));
  }
  scalar::DequantizeAccumulate(symbols + i, u + i, n - i, scale, s, weight, acc + i);
}

void NestedQuantize(const float* w, const float* u, std::size_t n, float scale, int s1, int rho,
                    uint8_t* symbols) {
  if (rho % 2 == 0) return scalar::NestedQuantize(w, u, n, scale, s1, rho, symbols);  // even rho: scalar
  const float32x4_t scale_v = vdupq_n_f32(scale);
  const float32x4_t hi = vdupq_n_f32(static_cast<float>(s1));
  const float32x4_t lo = vdupq_n_f32(-static_cast<float>(s1));
  const float32x4_t rho_v = vdupq_n_f32(static_cast<float>(rho));
  const int32x4_t offset = vdupq_n_s32((rho - 1) / 2);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t t = vaddq_f32(vdivq_f32(vld1q_f32(w + i), scale_v), vld1q_f32(u + i));
    const float32x4_t fine = vminq_f32(vmaxq_f32(vrndnq_f32(t), lo), hi);
    const float32x4_t q = vsubq_f32(fine, vmulq_f32(rho_v, vrndnq_f32(vdivq_f32(fine, rho_v))));
    StoreSymbols4(vaddq_s32(vcvtq_s32_f32(q), offset), symbols + i);
  }
  scalar::NestedQuantize(w + i, u + i, n - i, scale, s1, rho, symbols + i);
}

void NestedDequantize(const uint8_t* symbols, const float* u, const float* y, std::size_t n, float scale,
                      int rho, float* out) {
  const float32x4_t scale_v = vdupq_n_f32(scale);
  const float32x4_t rho_v = vdupq_n_f32(static_cast<float>(rho));
  const float32x4_t d2 = vdupq_n_f32(static_cast<float>(rho) * scale);
  const int32x4_t offset = vdupq_n_s32((rho - 1) / 2);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t q = LoadLevels(symbols + i, offset);
    const float32x4_t u_v = vld1q_f32(u + i);
    const float32x4_t a = vmulq_f32(vsubq_f32(q, u_v), scale_v);
    const float32x4_t m = vrndnq_f32(vdivq_f32(vsubq_f32(vld1q_f32(y + i), a), d2));
    const float32x4_t fine = vaddq_f32(q, vmulq_f32(rho_v, m));
    vst1q_f32(out + i, vmulq_f32(vsubq_f32(fine, u_v), scale_v));
  }
  scalar::NestedDequantize(symbols + i, u + i, y + i, n - i, scale, rho, out + i);
}

#else  // ARMv7

// ARMv7 quantize: no vector division, so q' = w * fl(1/scale) stands in for
// q = fl(w / scale), and the rounding of t' = q' + u is kept only when it
// provably equals the reference's rounding of t = fl(q + u); otherwise the
// block of 16 coordinates is recomputed by the scalar reference. Proof
// sketch, for 2^-100 <= scale <= 2^100 (else the whole call is scalar), so
// that 1/scale is normal: |q - q'| <= 3.0002 * 2^-24 |w / scale| + 2^-25
// (two roundings against one, plus a subnormal w flushed to 0, which moves
// the quotient by less than 2^-126 / 2^-100); a subnormal u or sum flushed
// by NEON moves t' by less than 2^-126; each of t, t' is within 2^-24 of its
// magnitude of the exact sum. Hence, for |t'| < 256,
//   |t - t'| <= 2^-22 |q'| + 2^-14.5,
// and the test below asks for a distance from t' to the nearest half-integer
// of more than 2^-20 |q'| + 2^-13 (twice that, so the roundings of the test
// itself cannot matter): then t and t' round to the same integer, ties
// included. For |t'| >= 256 the same bound (which the test limits to
// |q'| < 2^19) keeps |t| > 255 with the same sign, so both clamp to the
// same +-s (s <= 127). NaN or Inf in t' fails the test. Misses are rare:
// about 2^-11 of the coordinates of Gaussian-like input sit that close to a
// half-integer.
namespace {

constexpr float kMinReciprocalScale = 0x1p-100f;
constexpr float kMaxReciprocalScale = 0x1p100f;

using armv7::AllLanesSet;
using armv7::RoundHalfEven;

// clamp(round(w / scale + u), -hi, hi) for 16 coordinates when the test in
// the comment above holds for all of them (returns false otherwise).
inline bool FineIndices16(const float* w, const float* u, float32x4_t inverse, float32x4_t hi, float32x4_t fine[4]) {
  const float32x4_t limit = vdupq_n_f32(256.0f);
  const float32x4_t half = vdupq_n_f32(0.5f);
  const float32x4_t relative = vdupq_n_f32(0x1p-20f);
  const float32x4_t absolute = vdupq_n_f32(0x1p-13f);
  uint32x4_t sure = vdupq_n_u32(0xFFFFFFFFu);
  for (int h = 0; h < 4; ++h) {
    const float32x4_t q = vmulq_f32(vld1q_f32(w + 4 * h), inverse);
    const float32x4_t t = vminq_f32(vmaxq_f32(vaddq_f32(q, vld1q_f32(u + 4 * h)), vnegq_f32(limit)), limit);
    const float32x4_t k = RoundHalfEven(t);
    const float32x4_t margin = vaddq_f32(vmulq_f32(vabsq_f32(q), relative), absolute);
    sure = vandq_u32(sure, vcgtq_f32(vsubq_f32(half, vabdq_f32(t, k)), margin));
    fine[h] = vminq_f32(vmaxq_f32(k, vnegq_f32(hi)), hi);
  }
  return AllLanesSet(sure);
}

// Sixteen small integers (as floats) plus `offset`, stored as bytes.
inline void StoreSymbols16(const float32x4_t values[4], int32x4_t offset, uint8_t* out) {
  uint16x4_t narrow[4];
  for (int h = 0; h < 4; ++h) narrow[h] = vmovn_u32(vreinterpretq_u32_s32(vaddq_s32(vcvtq_s32_f32(values[h]), offset)));
  vst1_u8(out, vmovn_u16(vcombine_u16(narrow[0], narrow[1])));
  vst1_u8(out + 8, vmovn_u16(vcombine_u16(narrow[2], narrow[3])));
}

}  // namespace

void Quantize(const float* w, const float* u, std::size_t n, float scale, int s, uint8_t* symbols) {
  if (!(scale >= kMinReciprocalScale && scale <= kMaxReciprocalScale)) return scalar::Quantize(w, u, n, scale, s, symbols);
  const float32x4_t inverse = vdupq_n_f32(1.0f / scale);  // VFP division: IEEE
  const float32x4_t hi = vdupq_n_f32(static_cast<float>(s));
  const int32x4_t offset = vdupq_n_s32(s);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    float32x4_t fine[4];
    if (FineIndices16(w + i, u + i, inverse, hi, fine)) {
      StoreSymbols16(fine, offset, symbols + i);
    } else {
      scalar::Quantize(w + i, u + i, 16, scale, s, symbols + i);
    }
  }
  scalar::Quantize(w + i, u + i, n - i, scale, s, symbols + i);
}

// Odd rho: m = round(fine / rho) is fine * fl(1/rho) rounded, because fine / rho
// (|fine| <= 127) is at least 1/(2 rho) >= 2^-9 from a half-integer (2 fine is
// even, rho (2m + 1) odd) while the two roundings move it by under 2^-16.
void NestedQuantize(const float* w, const float* u, std::size_t n, float scale, int s1, int rho,
                    uint8_t* symbols) {
  if (rho % 2 == 0 || !(scale >= kMinReciprocalScale && scale <= kMaxReciprocalScale)) {
    return scalar::NestedQuantize(w, u, n, scale, s1, rho, symbols);
  }
  const float32x4_t inverse = vdupq_n_f32(1.0f / scale);
  const float32x4_t hi = vdupq_n_f32(static_cast<float>(s1));
  const float32x4_t rho_v = vdupq_n_f32(static_cast<float>(rho));
  const float32x4_t inverse_rho = vdupq_n_f32(1.0f / static_cast<float>(rho));
  const int32x4_t offset = vdupq_n_s32((rho - 1) / 2);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    float32x4_t fine[4];
    if (!FineIndices16(w + i, u + i, inverse, hi, fine)) {
      scalar::NestedQuantize(w + i, u + i, 16, scale, s1, rho, symbols + i);
      continue;
    }
    float32x4_t coset[4];
    for (int h = 0; h < 4; ++h) {
      coset[h] = vsubq_f32(fine[h], vmulq_f32(rho_v, RoundHalfEven(vmulq_f32(fine[h], inverse_rho))));
    }
    StoreSymbols16(coset, offset, symbols + i);
  }
  scalar::NestedQuantize(w + i, u + i, n - i, scale, s1, rho, symbols + i);
}

// acc += weight * ((q - u) * scale), 16 coordinates at a time, stored only
// when every lane provably has the IEEE value: acc not subnormal (NEON would
// read it as 0), the product normal (a zero product can hide a flushed value
// or product), and the sum normal or an exact zero (armv7::SumIsIeee). The
// value (q - u) * scale itself cannot be wrong without the product being 0:
// a flushed difference or value is 0, and otherwise the operations are IEEE.
// Other blocks (aggregates holding subnormals, zero values) run the scalar
// reference.
void DequantizeAccumulate(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s,
                          float weight, float* acc) {
  if (!(std::fabs(weight) >= 0x1p-126f)) return scalar::DequantizeAccumulate(symbols, u, n, scale, s, weight, acc);
  const float32x4_t scale_v = vdupq_n_f32(scale);
  const float32x4_t weight_v = vdupq_n_f32(weight);
  const int32x4_t offset = vdupq_n_s32(s);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    float32x4_t sums[4];
    uint32x4_t sure = vdupq_n_u32(0xFFFFFFFFu);
    for (int h = 0; h < 4; ++h) {
      const std::size_t at = i + 4 * static_cast<std::size_t>(h);
      const float32x4_t value = vmulq_f32(vsubq_f32(LoadLevels(symbols + at, offset), vld1q_f32(u + at)), scale_v);
      const float32x4_t old = vld1q_f32(acc + at);
      const float32x4_t product = vmulq_f32(weight_v, value);
      sums[h] = vaddq_f32(old, product);
      sure = vandq_u32(sure, vandq_u32(vandq_u32(armv7::IsNotSubnormal(old), armv7::IsNormal(product)),
                                       armv7::SumIsIeee(old, product, sums[h])));
    }
    if (!armv7::StoreBlockIfSure(sure, sums, acc + i)) {
      scalar::DequantizeAccumulate(symbols + i, u + i, 16, scale, s, weight, acc + i);
    }
  }
  scalar::DequantizeAccumulate(symbols + i, u + i, n - i, scale, s, weight, acc + i);
}

// Nested dequantize: z = (y - a) / d2 becomes (y - a) * fl(1/d2), and
// m = round(z) is kept when z' is far enough from a half-integer, as in
// quantize. For 2^-100 <= scale <= 2^100 (else scalar) d2 and 1/d2 are
// normal; flushes of a, y or y - a move y - a by less than 2^-124 plus
// 2^-23 of it, i.e. the quotient by less than 2^-24 + 2^-23 |z|; with the
// three roundings, |z - z'| < 2^-21.6 |z'| + 2^-23. The test asks for a
// distance above 2^-19 |z'| + 2^-20 (so |z'| < 2^18). Then n = q + rho m and
// (n - u) * scale are the reference's operations on normal numbers; the
// result is kept only if it is normal (a flushed product would be 0).
void NestedDequantize(const uint8_t* symbols, const float* u, const float* y, std::size_t n, float scale,
                      int rho, float* out) {
  if (!(scale >= kMinReciprocalScale && scale <= kMaxReciprocalScale)) {
    return scalar::NestedDequantize(symbols, u, y, n, scale, rho, out);
  }
  const float rho_f = static_cast<float>(rho);
  const float d2 = rho_f * scale;  // as the reference computes it
  const float32x4_t scale_v = vdupq_n_f32(scale);
  const float32x4_t rho_v = vdupq_n_f32(rho_f);
  const float32x4_t inverse_d2 = vdupq_n_f32(1.0f / d2);
  const float32x4_t limit = vdupq_n_f32(0x1p20f);
  const float32x4_t half = vdupq_n_f32(0.5f);
  const float32x4_t relative = vdupq_n_f32(0x1p-19f);
  const float32x4_t absolute = vdupq_n_f32(0x1p-20f);
  const int32x4_t offset = vdupq_n_s32((rho - 1) / 2);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    float32x4_t results[4];
    uint32x4_t sure = vdupq_n_u32(0xFFFFFFFFu);
    for (int h = 0; h < 4; ++h) {
      const std::size_t at = i + 4 * static_cast<std::size_t>(h);
      const float32x4_t q = LoadLevels(symbols + at, offset);
      const float32x4_t u_v = vld1q_f32(u + at);
      const float32x4_t a = vmulq_f32(vsubq_f32(q, u_v), scale_v);
      const float32x4_t z = vmulq_f32(vsubq_f32(vld1q_f32(y + at), a), inverse_d2);
      const float32x4_t zc = vminq_f32(vmaxq_f32(z, vnegq_f32(limit)), limit);
      const float32x4_t m = RoundHalfEven(zc);
      const float32x4_t margin = vaddq_f32(vmulq_f32(vabsq_f32(zc), relative), absolute);
      const float32x4_t fine = vaddq_f32(q, vmulq_f32(rho_v, m));
      results[h] = vmulq_f32(vsubq_f32(fine, u_v), scale_v);
      sure = vandq_u32(sure, vandq_u32(vcgtq_f32(vsubq_f32(half, vabdq_f32(zc, m)), margin),
                                       armv7::IsNormal(results[h])));
    }
    if (!armv7::StoreBlockIfSure(sure, results, out + i)) {
      scalar::NestedDequantize(symbols + i, u + i, y + i, 16, scale, rho, out + i);
    }
  }
  scalar::NestedDequantize(symbols + i, u + i, y + i, n - i, scale, rho, out + i);
}

#endif

}  // namespace fedrt::neon
