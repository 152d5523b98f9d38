// Scalar reference Philox4x32-10 (the specification's round function, as written).
#include "philox/philox_kernels.h"

namespace fedrt {

PhiloxCounter Philox4x32(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < kPhiloxRounds; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k = {k[0] + kPhiloxW0, k[1] + kPhiloxW1};
  }
  return c;
}

namespace scalar {

void PhiloxBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                  std::size_t blocks, uint32_t* out) {
  for (std::size_t j = 0; j < blocks; ++j) {
    // The block index wraps modulo 2^32 like the counter word it is.
    const PhiloxCounter words =
        Philox4x32({static_cast<uint32_t>(first_block + j), c1, c2, c3}, key);
    out[4 * j + 0] = words[0];
    out[4 * j + 1] = words[1];
    out[4 * j + 2] = words[2];
    out[4 * j + 3] = words[3];
  }
}

void PhiloxDitherBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                        std::size_t blocks, float* out) {
  for (std::size_t j = 0; j < blocks; ++j) {
    const PhiloxCounter words =
        Philox4x32({static_cast<uint32_t>(first_block + j), c1, c2, c3}, key);
    for (int k = 0; k < 4; ++k) out[4 * j + static_cast<std::size_t>(k)] = UniformFromWord(words[k]) - 0.5f;
  }
}

}  // namespace scalar
}  // namespace fedrt
