// GEMM micro-kernel family: one register-blocked kernel per ISA. This file is
// the family's list: the blocked driver (gemm.cc), the tests and the
// benchmarks all go through GemmMicroKernelFor().
//
// A micro-kernel updates one mr x nr tile of C in place:
//   for p in 0..k-1: c(i,j) = c(i,j) + a_panel[p*mr + i] * b_panel[p*nr + j]
// in increasing p, with a separate multiply and add (kernels compile with
// -ffp-contract=off). Panels are packed by the driver and padded with zeros,
// so kernels have no tails; the driver routes partial tiles of C through a
// full-size temporary. Same order on every ISA: bit-identical results.
#ifndef FEDRT_RUNTIME_TRAIN_GEMM_KERNELS_H_
#define FEDRT_RUNTIME_TRAIN_GEMM_KERNELS_H_

#include <cstddef>

#include "fedrt/platform/cpu.h"
#include "fedrt/runtime/gemm.h"

namespace fedrt {

using GemmMicroKernelFn = void (*)(std::size_t k, const float* a_panel, const float* b_panel,
                                   float* c, std::size_t ldc);

struct GemmMicroKernel {
  int mr;  // rows of the C tile
  int nr;  // columns of the C tile
  GemmMicroKernelFn fn;
};

namespace scalar {
inline constexpr int kGemmMr = 4;
inline constexpr int kGemmNr = 8;
void GemmMicroKernel(std::size_t k, const float* a_panel, const float* b_panel, float* c,
                     std::size_t ldc);
}  // namespace scalar
namespace avx2 {
inline constexpr int kGemmMr = 6;
inline constexpr int kGemmNr = 16;
void GemmMicroKernel(std::size_t k, const float* a_panel, const float* b_panel, float* c,
                     std::size_t ldc);
}  // namespace avx2
namespace neon {
inline constexpr int kGemmMr = 4;
inline constexpr int kGemmNr = 8;
void GemmMicroKernel(std::size_t k, const float* a_panel, const float* b_panel, float* c,
                     std::size_t ldc);
}  // namespace neon

// The micro-kernel for `isa` (which must be available, see IsaAvailable()).
GemmMicroKernel GemmMicroKernelFor(Isa isa);

// The blocked driver with a given micro-kernel (BuiltinGemm uses the one for
// ActiveIsa()); tests call it with every variant. `scratch` as in gemm.h.
void BlockedGemm(const GemmMicroKernel& kernel, Transpose trans_a, Transpose trans_b, int m, int n,
                 int k, const float* a, int lda, const float* b, int ldb, float beta, float* c,
                 int ldc, float* scratch = nullptr);

// The plain triple loop in the order every variant follows (the reference).
void ReferenceGemm(Transpose trans_a, Transpose trans_b, int m, int n, int k, const float* a,
                   int lda, const float* b, int ldb, float beta, float* c, int ldc);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_TRAIN_GEMM_KERNELS_H_
