// AVX2 Philox4x32-10 core, shared by the AVX2 kernels that draw Philox words
// in registers (the Philox kernels themselves and the fused dither kernels of
// other families). Include from AVX2 translation units only.
//
// Structure-of-arrays form with one block per 64-bit lane (four registers per
// set of four blocks, one per counter word). Only the low 32 bits of a lane
// are meaningful: _mm256_mul_epu32 reads just those, so the product's high
// half is moved down with one shuffle and its low half is used as it is,
// garbage above it included; that garbage never reaches a multiplier input or
// an output word. A set's lanes hold blocks (j, j+2, j+1, j+3), which makes
// the transpose back to block order two in-lane unpacks and no cross-lane
// permute. Integer arithmetic only, so the words equal the scalar reference.
#ifndef FEDRT_CODECS_PHILOX_PHILOX_AVX2_H_
#define FEDRT_CODECS_PHILOX_PHILOX_AVX2_H_

#include <immintrin.h>

#include "philox/philox_kernels.h"

namespace fedrt::avx2 {

// Four consecutive blocks' 16 words, in block order, as two registers.
struct FourBlocks {
  __m256i first;   // blocks j, j+1
  __m256i second;  // blocks j+2, j+3
};

// The key of every round, broadcast; built once per call.
struct PhiloxRoundKeys {
  __m256i k[2 * kPhiloxRounds];

  explicit PhiloxRoundKeys(PhiloxKey key) {
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < kPhiloxRounds; ++round) {
      k[2 * round] = _mm256_set1_epi32(static_cast<int>(k0));
      k[2 * round + 1] = _mm256_set1_epi32(static_cast<int>(k1));
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
  }
};

// Blocks first_block + 4c .. first_block + 4c + 3 (modulo 2^32) of the
// counter {block, c1, c2, c3}, for c < kSets, into out[c]. Independent sets
// let the multiplies of one set hide the latency (multiply, shuffle, xor) of
// another; three or four fit the 16 ymm registers with the two multipliers.
template <int kSets>
inline void PhiloxSets(const PhiloxRoundKeys& keys, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                       FourBlocks* out) {
  const __m256i m0 = _mm256_set1_epi64x(kPhiloxM0);
  const __m256i m1 = _mm256_set1_epi64x(kPhiloxM1);
  const __m256i base = _mm256_set1_epi64x(first_block);
  __m256i x0[kSets], x1[kSets], x2[kSets], x3[kSets];
  for (int c = 0; c < kSets; ++c) {
    x0[c] = _mm256_add_epi32(base, _mm256_setr_epi64x(4 * c + 0, 4 * c + 2, 4 * c + 1, 4 * c + 3));
    x1[c] = _mm256_set1_epi32(static_cast<int>(c1));
    x2[c] = _mm256_set1_epi32(static_cast<int>(c2));
    x3[c] = _mm256_set1_epi32(static_cast<int>(c3));
  }
  for (int round = 0; round < kPhiloxRounds; ++round) {
    const __m256i k0 = keys.k[2 * round], k1 = keys.k[2 * round + 1];
    for (int c = 0; c < kSets; ++c) {
      const __m256i p0 = _mm256_mul_epu32(x0[c], m0), p2 = _mm256_mul_epu32(x2[c], m1);
      // x1 ^ k0 does not wait for the multiply.
      x0[c] = _mm256_xor_si256(_mm256_shuffle_epi32(p2, 0xF5), _mm256_xor_si256(x1[c], k0));
      x2[c] = _mm256_xor_si256(_mm256_shuffle_epi32(p0, 0xF5), _mm256_xor_si256(x3[c], k1));
      x1[c] = p2;
      x3[c] = p0;
    }
  }
  for (int c = 0; c < kSets; ++c) {
    const __m256i w01 = _mm256_blend_epi32(x0[c], _mm256_slli_epi64(x1[c], 32), 0xAA);
    const __m256i w23 = _mm256_blend_epi32(x2[c], _mm256_slli_epi64(x3[c], 32), 0xAA);
    out[c] = FourBlocks{_mm256_unpacklo_epi64(w01, w23), _mm256_unpackhi_epi64(w01, w23)};
  }
}

// u01(r) - 1/2 = float(r >> 8) * 2^-24 - 1/2 of every word, exact in every step.
inline __m256 PhiloxDitherOf(__m256i words) {
  const __m256 u01 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(words, 8)), _mm256_set1_ps(0x1p-24f));
  return _mm256_sub_ps(u01, _mm256_set1_ps(0.5f));
}

}  // namespace fedrt::avx2

#endif  // FEDRT_CODECS_PHILOX_PHILOX_AVX2_H_
