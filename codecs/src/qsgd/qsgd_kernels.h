// Kernel family of the normalized quantizers (QSGD, TernGrad, ALQ, AMQ,
// scaled sign): bucket norms, stochastic rounding on a level table, and
// dequantization (+ accumulation). This file is the family's list: the
// codecs, the tests and the benchmarks go through QsgdKernelsFor().
//
// Definitions (the scalar variant is the reference; every variant gives the
// same floats and symbols):
//   L2Norm(v)    float(sqrt(S)) with S summed in double over 16 lanes, lane
//                k += double(v_i)^2 for i = k mod 16 in increasing i, then
//                S = CombineNormLanes(lanes) (halving tree, below).
//   MeanAbs(v)   float(S / n), S as above with |v_i| (0 for n = 0).
//   MaxAbs(v)    max |v_i| (0 for n = 0).
//   QuantizeLevels: for each i, in float32 and in this order,
//                r = |v_i| / norm, clamped to 1;
//                j = #{k in 1..s-1 : levels[k] <= r}  (so l_j <= r, j < s);
//                p = (r - levels[j]) / (levels[j+1] - levels[j]);
//                k = j + (u01(words[i]) < p);
//                symbols[i] = s - k if v_i < 0 else s + k   (alphabet 2s+1).
//                `norm` must be > 0; the caller handles all-zero buckets.
//   QuantizeLevelsStream: QuantizeLevels with words[i] the word of
//                coordinate first + i of `stream` (PhiloxWords), so that a
//                variant may draw the words where it uses them.
//   DequantizeLevels: out[i] = +-(norm * levels[|symbols[i] - s|]) (minus
//                for symbols below s); the accumulate form adds
//                weight * that value to acc[i]. Symbols must be <= 2s.
//   SignQuantize: symbols[i] = 1 if v_i < 0 else 0.
//   SignDequantize: out[i] = symbols[i] ? -scale : scale (+ accumulate form).
// All functions accept any n (tails handled inside) and any alignment.
#ifndef FEDRT_CODECS_QSGD_QSGD_KERNELS_H_
#define FEDRT_CODECS_QSGD_QSGD_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/codecs/philox.h"
#include "fedrt/platform/cpu.h"

namespace fedrt {

// Lanes of the norm sums: enough independent chains to hide the latency of
// double additions in every variant.
inline constexpr int kNormLanes = 16;
// a[k] += a[k + 8], then a[k] += a[k + 4], a[k] += a[k + 2], a[0] + a[1].
inline double CombineNormLanes(double* a) {
  for (int half = kNormLanes / 2; half >= 1; half /= 2) {
    for (int k = 0; k < half; ++k) a[k] += a[k + half];
  }
  return a[0];
}

// The reference's lane sums from coordinate `i` on (the SIMD variants call
// it for their tails after storing their lanes), then the combination.
template <bool kSquare>
double FinishNormLanes(double* lanes, const float* v, std::size_t i, std::size_t n) {
  for (; i < n; ++i) {
    const double x = v[i];
    lanes[i % kNormLanes] += kSquare ? x * x : (x < 0 ? -x : x);
  }
  return CombineNormLanes(lanes);
}

struct QsgdKernels {
  float (*l2_norm)(const float* v, std::size_t n);
  float (*mean_abs)(const float* v, std::size_t n);
  float (*max_abs)(const float* v, std::size_t n);
  void (*quantize_levels)(const float* v, std::size_t n, float norm, const float* levels, int s,
                          const uint32_t* words, uint8_t* symbols);
  void (*dequantize_levels)(const uint8_t* symbols, std::size_t n, float norm, const float* levels, int s,
                            float* out);
  void (*dequantize_levels_accumulate)(const uint8_t* symbols, std::size_t n, float norm, const float* levels,
                                       int s, float weight, float* acc);
  void (*sign_quantize)(const float* v, std::size_t n, uint8_t* symbols);
  void (*sign_dequantize)(const uint8_t* symbols, std::size_t n, float scale, float* out);
  void (*sign_dequantize_accumulate)(const uint8_t* symbols, std::size_t n, float scale, float weight,
                                     float* acc);
  void (*quantize_levels_stream)(const float* v, std::size_t n, float norm, const float* levels, int s,
                                 const RandomStream& stream, uint64_t first, uint8_t* symbols);
};

using QuantizeLevelsFn = void (*)(const float* v, std::size_t n, float norm, const float* levels, int s,
                                  const uint32_t* words, uint8_t* symbols);

// QuantizeLevelsStream through PhiloxWords and a words kernel, a stack chunk
// at a time (variants without a fused kernel, and the fused ones' edges).
inline void QuantizeLevelsByWords(QuantizeLevelsFn quantize, const float* v, std::size_t n, float norm,
                                  const float* levels, int s, const RandomStream& stream, uint64_t first,
                                  uint8_t* symbols) {
  constexpr std::size_t kWords = 512;
  uint32_t words[kWords];
  for (std::size_t at = 0; at < n; at += kWords) {
    const std::size_t m = n - at < kWords ? n - at : kWords;
    PhiloxWords(stream, first + at, m, words);
    quantize(v + at, m, norm, levels, s, words, symbols + at);
  }
}

namespace scalar {
extern const QsgdKernels kQsgdKernels;
}
namespace avx2 {
extern const QsgdKernels kQsgdKernels;
}
namespace neon {
extern const QsgdKernels kQsgdKernels;
}

// The variant for `isa` (which must be available, see IsaAvailable()).
const QsgdKernels& QsgdKernelsFor(Isa isa);

}  // namespace fedrt

#endif  // FEDRT_CODECS_QSGD_QSGD_KERNELS_H_
