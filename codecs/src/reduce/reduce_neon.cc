// NEON reduction kernels. AArch64: 16 floats per iteration (four 4-lane
// FADDs); under the default FPCR (FZ = 0) each lane rounds exactly as the
// scalar addition, subnormals included. Tails (< 16, then < 4 values):
// 4-lane steps, then scalar.
// ARMv7: NEON float arithmetic always flushes subnormals to zero, which
// would differ from the reference, so the ARMv7 variant is the scalar one
// (VFP additions are IEEE-exact).
#include <arm_neon.h>

#include "reduce/reduce_kernels.h"

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
void AddFloats(const float* in, std::size_t n, float* inout) { scalar::AddFloats(in, n, inout); }
#endif

}  // namespace fedrt::neon
