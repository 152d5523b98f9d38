// NEON variant of the normalized-quantizer kernels (definitions in
// qsgd_kernels.h), for AArch64 and ARMv7.
//
// AArch64 Advanced SIMD is IEEE (no flush-to-zero under Linux) and has
// vdivq_f32 and float64x2: the norms, stochastic rounding and accumulation
// run four lanes at a time with the reference's operations in its order
// (-ffp-contract=off, explicit mul then add). ARMv7 NEON has neither
// division nor doubles and flushes denormals to zero, so there the norms and
// stochastic rounding use the scalar reference; data movement (sign tests and
// maxima on the integer bits, table lookups, sign flips) is vectorized, and
// the accumulation runs in NEON for every block of 16 where no lane can have
// been flushed (the others in scalar): identical on denormals by construction. Dequantization looks values up in a per-call table of the
// 2s+1 signed values, each computed as the reference computes it.
// Tails (n % 4) go through the scalar kernel.
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "qsgd/qsgd_kernels.h"
#if !defined(__aarch64__)
#include "common/neon_armv7.h"
#endif

namespace fedrt {
namespace neon {
namespace {

const QsgdKernels& Ref() { return scalar::kQsgdKernels; }

// |x| as integer bits; for non-negative floats integer order is float order.
uint32x4_t AbsBits(const float* v) {
  return vandq_u32(vreinterpretq_u32_f32(vld1q_f32(v)), vdupq_n_u32(0x7FFFFFFFu));
}

// v < 0 on the bits: sign set and not -0 (a denormal counts, unlike a
// flush-to-zero float comparison on ARMv7).
uint32x4_t NegativeMask(const float* v) {
  return vcgtq_u32(vreinterpretq_u32_f32(vld1q_f32(v)), vdupq_n_u32(0x80000000u));
}

void StoreSymbols4(uint32x4_t symbols, uint8_t* out) {
  const uint16x4_t narrow16 = vmovn_u32(symbols);
  const uint8x8_t narrow8 = vmovn_u16(vcombine_u16(narrow16, narrow16));
  uint8_t bytes[8];
  vst1_u8(bytes, narrow8);
  std::memcpy(out, bytes, 4);
}

float MaxAbs(const float* v, std::size_t n) {
  uint32x4_t m = vdupq_n_u32(0);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) m = vmaxq_u32(m, AbsBits(v + i));
  uint32_t lanes[4];
  vst1q_u32(lanes, m);
  float result = Ref().max_abs(v + i, n - i);
  for (uint32_t bits : lanes) {
    float x;
    std::memcpy(&x, &bits, 4);
    result = x > result ? x : result;
  }
  return result;
}

void SignQuantize(const float* v, std::size_t n, uint8_t* symbols) {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) StoreSymbols4(vshrq_n_u32(NegativeMask(v + i), 31), symbols + i);
  Ref().sign_quantize(v + i, n - i, symbols + i);
}

// The 2s+1 decoded values (times `weight` when accumulating), computed
// exactly as the reference computes them per coordinate.
void ValueTable(float norm, const float* levels, int s, float* table) {
  for (int k = 0; k <= s; ++k) {
    const float magnitude = norm * levels[k];
    table[s - k] = -magnitude;
    table[s + k] = magnitude;  // last, so symbol s is +0 as in the reference
  }
}

void DequantizeLevels(const uint8_t* symbols, std::size_t n, float norm, const float* levels, int s, float* out) {
  float table[256];
  ValueTable(norm, levels, s, table);
  for (std::size_t i = 0; i < n; ++i) out[i] = table[symbols[i]];
}

void SignDequantize(const uint8_t* symbols, std::size_t n, float scale, float* out) {
  const float table[2] = {scale, -scale};
  for (std::size_t i = 0; i < n; ++i) out[i] = table[symbols[i] & 1];
}

#if defined(__aarch64__)

// Sums f(v_i) in double over the reference's 16 lanes; f is x*x or |x|.
template <bool kSquare>
double LaneSum(const float* v, std::size_t n) {
  float64x2_t acc[8];
  for (float64x2_t& a : acc) a = vdupq_n_f64(0);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int h = 0; h < 4; ++h) {
      float32x4_t x = vld1q_f32(v + i + 4 * h);
      if (!kSquare) x = vabsq_f32(x);
      const float64x2_t a = vcvt_f64_f32(vget_low_f32(x));
      const float64x2_t b = vcvt_high_f64_f32(x);
      acc[2 * h] = vaddq_f64(acc[2 * h], kSquare ? vmulq_f64(a, a) : a);
      acc[2 * h + 1] = vaddq_f64(acc[2 * h + 1], kSquare ? vmulq_f64(b, b) : b);
    }
  }
  double lanes[kNormLanes];
  for (int q = 0; q < 8; ++q) vst1q_f64(lanes + 2 * q, acc[q]);
  return FinishNormLanes<kSquare>(lanes, v, i, n);
}

