// AVX-512 Philox4x32-10 core (AVX-512F/BW/DQ/VL), shared by the AVX-512
// kernels that draw Philox words in registers. Include from AVX-512
// translation units only.
//
// The AVX2 core (philox_avx2.h) widened to 512 bits: one block per 64-bit
// lane, eight blocks per set, the same folding of one call's constant work
// (PhiloxCall). What AVX-512 adds: vpternlogd computes the three-way xor
// hi(p) ^ x ^ k of a round in one instruction, so a round of eight blocks is
// two multiplies, two shuffles and two ternary logic ops (AVX2: eight
// operations per four blocks), and 32 registers hold four independent sets.
// A set's lanes hold blocks (j, j+4, j+1, j+5, j+2, j+6, j+3, j+7), which
// makes the transpose back to block order two in-lane unpacks. Integer
// arithmetic only, so the words equal the scalar reference.
#ifndef FEDRT_CODECS_PHILOX_PHILOX_AVX512_H_
#define FEDRT_CODECS_PHILOX_PHILOX_AVX512_H_

// GCC 12 reports its own AVX-512 intrinsics (their undefined pass-through
// operand) as (maybe-)uninitialized where they are inlined; the warning is
// located in the intrinsic headers, so it must be off before they are read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "philox/philox_kernels.h"

namespace fedrt::avx512 {

// Eight consecutive blocks' 32 words, in block order, as two registers.
struct EightBlocks {
  __m512i first;   // blocks j .. j+3
  __m512i second;  // blocks j+4 .. j+7
};

// a ^ b ^ c in one instruction.
inline __m512i Xor3(__m512i a, __m512i b, __m512i c) { return _mm512_ternarylogic_epi32(a, b, c, 0x96); }

// The high half of each 64-bit product moved to the low half (the high half
// is left as garbage that no multiply reads).
inline __m512i High(__m512i product) { return _mm512_shuffle_epi32(product, _MM_PERM_DDBB); }

struct Lanes512 {
  static __m512i Splat(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
};

// What every block of one call shares, folded (philox_kernels.h).
using PhiloxCall = PhiloxFoldedCall<Lanes512>;

// Blocks first_block + 8c .. first_block + 8c + 7 (modulo 2^32) of the call's
// counter {block, c1, c2, c3}, for c < kSets, into out[c].
template <int kSets>
inline void PhiloxSets(const PhiloxCall& call, uint32_t first_block, EightBlocks* out) {
  const __m512i m0 = _mm512_set1_epi64(kPhiloxM0);
  const __m512i m1 = _mm512_set1_epi64(kPhiloxM1);
  const __m512i base = _mm512_add_epi32(_mm512_set1_epi64(first_block), _mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7));
  __m512i x0[kSets], x1[kSets], x2[kSets], x3[kSets];
  for (int c = 0; c < kSets; ++c) {
    // Rounds 0 and 1 (PhiloxCall).
    const __m512i p0 = _mm512_mul_epu32(_mm512_add_epi32(base, _mm512_set1_epi64(8 * c)), m0);
    const __m512i x2_r0 = _mm512_xor_si512(High(p0), call.r0_c3k1);
    const __m512i p2 = _mm512_mul_epu32(x2_r0, m1);
    x0[c] = _mm512_xor_si512(High(p2), call.r1_x1k0);
    x1[c] = p2;
    x2[c] = _mm512_xor_si512(p0, call.r1_hik1);
    // Round 2, with x3 ^ k1 constant.
    const __m512i q0 = _mm512_mul_epu32(x0[c], m0), q2 = _mm512_mul_epu32(x2[c], m1);
    x0[c] = Xor3(High(q2), x1[c], call.k0[2]);
    x2[c] = _mm512_xor_si512(High(q0), call.r2_x3k1);
    x1[c] = q2;
    x3[c] = q0;
  }
  for (int round = 3; round < kPhiloxRounds - 1; ++round) {
    const __m512i k0 = call.k0[round], k1 = call.k1[round];
    for (int c = 0; c < kSets; ++c) {
      const __m512i p0 = _mm512_mul_epu32(x0[c], m0), p2 = _mm512_mul_epu32(x2[c], m1);
      x0[c] = Xor3(High(p2), x1[c], k0);
      x2[c] = Xor3(High(p0), x3[c], k1);
      x1[c] = p2;
      x3[c] = p0;
    }
  }
  // The last round leaves words 0 and 1 (2 and 3) of a block in the low and
  // high half of one 64-bit lane: the product with its halves swapped, xored
  // with x1 ^ k0 (x3 ^ k1) in the low half only (mask of the even words).
  const __mmask16 low_halves = 0x5555;
  const __m512i k0 = call.k0[kPhiloxRounds - 1], k1 = call.k1[kPhiloxRounds - 1];
  for (int c = 0; c < kSets; ++c) {
    const __m512i p0 = _mm512_mul_epu32(x0[c], m0), p2 = _mm512_mul_epu32(x2[c], m1);
    const __m512i w01 =
        _mm512_mask_ternarylogic_epi32(_mm512_shuffle_epi32(p2, _MM_PERM_CDAB), low_halves, x1[c], k0, 0x96);
    const __m512i w23 =
        _mm512_mask_ternarylogic_epi32(_mm512_shuffle_epi32(p0, _MM_PERM_CDAB), low_halves, x3[c], k1, 0x96);
    out[c] = EightBlocks{_mm512_unpacklo_epi64(w01, w23), _mm512_unpackhi_epi64(w01, w23)};
  }
}

// u01(r) - 1/2 of every word, exactly as the scalar expression (see
// PhiloxDitherOf in philox_avx2.h).
inline __m512 PhiloxDitherOf(__m512i words) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(words, 8)), _mm512_set1_ps(0x1p-24f),
                         _mm512_set1_ps(-0.5f));
}

// As avx2::WithDither, sixteen floats per vector: vectors(i, u) gets the
// dither of coordinates first + i .. + 32 kSets as u[0 .. 2 kSets), for every
// such group that starts on a block boundary; plain(i, count, u) gets the
// rest with their dither in memory.
template <int kSets, typename Vectors, typename Plain>
inline void WithDither(const RandomStream& stream, uint64_t first, std::size_t n, Vectors vectors, Plain plain) {
  WalkDitherGroups<32 * kSets, PhiloxCall>(
      &PhiloxDitherBlocks, stream, first, n,
      [&](const PhiloxCall& call, uint32_t block, std::size_t i) {
        EightBlocks sets[kSets];
        PhiloxSets<kSets>(call, block, sets);
        __m512 dither[2 * kSets];
        for (int k = 0; k < kSets; ++k) {
          dither[2 * k] = PhiloxDitherOf(sets[k].first);
          dither[2 * k + 1] = PhiloxDitherOf(sets[k].second);
        }
        vectors(i, static_cast<const __m512*>(dither));
      },
      plain);
}

}  // namespace fedrt::avx512

#endif  // FEDRT_CODECS_PHILOX_PHILOX_AVX512_H_
