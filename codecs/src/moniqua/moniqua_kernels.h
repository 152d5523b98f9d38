// Moniqua kernel family (codecs/README.md, "Moniqua"): modulo quantize
// and recover. This file is the family's list: the codec, the tests and the
// benchmarks all go through MoniquaKernelsFor().
//
// Quantize, for each coordinate, in float32 and in this order:
//   t = x / B;  z = t - floor(t)            (z in [0, 1]; z := 0 if not finite)
//   nearest:    s = round_half_even(z * 2^b)
//   stochastic: s = floor(z * 2^b + u),  u = u01(words[i])
//   symbol = s mod 2^b                      (the grid wraps: 1 -> 0)
// Recover, with side information y:
//   q = symbol * 2^-b;  a = B * q - y;  m = a - B * round_half_even(a / B)
//   out = m + y;  near += !(|m| < near_limit)     (NaN counts as near)
// Dither (subtractive, shared randomness; u = dither[i] in [-1/2, 1/2)):
//   quantize: t, z as above;  s = round_half_even(z * 2^b + u);  symbol = s mod 2^b
//   recover:  q = (symbol - u) * 2^-b, then a, m, out and near as above
// Identical results on every variant (IEEE division and rounding; no FMA).
// ARMv7 NEON has no vector division and flushes denormals, so its variant is
// the scalar code; AArch64 NEON is vectorised.
// All: any n (tails inside), any alignment, read/write only [0, n).
#ifndef FEDRT_CODECS_MONIQUA_MONIQUA_KERNELS_H_
#define FEDRT_CODECS_MONIQUA_MONIQUA_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/platform/cpu.h"

namespace fedrt {

struct MoniquaKernels {
  // words == nullptr: nearest rounding; else stochastic with words[0..n).
  void (*quantize)(const float* x, std::size_t n, float modulus, int bits, const uint32_t* words,
                   uint8_t* symbols);
  // Returns the number of coordinates with |m| >= near_limit or m NaN.
  std::size_t (*recover)(const uint8_t* symbols, std::size_t n, float modulus, int bits, const float* y,
                         float near_limit, float* out);
  // round=dither: the dither values u[0..n) instead of words.
  void (*quantize_dither)(const float* x, std::size_t n, float modulus, int bits, const float* dither,
                          uint8_t* symbols);
  std::size_t (*recover_dither)(const uint8_t* symbols, std::size_t n, float modulus, int bits, const float* dither,
                                const float* y, float near_limit, float* out);
};

#define FEDRT_MONIQUA_KERNEL_DECLS                                                                 \
  void MoniquaQuantize(const float* x, std::size_t n, float modulus, int bits, const uint32_t* words, \
                       uint8_t* symbols);                                                          \
  std::size_t MoniquaRecover(const uint8_t* symbols, std::size_t n, float modulus, int bits,       \
                             const float* y, float near_limit, float* out);                \
  void MoniquaQuantizeDither(const float* x, std::size_t n, float modulus, int bits, const float* dither, \
                             uint8_t* symbols);                                                    \
  std::size_t MoniquaRecoverDither(const uint8_t* symbols, std::size_t n, float modulus, int bits, \
                                   const float* dither, const float* y, float near_limit, float* out);

namespace scalar {
FEDRT_MONIQUA_KERNEL_DECLS
}
namespace avx2 {
FEDRT_MONIQUA_KERNEL_DECLS
}
namespace neon {
FEDRT_MONIQUA_KERNEL_DECLS
}
#undef FEDRT_MONIQUA_KERNEL_DECLS

const MoniquaKernels& MoniquaKernelsFor(Isa isa);

}  // namespace fedrt

#endif  // FEDRT_CODECS_MONIQUA_MONIQUA_KERNELS_H_