float L2Norm(const float* v, std::size_t n) { return static_cast<float>(__builtin_sqrt(LaneSum<true>(v, n))); }

float MeanAbs(const float* v, std::size_t n) {
  if (n == 0) return 0.0f;
  return static_cast<float>(LaneSum<false>(v, n) / static_cast<double>(n));
}

void QuantizeLevels(const float* v, std::size_t n, float norm, const float* levels, int s, const uint32_t* words,
                    uint8_t* symbols) {
  const float32x4_t norm4 = vdupq_n_f32(norm);
  const float32x4_t one = vdupq_n_f32(1.0f);
  const float32x4_t scale24 = vdupq_n_f32(0x1p-24f);
  const uint32x4_t s4 = vdupq_n_u32(static_cast<uint32_t>(s));
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t r = vminq_f32(vdivq_f32(vabsq_f32(vld1q_f32(v + i)), norm4), one);
    uint32x4_t j = vdupq_n_u32(0);
    // The comparison mask is all ones (-1) where levels[k] <= r.
    for (int k = 1; k < s; ++k) j = vsubq_u32(j, vcleq_f32(vdupq_n_f32(levels[k]), r));
    uint32_t index[4];
    vst1q_u32(index, j);
    const float low_values[4] = {levels[index[0]], levels[index[1]], levels[index[2]], levels[index[3]]};
    const float high_values[4] = {levels[index[0] + 1], levels[index[1] + 1], levels[index[2] + 1],
                                  levels[index[3] + 1]};
    const float32x4_t low = vld1q_f32(low_values);
    const float32x4_t high = vld1q_f32(high_values);
    const float32x4_t p = vdivq_f32(vsubq_f32(r, low), vsubq_f32(high, low));
    const float32x4_t u = vmulq_f32(vcvtq_f32_u32(vshrq_n_u32(vld1q_u32(words + i), 8)), scale24);
    const uint32x4_t level = vsubq_u32(j, vcltq_f32(u, p));
    const uint32x4_t sym = vbslq_u32(NegativeMask(v + i), vsubq_u32(s4, level), vaddq_u32(s4, level));
    StoreSymbols4(sym, symbols + i);
  }
  Ref().quantize_levels(v + i, n - i, norm, levels, s, words + i, symbols + i);
}

// acc[i] += weight * table[symbols[i]], four lanes at a time.
void AccumulateFromTable(const uint8_t* symbols, std::size_t n, const float* table, float weight, float* acc) {
  const float32x4_t weight4 = vdupq_n_f32(weight);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float values[4] = {table[symbols[i]], table[symbols[i + 1]], table[symbols[i + 2]], table[symbols[i + 3]]};
    vst1q_f32(acc + i, vaddq_f32(vld1q_f32(acc + i), vmulq_f32(weight4, vld1q_f32(values))));
  }
  for (; i < n; ++i) acc[i] += weight * table[symbols[i]];
}

