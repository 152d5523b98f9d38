// Fixed-length symbol packing kernels (the `ec=pack` coding of
// symbol_streams.h), one variant per ISA, all writing the same bytes. This
// file is the family's list: symbol_pack.cc, the tests and the benchmarks go
// through PackKernelsFor().
//
//   pack    symbols[0..count) (each < alphabet) -> PackedStreamSize(count)
//           bytes: ceil(log2(alphabet)) bits per symbol LSB first, or 5 trits
//           per byte for alphabet 3; zero padding. Writes nothing else.
//   unpack  the inverse for exactly `count` symbols, reading exactly
//           PackedStreamSize(count) bytes, WITHOUT any check; returns the
//           largest value it produced. A stream is valid iff that value is
//           < alphabet and the padding is zero (the caller checks the padding):
//           base-3 bytes >= 243 give a last trit >= 3 (it is byte / 81, not
//           reduced), so they fail the same test.
// Any count, any alignment; 2 <= alphabet <= 256 (alphabet 1 has no stream).
#ifndef FEDRT_CODECS_SYMBOLS_PACK_KERNELS_H_
#define FEDRT_CODECS_SYMBOLS_PACK_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/platform/cpu.h"

namespace fedrt {

#define FEDRT_PACK_KERNEL_DECLS                                                               \
  void PackSymbols(const uint8_t* symbols, std::size_t count, uint32_t alphabet, uint8_t* out); \
  uint32_t UnpackSymbols(const uint8_t* stream, std::size_t count, uint32_t alphabet, uint8_t* symbols);

namespace scalar {
FEDRT_PACK_KERNEL_DECLS
}
namespace avx2 {
FEDRT_PACK_KERNEL_DECLS
// True iff all `count` codes of the stream are < alphabet (the padding is not
// looked at): the verdict of unpack() without writing symbols. Bit-parallel
// for 3 and 4 bits per symbol (alphabets 5..7, 9..15), unpack() otherwise.
bool CodesValid(const uint8_t* stream, std::size_t count, uint32_t alphabet);
}
// AVX-512: unpack only (VBMI; pack is the AVX2 kernel).
namespace avx512 {
uint32_t UnpackSymbols(const uint8_t* stream, std::size_t count, uint32_t alphabet, uint8_t* symbols);
}
// NEON: integer only, so the same code runs on AArch64 and ARMv7.
namespace neon {
FEDRT_PACK_KERNEL_DECLS
}
#undef FEDRT_PACK_KERNEL_DECLS

struct PackKernels {
  void (*pack)(const uint8_t* symbols, std::size_t count, uint32_t alphabet, uint8_t* out);
  uint32_t (*unpack)(const uint8_t* stream, std::size_t count, uint32_t alphabet, uint8_t* symbols);
  // Optional (null: validate with unpack): see avx2::CodesValid.
  bool (*codes_valid)(const uint8_t* stream, std::size_t count, uint32_t alphabet);
};

// The variants for `isa` (which must be available, see IsaAvailable()).
const PackKernels& PackKernelsFor(Isa isa);

// The base-3 byte of five trits read as one little-endian 40-bit integer
// t0 + t1 2^8 + ... + t4 2^32: its product with 81 + 27 2^8 + 9 2^16 +
// 3 2^24 + 2^32 holds t0 + 3 t1 + 9 t2 + 27 t3 + 81 t4 in bits 32..39, and the
// partial sums below bit 32 stay below 2^32 (each byte column at most 240), so
// no carry reaches it. Used by the SIMD variants' base-3 loops.
inline uint8_t Base3Byte(uint64_t five_trits) {
  constexpr uint64_t kWeights = 81u | 27u << 8 | 9u << 16 | 3u << 24 | uint64_t{1} << 32;
  return static_cast<uint8_t>(((five_trits & 0xFFFFFFFFFFull) * kWeights) >> 32);
}

// The five trits of base-3 byte v as bytes 0..4 of a little-endian word, the
// last one not reduced (v / 81), and the largest of the five, for
// UnpackBase3ByTable.
struct Base3Table {
  uint64_t trits[256];
  uint8_t largest[256];
  constexpr Base3Table() : trits(), largest() {
    for (uint32_t v = 0; v < 256; ++v) {
      const uint32_t t[5] = {v % 3, v / 3 % 3, v / 9 % 3, v / 27 % 3, v / 81};
      uint32_t top = 0;
      for (int k = 0; k < 5; ++k) {
        trits[v] |= uint64_t{t[k]} << (8 * k);
        top = t[k] > top ? t[k] : top;
      }
      largest[v] = static_cast<uint8_t>(top);
    }
  }
};

// The SIMD variants' base-3 unpack (a table lookup per byte needs no vector
// code): bytes while 16 or more symbols remain, the rest by the scalar kernel.
// Built with the baseline flags, so both the AVX2 and the NEON files share it.
uint32_t UnpackBase3ByTable(const uint8_t* stream, std::size_t count, uint8_t* symbols);

}  // namespace fedrt

#endif  // FEDRT_CODECS_SYMBOLS_PACK_KERNELS_H_
