// NEON DQSG / NDQSG kernels, four coordinates per vector.
// AArch64: division is FDIV (correctly rounded), rounding FRINTN (vrndnq_f32,
// half to even), no fused multiply-add (-ffp-contract=off and no vfma), and
// the default FPCR keeps subnormals: every value equals the scalar reference.
// ARMv7: NEON has no division and always flushes subnormals to zero (inputs
// and results), rounding to nearest even otherwise. max_abs works on integer
// bit patterns and runs in NEON. dequantize runs in NEON when the bucket's
// scale is at least 2^-102: then no operand or result can be subnormal
// (q - u is 0 or at least 2^-24 in magnitude, so a nonzero product is at
// least 2^-126), and every operation is the IEEE one; smaller scales, and the
// kernels that divide or accumulate into arbitrary floats, use the scalar
// reference (VFP, IEEE).
// Tails (fewer than one iteration): the scalar kernels.
#include <arm_neon.h>

#include <cstring>

#include "dqsg/dqsg_kernels.h"

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

void Quantize(const float* w, const float* u, std::size_t n, float scale, int s, uint8_t* symbols) {
  scalar::Quantize(w, u, n, scale, s, symbols);
}
void DequantizeAccumulate(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s,
                          float weight, float* acc) {
  scalar::DequantizeAccumulate(symbols, u, n, scale, s, weight, acc);
}
void NestedQuantize(const float* w, const float* u, std::size_t n, float scale, int s1, int rho,
                    uint8_t* symbols) {
  scalar::NestedQuantize(w, u, n, scale, s1, rho, symbols);
}
void NestedDequantize(const uint8_t* symbols, const float* u, const float* y, std::size_t n, float scale,
                      int rho, float* out) {
  scalar::NestedDequantize(symbols, u, y, n, scale, rho, out);
}

#endif

}  // namespace fedrt::neon
