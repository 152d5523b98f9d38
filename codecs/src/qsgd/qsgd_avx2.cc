// AVX2 variant of the normalized-quantizer kernels (definitions in
// qsgd_kernels.h). Eight coordinates per step with the scalar reference's
// operations in the same order (IEEE division, no FMA: built with
// -ffp-contract=off and explicit mul/add); level lookups are gathers. Tails
// (n % 8) go through the scalar kernel, which is exact by definition. The
// double-lane sums keep the reference's 16 lanes (i % 16) in four registers.
#include <immintrin.h>

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
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int h = 0; h < 2; ++h) {
      __m256 x = _mm256_loadu_ps(v + i + 8 * h);
      if (!kSquare) x = AbsPs(x);
      const __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
      const __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
      acc[2 * h] = _mm256_add_pd(acc[2 * h], kSquare ? _mm256_mul_pd(a, a) : a);
      acc[2 * h + 1] = _mm256_add_pd(acc[2 * h + 1], kSquare ? _mm256_mul_pd(b, b) : b);
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

void QuantizeLevels(const float* v, std::size_t n, float norm, const float* levels, int s, const uint32_t* words,
                    uint8_t* symbols) {
  const __m256 norm8 = _mm256_set1_ps(norm);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 zero = _mm256_setzero_ps();
  const __m256 scale24 = _mm256_set1_ps(0x1p-24f);
  const __m256i s8 = _mm256_set1_epi32(s);
  // Up to 8 levels fit one register: a permute replaces the gathers.
  const bool small = s < 8;
  float padded[8] = {};
  for (int k = 0; small && k <= s; ++k) padded[k] = levels[k];
  const __m256 table = _mm256_loadu_ps(padded);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(v + i);
    const __m256 r = _mm256_min_ps(_mm256_div_ps(AbsPs(x), norm8), one);
    __m256i j = _mm256_setzero_si256();
    for (int k = 1; k < s; ++k) {
      // The comparison mask is -1 where levels[k] <= r: subtracting counts it.
      j = _mm256_sub_epi32(j, _mm256_castps_si256(_mm256_cmp_ps(_mm256_set1_ps(levels[k]), r, _CMP_LE_OQ)));
    }
    const __m256 low = small ? _mm256_permutevar8x32_ps(table, j) : _mm256_i32gather_ps(levels, j, 4);
    const __m256 high = small ? _mm256_permutevar8x32_ps(table, _mm256_add_epi32(j, _mm256_set1_epi32(1)))
                              : _mm256_i32gather_ps(levels + 1, j, 4);
    const __m256 p = _mm256_div_ps(_mm256_sub_ps(r, low), _mm256_sub_ps(high, low));
    const __m256i w = _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + i)), 8);
    const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(w), scale24);
    const __m256i level = _mm256_sub_epi32(j, _mm256_castps_si256(_mm256_cmp_ps(u, p, _CMP_LT_OQ)));
    const __m256i negative = _mm256_castps_si256(_mm256_cmp_ps(x, zero, _CMP_LT_OQ));
    const __m256i sym = _mm256_blendv_epi8(_mm256_add_epi32(s8, level), _mm256_sub_epi32(s8, level), negative);
    StoreSymbols8(sym, symbols + i);
  }
  Ref().quantize_levels(v + i, n - i, norm, levels, s, words + i, symbols + i);
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
                                  &SignDequantize, &SignDequantizeAccumulate};

}  // namespace avx2
}  // namespace fedrt
