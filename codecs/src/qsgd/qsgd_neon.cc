// NEON variant of the normalized-quantizer kernels (definitions in
// qsgd_kernels.h), for AArch64 and ARMv7.
//
// AArch64 Advanced SIMD is IEEE (no flush-to-zero under Linux) and has
// vdivq_f32 and float64x2: the norms, stochastic rounding and accumulation
// run four lanes at a time with the reference's operations in its order
// (-ffp-contract=off, explicit mul then add). ARMv7 NEON has neither
// division nor doubles and flushes denormals to zero, so there the norms
// (double sums) use the scalar reference; data movement (sign tests and
// maxima on the integer bits, table lookups, sign flips) is vectorized, and
// stochastic rounding and accumulation run in NEON for every block of 16
// where a lane-wise test proves the reference's result (the others in
// scalar): identical on denormals by construction. Dequantization looks values up in a per-call table of the
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

// The level index j = #{k in 1..s-1 : levels[k] <= r} of four lanes (also
// written to `index`), with levels[j] and levels[j + 1] gathered.
uint32x4_t LevelIndex(float32x4_t r, const float* levels, int s, uint32_t index[4], float32x4_t* low,
                      float32x4_t* high) {
  uint32x4_t j = vdupq_n_u32(0);
  // The comparison mask is all ones (-1) where levels[k] <= r.
  for (int k = 1; k < s; ++k) j = vsubq_u32(j, vcleq_f32(vdupq_n_f32(levels[k]), r));
  vst1q_u32(index, j);
  const float low_values[4] = {levels[index[0]], levels[index[1]], levels[index[2]], levels[index[3]]};
  const float high_values[4] = {levels[index[0] + 1], levels[index[1] + 1], levels[index[2] + 1],
                                levels[index[3] + 1]};
  *low = vld1q_f32(low_values);
  *high = vld1q_f32(high_values);
  return j;
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
    uint32_t index[4];
    float32x4_t low, high;
    const uint32x4_t j = LevelIndex(r, levels, s, index, &low, &high);
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

#else  // ARMv7: the norms stay scalar (see the file comment).

float L2Norm(const float* v, std::size_t n) { return Ref().l2_norm(v, n); }
float MeanAbs(const float* v, std::size_t n) { return Ref().mean_abs(v, n); }

// ARMv7 stochastic rounding, 16 coordinates per block, without division:
// r' = min(|v| * fl(1/norm), 1) and p' = (r' - l_j) * fl(1/(l_{j+1} - l_j))
// (the gap's reciprocal from a per-call table). For 2^-100 <= norm <= 2^100
// and gaps in [2^-60, 2^60] (else the call is scalar), |r' - r| is below
// 2^-22.4 r' + 2^-25.9 (three roundings against one, a subnormal |v| or
// product flushed, the clamp at 1 being 1-Lipschitz), and the test margin is
// m_r = 2^-21 r' + 2^-25. A lane is kept when r' is more than m_r from both
// neighbouring levels (so the reference finds the same j), and u is more
// than m_p = 2 m_r / gap + 2^-20 p' + 2^-30 from p' (which bounds |p - p'|
// twice over: the error of r divided by the gap plus the roundings of p; the
// absolute term catches r' flushed to 0 with u = 0). Then u < p exactly when
// u < p'. Other blocks: the scalar reference.
void QuantizeLevels(const float* v, std::size_t n, float norm, const float* levels, int s, const uint32_t* words,
                    uint8_t* symbols) {
  float inverse_gap[256];
  bool usable = norm >= 0x1p-100f && norm <= 0x1p100f;
  for (int j = 0; usable && j < s; ++j) {
    const float gap = levels[j + 1] - levels[j];
    usable = gap >= 0x1p-60f && gap <= 0x1p60f;
    inverse_gap[j] = 1.0f / gap;
  }
  if (!usable) return Ref().quantize_levels(v, n, norm, levels, s, words, symbols);
  const float32x4_t inverse_norm = vdupq_n_f32(1.0f / norm);
  const float32x4_t one = vdupq_n_f32(1.0f);
  const float32x4_t unit = vdupq_n_f32(0x1p-24f);
  const uint32x4_t s4 = vdupq_n_u32(static_cast<uint32_t>(s));
  const uint32x4_t top = vdupq_n_u32(static_cast<uint32_t>(s - 1));
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    uint32x4_t sure = vdupq_n_u32(0xFFFFFFFFu);
    uint32x4_t block[4];
    for (int h = 0; h < 4; ++h) {
      const std::size_t at = i + 4 * static_cast<std::size_t>(h);
      const float32x4_t a = vreinterpretq_f32_u32(AbsBits(v + at));
      const float32x4_t r = vminq_f32(vmulq_f32(a, inverse_norm), one);
      uint32_t index[4];
      float32x4_t low, high;
      const uint32x4_t j = LevelIndex(r, levels, s, index, &low, &high);
      const float inverse_values[4] = {inverse_gap[index[0]], inverse_gap[index[1]], inverse_gap[index[2]],
                                       inverse_gap[index[3]]};
      const float32x4_t inverse = vld1q_f32(inverse_values);
      const float32x4_t margin_r = vaddq_f32(vmulq_f32(r, vdupq_n_f32(0x1p-21f)), vdupq_n_f32(0x1p-25f));
      const uint32x4_t below_ok = vorrq_u32(vcgtq_f32(vsubq_f32(r, low), margin_r), vceqq_u32(j, vdupq_n_u32(0)));
      const uint32x4_t above_ok = vorrq_u32(vcgtq_f32(vsubq_f32(high, r), margin_r), vceqq_u32(j, top));
      const float32x4_t p = vmulq_f32(vsubq_f32(r, low), inverse);
      const float32x4_t margin_p = vaddq_f32(vmulq_f32(vaddq_f32(margin_r, margin_r), inverse),
                                             vaddq_f32(vmulq_f32(p, vdupq_n_f32(0x1p-20f)), vdupq_n_f32(0x1p-30f)));
      const float32x4_t u = vmulq_f32(vcvtq_f32_u32(vshrq_n_u32(vld1q_u32(words + at), 8)), unit);
      const uint32x4_t u_ok = vcgtq_f32(vabdq_f32(u, p), margin_p);
      sure = vandq_u32(sure, vandq_u32(vandq_u32(below_ok, above_ok), u_ok));
      const uint32x4_t level = vsubq_u32(j, vcltq_f32(u, p));
      block[h] = vbslq_u32(NegativeMask(v + at), vsubq_u32(s4, level), vaddq_u32(s4, level));
    }
    if (armv7::AllLanesSet(sure)) {
      for (int h = 0; h < 4; ++h) StoreSymbols4(block[h], symbols + i + 4 * h);
    } else {
      Ref().quantize_levels(v + i, 16, norm, levels, s, words + i, symbols + i);
    }
  }
  Ref().quantize_levels(v + i, n - i, norm, levels, s, words + i, symbols + i);
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

void QuantizeLevelsStream(const float* v, std::size_t n, float norm, const float* levels, int s,
                          const RandomStream& stream, uint64_t first, uint8_t* symbols) {
  QuantizeLevelsByWords(&QuantizeLevels, v, n, norm, levels, s, stream, first, symbols);
}

}  // namespace

const QsgdKernels kQsgdKernels = {&L2Norm,         &MeanAbs,      &MaxAbs,         &QuantizeLevels,
                                  &DequantizeLevels, &DequantizeLevelsAccumulate, &SignQuantize,
                                  &SignDequantize, &SignDequantizeAccumulate, &QuantizeLevelsStream};

}  // namespace neon
}  // namespace fedrt
