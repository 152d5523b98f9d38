// Interleaved rANS, scalar reference (rans_kernels.h): the specification the
// vector variants are tested against. Symbol i uses state i % kRansLanes.
#include <cstring>

#include "symbols/rans_kernels.h"

namespace fedrt::scalar {

// Four interleaved tables, so runs of one symbol (the common case after
// quantization) do not serialize on one counter.
void RansHistogram(const uint8_t* symbols, std::size_t count, uint32_t /*alphabet*/, uint64_t* histogram) {
  uint32_t tables[4][256] = {};
  for (int s = 0; s < 256; ++s) histogram[s] = 0;
  std::size_t i = 0;
  while (i < count) {
    // Flush before a 32-bit counter could overflow.
    const std::size_t end = count - i > (std::size_t{1} << 30) ? i + (std::size_t{1} << 30) : count;
    for (; i + 4 <= end; i += 4) {
      ++tables[0][symbols[i]];
      ++tables[1][symbols[i + 1]];
      ++tables[2][symbols[i + 2]];
      ++tables[3][symbols[i + 3]];
    }
    for (; i < end; ++i) ++tables[0][symbols[i]];
    for (int s = 0; s < 256; ++s) {
      histogram[s] += uint64_t{tables[0][s]} + tables[1][s] + tables[2][s] + tables[3][s];
      tables[0][s] = tables[1][s] = tables[2][s] = tables[3][s] = 0;
    }
  }
}

uint8_t* RansEncodeLanes(const uint8_t* symbols, std::size_t count, uint32_t /*alphabet*/,
                         const RansEncodeTable& table, uint8_t* floor, uint8_t* end, uint32_t* states) {
  uint8_t* ptr = end;
  for (std::size_t i = count; i-- > 0;) {
    const uint32_t s = symbols[i];
    uint32_t x = states[i % kRansLanes];
    if (x >= table.x_max[s]) {  // once is enough: x >> 16 < 2^15 <= x_max
      if (ptr - floor < 2) return nullptr;
      ptr -= 2;
      StoreRansWord(ptr, x);
      x >>= 16;
    }
    const uint32_t q =
        static_cast<uint32_t>((static_cast<uint64_t>(x) * table.reciprocal[s]) >> 32) >> table.shift[s];
    states[i % kRansLanes] = x + table.bias[s] + q * table.complement[s];
  }
  return ptr;
}

std::size_t RansDecodeLanes(const uint8_t* stream, std::size_t size, std::size_t* at, std::size_t count,
                            const RansDecodeTable& table, uint32_t* states, uint8_t* symbols) {
  const int bits = table.scale_bits;
  const uint32_t mask = (1u << bits) - 1;
  std::size_t pos = *at;
  for (std::size_t i = 0; i < count; ++i) {
    uint32_t x = states[i % kRansLanes];
    const uint32_t slot = x & mask;
    const uint32_t s = table.slot_symbol[slot];
    symbols[i] = static_cast<uint8_t>(s);
    x = table.freq[s] * (x >> bits) + slot - table.start[s];
    if (x < kRansLow) {  // once is enough: x >= 2^(15 - L) >= 8 here
      if (size - pos < 2) {
        *at = pos;
        return i;
      }
      x = (x << 16) | LoadRansWord(stream + pos);
      pos += 2;
    }
    states[i % kRansLanes] = x;
  }
  *at = pos;
  return count;
}

}  // namespace fedrt::scalar
