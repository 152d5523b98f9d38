// AVX2 Philox4x32-10 core, shared by the AVX2 kernels that draw Philox words
// in registers (the Philox kernels themselves and the fused dither kernels of
// other families). Include from AVX2 translation units only.
//
// Structure-of-arrays form with one block per 64-bit lane (four registers per
// set of four blocks, one per counter word), one call's constant work folded
// (PhiloxCall). Only the low 32 bits of a lane are meaningful:
// _mm256_mul_epu32 reads just those, so the product's high half is moved down
// with one shuffle and its low half is used as it is, garbage above it
// included; that garbage never reaches a multiplier input or an output word. A set's lanes hold blocks (j, j+2, j+1, j+3), which makes
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

struct Lanes256 {
  static __m256i Splat(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
};

// What every block of one call shares, folded (philox_kernels.h).
using PhiloxCall = PhiloxFoldedCall<Lanes256>;

// Blocks first_block + 4c .. first_block + 4c + 3 (modulo 2^32) of the call's
// counter {block, c1, c2, c3}, for c < kSets, into out[c]. Independent sets
// let the multiplies of one set hide the latency (multiply, shuffle, xor) of
// another; three or four fit the 16 ymm registers with the two multipliers.
template <int kSets>
inline void PhiloxSets(const PhiloxCall& call, uint32_t first_block, FourBlocks* out) {
  const __m256i m0 = _mm256_set1_epi64x(kPhiloxM0);
  const __m256i m1 = _mm256_set1_epi64x(kPhiloxM1);
  const __m256i base = _mm256_set1_epi64x(first_block);
  __m256i x0[kSets], x1[kSets], x2[kSets], x3[kSets];
  for (int c = 0; c < kSets; ++c) {
    // Rounds 0 and 1 (PhiloxCall).
    const __m256i p0 =
        _mm256_mul_epu32(_mm256_add_epi32(base, _mm256_setr_epi64x(4 * c + 0, 4 * c + 2, 4 * c + 1, 4 * c + 3)), m0);
    const __m256i x2_r0 = _mm256_xor_si256(_mm256_shuffle_epi32(p0, 0xF5), call.r0_c3k1);
    const __m256i p2 = _mm256_mul_epu32(x2_r0, m1);
    x0[c] = _mm256_xor_si256(_mm256_shuffle_epi32(p2, 0xF5), call.r1_x1k0);
    x1[c] = p2;
    x2[c] = _mm256_xor_si256(p0, call.r1_hik1);
    // Round 2, with x3 ^ k1 constant.
    const __m256i q0 = _mm256_mul_epu32(x0[c], m0), q2 = _mm256_mul_epu32(x2[c], m1);
    x0[c] = _mm256_xor_si256(_mm256_shuffle_epi32(q2, 0xF5), _mm256_xor_si256(x1[c], call.k0[2]));
    x2[c] = _mm256_xor_si256(_mm256_shuffle_epi32(q0, 0xF5), call.r2_x3k1);
    x1[c] = q2;
    x3[c] = q0;
  }
  for (int round = 3; round < kPhiloxRounds - 1; ++round) {
    const __m256i k0 = call.k0[round], k1 = call.k1[round];
    for (int c = 0; c < kSets; ++c) {
      const __m256i p0 = _mm256_mul_epu32(x0[c], m0), p2 = _mm256_mul_epu32(x2[c], m1);
      // x1 ^ k0 does not wait for the multiply.
      x0[c] = _mm256_xor_si256(_mm256_shuffle_epi32(p2, 0xF5), _mm256_xor_si256(x1[c], k0));
      x2[c] = _mm256_xor_si256(_mm256_shuffle_epi32(p0, 0xF5), _mm256_xor_si256(x3[c], k1));
      x1[c] = p2;
      x3[c] = p0;
    }
  }
  // The last round leaves words 0 and 1 (2 and 3) of a block in the low and
  // high half of one 64-bit lane: the product with its halves swapped, xored
  // with x1 ^ k0 (x3 ^ k1) in the low half only.
  const __m256i zero = _mm256_setzero_si256();
  const __m256i k0 = call.k0[kPhiloxRounds - 1], k1 = call.k1[kPhiloxRounds - 1];
  for (int c = 0; c < kSets; ++c) {
    const __m256i p0 = _mm256_mul_epu32(x0[c], m0), p2 = _mm256_mul_epu32(x2[c], m1);
    const __m256i w01 = _mm256_xor_si256(_mm256_shuffle_epi32(p2, 0xB1),
                                         _mm256_blend_epi32(_mm256_xor_si256(x1[c], k0), zero, 0xAA));
    const __m256i w23 = _mm256_xor_si256(_mm256_shuffle_epi32(p0, 0xB1),
                                         _mm256_blend_epi32(_mm256_xor_si256(x3[c], k1), zero, 0xAA));
    out[c] = FourBlocks{_mm256_unpacklo_epi64(w01, w23), _mm256_unpackhi_epi64(w01, w23)};
  }
}

// u01(r) - 1/2 = float(r >> 8) * 2^-24 - 1/2 of every word. The product is
// exact (a power of two), so one fused multiply-add rounds only the
// subtraction, which is exact too: the same floats as the scalar expression.
inline __m256 PhiloxDitherOf(__m256i words) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(words, 8)), _mm256_set1_ps(0x1p-24f),
                         _mm256_set1_ps(-0.5f));
}

// Walks coordinates [0, n) of a stream's dither starting at coordinate
// `first`, for kernels that use the dither right where it is made:
// vectors(i, u) gets the dither of coordinates first + i .. + 16 kSets as
// u[0 .. 2 kSets) (eight floats each, in order), for every such group that
// starts on a block boundary; plain(i, count, u) gets the rest (the 0..3
// coordinates before the first boundary and the fewer than 16 kSets after the
// last group) with their dither in memory.
template <int kSets, typename Vectors, typename Plain>
inline void WithDither(const RandomStream& stream, uint64_t first, std::size_t n, Vectors vectors, Plain plain) {
  WalkDitherGroups<16 * kSets, PhiloxCall>(
      &PhiloxDitherBlocks, stream, first, n,
      [&](const PhiloxCall& call, uint32_t block, std::size_t i) {
        FourBlocks sets[kSets];
        PhiloxSets<kSets>(call, block, sets);
        __m256 dither[2 * kSets];
        for (int k = 0; k < kSets; ++k) {
          dither[2 * k] = PhiloxDitherOf(sets[k].first);
          dither[2 * k + 1] = PhiloxDitherOf(sets[k].second);
        }
        vectors(i, static_cast<const __m256*>(dither));
      },
      plain);
}

}  // namespace fedrt::avx2

#endif  // FEDRT_CODECS_PHILOX_PHILOX_AVX2_H_
