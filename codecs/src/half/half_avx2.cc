// AVX2 + F16C fp16 / bf16 converters, eight values per iteration.
// fp16: clamp to +-65504 in float (min/max are exact, so this is the scalar
// saturation), then VCVTPS2PH with round-to-nearest-even; F16C produces
// subnormal halves exactly and is not affected by MXCSR.FTZ/DAZ for these
// conversions, so results equal the integer reference. fp16 -> float is exact.
// bf16: the scalar integer algorithm on eight lanes.
// Tails (< 8 values): the scalar kernels.
#include <immintrin.h>

#include "half/half_kernels.h"

namespace fedrt::avx2 {

void FloatToFp16(const float* in, std::size_t n, uint16_t* out) {
  const __m256 hi = _mm256_set1_ps(kFp16Max);
  const __m256 lo = _mm256_set1_ps(-kFp16Max);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(in + i), lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  scalar::FloatToFp16(in + i, n - i, out + i);
}

void Fp16ToFloat(const uint16_t* in, std::size_t n, float* out) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  scalar::Fp16ToFloat(in + i, n - i, out + i);
}

void FloatToBf16(const float* in, std::size_t n, uint16_t* out) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i max_bits = _mm256_set1_epi32(static_cast<int>(kBf16MaxAsFloatBits));
  const __m256i round_bias = _mm256_set1_epi32(0x7FFF);
  const __m256i one = _mm256_set1_epi32(1);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_castps_si256(_mm256_loadu_ps(in + i));
    const __m256i sign = _mm256_srli_epi32(_mm256_andnot_si256(abs_mask, x), 16);
    __m256i a = _mm256_min_epu32(_mm256_and_si256(x, abs_mask), max_bits);
    a = _mm256_add_epi32(a, _mm256_add_epi32(round_bias, _mm256_and_si256(_mm256_srli_epi32(a, 16), one)));
    const __m256i h = _mm256_or_si256(sign, _mm256_srli_epi32(a, 16));  // each lane < 2^16
    // packus works within 128-bit lanes: fix the order with a 64-bit permute.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
  scalar::FloatToBf16(in + i, n - i, out + i);
}

void Bf16ToFloat(const uint16_t* in, std::size_t n, float* out) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(h, 16));
  }
  scalar::Bf16ToFloat(in + i, n - i, out + i);
}

}  // namespace fedrt::avx2
