// AVX2 Philox4x32-10: eight blocks per iteration, in structure-of-arrays form
// with one block per 64-bit lane (two registers per counter word). Only the
// low 32 bits of a lane are meaningful: _mm256_mul_epu32 reads just those,
// so the product's high half is moved down with one shuffle (port 5) and its
// low half is used as it is, garbage above it included; that garbage never
// reaches a multiplier input or an output word. The lanes hold blocks
// (j, j+2, j+1, j+3), which makes the transpose back to block order two
// in-lane unpacks and no cross-lane permute. Integer arithmetic only, so the
// words equal the scalar reference exactly. Tail (< 8 blocks): the scalar kernel.
#include <immintrin.h>

#include "philox/philox_kernels.h"

namespace fedrt::avx2 {
namespace {

// Four consecutive blocks' 16 words, in block order, as two registers.
struct FourBlocks {
  __m256i first;   // blocks j, j+1
  __m256i second;  // blocks j+2, j+3
};

// Runs the ten rounds on blocks first_block + {0, 2, 1, 3} (+ 4 for `b`).
template <typename Sink>
inline void EightBlocks(const __m256i* round_keys, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                        Sink sink) {
  const __m256i m0 = _mm256_set1_epi64x(kPhiloxM0);
  const __m256i m1 = _mm256_set1_epi64x(kPhiloxM1);
  const __m256i base = _mm256_set1_epi64x(first_block);
  __m256i a0 = _mm256_add_epi32(base, _mm256_setr_epi64x(0, 2, 1, 3));
  __m256i b0 = _mm256_add_epi32(base, _mm256_setr_epi64x(4, 6, 5, 7));
  __m256i a1 = _mm256_set1_epi32(static_cast<int>(c1)), b1 = a1;
  __m256i a2 = _mm256_set1_epi32(static_cast<int>(c2)), b2 = a2;
  __m256i a3 = _mm256_set1_epi32(static_cast<int>(c3)), b3 = a3;
  for (int round = 0; round < kPhiloxRounds; ++round) {
    const __m256i pa0 = _mm256_mul_epu32(a0, m0), pa2 = _mm256_mul_epu32(a2, m1);
    const __m256i pb0 = _mm256_mul_epu32(b0, m0), pb2 = _mm256_mul_epu32(b2, m1);
    const __m256i k0 = round_keys[2 * round], k1 = round_keys[2 * round + 1];
    a0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_shuffle_epi32(pa2, 0xF5), a1), k0);
    a2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_shuffle_epi32(pa0, 0xF5), a3), k1);
    b0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_shuffle_epi32(pb2, 0xF5), b1), k0);
    b2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_shuffle_epi32(pb0, 0xF5), b3), k1);
    a1 = pa2;
    a3 = pa0;
    b1 = pb2;
    b3 = pb0;
  }
  const auto order = [](__m256i x0, __m256i x1, __m256i x2, __m256i x3) {
    const __m256i w01 = _mm256_blend_epi32(x0, _mm256_slli_epi64(x1, 32), 0xAA);
    const __m256i w23 = _mm256_blend_epi32(x2, _mm256_slli_epi64(x3, 32), 0xAA);
    return FourBlocks{_mm256_unpacklo_epi64(w01, w23), _mm256_unpackhi_epi64(w01, w23)};
  };
  sink(order(a0, a1, a2, a3), order(b0, b1, b2, b3));
}

template <typename Sink>
inline std::size_t ForEightBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                                  std::size_t blocks, Sink sink) {
  __m256i round_keys[2 * kPhiloxRounds];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < kPhiloxRounds; ++round) {
    round_keys[2 * round] = _mm256_set1_epi32(static_cast<int>(k0));
    round_keys[2 * round + 1] = _mm256_set1_epi32(static_cast<int>(k1));
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  std::size_t j = 0;
  for (; j + 8 <= blocks; j += 8) {
    EightBlocks(round_keys, static_cast<uint32_t>(first_block + j), c1, c2, c3,
                [&](FourBlocks lo, FourBlocks hi) { sink(j, lo, hi); });
  }
  return j;
}

// u01(r) - 1/2 = float(r >> 8) * 2^-24 - 1/2, exact in every step.
inline __m256 Dither(__m256i words) {
  const __m256 u01 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(words, 8)), _mm256_set1_ps(0x1p-24f));
  return _mm256_sub_ps(u01, _mm256_set1_ps(0.5f));
}

}  // namespace

void PhiloxBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                  std::size_t blocks, uint32_t* out) {
  const std::size_t j =
      ForEightBlocks(key, first_block, c1, c2, c3, blocks, [out](std::size_t at, FourBlocks lo, FourBlocks hi) {
        __m256i* dst = reinterpret_cast<__m256i*>(out + 4 * at);
        _mm256_storeu_si256(dst + 0, lo.first);
        _mm256_storeu_si256(dst + 1, lo.second);
        _mm256_storeu_si256(dst + 2, hi.first);
        _mm256_storeu_si256(dst + 3, hi.second);
      });
  scalar::PhiloxBlocks(key, static_cast<uint32_t>(first_block + j), c1, c2, c3, blocks - j, out + 4 * j);
}

void PhiloxDitherBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                        std::size_t blocks, float* out) {
  const std::size_t j =
      ForEightBlocks(key, first_block, c1, c2, c3, blocks, [out](std::size_t at, FourBlocks lo, FourBlocks hi) {
        float* dst = out + 4 * at;
        _mm256_storeu_ps(dst + 0, Dither(lo.first));
        _mm256_storeu_ps(dst + 8, Dither(lo.second));
        _mm256_storeu_ps(dst + 16, Dither(hi.first));
        _mm256_storeu_ps(dst + 24, Dither(hi.second));
      });
  scalar::PhiloxDitherBlocks(key, static_cast<uint32_t>(first_block + j), c1, c2, c3, blocks - j, out + 4 * j);
}

}  // namespace fedrt::avx2
