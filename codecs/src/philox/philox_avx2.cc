// AVX2 Philox4x32-10: twelve blocks per iteration, in structure-of-arrays form
// with one block per 64-bit lane (three registers per counter word). Only the
// low 32 bits of a lane are meaningful: _mm256_mul_epu32 reads just those,
// so the product's high half is moved down with one shuffle (port 5) and its
// low half is used as it is, garbage above it included; that garbage never
// reaches a multiplier input or an output word. The lanes hold blocks
// (j, j+2, j+1, j+3), which makes the transpose back to block order two
// in-lane unpacks and no cross-lane permute. Integer arithmetic only, so the
// words equal the scalar reference exactly. Tail (< 12 blocks): the scalar kernel.
#include <immintrin.h>

#include "philox/philox_kernels.h"

namespace fedrt::avx2 {
namespace {

// Four consecutive blocks' 16 words, in block order, as two registers.
struct FourBlocks {
  __m256i first;   // blocks j, j+1
  __m256i second;  // blocks j+2, j+3
};

// Blocks per iteration: three independent sets of four. A round is a chain of
// multiply (5 cycles), shuffle and xor; three sets give the multiply ports
// enough independent work to cover that latency, and their 12 state
// registers still fit the 16 ymm registers with the two multipliers.
constexpr int kSets = 3;
constexpr std::size_t kBlocksPerStep = 4 * kSets;

// Runs the ten rounds on blocks first_block + 4c + {0, 2, 1, 3} of set c and
// hands set c's words to sink(c, words).
template <typename Sink>
inline void TwelveBlocks(const __m256i* round_keys, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                         Sink sink) {
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
    const __m256i k0 = round_keys[2 * round], k1 = round_keys[2 * round + 1];
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
    sink(c, FourBlocks{_mm256_unpacklo_epi64(w01, w23), _mm256_unpackhi_epi64(w01, w23)});
  }
}

template <typename Sink>
inline std::size_t ForBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
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
  for (; j + kBlocksPerStep <= blocks; j += kBlocksPerStep) {
    TwelveBlocks(round_keys, static_cast<uint32_t>(first_block + j), c1, c2, c3,
                 [&](int c, FourBlocks four) { sink(j + 4 * static_cast<std::size_t>(c), four); });
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
  const std::size_t j = ForBlocks(key, first_block, c1, c2, c3, blocks, [out](std::size_t at, FourBlocks four) {
    __m256i* dst = reinterpret_cast<__m256i*>(out + 4 * at);
    _mm256_storeu_si256(dst + 0, four.first);
    _mm256_storeu_si256(dst + 1, four.second);
  });
  scalar::PhiloxBlocks(key, static_cast<uint32_t>(first_block + j), c1, c2, c3, blocks - j, out + 4 * j);
}

void PhiloxDitherBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                        std::size_t blocks, float* out) {
  const std::size_t j = ForBlocks(key, first_block, c1, c2, c3, blocks, [out](std::size_t at, FourBlocks four) {
    float* dst = out + 4 * at;
    _mm256_storeu_ps(dst + 0, Dither(four.first));
    _mm256_storeu_ps(dst + 8, Dither(four.second));
  });
  scalar::PhiloxDitherBlocks(key, static_cast<uint32_t>(first_block + j), c1, c2, c3, blocks - j, out + 4 * j);
}

}  // namespace fedrt::avx2
