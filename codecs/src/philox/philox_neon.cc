// NEON Philox4x32-10 (AArch64 and ARMv7): four blocks per iteration in
// structure-of-arrays form; vst4q_u32 interleaves them back to block order.
// vmull_u32 gives the 64-bit products; only instructions present on ARMv7
// NEON are used, so one file serves both. Integer arithmetic only: the words
// equal the scalar reference exactly. Dither: u01(r) - 1/2 with vcvtq_f32_u32
// of r >> 8, a multiply by 2^-24 and a subtraction, all exact with normal or
// zero results (|value| >= 2^-24), so ARMv7's flush-to-zero cannot change
// them. Tail (< 4 blocks): the scalar kernel.
#include <arm_neon.h>

#include "philox/philox_kernels.h"

namespace fedrt::neon {
namespace {

inline void MulHiLo(uint32x4_t a, uint32x2_t m, uint32x4_t* hi, uint32x4_t* lo) {
  const uint64x2_t p_low = vmull_u32(vget_low_u32(a), m);
  const uint64x2_t p_high = vmull_u32(vget_high_u32(a), m);
  *hi = vcombine_u32(vshrn_n_u64(p_low, 32), vshrn_n_u64(p_high, 32));
  *lo = vcombine_u32(vmovn_u64(p_low), vmovn_u64(p_high));
}

// Runs the rounds on blocks j..j+3 for every j, hands the four words in
// structure-of-arrays form (word k of the four blocks in x.val[k]) to `sink`.
template <typename Sink>
std::size_t ForFourBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                          std::size_t blocks, Sink sink) {
  const uint32x2_t m0 = vdup_n_u32(kPhiloxM0);
  const uint32x2_t m1 = vdup_n_u32(kPhiloxM1);
  const uint32_t offsets[4] = {0, 1, 2, 3};
  const uint32x4_t lane_offsets = vld1q_u32(offsets);
  std::size_t j = 0;
  for (; j + 4 <= blocks; j += 4) {
    uint32x4x4_t x;
    x.val[0] = vaddq_u32(vdupq_n_u32(static_cast<uint32_t>(first_block + j)), lane_offsets);
    x.val[1] = vdupq_n_u32(c1);
    x.val[2] = vdupq_n_u32(c2);
    x.val[3] = vdupq_n_u32(c3);
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < kPhiloxRounds; ++round) {
      uint32x4_t hi0, lo0, hi1, lo1;
      MulHiLo(x.val[0], m0, &hi0, &lo0);
      MulHiLo(x.val[2], m1, &hi1, &lo1);
      x.val[0] = veorq_u32(veorq_u32(hi1, x.val[1]), vdupq_n_u32(k0));
      x.val[2] = veorq_u32(veorq_u32(hi0, x.val[3]), vdupq_n_u32(k1));
      x.val[1] = lo1;
      x.val[3] = lo0;
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    sink(j, x);
  }
  return j;
}

inline float32x4_t Dither(uint32x4_t words) {
  const float32x4_t u01 = vmulq_f32(vcvtq_f32_u32(vshrq_n_u32(words, 8)), vdupq_n_f32(0x1p-24f));
  return vsubq_f32(u01, vdupq_n_f32(0.5f));
}

}  // namespace

void PhiloxBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                  std::size_t blocks, uint32_t* out) {
  const std::size_t j = ForFourBlocks(key, first_block, c1, c2, c3, blocks,
                                      [out](std::size_t at, const uint32x4x4_t& x) { vst4q_u32(out + 4 * at, x); });
  scalar::PhiloxBlocks(key, static_cast<uint32_t>(first_block + j), c1, c2, c3, blocks - j, out + 4 * j);
}

void PhiloxDitherBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                        std::size_t blocks, float* out) {
  const std::size_t j = ForFourBlocks(key, first_block, c1, c2, c3, blocks, [out](std::size_t at, const uint32x4x4_t& x) {
    float32x4x4_t u;
    for (int k = 0; k < 4; ++k) u.val[k] = Dither(x.val[k]);
    vst4q_f32(out + 4 * at, u);
  });
  scalar::PhiloxDitherBlocks(key, static_cast<uint32_t>(first_block + j), c1, c2, c3, blocks - j, out + 4 * j);
}

}  // namespace fedrt::neon
