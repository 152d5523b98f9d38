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

// A stream's key and the counter words after the block index (specification
// section 1; philox.h): block b of the stream is philox({b, c1, c2, c3}, key).
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

// Philox constants (codec specification, section 1).
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
inline constexpr int kPhiloxRounds = 10;

}  // namespace fedrt

#endif  // FEDRT_CODECS_PHILOX_KERNELS_H_
