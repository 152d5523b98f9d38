// Philox kernel family: one block function per ISA, all producing the same
// words. This file is the family's list: dispatch (philox.cc), the tests and
// the benchmarks all go through PhiloxBlocksFor().
//
// PhiloxBlocks computes `blocks` consecutive Philox blocks whose counters are
// {first_block + j, c1, c2, c3} and writes their 4 words each, block after
// block, to out[0 .. 4 * blocks). PhiloxDitherBlocks writes the dither value
// u01(r) - 1/2 of every word instead (philox.h), computed exactly as the
// scalar float expression. Any `blocks` (tails handled inside), any alignment
// of `out`.
#ifndef FEDRT_CODECS_PHILOX_KERNELS_H_
#define FEDRT_CODECS_PHILOX_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "fedrt/codecs/philox.h"
#include "fedrt/platform/cpu.h"

namespace fedrt {

using PhiloxBlocksFn = void (*)(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2,
                                uint32_t c3, std::size_t blocks, uint32_t* out);
using PhiloxDitherBlocksFn = void (*)(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2,
                                      uint32_t c3, std::size_t blocks, float* out);

#define FEDRT_PHILOX_KERNEL_DECLS                                                                   \
  void PhiloxBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,    \
                    std::size_t blocks, uint32_t* out);                                            \
  void PhiloxDitherBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3, \
                          std::size_t blocks, float* out);
namespace scalar {
FEDRT_PHILOX_KERNEL_DECLS
}
namespace avx2 {
FEDRT_PHILOX_KERNEL_DECLS
}
namespace neon {
FEDRT_PHILOX_KERNEL_DECLS
}
namespace avx512 {
FEDRT_PHILOX_KERNEL_DECLS
}
#undef FEDRT_PHILOX_KERNEL_DECLS

// The variants for `isa` (which must be available, see IsaAvailable()).
PhiloxBlocksFn PhiloxBlocksFor(Isa isa);
PhiloxDitherBlocksFn PhiloxDitherBlocksFor(Isa isa);

// A stream's key and the counter words after the block index (philox.h):
// block b of the stream is philox({b, c1, c2, c3}, key).
struct PhiloxStreamCounter {
  PhiloxKey key;
  uint32_t c1, c2, c3;
};
inline PhiloxStreamCounter StreamCounter(const RandomStream& s) {
  return {{static_cast<uint32_t>(s.seed), static_cast<uint32_t>(s.seed >> 32)},
          s.tensor_id,
          s.round,
          (s.sender_id << 8) | static_cast<uint32_t>(s.purpose)};
}

// PhiloxDither() computed by the given block kernel (for kernels of other
// families that fuse the dither into their loop, and their tails).
void PhiloxDitherWith(PhiloxDitherBlocksFn blocks_fn, const RandomStream& stream, uint64_t first,
                      std::size_t count, float* out);

// Philox constants (codecs/README.md, "Randomness").
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
inline constexpr int kPhiloxRounds = 10;

// What every block of one call of a vector kernel shares, as vectors made by
// Lanes::Splat(word) (a class, since vector types lose their attributes as
// template arguments): the round keys, and the parts of rounds 0-2 that depend
// only on the counter words c1, c2, c3 (all blocks of a call differ only in
// counter word 0), folded into constants. With x = {b, c1, c2, c3} and
// p = x0 * M0, P = x2 * M1 in each round:
//   round 0: P = c2 M1 is constant, so x0 = hi(P) ^ c1 ^ k0 and x1 = lo(P)
//            are; p = b M0 gives x2 = hi(p) ^ (c3 ^ k1), x3 = p.
//   round 1: p = x0 M0 is constant: x2 = x3 ^ (hi(p) ^ k1), x3 = lo(p);
//            P = x2 M1 gives x0 = hi(P) ^ (x1 ^ k0), x1 = P.
//   round 2: x2 = hi(p) ^ (x3 ^ k1) with x3 ^ k1 constant.
template <typename Lanes>
struct PhiloxFoldedCall {
  using V = decltype(Lanes::Splat(0u));
  V k0[kPhiloxRounds], k1[kPhiloxRounds];
  V r0_c3k1;  // c3 ^ k1 (round 0)
  V r1_hik1;  // hi(x0 M0) ^ k1 (round 1)
  V r1_x1k0;  // x1 ^ k0 (round 1)
  V r2_x3k1;  // x3 ^ k1 (round 2)

