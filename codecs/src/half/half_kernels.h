// fp16 / bf16 conversion kernel family: one set of converters per ISA, all
// producing the same bits. This file is the family's list: the fp16 and bf16
// codecs, the tests and the benchmarks all go through HalfKernelsFor().
//
// float -> half rounds to nearest, ties to even, and SATURATES: a finite
// input whose magnitude is beyond the format's largest finite value becomes
// that value with the input's sign (fp16: +-65504, bf16: +-0x1.fep127), never
// Inf. Gradients that large are rare and an Inf would poison the aggregate;
// a clipped value keeps the update usable. Subnormal results are produced
// exactly (no flush to zero); float subnormal inputs round to signed zero in
// fp16 and keep their bits in bf16 (after rounding).
// Inputs must be finite (the codecs check); NaN/Inf inputs give unspecified
// (but per-variant deterministic) bits.
//
// half -> float is exact for every finite half (every fp16 and bf16 value is
// a float); callers reject Inf/NaN bit patterns before converting.
//
// Every function takes any n (tails handled inside) and any alignment.
#ifndef FEDRT_CODECS_HALF_HALF_KERNELS_H_
#define FEDRT_CODECS_HALF_HALF_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/platform/cpu.h"

namespace fedrt {

using FloatToHalfFn = void (*)(const float* in, std::size_t n, uint16_t* out);
using HalfToFloatFn = void (*)(const uint16_t* in, std::size_t n, float* out);

struct HalfKernels {
  FloatToHalfFn float_to_fp16;
  HalfToFloatFn fp16_to_float;
  FloatToHalfFn float_to_bf16;
  HalfToFloatFn bf16_to_float;
};

#define FEDRT_HALF_KERNEL_DECLS                                       \
  void FloatToFp16(const float* in, std::size_t n, uint16_t* out);    \
  void Fp16ToFloat(const uint16_t* in, std::size_t n, float* out);    \
  void FloatToBf16(const float* in, std::size_t n, uint16_t* out);    \
  void Bf16ToFloat(const uint16_t* in, std::size_t n, float* out);

namespace scalar {
FEDRT_HALF_KERNEL_DECLS
}
// AVX2 variants use F16C for fp16 (HalfKernelsFor falls back to the scalar
// fp16 converters on the rare AVX2 CPU without F16C).
namespace avx2 {
FEDRT_HALF_KERNEL_DECLS
}
// NEON: fp16 uses the AArch64 conversion instructions; ARMv7 builds (no
// neon-fp16 in our flags, and NEON would flush subnormal halves) run the
// scalar integer algorithm in integer NEON, which also matches the scalar
// bits for NaN/Inf inputs. bf16 is integer arithmetic and runs in NEON on both.
namespace neon {
FEDRT_HALF_KERNEL_DECLS
}
#undef FEDRT_HALF_KERNEL_DECLS

// The variants for `isa` (which must be available, see IsaAvailable()).
const HalfKernels& HalfKernelsFor(Isa isa);

// Bit patterns of the largest finite values, used for saturation.
inline constexpr uint32_t kFp16MaxAsFloatBits = 0x477FE000u;  // 65504.0f
inline constexpr uint32_t kBf16MaxAsFloatBits = 0x7F7F0000u;  // 0x1.fep127f
inline constexpr float kFp16Max = 65504.0f;

// True when a half bit pattern is Inf or NaN (all-ones exponent).
inline bool Fp16IsNonFinite(uint16_t h) { return (h & 0x7C00u) == 0x7C00u; }
inline bool Bf16IsNonFinite(uint16_t h) { return (h & 0x7F80u) == 0x7F80u; }

}  // namespace fedrt

#endif  // FEDRT_CODECS_HALF_HALF_KERNELS_H_
