// NEON fp16 / bf16 converters, four values per iteration.
// fp16 on AArch64: clamp to +-65504 (vmin/vmax are exact), then FCVTN, which
// rounds to nearest-even under the default FPCR (FZ = 0, so subnormal halves
// are produced exactly); fp16 -> float with FCVTL is exact.
// fp16 on ARMv7: the half-precision NEON conversions need neon-fp16, which
// our ARMv7 flags do not enable (and ARMv7 NEON flushes subnormals), so the
// ARMv7 variant forwards fp16 to the scalar integer reference.
// bf16 (both): the scalar integer algorithm on four lanes.
// Tails (< 4 values): the scalar kernels.
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
#else
void FloatToFp16(const float* in, std::size_t n, uint16_t* out) { scalar::FloatToFp16(in, n, out); }
void Fp16ToFloat(const uint16_t* in, std::size_t n, float* out) { scalar::Fp16ToFloat(in, n, out); }
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