  PhiloxFoldedCall(PhiloxKey key, uint32_t c1_word, uint32_t c2_word, uint32_t c3_word) {
    uint32_t k0s[kPhiloxRounds], k1s[kPhiloxRounds];
    uint32_t a = key[0], b = key[1];
    for (int round = 0; round < kPhiloxRounds; ++round) {
      k0s[round] = a;
      k1s[round] = b;
      k0[round] = Lanes::Splat(a);
      k1[round] = Lanes::Splat(b);
      a += kPhiloxW0;
      b += kPhiloxW1;
    }
    const uint64_t big_p0 = uint64_t{kPhiloxM1} * c2_word;
    const uint32_t x0 = static_cast<uint32_t>(big_p0 >> 32) ^ c1_word ^ k0s[0];
    const uint32_t x1 = static_cast<uint32_t>(big_p0);
    const uint64_t p1 = uint64_t{kPhiloxM0} * x0;
    r0_c3k1 = Lanes::Splat(c3_word ^ k1s[0]);
    r1_hik1 = Lanes::Splat(static_cast<uint32_t>(p1 >> 32) ^ k1s[1]);
    r1_x1k0 = Lanes::Splat(x1 ^ k0s[1]);
    r2_x3k1 = Lanes::Splat(static_cast<uint32_t>(p1) ^ k1s[2]);
  }
};

// The loop of a vector block kernel: sets(std::integral_constant<int, K>,
// block, out) computes K sets of kPerSet consecutive blocks from `block`
// (modulo 2^32) into out[0 .. K); every whole set goes to sink(at, set), `at`
// counted in blocks from first_block, and the last partial set (if any) to
// tail(at, set, count). kSets sets per step, then one at a time.
template <int kSets, std::size_t kPerSet, typename Set, typename Sets, typename Sink, typename Tail>
inline void ForBlockSets(uint32_t first_block, std::size_t blocks, Sets sets, Sink sink, Tail tail) {
  std::size_t j = 0;
  for (; j + kPerSet * kSets <= blocks; j += kPerSet * kSets) {
    Set out[kSets];
    sets(std::integral_constant<int, kSets>(), static_cast<uint32_t>(first_block + j), out);
    for (int c = 0; c < kSets; ++c) sink(j + kPerSet * static_cast<std::size_t>(c), out[c]);
  }
  for (; j < blocks; j += kPerSet) {
    Set one;
    sets(std::integral_constant<int, 1>(), static_cast<uint32_t>(first_block + j), &one);
    if (j + kPerSet <= blocks) {
      sink(j, one);
    } else {
      tail(j, one, blocks - j);
    }
  }
}

// Walks coordinates [0, n) of a stream's dither starting at coordinate
// `first`, for kernels that make the dither in registers kGroup coordinates
// at a time: group(call, block, i) handles coordinates first + i .. + kGroup
// (from Philox block `block`, modulo 2^32), for every such group that starts
// on a block boundary, with `call` a Call(key, c1, c2, c3) made once;
// plain(i, count, u) gets the rest (the 0..3 coordinates before the first
// boundary and the fewer than kGroup after the last group) with their dither
// in memory, made by blocks_fn.
template <std::size_t kGroup, typename Call, typename Group, typename Plain>
inline void WalkDitherGroups(PhiloxDitherBlocksFn blocks_fn, const RandomStream& stream, uint64_t first,
                             std::size_t n, Group group, Plain plain) {
  float u[kGroup];
  std::size_t i = static_cast<std::size_t>((4 - first % 4) % 4);
  if (i > n) i = n;
  if (i != 0) {
    PhiloxDitherWith(blocks_fn, stream, first, i, u);
    plain(std::size_t{0}, i, static_cast<const float*>(u));
  }
  const PhiloxStreamCounter c = StreamCounter(stream);
  const Call call(c.key, c.c1, c.c2, c.c3);
  for (; i + kGroup <= n; i += kGroup) group(call, static_cast<uint32_t>((first + i) / 4), i);
  if (i < n) {
    PhiloxDitherWith(blocks_fn, stream, first + i, n - i, u);
    plain(i, n - i, static_cast<const float*>(u));
  }
}

}  // namespace fedrt

#endif  // FEDRT_CODECS_PHILOX_KERNELS_H_
