// Scalar reference GEMM micro-kernel: a 4 x 8 tile of C, accumulated in
// increasing p with a separate multiply and add. No tails (the driver pads).
#include "train/gemm_kernels.h"

namespace fedrt::scalar {

void GemmMicroKernel(std::size_t k, const float* a_panel, const float* b_panel, float* c,
                     std::size_t ldc) {
  float acc[kGemmMr][kGemmNr];
  for (int i = 0; i < kGemmMr; ++i) {
    for (int j = 0; j < kGemmNr; ++j) acc[i][j] = c[static_cast<std::size_t>(i) * ldc + j];
  }
  for (std::size_t p = 0; p < k; ++p) {
    const float* a = a_panel + p * kGemmMr;
    const float* b = b_panel + p * kGemmNr;
    for (int i = 0; i < kGemmMr; ++i) {
      for (int j = 0; j < kGemmNr; ++j) acc[i][j] = acc[i][j] + a[i] * b[j];
    }
  }
  for (int i = 0; i < kGemmMr; ++i) {
    for (int j = 0; j < kGemmNr; ++j) c[static_cast<std::size_t>(i) * ldc + j] = acc[i][j];
  }
}

}  // namespace fedrt::scalar
