// Scalar CRC32C, slicing-by-8: eight 256-entry tables built at compile time,
// so eight input bytes cost eight lookups and no per-bit work.
#include <cstring>

#include "crc/crc32c_kernels.h"
#include "fedrt/platform/config.h"

namespace fedrt {
namespace {

struct Crc32cTables {
  uint32_t t[8][256];
  constexpr Crc32cTables() : t() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
      t[0][i] = crc;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xffu];
    }
  }
};
constexpr Crc32cTables kTables;

}  // namespace

namespace scalar {

uint32_t Crc32cUpdate(uint32_t crc, const uint8_t* data, std::size_t size) {
  const auto& t = kTables.t;
  while (size >= 8) {
    // Byte-wise loads keep this independent of host endianness and alignment.
    const uint32_t lo = crc ^ (static_cast<uint32_t>(data[0]) | (static_cast<uint32_t>(data[1]) << 8) |
                               (static_cast<uint32_t>(data[2]) << 16) | (static_cast<uint32_t>(data[3]) << 24));
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
          t[3][data[4]] ^ t[2][data[5]] ^ t[1][data[6]] ^ t[0][data[7]];
    data += 8;
    size -= 8;
  }
  while (size-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *data++) & 0xffu];
  return crc;
}

}  // namespace scalar

Crc32cUpdateFn Crc32cUpdateFor(Isa requested) {
  const Isa isa = Avx2ForAvx512(requested);  // no AVX-512 variants: AVX2
#if FEDRT_HAVE_AVX2_KERNELS
  if (isa == Isa::kAvx2) return &avx2::Crc32cUpdate;
#endif
  (void)isa;
  return &scalar::Crc32cUpdate;
}

}  // namespace fedrt
