// AVX2 GEMM micro-kernel: a 6 x 16 tile of C in twelve 8-lane accumulators.
// Each step broadcasts a(i,p) and multiplies it with two 8-lane loads of the
// B panel, then adds (_mm256_mul_ps + _mm256_add_ps, never FMA), so every
// element is summed in the scalar reference's order and rounding: the results
// are bit-identical. No tails (the driver pads panels and partial tiles).
#include <immintrin.h>

#include "train/gemm_kernels.h"

namespace fedrt::avx2 {

void GemmMicroKernel(std::size_t k, const float* a_panel, const float* b_panel, float* c,
                     std::size_t ldc) {
  static_assert(kGemmMr == 6 && kGemmNr == 16, "the register layout below is 6 x 16");
  __m256 acc[kGemmMr][2];
  for (int i = 0; i < kGemmMr; ++i) {
    acc[i][0] = _mm256_loadu_ps(c + static_cast<std::size_t>(i) * ldc);
    acc[i][1] = _mm256_loadu_ps(c + static_cast<std::size_t>(i) * ldc + 8);
  }
  for (std::size_t p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b_panel + p * kGemmNr);
    const __m256 b1 = _mm256_loadu_ps(b_panel + p * kGemmNr + 8);
    const float* a = a_panel + p * kGemmMr;
    for (int i = 0; i < kGemmMr; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_mul_ps(ai, b0));
      acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_mul_ps(ai, b1));
    }
  }
  for (int i = 0; i < kGemmMr; ++i) {
    _mm256_storeu_ps(c + static_cast<std::size_t>(i) * ldc, acc[i][0]);
    _mm256_storeu_ps(c + static_cast<std::size_t>(i) * ldc + 8, acc[i][1]);
  }
}

}  // namespace fedrt::avx2
