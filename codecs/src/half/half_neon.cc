// NEON fp16 / bf16 converters, four values per iteration.
// fp16 on AArch64: clamp to +-65504 (vmin/vmax are exact), then FCVTN, which
// rounds to nearest-even under the default FPCR (FZ = 0, so subnormal halves
// are produced exactly); fp16 -> float with FCVTL is exact.
// fp16 on ARMv7: the half-precision conversions (vcvt.f16.f32) need
// neon-fp16, which our ARMv7 flags do not enable, and ARMv7 NEON flushes
// subnormal halves; so ARMv7 runs the scalar integer algorithm on four lanes
// (integer NEON only: exact, subnormal halves and round-half-even included,
// and even NaN/Inf inputs give the scalar bits), eight values per iteration.
// bf16 (both): the scalar integer algorithm on four lanes.
// Tails (fewer than one iteration): the scalar kernels.
#include <arm_neon.h>

#include "half/half_kernels.h"

namespace fedrt::neon {

#if defined(__aarch64__)
void FloatToFp16(const float* in, std::size_t n, uint16_t* out) {
  const float32x4_t hi = vdupq_n_f32(kFp16Max);
  const float32x4_t lo = vdupq_n_f32(-kFp16Max);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t x = vminq_f32(vmaxq_f32(vld1q_f32(in + i), lo), hi);
    vst1_u16(out + i, vreinterpret_u16_f16(vcvt_f16_f32(x)));
  }
  scalar::FloatToFp16(in + i, n - i, out + i);
}

void Fp16ToFloat(const uint16_t* in, std::size_t n, float* out) {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(in + i))));
  scalar::Fp16ToFloat(in + i, n - i, out + i);
}
#else  // ARMv7: the scalar integer algorithm on four lanes (no float ops)

namespace {

// Four floats (bits) to fp16 bits, exactly as scalar::FloatToFp16: saturate,
// then the normal-result rounding (add 0xFFF + lowest kept bit) or, for a
// result below 2^-14, the 24-bit significand shifted right by 126 - e with
// the same round-half-even trick (m + 2^(shift-1) - 1 + lowest kept bit).
// The shift is capped at 25, where every significand (< 2^24) rounds to 0,
// as the scalar kernel's "below 2^-25" case does (float subnormals included).
inline uint16x4_t FloatToFp16Lanes(uint32x4_t x) {
  const uint32x4_t one = vdupq_n_u32(1u);
  const uint32x4_t sign = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(0x8000u));
  const uint32x4_t a = vminq_u32(vandq_u32(x, vdupq_n_u32(0x7FFFFFFFu)), vdupq_n_u32(kFp16MaxAsFloatBits));
  // Lanes below 2^-14 wrap around here; they take the other result.
  const uint32x4_t rounded = vaddq_u32(a, vaddq_u32(vdupq_n_u32(0xFFFu), vandq_u32(vshrq_n_u32(a, 13), one)));
  const uint32x4_t normal = vshrq_n_u32(vsubq_u32(rounded, vdupq_n_u32(0x38000000u)), 13);
  const int32x4_t e = vreinterpretq_s32_u32(vshrq_n_u32(a, 23));
  const int32x4_t shift = vminq_s32(vsubq_s32(vdupq_n_s32(126), e), vdupq_n_s32(25));  // 14..25
  const int32x4_t right = vnegq_s32(shift);
  const uint32x4_t m = vorrq_u32(vandq_u32(a, vdupq_n_u32(0x7FFFFFu)), vdupq_n_u32(0x800000u));
  const uint32x4_t kept_lsb = vandq_u32(vshlq_u32(m, right), one);
  const uint32x4_t half_minus_one = vsubq_u32(vshlq_u32(one, vsubq_s32(shift, vreinterpretq_s32_u32(one))), one);
  const uint32x4_t subnormal = vshlq_u32(vaddq_u32(m, vaddq_u32(half_minus_one, kept_lsb)), right);
  const uint32x4_t is_normal = vcgeq_u32(a, vdupq_n_u32(0x38800000u));
  return vmovn_u32(vorrq_u32(sign, vbslq_u32(is_normal, normal, subnormal)));
}

