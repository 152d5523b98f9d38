// Dispatch for the DQSG / NDQSG kernel family.
#include "dqsg/dqsg_kernels.h"
#include "fedrt/platform/config.h"

namespace fedrt {

#define FEDRT_DQSG_KERNEL_TABLE(ns)                                                                 \
  {                                                                                                 \
    &ns::MaxAbs, &ns::Quantize, &ns::Dequantize, &ns::DequantizeAccumulate, &ns::NestedQuantize,    \
        &ns::NestedDequantize                                                                       \
  }

const DqsgKernels& DqsgKernelsFor(Isa isa) {
  static const DqsgKernels kScalar = FEDRT_DQSG_KERNEL_TABLE(scalar);
  switch (isa) {
#if FEDRT_HAVE_AVX2_KERNELS
    case Isa::kAvx2: {
      static const DqsgKernels kAvx2 = FEDRT_DQSG_KERNEL_TABLE(avx2);
      return kAvx2;
    }
#endif
#if FEDRT_HAVE_NEON_KERNELS
    case Isa::kNeon: {
      static const DqsgKernels kNeon = FEDRT_DQSG_KERNEL_TABLE(neon);
      return kNeon;
    }
#endif
    default: return kScalar;
  }
}

#undef FEDRT_DQSG_KERNEL_TABLE

}  // namespace fedrt
