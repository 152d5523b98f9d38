// NEON GEMM micro-kernel (AArch64 and ARMv7): a 4 x 8 tile of C in eight
// 4-lane accumulators. vmulq_f32 then vaddq_f32 (never vmlaq/vfmaq, which
// fuse or differ in rounding), so every element is summed in the scalar
// reference's order and rounding: bit-identical results. Only ARMv7 NEON
// instructions are used, so one file serves both. No tails (the driver pads).
//
// Subnormals: AArch64 NEON follows FPCR.FZ (clear on Linux), so it keeps
// them like the scalar code. ARMv7 NEON always flushes subnormal inputs and
// results to zero, whatever FPSCR.FZ says; the scalar VFP instructions do
// not. On ARMv7 the tile is therefore computed with NEON after clearing the
// cumulative flags IDC (a subnormal input was flushed) and UFC (a result was
// flushed); when either is set afterwards the tile is restored and computed
// again by the scalar kernel (VFP, subnormals kept). A tile without
// subnormals, the common case, costs two flag reads and a 32-float copy; a
// tile with them runs at scalar speed. NaN payloads may still differ (NEON
// returns the default NaN), which training never relies on.
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "train/gemm_kernels.h"

namespace fedrt::neon {
namespace {

void NeonTile(std::size_t k, const float* a_panel, const float* b_panel, float* c, std::size_t ldc) {
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

#if defined(__arm__) && !defined(__aarch64__)
constexpr uint32_t kFpscrUfc = 1u << 3;  // underflow: a result was flushed to zero
constexpr uint32_t kFpscrIdc = 1u << 7;  // input denormal: an input was flushed
// The "memory" clobbers keep the tile's loads after the clear and its stores
// before the read, so the flags cover exactly this tile's arithmetic.
inline uint32_t ReadFpscr() {
  uint32_t value;
  __asm__ volatile("vmrs %0, fpscr" : "=r"(value) : : "memory");
  return value;
}
inline void WriteFpscr(uint32_t value) { __asm__ volatile("vmsr fpscr, %0" : : "r"(value) : "memory"); }
#endif

}  // namespace

void GemmMicroKernel(std::size_t k, const float* a_panel, const float* b_panel, float* c,
                     std::size_t ldc) {
#if defined(__arm__) && !defined(__aarch64__)
  float saved[kGemmMr][kGemmNr];
  for (int i = 0; i < kGemmMr; ++i) std::memcpy(saved[i], c + static_cast<std::size_t>(i) * ldc, sizeof(saved[i]));
  const uint32_t before = ReadFpscr();
  WriteFpscr(before & ~(kFpscrUfc | kFpscrIdc));
  NeonTile(k, a_panel, b_panel, c, ldc);
  const uint32_t after = ReadFpscr();
  WriteFpscr(after | (before & (kFpscrUfc | kFpscrIdc)));  // the caller's flags stay as they were
  if ((after & (kFpscrUfc | kFpscrIdc)) == 0) return;
  for (int i = 0; i < kGemmMr; ++i) std::memcpy(c + static_cast<std::size_t>(i) * ldc, saved[i], sizeof(saved[i]));
  scalar::GemmMicroKernel(k, a_panel, b_panel, c, ldc);
#else
  NeonTile(k, a_panel, b_panel, c, ldc);
#endif
}

}  // namespace fedrt::neon
