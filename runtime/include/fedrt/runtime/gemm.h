// Single-precision matrix multiply for training: C = op(A) * op(B) + beta * C
// on row-major matrices, where op(X) is X or its transpose.
//
// Gemm() is the training backend: OpenBLAS cblas_sgemm when this build has
// FEDRT_HAVE_OPENBLAS (fedrt/platform/config.h), the built-in GEMM otherwise.
// BuiltinGemm() is always available and runs the scalar, AVX2 or NEON
// micro-kernel chosen by fedrt/platform/cpu.h. Every built-in variant computes
// each element of C in the same order as the plain loop
//   c = (beta == 0 ? 0 : beta * c); for p in 0..k-1: c = c + a(i,p) * b(p,j)
// (no fused multiply-add), so all ISAs give bit-identical results.
//
// Arrays in, arrays out: pointers to caller memory, leading dimensions in
// elements (lda >= columns of A as stored). Nothing is validated beyond
// "m, n or k <= 0 does nothing to C except the beta scaling when k <= 0".
// Neither function fails: when the built-in GEMM cannot get its packing
// scratch it falls back to the plain loop, which gives the same bits.
//
// Packing scratch: `scratch` is null (the built-in GEMM then keeps one
// packing buffer per thread, thread_local, allocated on first use and grown
// when a larger product needs it) or caller memory of at least
// GemmScratchFloats(m, n, k) floats (BuiltinGemmScratchFloats for
// BuiltinGemm): then the call allocates nothing, which is how a model built
// on caller buffers trains without a heap (model.h).
//
// Thread-safety: reentrant (a caller scratch must not be shared by two
// concurrent calls); OpenBLAS manages its own threads.
#ifndef FEDRT_RUNTIME_GEMM_H_
#define FEDRT_RUNTIME_GEMM_H_

#include <cstddef>

namespace fedrt {

enum class Transpose : int { kNo = 0, kYes = 1 };

// The training backend (OpenBLAS or built-in).
void Gemm(Transpose trans_a, Transpose trans_b, int m, int n, int k, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc, float* scratch = nullptr);

// The built-in blocked GEMM with the kernel ISA in use (ActiveIsa()).
void BuiltinGemm(Transpose trans_a, Transpose trans_b, int m, int n, int k, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc, float* scratch = nullptr);

// Packing scratch (floats) the built-in GEMM needs for an m x n x k product,
// whichever micro-kernel variant runs (0 when m, n or k <= 0).
std::size_t BuiltinGemmScratchFloats(int m, int n, int k);
// The same for Gemm(): BuiltinGemmScratchFloats with the built-in backend, 0
// with OpenBLAS (which keeps its own buffers).
std::size_t GemmScratchFloats(int m, int n, int k);

// "OpenBLAS" or "built-in".
const char* GemmBackendName();

// Threads the training GEMM uses. With OpenBLAS this is its thread count
// (openblas_set_num_threads; process-wide, like OPENBLAS_NUM_THREADS); the
// built-in GEMM runs on the calling thread only, so SetGemmThreads returns
// false for any n other than 1 there.
bool SetGemmThreads(int n);
int GemmThreads();

// The kernel family OpenBLAS chose for this CPU at load time ("Haswell",
// "SkylakeX", ...), or "" without OpenBLAS. Debian's OpenBLAS picks by CPU
// model; on a CPU it does not know (often a virtual one) it falls back to
// "Prescott" (SSE3), about three times slower than "Haswell" on an AVX2 + FMA
// CPU. The environment variable OPENBLAS_CORETYPE, read when the library
// loads, overrides the choice (see runtime/README.md).
const char* OpenBlasCoreName();

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_GEMM_H_
