// Dispatch for the reduction kernel family.
#include "fedrt/codecs/reduce.h"

#include "fedrt/platform/config.h"
#include "reduce/reduce_kernels.h"

namespace fedrt {

const ReduceKernels& ReduceKernelsFor(Isa requested) {
  const Isa isa = Avx2ForAvx512(requested);  // no AVX-512 variants: AVX2
  static const ReduceKernels kScalar = {&scalar::AddFloats};
  switch (isa) {
#if FEDRT_HAVE_AVX2_KERNELS
    case Isa::kAvx2: {
      static const ReduceKernels kAvx2 = {&avx2::AddFloats};
      return kAvx2;
    }
#endif
#if FEDRT_HAVE_NEON_KERNELS
    case Isa::kNeon: {
      static const ReduceKernels kNeon = {&neon::AddFloats};
      return kNeon;
    }
#endif
    default: return kScalar;
  }
}

void AddFloats(const float* in, std::size_t n, float* inout) { ReduceKernelsFor(ActiveIsa()).add(in, n, inout); }

}  // namespace fedrt
