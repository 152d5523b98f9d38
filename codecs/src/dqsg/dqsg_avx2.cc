// AVX2 DQSG / NDQSG kernels: eight coordinates per vector, 32 per iteration
// for the kernels that write symbols (four vectors packed to bytes at once).
// Division is _mm256_div_ps (correctly rounded, like the scalar '/'), rounding
// _mm256_round_ps(_MM_FROUND_TO_NEAREST_INT), no FMA: every value equals the
// scalar reference bit for bit, subnormals included (MXCSR defaults: no
// FTZ/DAZ). Tails (fewer than one iteration): the scalar kernels.
#include <immintrin.h>

#include <cstring>

#include "dqsg/dqsg_kernels.h"

namespace fedrt::avx2 {
namespace {

inline __m256 Round(__m256 x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

// Writes 32 symbols per iteration from `eight(i)`, which returns symbols
// i..i+7 as int32 lanes in [0, 255]. Returns how many were written.
template <typename Eight>
inline std::size_t StoreSymbols32(std::size_t n, uint8_t* out, Eight eight) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = eight(i), b = eight(i + 8), c = eight(i + 16), d = eight(i + 24);
    // packs/packus interleave 128-bit lanes; the permute restores the order.
    const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permutevar8x32_epi32(bytes, order));
  }
  return i;
}

// Symbols i..i+7 minus `offset`, as floats (exact: small integers).
inline __m256 LoadLevels(const uint8_t* symbols, __m256i offset) {
  const __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(symbols)));
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(q, offset));
}

}  // namespace

float MaxAbs(const float* w, std::size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i best = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    best = _mm256_max_epu32(best, _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(w + i)), abs_mask));
  }
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(best), _mm256_extracti128_si256(best, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4E));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xB1));
  const float vector_max = _mm_cvtss_f32(_mm_castsi128_ps(m));
  const float tail_max = scalar::MaxAbs(w + i, n - i);
  // Compare the bit patterns, as the reference does (a NaN must win too).
  const uint32_t vector_bits = static_cast<uint32_t>(_mm_cvtsi128_si32(m));
  uint32_t tail_bits;
  std::memcpy(&tail_bits, &tail_max, sizeof tail_bits);
  return tail_bits > vector_bits ? tail_max : vector_max;
}

void Quantize(const float* w, const float* u, std::size_t n, float scale, int s, uint8_t* symbols) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  const __m256 hi = _mm256_set1_ps(static_cast<float>(s));
  const __m256 lo = _mm256_set1_ps(-static_cast<float>(s));
  const __m256i offset = _mm256_set1_epi32(s);
  const std::size_t done = StoreSymbols32(n, symbols, [&](std::size_t i) {
    const __m256 t = _mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(w + i), scale_v), _mm256_loadu_ps(u + i));
    const __m256 q = _mm256_min_ps(_mm256_max_ps(Round(t), lo), hi);
    return _mm256_add_epi32(_mm256_cvtps_epi32(q), offset);
  });
  scalar::Quantize(w + done, u + done, n - done, scale, s, symbols + done);
}

void Dequantize(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s, float* out) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  const __m256i offset = _mm256_set1_epi32(s);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 q = LoadLevels(symbols + i, offset);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_sub_ps(q, _mm256_loadu_ps(u + i)), scale_v));
  }
  scalar::Dequantize(symbols + i, u + i, n - i, scale, s, out + i);
}

void DequantizeAccumulate(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s,
                          float weight, float* acc) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  const __m256 weight_v = _mm256_set1_ps(weight);
  const __m256i offset = _mm256_set1_epi32(s);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 q = LoadLevels(symbols + i, offset);
    const __m256 value = _mm256_mul_ps(_mm256_sub_ps(q, _mm256_loadu_ps(u + i)), scale_v);
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(weight_v, value)));
  }
  scalar::DequantizeAccumulate(symbols + i, u + i, n - i, scale, s, weight, acc + i);
}

void NestedQuantize(const float* w, const float* u, std::size_t n, float scale, int s1, int rho,
                    uint8_t* symbols) {
  if (rho % 2 == 0) return scalar::NestedQuantize(w, u, n, scale, s1, rho, symbols);  // even rho: scalar
  const __m256 scale_v = _mm256_set1_ps(scale);
  const __m256 hi = _mm256_set1_ps(static_cast<float>(s1));
  const __m256 lo = _mm256_set1_ps(-static_cast<float>(s1));
  const __m256 rho_v = _mm256_set1_ps(static_cast<float>(rho));
  const __m256i offset = _mm256_set1_epi32((rho - 1) / 2);
  const std::size_t done = StoreSymbols32(n, symbols, [&](std::size_t i) {
    const __m256 t = _mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(w + i), scale_v), _mm256_loadu_ps(u + i));
    const __m256 fine = _mm256_min_ps(_mm256_max_ps(Round(t), lo), hi);
    const __m256 q = _mm256_sub_ps(fine, _mm256_mul_ps(rho_v, Round(_mm256_div_ps(fine, rho_v))));
    return _mm256_add_epi32(_mm256_cvtps_epi32(q), offset);
  });
  scalar::NestedQuantize(w + done, u + done, n - done, scale, s1, rho, symbols + done);
}

void NestedDequantize(const uint8_t* symbols, const float* u, const float* y, std::size_t n, float scale,
                      int rho, float* out) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  const __m256 rho_v = _mm256_set1_ps(static_cast<float>(rho));
  const __m256 d2 = _mm256_set1_ps(static_cast<float>(rho) * scale);
  const __m256i offset = _mm256_set1_epi32((rho - 1) / 2);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 q = LoadLevels(symbols + i, offset);
    const __m256 u_v = _mm256_loadu_ps(u + i);
    const __m256 a = _mm256_mul_ps(_mm256_sub_ps(q, u_v), scale_v);
    const __m256 m = Round(_mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(y + i), a), d2));
    const __m256 fine = _mm256_add_ps(q, _mm256_mul_ps(rho_v, m));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_sub_ps(fine, u_v), scale_v));
  }
  scalar::NestedDequantize(symbols + i, u + i, y + i, n - i, scale, rho, out + i);
}

}  // namespace fedrt::avx2
