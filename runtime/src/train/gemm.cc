// The built-in blocked GEMM driver (Goto-style: B packed in KC x NC blocks of
// nr-wide panels, A in MC x KC blocks of mr-high panels, a register-blocked
// micro-kernel per tile), the dispatch to OpenBLAS, and the reference loop.
//
// Why the result is bit-identical to ReferenceGemm: C is first scaled by beta
// exactly as the reference does, and each micro-kernel call loads the C tile,
// adds a(i,p) * b(p,j) for the block's p in increasing order and stores it,
// so over the KC blocks every element sees the same sequence of roundings.
#include <algorithm>
#include <cstddef>

#include "fedrt/platform/config.h"
#include "fedrt/platform/memory.h"
#include "train/gemm_kernels.h"

#if FEDRT_HAVE_OPENBLAS
#include <cblas.h>
// Declared by Debian's cblas.h through openblas_config.h; repeated for other
// cblas.h flavours that omit it.
extern "C" char* openblas_get_corename(void);
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" int openblas_get_num_threads(void);
#endif

namespace fedrt {
namespace {

// Blocking, set at configure time (FEDRT_GEMM_BLOCKING): the packing scratch
// of one product is at most kKc * (kMc + kNc) floats (0.5 MiB with the host's
// 256;120;512, 20 KiB with the Cortex-M preset's 64;16;64).
constexpr int kKc = FEDRT_GEMM_KC;  // depth of a packed block: panels stay in L1/L2
constexpr int kMc = FEDRT_GEMM_MC;  // rows of a packed A block (a multiple of every mr)
constexpr int kNc = FEDRT_GEMM_NC;  // columns of a packed B block (a multiple of every nr)
static_assert(kKc > 0 && kMc > 0 && kNc > 0, "FEDRT_GEMM_BLOCKING: sizes must be positive");
static_assert(kMc % scalar::kGemmMr == 0 && kNc % scalar::kGemmNr == 0,
              "FEDRT_GEMM_BLOCKING: MC and NC must be multiples of the scalar kernel's tile");
#if FEDRT_HAVE_AVX2_KERNELS
static_assert(kMc % avx2::kGemmMr == 0 && kNc % avx2::kGemmNr == 0,
              "FEDRT_GEMM_BLOCKING: MC and NC must be multiples of the AVX2 kernel's tile (6 x 16)");
#endif
#if FEDRT_HAVE_NEON_KERNELS
static_assert(kMc % neon::kGemmMr == 0 && kNc % neon::kGemmNr == 0,
              "FEDRT_GEMM_BLOCKING: MC and NC must be multiples of the NEON kernel's tile");
#endif

inline float ElementA(Transpose t, const float* a, int lda, int i, int p) {
  return t == Transpose::kNo ? a[static_cast<std::size_t>(i) * lda + p]
                             : a[static_cast<std::size_t>(p) * lda + i];
}
inline float ElementB(Transpose t, const float* b, int ldb, int p, int j) {
  return ElementA(t == Transpose::kNo ? Transpose::kYes : Transpose::kNo, b, ldb, j, p);
}

void ScaleC(int m, int n, float beta, float* c, int ldc) {
  if (beta == 1.0f) return;
  for (int i = 0; i < m; ++i) {
    float* row = c + static_cast<std::size_t>(i) * ldc;
    // beta == 0 overwrites (NaN or Inf in C must not survive), as BLAS does.
    for (int j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
  }
}

// Packing scratch, one per thread (one in all without threads), grown on
// demand and kept.
struct PackScratch {
  AlignedArray<float> a;
  AlignedArray<float> b;
};

bool EnsureScratch(PackScratch& s, std::size_t a_size, std::size_t b_size) {
  if (s.a.size() < a_size && !s.a.Resize(a_size)) return false;
  if (s.b.size() < b_size && !s.b.Resize(b_size)) return false;
  return true;
}

// Packs rows [r0, r0 + rows) x depth [p0, p0 + kc) of op(X) into `width`-high
// panels, each stored p-major ([p][r]), rows beyond `total` padded with zeros.
// A block of op(A) is packed as is; a block of op(B) as rows of op(B)^T.
void PackPanels(int width, Transpose t, const float* x, int ldx, int total, int r0, int rows, int p0,
                int kc, float* out) {
  for (int base = 0; base < rows; base += width) {
    for (int p = 0; p < kc; ++p) {
      for (int r = 0; r < width; ++r) {
        const int i = r0 + base + r;
        *out++ = (base + r < rows && i < total) ? ElementA(t, x, ldx, i, p0 + p) : 0.0f;
      }
    }
  }
}

inline Transpose Flip(Transpose t) { return t == Transpose::kNo ? Transpose::kYes : Transpose::kNo; }

inline int RoundUp(int x, int to) { return (x + to - 1) / to * to; }

}  // namespace

GemmMicroKernel GemmMicroKernelFor(Isa requested) {
  const Isa isa = Avx2ForAvx512(requested);  // no AVX-512 variants: AVX2
  switch (isa) {
#if FEDRT_HAVE_AVX2_KERNELS
    case Isa::kAvx2: return {avx2::kGemmMr, avx2::kGemmNr, &avx2::GemmMicroKernel};
#endif
#if FEDRT_HAVE_NEON_KERNELS
    case Isa::kNeon: return {neon::kGemmMr, neon::kGemmNr, &neon::GemmMicroKernel};
#endif
    default: return {scalar::kGemmMr, scalar::kGemmNr, &scalar::GemmMicroKernel};
  }
}

void ReferenceGemm(Transpose trans_a, Transpose trans_b, int m, int n, int k, const float* a,
                   int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  ScaleC(m, n, beta, c, ldc);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      float sum = c[static_cast<std::size_t>(i) * ldc + j];
      for (int p = 0; p < k; ++p) sum = sum + ElementA(trans_a, a, lda, i, p) * ElementB(trans_b, b, ldb, p, j);
      c[static_cast<std::size_t>(i) * ldc + j] = sum;
    }
  }
}

