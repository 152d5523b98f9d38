// Dispatch of the normalized-quantizer kernel family.
#include "fedrt/platform/config.h"
#include "qsgd/qsgd_kernels.h"

namespace fedrt {

const QsgdKernels& QsgdKernelsFor(Isa requested) {
  const Isa isa = Avx2ForAvx512(requested);  // no AVX-512 variants: AVX2
  switch (isa) {
#if FEDRT_HAVE_AVX2_KERNELS
    case Isa::kAvx2: return avx2::kQsgdKernels;
#endif
#if FEDRT_HAVE_NEON_KERNELS
    case Isa::kNeon: return neon::kQsgdKernels;
#endif
    default: return scalar::kQsgdKernels;
  }
}

}  // namespace fedrt
