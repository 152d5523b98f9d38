// AVX2 Philox4x32-10: eight blocks per iteration, in structure-of-arrays form
// (one register per counter word), transposed back to block order on store.
// The 32x32->64 multiplies use _mm256_mul_epu32 on even and odd lanes; integer
// arithmetic only, so the words equal the scalar reference exactly.
// Tail (< 8 blocks): the scalar kernel.
#include <immintrin.h>

#include "philox/philox_kernels.h"

namespace fedrt::avx2 {
namespace {

// hi and lo 32-bit halves of a * m for each of the eight lanes.
inline void MulHiLo(__m256i a, __m256i m, __m256i* hi, __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

}  // namespace

void PhiloxBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                  std::size_t blocks, uint32_t* out) {
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(kPhiloxM0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(kPhiloxM1));
  const __m256i lane_offsets = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  std::size_t j = 0;
  for (; j + 8 <= blocks; j += 8) {
    __m256i x0 = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first_block + j)), lane_offsets);
    __m256i x1 = _mm256_set1_epi32(static_cast<int>(c1));
    __m256i x2 = _mm256_set1_epi32(static_cast<int>(c2));
    __m256i x3 = _mm256_set1_epi32(static_cast<int>(c3));
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < kPhiloxRounds; ++round) {
      __m256i hi0, lo0, hi1, lo1;
      MulHiLo(x0, m0, &hi0, &lo0);
      MulHiLo(x2, m1, &hi1, &lo1);
      const __m256i y0 = _mm256_xor_si256(_mm256_xor_si256(hi1, x1), _mm256_set1_epi32(static_cast<int>(k0)));
      const __m256i y2 = _mm256_xor_si256(_mm256_xor_si256(hi0, x3), _mm256_set1_epi32(static_cast<int>(k1)));
      x0 = y0;
      x1 = lo1;
      x2 = y2;
      x3 = lo0;
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    // 4x8 -> 8x4 transpose: block b's words are lane b of x0..x3.
    const __m256i t0 = _mm256_unpacklo_epi32(x0, x1);  // b0w0 b0w1 b1w0 b1w1 | b4.. b5..
    const __m256i t1 = _mm256_unpackhi_epi32(x0, x1);  // b2w0 b2w1 b3w0 b3w1 | b6.. b7..
    const __m256i t2 = _mm256_unpacklo_epi32(x2, x3);
    const __m256i t3 = _mm256_unpackhi_epi32(x2, x3);
    const __m256i b01 = _mm256_unpacklo_epi64(t0, t2);  // block 0 | block 4
    const __m256i b11 = _mm256_unpackhi_epi64(t0, t2);  // block 1 | block 5
    const __m256i b22 = _mm256_unpacklo_epi64(t1, t3);  // block 2 | block 6
    const __m256i b33 = _mm256_unpackhi_epi64(t1, t3);  // block 3 | block 7
    __m256i* dst = reinterpret_cast<__m256i*>(out + 4 * j);
    _mm256_storeu_si256(dst + 0, _mm256_permute2x128_si256(b01, b11, 0x20));
    _mm256_storeu_si256(dst + 1, _mm256_permute2x128_si256(b22, b33, 0x20));
    _mm256_storeu_si256(dst + 2, _mm256_permute2x128_si256(b01, b11, 0x31));
    _mm256_storeu_si256(dst + 3, _mm256_permute2x128_si256(b22, b33, 0x31));
  }
  scalar::PhiloxBlocks(key, static_cast<uint32_t>(first_block + j), c1, c2, c3, blocks - j, out + 4 * j);
}

}  // namespace fedrt::avx2
