// Dispatch for the fp16 / bf16 kernel family.
#include "fedrt/platform/config.h"
#include "half/half_kernels.h"

namespace fedrt {

const HalfKernels& HalfKernelsFor(Isa requested) {
  const Isa isa = Avx2ForAvx512(requested);  // no AVX-512 variants: AVX2
  static const HalfKernels kScalar = {&scalar::FloatToFp16, &scalar::Fp16ToFloat, &scalar::FloatToBf16,
                                      &scalar::Bf16ToFloat};
  switch (isa) {
#if FEDRT_HAVE_AVX2_KERNELS
    case Isa::kAvx2: {
      static const HalfKernels kAvx2 = {&avx2::FloatToFp16, &avx2::Fp16ToFloat, &avx2::FloatToBf16,
                                        &avx2::Bf16ToFloat};
      static const HalfKernels kAvx2NoF16c = {&scalar::FloatToFp16, &scalar::Fp16ToFloat,
                                              &avx2::FloatToBf16, &avx2::Bf16ToFloat};
      return DetectCpu().f16c ? kAvx2 : kAvx2NoF16c;
    }
#endif
#if FEDRT_HAVE_NEON_KERNELS
    case Isa::kNeon: {
      static const HalfKernels kNeon = {&neon::FloatToFp16, &neon::Fp16ToFloat, &neon::FloatToBf16,
                                        &neon::Bf16ToFloat};
      return kNeon;
    }
#endif
    default: return kScalar;
  }
}

}  // namespace fedrt
