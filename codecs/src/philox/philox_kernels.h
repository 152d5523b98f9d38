// Philox kernel family: one block function per ISA, all producing the same
// words. This file is the family's list: dispatch (philox.cc), the tests and
// the benchmarks all go through PhiloxBlocksFor().
//
// PhiloxBlocks computes `blocks` consecutive Philox blocks whose counters are
// {first_block + j, c1, c2, c3} and writes their 4 words each, block after
// block, to out[0 .. 4 * blocks). Any `blocks` (tails handled inside), any
// alignment of `out`.
#ifndef FEDRT_CODECS_PHILOX_KERNELS_H_
#define FEDRT_CODECS_PHILOX_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/codecs/philox.h"
#include "fedrt/platform/cpu.h"

namespace fedrt {

using PhiloxBlocksFn = void (*)(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2,
                                uint32_t c3, std::size_t blocks, uint32_t* out);

namespace scalar {
void PhiloxBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                  std::size_t blocks, uint32_t* out);
}
namespace avx2 {
void PhiloxBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                  std::size_t blocks, uint32_t* out);
}
namespace neon {
void PhiloxBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                  std::size_t blocks, uint32_t* out);
}

// The variant for `isa` (which must be available, see IsaAvailable()).
PhiloxBlocksFn PhiloxBlocksFor(Isa isa);

// Philox constants (codec specification, section 1).
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
inline constexpr int kPhiloxRounds = 10;

}  // namespace fedrt

#endif  // FEDRT_CODECS_PHILOX_KERNELS_H_
