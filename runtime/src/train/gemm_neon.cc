// NEON GEMM micro-kernel (AArch64 and ARMv7): a 4 x 8 tile of C in eight
// 4-lane accumulators. vmulq_f32 then vaddq_f32 (never vmlaq/vfmaq, which
// fuse or differ in rounding), so every element is summed in the scalar
// reference's order and rounding: bit-identical results. Only ARMv7 NEON
// instructions are used, so one file serves both. No tails (the driver pads).
#include <arm_neon.h>

#include "train/gemm_kernels.h"

namespace fedrt::neon {

void GemmMicroKernel(std::size_t k, const float* a_panel, const float* b_panel, float* c,
                     std::size_t ldc) {
  static_assert(kGemmMr == 4 && kGemmNr == 8, "the register layout below is 4 x 8");
  float32x4_t acc[kGemmMr][2];
  for (int i = 0; i < kGemmMr; ++i) {
    acc[i][0] = vld1q_f32(c + static_cast<std::size_t>(i) * ldc);
    acc[i][1] = vld1q_f32(c + static_cast<std::size_t>(i) * ldc + 4);
  }
  for (std::size_t p = 0; p < k; ++p) {
    const float32x4_t b0 = vld1q_f32(b_panel + p * kGemmNr);
    const float32x4_t b1 = vld1q_f32(b_panel + p * kGemmNr + 4);
    const float* a = a_panel + p * kGemmMr;
    for (int i = 0; i < kGemmMr; ++i) {
      const float32x4_t ai = vdupq_n_f32(a[i]);
      acc[i][0] = vaddq_f32(acc[i][0], vmulq_f32(ai, b0));
      acc[i][1] = vaddq_f32(acc[i][1], vmulq_f32(ai, b1));
    }
  }
  for (int i = 0; i < kGemmMr; ++i) {
    vst1q_f32(c + static_cast<std::size_t>(i) * ldc, acc[i][0]);
    vst1q_f32(c + static_cast<std::size_t>(i) * ldc + 4, acc[i][1]);
  }
}

}  // namespace fedrt::neon
