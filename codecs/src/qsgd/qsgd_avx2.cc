// AVX2 variant of the normalized-quantizer kernels (definitions in
// qsgd_kernels.h). Eight coordinates per step with the scalar reference's
// operations in the same order (IEEE division, no FMA: built with
// -ffp-contract=off and explicit mul/add); level lookups are permutes (s < 8)
// or gathers. Stochastic rounding first tries a division-free form
// (FastUniform, FastLevels) that also proves, lane by lane, that it gives the
// reference's symbol; a group of 32 coordinates with any lane unproven is
// recomputed exactly (ExactLevels). The stream entry point makes the Philox
// words in registers. Tails (n % 8, and the stream's coordinates off its
// 64-coordinate grid) go through the scalar kernel or PhiloxWords, exact by
// definition. The double-lane sums keep the reference's 16 lanes (i % 16) in
// four registers.
#include <immintrin.h>

#include "philox/philox_avx2.h"
#include "qsgd/qsgd_kernels.h"

namespace fedrt {
namespace avx2 {
namespace {

const QsgdKernels& Ref() { return scalar::kQsgdKernels; }

__m256 AbsPs(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

// Sums f(v_i) in double over the reference's 16 lanes; f is x*x or |x|.
template <bool kSquare>
double LaneSum(const float* v, std::size_t n) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  const __m256d sign = _mm256_set1_pd(-0.0);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int q = 0; q < 4; ++q) {
      // Converted from memory four floats at a time (no cross-lane extract).
      __m256d x = _mm256_cvtps_pd(_mm_loadu_ps(v + i + 4 * q));
      x = kSquare ? _mm256_mul_pd(x, x) : _mm256_andnot_pd(sign, x);
      acc[q] = _mm256_add_pd(acc[q], x);
    }
  }
  double lanes[kNormLanes];
  for (int q = 0; q < 4; ++q) _mm256_storeu_pd(lanes + 4 * q, acc[q]);
  return FinishNormLanes<kSquare>(lanes, v, i, n);
}

float L2Norm(const float* v, std::size_t n) {
  return static_cast<float>(__builtin_sqrt(LaneSum<true>(v, n)));
}

float MeanAbs(const float* v, std::size_t n) {
  if (n == 0) return 0.0f;
  return static_cast<float>(LaneSum<false>(v, n) / static_cast<double>(n));
}

float MaxAbs(const float* v, std::size_t n) {
  __m256 m = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, AbsPs(_mm256_loadu_ps(v + i)));
  float lanes[8];
  _mm256_storeu_ps(lanes, m);
  float result = Ref().max_abs(v + i, n - i);
  for (float x : lanes) result = x > result ? x : result;
  return result;
}

