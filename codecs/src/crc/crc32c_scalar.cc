// Scalar CRC32C in three table sizes, one chosen at build time
// (FEDRT_CRC32C, codecs/CMakeLists.txt) for scalar::Crc32cUpdate; all three
// give the same value for the same bytes (tests/codecs/crc32c_test.cc):
//   slice8  slicing-by-8: eight 256-entry tables (8 KiB), eight lookups per
//           eight input bytes and no per-bit work; the default
//   byte    one 256-entry table (1 KiB), one lookup per byte
//   nibble  one 16-entry table (64 bytes), two lookups per byte: for
//           microcontrollers, whose payloads are a few KiB a round and whose
//           flash is counted in KiB
// The tables are built at compile time; with -ffunction-sections and
// --gc-sections an image keeps only the chosen variant and its table.
#include <cstring>

#include "crc/crc32c_kernels.h"
#include "fedrt/platform/config.h"

namespace fedrt {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, reflected

// Entry i: the register after shifting the kBits low bits of i through the
// polynomial (kBits = 8: the classic byte table; 4: nibbles).
template <int kBits>
struct ShiftTable {
  uint32_t t[1u << kBits];
  constexpr ShiftTable() : t() {
    for (uint32_t i = 0; i < (1u << kBits); ++i) {
      uint32_t crc = i;
      for (int bit = 0; bit < kBits; ++bit) crc = (crc >> 1) ^ (kPolynomial & (0u - (crc & 1u)));
      t[i] = crc;
    }
  }
};
constexpr ShiftTable<8> kByteTable;
constexpr ShiftTable<4> kNibbleTable;

// Slicing-by-8: t[k][i] is byte i followed by k zero bytes.
struct Crc32cTables {
  uint32_t t[8][256];
  constexpr Crc32cTables() : t() {
    const ShiftTable<8> bytes;
    for (uint32_t i = 0; i < 256; ++i) t[0][i] = bytes.t[i];
    for (uint32_t i = 0; i < 256; ++i) {
      for (int k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xffu];
    }
  }
};
constexpr Crc32cTables kTables;

}  // namespace

namespace scalar {

uint32_t Crc32cUpdateSlice8(uint32_t crc, const uint8_t* data, std::size_t size) {
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

uint32_t Crc32cUpdateByte(uint32_t crc, const uint8_t* data, std::size_t size) {
  const auto& t = kByteTable.t;
  while (size-- > 0) crc = (crc >> 8) ^ t[(crc ^ *data++) & 0xffu];
  return crc;
}

uint32_t Crc32cUpdateNibble(uint32_t crc, const uint8_t* data, std::size_t size) {
  const auto& t = kNibbleTable.t;
  while (size-- > 0) {
    crc ^= *data++;
    crc = (crc >> 4) ^ t[crc & 0xfu];
    crc = (crc >> 4) ^ t[crc & 0xfu];
  }
  return crc;
}

uint32_t Crc32cUpdate(uint32_t crc, const uint8_t* data, std::size_t size) {
#if FEDRT_CRC32C_NIBBLE
  return Crc32cUpdateNibble(crc, data, size);
#elif FEDRT_CRC32C_BYTE
  return Crc32cUpdateByte(crc, data, size);
#else
  return Crc32cUpdateSlice8(crc, data, size);
#endif
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
