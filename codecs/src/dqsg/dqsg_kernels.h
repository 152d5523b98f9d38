// DQSG / NDQSG kernel family (codecs/README.md): the hot loops
// of the subtractive-dither quantizers, one set per ISA, all giving the same
// symbols and bit-identical floats. This file is the family's list: the
// codecs, the tests and the benchmarks all go through DqsgKernelsFor().
//
// Formulas, evaluated in float32 in exactly this order (round = round half to
// even; the dither u comes from PhiloxDither, purpose 1):
//   max_abs              max_i |w_i|  (as a float; computed on the integer bit
//                        patterns, which order finite floats by magnitude, so
//                        subnormals count on every ISA; an Inf or NaN in w
//                        gives a non-finite result, which callers use as their
//                        finiteness check)
//   quantize             t = w / scale + u;  q = clamp(round(t), -s, s);
//                        symbol = q + s                      (in [0, 2s])
//   dequantize           w' = (float(symbol - s) - u) * scale
//   dequantize_accumulate acc += weight * w'
//   nested_quantize      n = clamp(round(w / scale + u), -s1, s1);
//                        q = n - rho * round(n / rho)        (odd rho)
//                        q = n - rho * ceil((n - rho/2) / rho) (even rho)
//                        symbol = q + (rho-1)/2  (integer division; in [0, rho))
//   nested_dequantize    q = float(symbol - (rho-1)/2);  a = (q - u) * scale;
//                        m = round((y - a) / d2);  n = q + rho * m;
//                        w' = (n - u) * scale          (d2 = rho * scale)
//
// Why the clamp: with |w| <= max|w| and scale = fl(max/s), the quotient
// fl(w/scale) can exceed s by a few ulps (scale is rounded), and u reaches
// -1/2, so round(t) can land one step outside [-s, s] exactly when t falls
// within a few ulps of +-(s + 1/2). Clamping changes q by at most one in those
// cases, and the decoded error stays within scale/2 up to rounding.
//
// NDQSG notes. q is computed from the clamped fine index n rather than from
// t as the specification's q = round(t) - rho*round(t/rho) is written: the two
// agree except at ties of t/rho (e.g. t = 1.5, rho = 3, where the written
// form gives 2, outside the alphabet); ours is always in the alphabet and
// congruent to n modulo rho, which is all the decoder uses. The decoder
// evaluates y + (r mod_c D2), r = (q - u)*scale - y, in the algebraically
// equal form (q + rho*m - u)*scale with m = round((y - a)/D2): then, whenever
// the side information is within the bound, n is the encoder's fine index and
// the result is bit-identical to the DQSG reconstruction.
//
// Even rho (rho = 2 gives one bit per coordinate) is an extension of the
// specification's odd rho: the coset q = n mod rho is taken in
// [1 - rho/2, rho/2]; the dequantizer is unchanged, since it only needs q
// congruent to n. (n - rho/2) / rho is exact when it is an integer and at
// least 1/rho away from one otherwise, so ceil is exact for |n| <= 127. The
// AVX2 and NEON variants run the scalar loop for even rho (a rarely hot
// path; identical by construction).
//
// Every function takes any n (tails inside) and any alignment. s <= 127 and
// rho <= 255 (symbols are bytes); scale > 0 and finite.
#ifndef FEDRT_CODECS_DQSG_DQSG_KERNELS_H_
#define FEDRT_CODECS_DQSG_DQSG_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/codecs/philox.h"
#include "fedrt/platform/cpu.h"

namespace fedrt {

#define FEDRT_DQSG_KERNEL_DECLS                                                                       \
  float MaxAbs(const float* w, std::size_t n);                                                        \
  void Quantize(const float* w, const float* u, std::size_t n, float scale, int s, uint8_t* symbols); \
  void Dequantize(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s, float* out); \
  void DequantizeAccumulate(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s,    \
                            float weight, float* acc);                                                \
  void NestedQuantize(const float* w, const float* u, std::size_t n, float scale, int s1, int rho,     \
                      uint8_t* symbols);                                                              \
  void NestedDequantize(const uint8_t* symbols, const float* u, const float* y, std::size_t n,          \
                        float scale, int rho, float* out);

namespace scalar {
FEDRT_DQSG_KERNEL_DECLS
}
// The fused dither kernels (see DqsgKernels below) of the ISAs that have them.
#define FEDRT_DQSG_DITHER_KERNEL_DECLS                                                                              \
  void DitherQuantize(const RandomStream& dither, uint64_t first, const float* w, std::size_t n, float scale, int s, \
                      uint8_t* symbols);                                                                            \
  void DitherDequantize(const RandomStream& dither, uint64_t first, const uint8_t* symbols, std::size_t n,          \
                        float scale, int s, float* out);                                                            \
  void DitherDequantizeAccumulate(const RandomStream& dither, uint64_t first, const uint8_t* symbols, std::size_t n, \
                                  float scale, int s, float weight, float* acc);

namespace avx2 {
FEDRT_DQSG_KERNEL_DECLS
FEDRT_DQSG_DITHER_KERNEL_DECLS
}
// AVX-512 (an extension of the AVX2 set, chosen when the CPU has
// AVX-512F/BW/DQ/VL): max_abs and the fused dither kernels; the others are
// the AVX2 kernels.
namespace avx512 {
float MaxAbs(const float* w, std::size_t n);
FEDRT_DQSG_DITHER_KERNEL_DECLS
}
// NEON: all kernels on AArch64. ARMv7 NEON has no division and flushes
// subnormals: there the float kernels run in NEON block by block and fall
// back to the scalar reference for every block (or scale) where they cannot
// prove the reference's result (dqsg_neon.cc).
namespace neon {
FEDRT_DQSG_KERNEL_DECLS
}
#undef FEDRT_DQSG_KERNEL_DECLS
#undef FEDRT_DQSG_DITHER_KERNEL_DECLS

struct DqsgKernels {
  float (*max_abs)(const float* w, std::size_t n);
  void (*quantize)(const float* w, const float* u, std::size_t n, float scale, int s, uint8_t* symbols);
  void (*dequantize)(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s, float* out);
  void (*dequantize_accumulate)(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s,
                                float weight, float* acc);
  void (*nested_quantize)(const float* w, const float* u, std::size_t n, float scale, int s1, int rho,
                          uint8_t* symbols);
  void (*nested_dequantize)(const uint8_t* symbols, const float* u, const float* y, std::size_t n,
                            float scale, int rho, float* out);
  // quantize, dequantize and dequantize_accumulate with u = the dither of
  // coordinates [first, first + n) of `dither` (PhiloxDither), made inside
  // the kernel: AVX2 keeps it in registers; the other ISAs run their Philox
  // dither kernel into a stack buffer, then the kernel above.
  void (*dither_quantize)(const RandomStream& dither, uint64_t first, const float* w, std::size_t n, float scale,
                          int s, uint8_t* symbols);
  void (*dither_dequantize)(const RandomStream& dither, uint64_t first, const uint8_t* symbols, std::size_t n,
                            float scale, int s, float* out);
  void (*dither_dequantize_accumulate)(const RandomStream& dither, uint64_t first, const uint8_t* symbols,
                                       std::size_t n, float scale, int s, float weight, float* acc);
};

// The variants for `isa` (which must be available, see IsaAvailable()).
const DqsgKernels& DqsgKernelsFor(Isa isa);

}  // namespace fedrt

#endif  // FEDRT_CODECS_DQSG_DQSG_KERNELS_H_