// Eight int32 symbols (0..255) to eight bytes.
void StoreSymbols8(__m256i symbols, uint8_t* out) {
  const __m128i words16 = _mm_packs_epi32(_mm256_castsi256_si128(symbols), _mm256_extracti128_si256(symbols, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(words16, words16));
}

// Thirty-two int32 symbols (0..255), four vectors in order, to 32 bytes.
void StoreSymbols32(const __m256i* symbols, uint8_t* out) {
  // packs/packus interleave 128-bit lanes; the permute restores the order.
  const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(symbols[0], symbols[1]),
                                            _mm256_packs_epi32(symbols[2], symbols[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// u01 of eight words: float(w >> 8) * 2^-24, exact.
__m256 UniformOf(const uint32_t* words) {
  const __m256i w = _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words)), 8);
  return _mm256_mul_ps(_mm256_cvtepi32_ps(w), _mm256_set1_ps(0x1p-24f));
}

// The reference's stochastic rounding of eight coordinates, operation for
// operation (two IEEE divisions); levels permuted from a register for s < 8,
// gathered otherwise.
class ExactLevels {
 public:
  ExactLevels(float norm, const float* levels, int s) : levels_(levels), s_(s), small_(s < 8) {
    float padded[8] = {};
    for (int k = 0; small_ && k <= s; ++k) padded[k] = levels[k];
    table_ = _mm256_loadu_ps(padded);
    norm_ = _mm256_set1_ps(norm);
  }

  __m256i operator()(__m256 x, __m256 u) const {
    const __m256 r = _mm256_min_ps(_mm256_div_ps(AbsPs(x), norm_), _mm256_set1_ps(1.0f));
    __m256i j = _mm256_setzero_si256();
    for (int k = 1; k < s_; ++k) {
      // The comparison mask is -1 where levels[k] <= r: subtracting counts it.
      j = _mm256_sub_epi32(j, _mm256_castps_si256(_mm256_cmp_ps(_mm256_set1_ps(levels_[k]), r, _CMP_LE_OQ)));
    }
    const __m256 low = small_ ? _mm256_permutevar8x32_ps(table_, j) : _mm256_i32gather_ps(levels_, j, 4);
    const __m256 high = small_ ? _mm256_permutevar8x32_ps(table_, _mm256_add_epi32(j, _mm256_set1_epi32(1)))
                               : _mm256_i32gather_ps(levels_ + 1, j, 4);
    const __m256 p = _mm256_div_ps(_mm256_sub_ps(r, low), _mm256_sub_ps(high, low));
    return Signed(x, _mm256_sub_epi32(j, _mm256_castps_si256(_mm256_cmp_ps(u, p, _CMP_LT_OQ))), s_);
  }

  // s + level, or s - level where x < 0.
  static __m256i Signed(__m256 x, __m256i level, int s) {
    const __m256i s8 = _mm256_set1_epi32(s);
    const __m256i negative = _mm256_castps_si256(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_blendv_epi8(_mm256_add_epi32(s8, level), _mm256_sub_epi32(s8, level), negative);
  }

 private:
  const float* levels_;
  int s_;
  bool small_;
  __m256 table_, norm_;
};

// Stochastic rounding without division, for s < 8, 2^-100 <= norm <= 2^100
// and level gaps in [2^-60, 2^60] (otherwise not usable()): the ARMv7 NEON
// scheme of qsgd_neon.cc, whose bounds hold a fortiori here (IEEE
// arithmetic, nothing flushed), with its margins bounded per call:
//   r' = min(|x| * fl(1/norm), 1), j' counted on r',
//   p' = (r' - l_j') * fl(1/(l_j'+1 - l_j')),
//   m_r = 2^-21 + 2^-25 >= 2^-21 r' + 2^-25 (r' <= 1),
//   m_p[j] = 2 m_r / gap_j + 2^-19 + 2^-30 >= 2 m_r / gap + 2^-20 p' + 2^-30
//            (p' <= 2 once r' is m_r below l_j'+1), rounded up to float.
// A lane is proven equal to the reference (j' = j and u < p' == u < p) when
// r' is more than m_r above l_j' (or j' = 0) and below l_j'+1 (or j' = s-1),
// and |u - p'| > m_p[j']. Per-level values come from registers by permutes.
// kS (the s of the call) is a template argument so the count of j unrolls;
// kS = 0 stands for every s >= 8, which is never usable.
template <int kS>
class FastLevels {
 public:
  FastLevels(float norm, const float* levels, int s) {
    usable_ = kS != 0 && s == kS && norm >= 0x1p-100f && norm <= 0x1p100f;
    const double margin_r = 0x1p-21 + 0x1p-25;
    float low[8] = {}, inverse_gap[8] = {}, below[8] = {}, above[8] = {}, margin_p[8] = {};
    for (int j = 0; usable_ && j < s; ++j) {
      const float gap = levels[j + 1] - levels[j];
      usable_ = gap >= 0x1p-60f && gap <= 0x1p60f;
      low[j] = levels[j];
      inverse_gap[j] = 1.0f / gap;
      below[j] = j == 0 ? -2.0f : levels[j];
      above[j] = j == s - 1 ? 3.0f : levels[j + 1];
      const double m = 2.0 * margin_r / static_cast<double>(gap) + 0x1p-19 + 0x1p-30;
      margin_p[j] = static_cast<float>(m);
      if (static_cast<double>(margin_p[j]) < m) margin_p[j] = __builtin_nextafterf(margin_p[j], 1e30f);
    }
    for (int k = 1; usable_ && k < kS; ++k) level_[k - 1] = _mm256_set1_ps(levels[k]);
    low_ = _mm256_loadu_ps(low);
    inverse_gap_ = _mm256_loadu_ps(inverse_gap);
    below_ = _mm256_loadu_ps(below);
    above_ = _mm256_loadu_ps(above);
    margin_p_ = _mm256_loadu_ps(margin_p);
    inverse_norm_ = _mm256_set1_ps(1.0f / norm);
    margin_r_ = _mm256_set1_ps(static_cast<float>(margin_r));
  }

  bool usable() const { return usable_; }

  // Symbols of eight coordinates; clears the lanes of *sure whose symbol is
  // not proven to be the reference's.
  __m256i operator()(__m256 x, __m256 u, __m256* sure) const {
    const __m256 r = _mm256_min_ps(_mm256_mul_ps(AbsPs(x), inverse_norm_), _mm256_set1_ps(1.0f));
    __m256i j = _mm256_setzero_si256();
    for (int k = 1; k < kS; ++k) {
      j = _mm256_sub_epi32(j, _mm256_castps_si256(_mm256_cmp_ps(level_[k - 1], r, _CMP_LE_OQ)));
    }
    const __m256 p = _mm256_mul_ps(_mm256_sub_ps(r, _mm256_permutevar8x32_ps(low_, j)),
                                   _mm256_permutevar8x32_ps(inverse_gap_, j));
    const __m256 below_ok =
        _mm256_cmp_ps(_mm256_sub_ps(r, _mm256_permutevar8x32_ps(below_, j)), margin_r_, _CMP_GT_OQ);
    const __m256 above_ok =
        _mm256_cmp_ps(_mm256_sub_ps(_mm256_permutevar8x32_ps(above_, j), r), margin_r_, _CMP_GT_OQ);
    const __m256 u_ok =
        _mm256_cmp_ps(AbsPs(_mm256_sub_ps(u, p)), _mm256_permutevar8x32_ps(margin_p_, j), _CMP_GT_OQ);
    *sure = _mm256_and_ps(*sure, _mm256_and_ps(_mm256_and_ps(below_ok, above_ok), u_ok));
    return ExactLevels::Signed(x, _mm256_sub_epi32(j, _mm256_castps_si256(_mm256_cmp_ps(u, p, _CMP_LT_OQ))), kS);
  }

 private:
  bool usable_;
  __m256 level_[kS > 1 ? kS - 1 : 1];
  __m256 low_, inverse_gap_, below_, above_, margin_p_, inverse_norm_, margin_r_;
};

// Stochastic rounding on a uniform table (l_0 = 0, l_s = 1, every l_k
// within 2^-24 of k/s: qsgd, terngrad), for s <= 127 and 2^-100 <= norm <=
// 2^100 (otherwise not usable()), in one expression per lane:
//   e' = min(|x| * fl(s * fl(1/norm)), s) + (1 - u)   (1 - u is exact).
// The reference's level is floor(E) for E = j + p + 1 - u: u < p puts E in
// (j + 1, j + 2], u >= p in (j, j + 1], and E is an integer only on a tie.
// Bounds (absolute, t = s * min(|x| / norm, 1) in [0, s]): t' = the min()
// above is within 3.01 * 2^-24 t + 2^-149 of t (three roundings, the clamp
// 1-Lipschitz); j + p is within (4.5 s + 1) 2^-24 of t (r and the levels
// each within 2^-25 or 2^-24 of their real values, d, g and p rounded once,
// g within 3 * 2^-25 of 1/s); the last addition rounds by at most
// (s + 1) 2^-24. So |e' - E| <= (11 s + 2) 2^-24, and a lane whose e' is more
// than M = (s + 1) 2^-19 (about three times that) from every integer has
// floor(e') = floor(E), the reference's level.
class FastUniform {
 public:
  FastUniform(float norm, const float* levels, int s) {
    usable_ = s >= 1 && s <= 127 && norm >= 0x1p-100f && norm <= 0x1p100f && levels[0] == 0.0f &&
              levels[s] == 1.0f;
    for (int k = 1; usable_ && k < s; ++k) {
      const double error = static_cast<double>(levels[k]) - static_cast<double>(k) / static_cast<double>(s);
      usable_ = error <= 0x1p-24 && error >= -0x1p-24;
    }
    const float top = static_cast<float>(s);
    const float margin = static_cast<float>(s + 1) * 0x1p-19f;  // exact: a small multiple of 2^-19
    scale_ = _mm256_set1_ps(top * (1.0f / norm));
    top_ = _mm256_set1_ps(top);
    margin_ = _mm256_set1_ps(margin);
    upper_ = _mm256_set1_ps(1.0f - margin);  // exact: margin < 1/2 is a multiple of 2^-19
    s8_ = _mm256_set1_epi32(s);
  }

  bool usable() const { return usable_; }

  // Symbols of eight coordinates; clears the lanes of *sure whose symbol is
  // not proven to be the reference's.
  __m256i operator()(__m256 x, __m256 u, __m256* sure) const {
    const __m256 t = _mm256_min_ps(_mm256_mul_ps(AbsPs(x), scale_), top_);
    const __m256 e = _mm256_add_ps(t, _mm256_sub_ps(_mm256_set1_ps(1.0f), u));
    // e' - floor(e') is exact (Sterbenz, or floor 0).
    const __m256 fraction = _mm256_sub_ps(e, _mm256_round_ps(e, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    *sure = _mm256_and_ps(*sure, _mm256_and_ps(_mm256_cmp_ps(fraction, margin_, _CMP_GT_OQ),
                                               _mm256_cmp_ps(fraction, upper_, _CMP_LT_OQ)));
    const __m256i level = _mm256_cvttps_epi32(e);  // floor: e' >= 0
    // s + level, or s - level where x < 0 (sign bit set; -0 has level 0).
    const __m256i negative = _mm256_srai_epi32(_mm256_castps_si256(x), 31);
    return _mm256_add_epi32(s8_, _mm256_sub_epi32(_mm256_xor_si256(level, negative), negative));
  }

 private:
  bool usable_;
  __m256 scale_, top_, margin_, upper_;
  __m256i s8_;
};

// Symbols of 32 coordinates given their uniforms: the fast rounding
// (FastUniform or FastLevels) when usable and proven for all 32, else
// ExactLevels.
template <typename Fast>
inline void Quantize32(const Fast& fast, const ExactLevels& exact, const float* v, const __m256* u,
                       uint8_t* out) {
  __m256 x[4];
  __m256i symbols[4];
  for (int h = 0; h < 4; ++h) x[h] = _mm256_loadu_ps(v + 8 * h);
  if (fast.usable()) {
    __m256 sure = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int h = 0; h < 4; ++h) symbols[h] = fast(x[h], u[h], &sure);
    if (_mm256_movemask_ps(sure) == 0xFF) return StoreSymbols32(symbols, out);
  }
  for (int h = 0; h < 4; ++h) symbols[h] = exact(x[h], u[h]);
  StoreSymbols32(symbols, out);
}

template <typename Fast>
void QuantizeLevelsWith(const Fast& fast, const float* v, std::size_t n, float norm, const float* levels, int s,
                        const uint32_t* words, uint8_t* symbols) {
  const ExactLevels exact(norm, levels, s);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 u[4];
    for (int h = 0; h < 4; ++h) u[h] = UniformOf(words + i + 8 * h);
    Quantize32(fast, exact, v + i, u, symbols + i);
  }
  for (; i + 8 <= n; i += 8) StoreSymbols8(exact(_mm256_loadu_ps(v + i), UniformOf(words + i)), symbols + i);
  Ref().quantize_levels(v + i, n - i, norm, levels, s, words + i, symbols + i);
}

void QuantizeLevels(const float* v, std::size_t n, float norm, const float* levels, int s, const uint32_t* words,
                    uint8_t* symbols);

// Philox sets per step of the fused kernel: 64 coordinates, two Quantize32.
constexpr int kRandomSets = 4;
constexpr uintptr_t kPrefetchBytes = 4096;

// QuantizeLevelsStream with the words made in registers as dither u - 1/2
// (philox_avx2.h); adding 1/2 back is exact (multiples of 2^-24 in [0, 1)).
// Coordinates off the step grid go through PhiloxWords and QuantizeLevels.
template <typename Fast>
void QuantizeStreamWith(const Fast& fast, const float* v, std::size_t n, float norm, const float* levels, int s,
                        const RandomStream& stream, uint64_t first, uint8_t* symbols) {
  const ExactLevels exact(norm, levels, s);
  const __m256 half = _mm256_set1_ps(0.5f);
  WithDither<kRandomSets>(
      stream, first, n,
      [&](std::size_t i, const __m256* dither) {
        // A later step's input, 4 KB ahead (an address only: prefetches past
        // the end are harmless): the next bucket comes from memory.
        const uintptr_t ahead = reinterpret_cast<uintptr_t>(v + i) + kPrefetchBytes;
        for (int line = 0; line < kRandomSets; ++line) {
          _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * static_cast<uintptr_t>(line)), _MM_HINT_T0);
        }
        for (int q = 0; q < 2 * kRandomSets; q += 4) {
          __m256 u[4];
          for (int h = 0; h < 4; ++h) u[h] = _mm256_add_ps(dither[q + h], half);
          const std::size_t at = i + 8 * static_cast<std::size_t>(q);
          Quantize32(fast, exact, v + at, u, symbols + at);
        }
      },
      [&](std::size_t i, std::size_t count, const float* /*dither*/) {
        QuantizeLevelsByWords(&QuantizeLevels, v + i, count, norm, levels, s, stream, first + i, symbols + i);
      });
}