// Packing sizes of one product for a kernel: A blocks of kc x mc, B blocks
// of kc x nc, each rounded up to whole panels.
struct PackSizes {
  std::size_t a = 0, b = 0;
};
PackSizes PackSizesFor(const GemmMicroKernel& kernel, int m, int n, int k) {
  if (m <= 0 || n <= 0 || k <= 0) return {};
  const std::size_t kc = static_cast<std::size_t>(std::min(k, kKc));
  return {kc * static_cast<std::size_t>(RoundUp(std::min(m, kMc), kernel.mr)),
          kc * static_cast<std::size_t>(RoundUp(std::min(n, kNc), kernel.nr))};
}

std::size_t BuiltinGemmScratchFloats(int m, int n, int k) {
  std::size_t most = 0;
  for (Isa isa : AvailableIsas()) {
    const PackSizes s = PackSizesFor(GemmMicroKernelFor(isa), m, n, k);
    most = std::max(most, s.a + s.b);
  }
  return most;
}

std::size_t GemmScratchFloats(int m, int n, int k) {
  return FEDRT_HAVE_OPENBLAS ? 0 : BuiltinGemmScratchFloats(m, n, k);
}

void BlockedGemm(const GemmMicroKernel& kernel, Transpose trans_a, Transpose trans_b, int m, int n,
                 int k, const float* a, int lda, const float* b, int ldb, float beta, float* c,
                 int ldc, float* scratch) {
  if (m <= 0 || n <= 0) return;
  const int mr = kernel.mr;
  const int nr = kernel.nr;
  const PackSizes sizes = PackSizesFor(kernel, m, n, k);
  float* pack_a = scratch;
  float* pack_b = scratch != nullptr ? scratch + sizes.a : nullptr;
  if (scratch == nullptr && k > 0) {
#if FEDRT_HAVE_THREADS
    thread_local PackScratch owned;
#else
    static PackScratch owned;  // one thread (and no thread-local storage on bare metal)
#endif
    if (!EnsureScratch(owned, sizes.a, sizes.b)) {
      ReferenceGemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
      return;
    }
    pack_a = owned.a.data();
    pack_b = owned.b.data();
  }
  ScaleC(m, n, beta, c, ldc);
  float tile[16 * 16];  // a partial C tile, padded to mr x nr (both <= 16)
  for (int j0 = 0; j0 < n; j0 += kNc) {
    const int nc = std::min(kNc, n - j0);
    for (int p0 = 0; p0 < k; p0 += kKc) {
      const int kc = std::min(kKc, k - p0);
      PackPanels(nr, Flip(trans_b), b, ldb, n, j0, nc, p0, kc, pack_b);
      for (int i0 = 0; i0 < m; i0 += kMc) {
        const int mc = std::min(kMc, m - i0);
        PackPanels(mr, trans_a, a, lda, m, i0, mc, p0, kc, pack_a);
        for (int jr = 0; jr < nc; jr += nr) {
          const float* b_panel = pack_b + static_cast<std::size_t>(jr) * kc;
          const int cols = std::min(nr, nc - jr);
          for (int ir = 0; ir < mc; ir += mr) {
            const float* a_panel = pack_a + static_cast<std::size_t>(ir) * kc;
            const int rows = std::min(mr, mc - ir);
            float* c_tile = c + static_cast<std::size_t>(i0 + ir) * ldc + (j0 + jr);
            if (rows == mr && cols == nr) {
              kernel.fn(static_cast<std::size_t>(kc), a_panel, b_panel, c_tile,
                        static_cast<std::size_t>(ldc));
              continue;
            }
            for (int r = 0; r < mr; ++r) {
              for (int q = 0; q < nr; ++q) {
                tile[r * nr + q] = (r < rows && q < cols) ? c_tile[static_cast<std::size_t>(r) * ldc + q] : 0.0f;
              }
            }
            kernel.fn(static_cast<std::size_t>(kc), a_panel, b_panel, tile, static_cast<std::size_t>(nr));
            for (int r = 0; r < rows; ++r) {
              for (int q = 0; q < cols; ++q) c_tile[static_cast<std::size_t>(r) * ldc + q] = tile[r * nr + q];
            }
          }
        }
      }
    }
  }
}