#else  // ARMv7: norms and stochastic rounding stay scalar (see the file comment).

float L2Norm(const float* v, std::size_t n) { return Ref().l2_norm(v, n); }
float MeanAbs(const float* v, std::size_t n) { return Ref().mean_abs(v, n); }

void QuantizeLevels(const float* v, std::size_t n, float norm, const float* levels, int s, const uint32_t* words,
                    uint8_t* symbols) {
  Ref().quantize_levels(v, n, norm, levels, s, words, symbols);
}

// acc[i] += weight * table[symbols[i]], 16 lanes per block, a block stored
// only when every lane is the IEEE result: acc not subnormal, the product
// normal or the product of an exactly zero value (a normal weight times +-0
// is +-0 on every unit; a subnormal value would be flushed to a zero product
// and fails the test), and the sum normal or an exact zero
// (common/neon_armv7.h). Other blocks and non-normal weights: scalar.
void AccumulateFromTable(const uint8_t* symbols, std::size_t n, const float* table, float weight, float* acc) {
  std::size_t i = 0;
  if (std::fabs(weight) >= 0x1p-126f) {
    const float32x4_t weight4 = vdupq_n_f32(weight);
    for (; i + 16 <= n; i += 16) {
      float32x4_t sums[4];
      uint32x4_t sure = vdupq_n_u32(0xFFFFFFFFu);
      for (int h = 0; h < 4; ++h) {
        const uint8_t* sym = symbols + i + 4 * h;
        const float values[4] = {table[sym[0]], table[sym[1]], table[sym[2]], table[sym[3]]};
        const float32x4_t value = vld1q_f32(values);
        const float32x4_t old = vld1q_f32(acc + i + 4 * h);
        const float32x4_t product = vmulq_f32(weight4, value);
        sums[h] = vaddq_f32(old, product);
        const uint32x4_t zero_value = vceqq_u32(armv7::AbsBits(value), vdupq_n_u32(0));
        const uint32x4_t product_ok = vorrq_u32(armv7::IsNormal(product), zero_value);
        sure = vandq_u32(sure, vandq_u32(vandq_u32(armv7::IsNotSubnormal(old), product_ok),
                                         armv7::SumIsIeee(old, product, sums[h])));
      }
      if (armv7::StoreBlockIfSure(sure, sums, acc + i)) continue;
      for (std::size_t k = i; k < i + 16; ++k) acc[k] += weight * table[symbols[k]];
    }
  }
  for (; i < n; ++i) acc[i] += weight * table[symbols[i]];
}

#endif

// Both: the table of decoded values, then the accumulation above.
void DequantizeLevelsAccumulate(const uint8_t* symbols, std::size_t n, float norm, const float* levels, int s,
                                float weight, float* acc) {
  float table[256];
  ValueTable(norm, levels, s, table);
  AccumulateFromTable(symbols, n, table, weight, acc);
}

void SignDequantizeAccumulate(const uint8_t* symbols, std::size_t n, float scale, float weight, float* acc) {
  const float table[2] = {scale, -scale};
  uint8_t masked[256];
  // Symbols are 0 or 1 after validation; the mask keeps lookups in bounds.
  for (std::size_t at = 0; at < n; at += sizeof(masked)) {
    const std::size_t m = n - at < sizeof(masked) ? n - at : sizeof(masked);
    for (std::size_t i = 0; i < m; ++i) masked[i] = symbols[at + i] & 1;
    AccumulateFromTable(masked, m, table, weight, acc + at);
  }
}


}  // namespace

const QsgdKernels kQsgdKernels = {&L2Norm,         &MeanAbs,      &MaxAbs,         &QuantizeLevels,
                                  &DequantizeLevels, &DequantizeLevelsAccumulate, &SignQuantize,
                                  &SignDequantize, &SignDequantizeAccumulate};

}  // namespace neon
}  // namespace fedrt