// The s of a call as a template argument of FastLevels (0: s >= 8).
template <template <int> class Fn, typename... Args>
void WithLevelCount(int s, Args... args) {
  switch (s) {
    case 1: return Fn<1>::Run(args...);
    case 2: return Fn<2>::Run(args...);
    case 3: return Fn<3>::Run(args...);
    case 4: return Fn<4>::Run(args...);
    case 5: return Fn<5>::Run(args...);
    case 6: return Fn<6>::Run(args...);
    case 7: return Fn<7>::Run(args...);
    default: return Fn<0>::Run(args...);
  }
}

template <int kS>
struct QuantizeWords {
  static void Run(const float* v, std::size_t n, float norm, const float* levels, int s, const uint32_t* words,
                  uint8_t* symbols) {
    QuantizeLevelsWith(FastLevels<kS>(norm, levels, s), v, n, norm, levels, s, words, symbols);
  }
};

template <int kS>
struct QuantizeStream {
  static void Run(const float* v, std::size_t n, float norm, const float* levels, int s, const RandomStream* stream,
                  uint64_t first, uint8_t* symbols) {
    const FastLevels<kS> fast(norm, levels, s);
    if (!fast.usable()) {
      return QuantizeLevelsByWords(&QuantizeLevels, v, n, norm, levels, s, *stream, first, symbols);
    }
    QuantizeStreamWith(fast, v, n, norm, levels, s, *stream, first, symbols);
  }
};