void BuiltinGemm(Transpose trans_a, Transpose trans_b, int m, int n, int k, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc, float* scratch) {
  BlockedGemm(GemmMicroKernelFor(ActiveIsa()), trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c,
              ldc, scratch);
}

void Gemm(Transpose trans_a, Transpose trans_b, int m, int n, int k, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc, float* scratch) {
#if FEDRT_HAVE_OPENBLAS
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    ScaleC(m, n, beta, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a == Transpose::kNo ? CblasNoTrans : CblasTrans,
              trans_b == Transpose::kNo ? CblasNoTrans : CblasTrans, m, n, k, 1.0f, a, lda, b, ldb,
              beta, c, ldc);
  (void)scratch;
#else
  BuiltinGemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc, scratch);
#endif
}

const char* GemmBackendName() { return FEDRT_HAVE_OPENBLAS ? "OpenBLAS" : "built-in"; }

bool SetGemmThreads(int n) {
  if (n < 1) return false;
#if FEDRT_HAVE_OPENBLAS
  openblas_set_num_threads(n);
  return true;
#else
  return n == 1;
#endif
}

int GemmThreads() {
#if FEDRT_HAVE_OPENBLAS
  return openblas_get_num_threads();
#else
  return 1;
#endif
}

const char* OpenBlasCoreName() {
#if FEDRT_HAVE_OPENBLAS
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "";
#else
  return "";
#endif
}

}  // namespace fedrt
