// NEON reduction kernels. AArch64: 16 floats per iteration (four 4-lane
// FADDs); under the default FPCR (FZ = 0) each lane rounds exactly as the
// scalar addition, subnormals included. Tails (< 16, then < 4 values):
// 4-lane steps, then scalar.
// ARMv7: NEON float arithmetic always flushes subnormals to zero, so a block
// is kept only when no lane can have been flushed (below); the others use
// the scalar reference (VFP additions are IEEE-exact).
#include <arm_neon.h>

#include "reduce/reduce_kernels.h"
#if !defined(__aarch64__)
#include "common/neon_armv7.h"
#endif

namespace fedrt::neon {

#if defined(__aarch64__)
void AddFloats(const float* in, std::size_t n, float* inout) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const float32x4_t a0 = vaddq_f32(vld1q_f32(inout + i), vld1q_f32(in + i));
    const float32x4_t a1 = vaddq_f32(vld1q_f32(inout + i + 4), vld1q_f32(in + i + 4));
    const float32x4_t a2 = vaddq_f32(vld1q_f32(inout + i + 8), vld1q_f32(in + i + 8));
    const float32x4_t a3 = vaddq_f32(vld1q_f32(inout + i + 12), vld1q_f32(in + i + 12));
    vst1q_f32(inout + i, a0);
    vst1q_f32(inout + i + 4, a1);
    vst1q_f32(inout + i + 8, a2);
    vst1q_f32(inout + i + 12, a3);
  }
  for (; i + 4 <= n; i += 4) vst1q_f32(inout + i, vaddq_f32(vld1q_f32(inout + i), vld1q_f32(in + i)));
  scalar::AddFloats(in + i, n - i, inout + i);
}
#else
// ARMv7: 16 floats per block in NEON, stored only when every lane is the IEEE
// sum (neither input subnormal, the sum normal or an exact zero; see
// common/neon_armv7.h); other blocks, e.g. sums that cancel into the
// subnormal range or carry NaN, are recomputed by the scalar reference.
void AddFloats(const float* in, std::size_t n, float* inout) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    float32x4_t sums[4];
    uint32x4_t sure = vdupq_n_u32(0xFFFFFFFFu);
    for (int h = 0; h < 4; ++h) {
      const float32x4_t a = vld1q_f32(inout + i + 4 * h);
      const float32x4_t b = vld1q_f32(in + i + 4 * h);
      sums[h] = vaddq_f32(a, b);
      sure = vandq_u32(sure, vandq_u32(vandq_u32(armv7::IsNotSubnormal(a), armv7::IsNotSubnormal(b)),
                                       armv7::SumIsIeee(a, b, sums[h])));
    }
    if (!armv7::StoreBlockIfSure(sure, sums, inout + i)) scalar::AddFloats(in + i, 16, inout + i);
  }
  scalar::AddFloats(in + i, n - i, inout + i);
}
#endif

}  // namespace fedrt::neon