void QuantizeLevels(const float* v, std::size_t n, float norm, const float* levels, int s, const uint32_t* words,
                    uint8_t* symbols) {
  const FastUniform uniform(norm, levels, s);
  if (uniform.usable()) return QuantizeLevelsWith(uniform, v, n, norm, levels, s, words, symbols);
  WithLevelCount<QuantizeWords>(s, v, n, norm, levels, s, words, symbols);
}

void QuantizeLevelsStream(const float* v, std::size_t n, float norm, const float* levels, int s,
                          const RandomStream& stream, uint64_t first, uint8_t* symbols) {
  const FastUniform uniform(norm, levels, s);
  if (uniform.usable()) return QuantizeStreamWith(uniform, v, n, norm, levels, s, stream, first, symbols);
  WithLevelCount<QuantizeStream>(s, v, n, norm, levels, s, &stream, first, symbols);
}

// +-(norm * levels[|symbol - s|]) for eight symbols.
__m256 LevelValues8(const uint8_t* symbols, __m256 norm8, const float* levels, __m256i s8) {
  const __m256i sym = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(symbols)));
  const __m256i offset = _mm256_sub_epi32(sym, s8);
  const __m256 magnitude = _mm256_mul_ps(norm8, _mm256_i32gather_ps(levels, _mm256_abs_epi32(offset), 4));
  const __m256 sign = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cmpgt_epi32(_mm256_setzero_si256(), offset), 31));
  return _mm256_xor_ps(magnitude, sign);
}

