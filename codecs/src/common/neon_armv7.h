// Helpers of the ARMv7 NEON kernels (included only by *_neon.cc files built
// for 32-bit ARM). ARMv7 Advanced SIMD rounds to nearest even but flushes
// subnormal inputs and results to zero and returns the default NaN; these
// predicates let a kernel run a block in NEON and prove, lane by lane, that
// no flush (or NaN) happened, so the block equals the IEEE (scalar VFP)
// result; a block that fails the test is recomputed by the scalar reference.
#ifndef FEDRT_CODECS_COMMON_NEON_ARMV7_H_
#define FEDRT_CODECS_COMMON_NEON_ARMV7_H_

#include <arm_neon.h>

namespace fedrt::neon::armv7 {

inline uint32x4_t AbsBits(float32x4_t x) {
  return vandq_u32(vreinterpretq_u32_f32(x), vdupq_n_u32(0x7FFFFFFFu));
}

// All ones where x is a normal number (not zero, subnormal, Inf or NaN).
inline uint32x4_t IsNormal(float32x4_t x) {
  return vcltq_u32(vsubq_u32(AbsBits(x), vdupq_n_u32(0x00800000u)), vdupq_n_u32(0x7F000000u));
}

// All ones where x is not subnormal (zero, normal, Inf or NaN).
inline uint32x4_t IsNotSubnormal(float32x4_t x) {
  return vcgeq_u32(vsubq_u32(AbsBits(x), vdupq_n_u32(1u)), vdupq_n_u32(0x007FFFFFu));
}

// All ones where the NEON sum `sum` of a + b (neither subnormal: callers
// check) is the IEEE sum: a normal result cannot have been flushed, and a
// zero result is exact only when a == -b (otherwise the exact sum was
// subnormal and NEON flushed it). Inf/NaN results are never accepted.
inline uint32x4_t SumIsIeee(float32x4_t a, float32x4_t b, float32x4_t sum) {
  const uint32x4_t exact_zero = vandq_u32(vceqq_u32(AbsBits(sum), vdupq_n_u32(0)), vceqq_f32(a, vnegq_f32(b)));
  return vorrq_u32(IsNormal(sum), exact_zero);
}

// True when every lane of `mask` is set (one transfer to the core registers).
inline bool AllLanesSet(uint32x4_t mask) {
  uint32x2_t m = vpmin_u32(vget_low_u32(mask), vget_high_u32(mask));
  m = vpmin_u32(m, m);
  return vget_lane_u32(m, 0) != 0;
}

// Stores the 16 floats of `block` at `out` when every lane of `sure` is set;
// returns false (storing nothing) otherwise, for the caller's scalar redo.
inline bool StoreBlockIfSure(uint32x4_t sure, const float32x4_t block[4], float* out) {
  if (!AllLanesSet(sure)) return false;
  for (int h = 0; h < 4; ++h) vst1q_f32(out + 4 * h, block[h]);
  return true;
}

// Round half to even for |x| <= 2^22: adding 1.5 * 2^23 leaves no fraction
// bits (NEON rounds to nearest even), and the subtraction is exact.
inline float32x4_t RoundHalfEven(float32x4_t x) {
  const float32x4_t magic = vdupq_n_f32(0x1.8p23f);
  return vsubq_f32(vaddq_f32(x, magic), magic);
}

}  // namespace fedrt::neon::armv7

#endif  // FEDRT_CODECS_COMMON_NEON_ARMV7_H_
