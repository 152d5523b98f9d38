// AVX2 Moniqua kernels (see moniqua_kernels.h): eight coordinates at a time,
// the scalar formulas with _mm256_div_ps, _mm256_floor_ps and
// _mm256_round_ps(nearest even), so results equal the reference bit for bit.
// Symbols are narrowed 32 -> 8 bits with packs. Tails: the scalar kernels.
#include <immintrin.h>

#include "moniqua/moniqua_kernels.h"

namespace fedrt::avx2 {
namespace {

inline __m256 Uniform(const uint32_t* words) {
  const __m256i w = _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words)), 8);
  return _mm256_mul_ps(_mm256_cvtepi32_ps(w), _mm256_set1_ps(0x1p-24f));
}

// z = frac(x / b) in [0, 1]; 0 where not finite.
inline __m256 UnitFraction(__m256 x, __m256 b) {
  const __m256 t = _mm256_div_ps(x, b);
  const __m256 z = _mm256_sub_ps(t, _mm256_floor_ps(t));
  const __m256 in_range = _mm256_and_ps(_mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GE_OQ),
                                        _mm256_cmp_ps(z, _mm256_set1_ps(1.0f), _CMP_LE_OQ));
  return _mm256_and_ps(z, in_range);
}

// Eight symbols s mod 2^b (s integral floats) to symbols[0..8).
inline void StoreSymbols(__m256 s, __m256i mask, uint8_t* symbols) {
  const __m256i q = _mm256_and_si256(_mm256_cvttps_epi32(s), mask);
  const __m128i q16 = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(symbols), _mm_packus_epi16(q16, q16));
}

inline __m256 LoadSymbols(const uint8_t* symbols) {
  const __m128i s8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(symbols));
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(s8));
}

// out = ((b q - y) mod_c b) + y for eight coordinates; returns how many have
// |m| >= limit or m NaN.
inline std::size_t Recover(__m256 q, __m256 b, const float* y, __m256 limit, float* out) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 yi = _mm256_loadu_ps(y);
  const __m256 a = _mm256_sub_ps(_mm256_mul_ps(b, q), yi);
  const __m256 r = _mm256_round_ps(_mm256_div_ps(a, b), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 m = _mm256_sub_ps(a, _mm256_mul_ps(b, r));
  _mm256_storeu_ps(out, _mm256_add_ps(m, yi));
  const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(m, abs_mask), limit, _CMP_NLT_UQ));
  return static_cast<std::size_t>(__builtin_popcount(static_cast<unsigned>(hits)));
}

}  // namespace

void MoniquaQuantize(const float* x, std::size_t n, float modulus, int bits, const uint32_t* words,
                     uint8_t* symbols) {
  const __m256 b = _mm256_set1_ps(modulus);
  const __m256 levels = _mm256_set1_ps(static_cast<float>(1u << bits));
  const __m256i mask = _mm256_set1_epi32(static_cast<int>((1u << bits) - 1));
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 scaled = _mm256_mul_ps(UnitFraction(_mm256_loadu_ps(x + i), b), levels);
    const __m256 s = words == nullptr
                         ? _mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                         : _mm256_floor_ps(_mm256_add_ps(scaled, Uniform(words + i)));
    StoreSymbols(s, mask, symbols + i);
  }
  scalar::MoniquaQuantize(x + i, n - i, modulus, bits, words == nullptr ? nullptr : words + i, symbols + i);
}

std::size_t MoniquaRecover(const uint8_t* symbols, std::size_t n, float modulus, int bits, const float* y,
                           float near_limit, float* out) {
  const __m256 b = _mm256_set1_ps(modulus);
  const __m256 step = _mm256_set1_ps(1.0f / static_cast<float>(1u << bits));
  const __m256 limit = _mm256_set1_ps(near_limit);
  std::size_t near = 0;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    near += Recover(_mm256_mul_ps(LoadSymbols(symbols + i), step), b, y + i, limit, out + i);
  }
  return near + scalar::MoniquaRecover(symbols + i, n - i, modulus, bits, y + i, near_limit, out + i);
}

void MoniquaQuantizeDither(const float* x, std::size_t n, float modulus, int bits, const float* dither,
                           uint8_t* symbols) {
  const __m256 b = _mm256_set1_ps(modulus);
  const __m256 levels = _mm256_set1_ps(static_cast<float>(1u << bits));
  const __m256i mask = _mm256_set1_epi32(static_cast<int>((1u << bits) - 1));
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 scaled = _mm256_mul_ps(UnitFraction(_mm256_loadu_ps(x + i), b), levels);
    StoreSymbols(_mm256_round_ps(_mm256_add_ps(scaled, _mm256_loadu_ps(dither + i)),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                 mask, symbols + i);
  }
  scalar::MoniquaQuantizeDither(x + i, n - i, modulus, bits, dither + i, symbols + i);
}

std::size_t MoniquaRecoverDither(const uint8_t* symbols, std::size_t n, float modulus, int bits, const float* dither,
                                 const float* y, float near_limit, float* out) {
  const __m256 b = _mm256_set1_ps(modulus);
  const __m256 step = _mm256_set1_ps(1.0f / static_cast<float>(1u << bits));
  const __m256 limit = _mm256_set1_ps(near_limit);
  std::size_t near = 0;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 q = _mm256_mul_ps(_mm256_sub_ps(LoadSymbols(symbols + i), _mm256_loadu_ps(dither + i)), step);
    near += Recover(q, b, y + i, limit, out + i);
  }
  return near + scalar::MoniquaRecoverDither(symbols + i, n - i, modulus, bits, dither + i, y + i, near_limit, out + i);
}

}  // namespace fedrt::avx2