void DequantizeLevels(const uint8_t* symbols, std::size_t n, float norm, const float* levels, int s, float* out) {
  const __m256 norm8 = _mm256_set1_ps(norm);
  const __m256i s8 = _mm256_set1_epi32(s);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, LevelValues8(symbols + i, norm8, levels, s8));
  Ref().dequantize_levels(symbols + i, n - i, norm, levels, s, out + i);
}

void DequantizeLevelsAccumulate(const uint8_t* symbols, std::size_t n, float norm, const float* levels, int s,
                                float weight, float* acc) {
  const __m256 norm8 = _mm256_set1_ps(norm);
  const __m256 weight8 = _mm256_set1_ps(weight);
  const __m256i s8 = _mm256_set1_epi32(s);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 value = LevelValues8(symbols + i, norm8, levels, s8);
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(weight8, value)));
  }
  Ref().dequantize_levels_accumulate(symbols + i, n - i, norm, levels, s, weight, acc + i);
}

void SignQuantize(const float* v, std::size_t n, uint8_t* symbols) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i negative =
        _mm256_castps_si256(_mm256_cmp_ps(_mm256_loadu_ps(v + i), _mm256_setzero_ps(), _CMP_LT_OQ));
    StoreSymbols8(_mm256_srli_epi32(negative, 31), symbols + i);
  }
  Ref().sign_quantize(v + i, n - i, symbols + i);
}

