// Reduction kernel family: the list of variants. AddFloats (reduce.h) and the
// tests go through ReduceKernelsFor().
//
// AddFloats: inout[i] += in[i] in float32, one rounding per element; every
// variant gives the scalar reference's bits (IEEE addition is exactly
// rounded; no variant flushes subnormals). Any n (tails inside), any
// alignment.
#ifndef FEDRT_CODECS_REDUCE_REDUCE_KERNELS_H_
#define FEDRT_CODECS_REDUCE_REDUCE_KERNELS_H_

#include <cstddef>

#include "fedrt/platform/cpu.h"

namespace fedrt {

using AddFloatsFn = void (*)(const float* in, std::size_t n, float* inout);

struct ReduceKernels {
  AddFloatsFn add;
};

namespace scalar {
void AddFloats(const float* in, std::size_t n, float* inout);
}
namespace avx2 {
void AddFloats(const float* in, std::size_t n, float* inout);
}
// ARMv7 NEON flushes subnormals, so the ARMv7 variant keeps a NEON block only
// when no lane can have been flushed and adds the other blocks in scalar;
// AArch64 NEON is IEEE-exact (FPCR.FZ = 0).
namespace neon {
void AddFloats(const float* in, std::size_t n, float* inout);
}

// The variants for `isa` (which must be available, see IsaAvailable()).
const ReduceKernels& ReduceKernelsFor(Isa isa);

}  // namespace fedrt

#endif  // FEDRT_CODECS_REDUCE_REDUCE_KERNELS_H_