// Four fp16 bit patterns to float bits, exactly as scalar::Fp16ToFloat:
// normal halves rebias the exponent by 112 (Inf/NaN by 224, which lands on
// 255); a subnormal m * 2^-24 with its top bit at 31 - clz(m) becomes the
// float with exponent field 134 - clz and the bits below the top one.
inline uint32x4_t Fp16ToFloatLanes(uint16x4_t h16) {
  const uint32x4_t h = vmovl_u16(h16);
  const uint32x4_t sign = vshlq_n_u32(vandq_u32(h, vdupq_n_u32(0x8000u)), 16);
  const uint32x4_t mag = vandq_u32(h, vdupq_n_u32(0x7FFFu));
  const uint32x4_t bias = vdupq_n_u32(112u << 23);
  const uint32x4_t is_special = vcgeq_u32(mag, vdupq_n_u32(0x7C00u));
  const uint32x4_t normal = vaddq_u32(vaddq_u32(vshlq_n_u32(mag, 13), bias), vandq_u32(is_special, bias));
  const uint32x4_t lz = vclzq_u32(mag);  // 22..31 for a nonzero subnormal
  const uint32x4_t exponent = vshlq_n_u32(vsubq_u32(vdupq_n_u32(134u), lz), 23);
  const int32x4_t up = vsubq_s32(vreinterpretq_s32_u32(lz), vdupq_n_s32(8));
  const uint32x4_t mantissa = vandq_u32(vshlq_u32(mag, up), vdupq_n_u32(0x7FFFFFu));
  const uint32x4_t subnormal = vandq_u32(vorrq_u32(exponent, mantissa), vtstq_u32(mag, mag));  // +-0 stays 0
  const uint32x4_t is_small = vcltq_u32(mag, vdupq_n_u32(0x400u));
  return vorrq_u32(sign, vbslq_u32(is_small, subnormal, normal));
}

}  // namespace

void FloatToFp16(const float* in, std::size_t n, uint16_t* out) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint16x4_t lo = FloatToFp16Lanes(vreinterpretq_u32_f32(vld1q_f32(in + i)));
    const uint16x4_t hi = FloatToFp16Lanes(vreinterpretq_u32_f32(vld1q_f32(in + i + 4)));
    vst1q_u16(out + i, vcombine_u16(lo, hi));
  }
  scalar::FloatToFp16(in + i, n - i, out + i);
}

void Fp16ToFloat(const uint16_t* in, std::size_t n, float* out) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint16x8_t h = vld1q_u16(in + i);
    vst1q_f32(out + i, vreinterpretq_f32_u32(Fp16ToFloatLanes(vget_low_u16(h))));
    vst1q_f32(out + i + 4, vreinterpretq_f32_u32(Fp16ToFloatLanes(vget_high_u16(h))));
  }
  scalar::Fp16ToFloat(in + i, n - i, out + i);
}

#endif

void FloatToBf16(const float* in, std::size_t n, uint16_t* out) {
  const uint32x4_t abs_mask = vdupq_n_u32(0x7FFFFFFFu);
  const uint32x4_t max_bits = vdupq_n_u32(kBf16MaxAsFloatBits);
  const uint32x4_t round_bias = vdupq_n_u32(0x7FFFu);
  const uint32x4_t one = vdupq_n_u32(1u);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint32x4_t x = vreinterpretq_u32_f32(vld1q_f32(in + i));
    const uint32x4_t sign = vshrq_n_u32(vbicq_u32(x, abs_mask), 16);
    uint32x4_t a = vminq_u32(vandq_u32(x, abs_mask), max_bits);
    a = vaddq_u32(a, vaddq_u32(round_bias, vandq_u32(vshrq_n_u32(a, 16), one)));
    vst1_u16(out + i, vmovn_u32(vorrq_u32(sign, vshrq_n_u32(a, 16))));
  }
  scalar::FloatToBf16(in + i, n - i, out + i);
}

void Bf16ToFloat(const uint16_t* in, std::size_t n, float* out) {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    vst1q_f32(out + i, vreinterpretq_f32_u32(vshlq_n_u32(vmovl_u16(vld1_u16(in + i)), 16)));
  }
  scalar::Bf16ToFloat(in + i, n - i, out + i);
}

}  // namespace fedrt::neon