__m256 SignValues8(const uint8_t* symbols, __m256 scale8) {
  const __m256i sym = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(symbols)));
  return _mm256_xor_ps(scale8, _mm256_castsi256_ps(_mm256_slli_epi32(sym, 31)));
}

void SignDequantize(const uint8_t* symbols, std::size_t n, float scale, float* out) {
  const __m256 scale8 = _mm256_set1_ps(scale);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, SignValues8(symbols + i, scale8));
  Ref().sign_dequantize(symbols + i, n - i, scale, out + i);
}

void SignDequantizeAccumulate(const uint8_t* symbols, std::size_t n, float scale, float weight, float* acc) {
  const __m256 scale8 = _mm256_set1_ps(scale);
  const __m256 weight8 = _mm256_set1_ps(weight);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 value = SignValues8(symbols + i, scale8);
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(weight8, value)));
  }
  Ref().sign_dequantize_accumulate(symbols + i, n - i, scale, weight, acc + i);
}

}  // namespace

const QsgdKernels kQsgdKernels = {&L2Norm,         &MeanAbs,      &MaxAbs,         &QuantizeLevels,
                                  &DequantizeLevels, &DequantizeLevelsAccumulate, &SignQuantize,
                                  &SignDequantize, &SignDequantizeAccumulate, &QuantizeLevelsStream};

}  // namespace avx2
}  // namespace fedrt
