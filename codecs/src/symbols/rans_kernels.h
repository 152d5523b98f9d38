// Interleaved rANS kernels (the `ec=rans` coding of symbol_streams.h), one
// variant per ISA, all writing the same bytes and decoding the same symbols.
// This file is the family's list: symbol_rans.cc, the tests and the
// benchmarks go through RansKernelsFor().
//
// The coder: kRansLanes = 16 independent 32-bit states, symbol i coded by
// state i % 16; each state lives in [2^15, 2^31) and renormalises by one
// 16-bit word at most per symbol (scale bits <= 12 < 16). The encoder runs
// over the symbols backwards from all states = 2^15 and writes the words
// downwards; the decoder runs forwards and reads them upwards, so symbol i's
// word (if it has one) follows symbol i - 1's in the stream whatever its
// lane. That order is what lets an 8-lane vector decoder read the words of
// eight symbols with one load and a permutation, and a vector encoder write
// them with one store: every variant produces the same words in the same
// order. Sixteen states rather than eight give a vector coder two independent
// dependency chains (a step's latency, not its work, bounds one chain).
//
//   histogram  counts of symbols[0..count) into histogram[0..256) (all 256
//              entries written), so a symbol >= alphabet shows up as a count
//              above the alphabet.
//   encode     codes symbols[0..count) (each < alphabet, present in the table)
//              into the words ending at `end`, never writing below `floor`;
//              returns the first byte written, or nullptr when the words would
//              pass `floor` (the caller then packs instead). states[0..16) start
//              at 2^15 and end as the encoder's final states.
//   decode     decodes `count` symbols from stream[*at..size) starting from
//              states[0..16) (each in [2^15, 2^31)), advancing *at; returns the
//              number decoded, less than `count` only if the stream ended
//              early. Never reads outside stream[0..size); the caller checks
//              the final states and that the stream is consumed.
//
// Tables are built and validated by symbol_rans.cc (frequencies summing to
// 2^scale_bits, scale_bits in 1..kRansMaxScaleBits, at least two symbols).
#ifndef FEDRT_CODECS_SYMBOLS_RANS_KERNELS_H_
#define FEDRT_CODECS_SYMBOLS_RANS_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/platform/cpu.h"
#include "symbols/symbol_streams.h"

namespace fedrt {

inline constexpr int kRansLanes = 16;
inline constexpr uint32_t kRansLow = 1u << 15;

// Per-symbol encoding constants, one array per field (a vector variant looks
// several up at once). x / f is computed as (x * reciprocal) >> 32 >> shift
// with reciprocal = ceil(2^(31 + shift) / f), exact for x < 2^31 and
// f <= 2^12; f = 1 uses reciprocal 2^32 - 1, shift 0 and folds the quotient's
// error into bias (start + 2^L - 1). Then x' = x + bias + q * complement.
struct RansEncodeTable {
  int scale_bits = 0;
  uint32_t x_max[256];       // renormalise while x >= x_max (f << (31 - L))
  uint32_t reciprocal[256];
  uint32_t shift[256];
  uint32_t bias[256];
  uint32_t complement[256];  // 2^L - f
};

// Decoding: slot = x & (2^L - 1), s = slot_symbol[slot],
// x' = freq[s] * (x >> L) + slot - start[s].
struct RansDecodeTable {
  int scale_bits = 0;
  uint32_t alphabet = 0;  // highest symbol + 1 of the table
  uint32_t freq[256];
  uint32_t start[256];
  uint8_t slot_symbol[1u << codec_internal::kRansMaxScaleBits];
};

// The stream's 16-bit words are little-endian.
inline void StoreRansWord(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline uint32_t LoadRansWord(const uint8_t* p) { return p[0] | uint32_t{p[1]} << 8; }

#define FEDRT_RANS_KERNEL_DECLS                                                                               \
  void RansHistogram(const uint8_t* symbols, std::size_t count, uint32_t alphabet, uint64_t* histogram);      \
  uint8_t* RansEncodeLanes(const uint8_t* symbols, std::size_t count, uint32_t alphabet,                      \
                           const RansEncodeTable& table, uint8_t* floor, uint8_t* end, uint32_t* states);     \
  std::size_t RansDecodeLanes(const uint8_t* stream, std::size_t size, std::size_t* at, std::size_t count, \
                              const RansDecodeTable& table, uint32_t* states, uint8_t* symbols);

namespace scalar {
FEDRT_RANS_KERNEL_DECLS
}
// AVX2 (also used under AVX-512): the sixteen states in two registers.
namespace avx2 {
FEDRT_RANS_KERNEL_DECLS
}
#undef FEDRT_RANS_KERNEL_DECLS
// NEON (AArch64): the decoder only; the rest is the scalar reference.
namespace neon {
std::size_t RansDecodeLanes(const uint8_t* stream, std::size_t size, std::size_t* at, std::size_t count,
                            const RansDecodeTable& table, uint32_t* states, uint8_t* symbols);
}

struct RansKernels {
  void (*histogram)(const uint8_t* symbols, std::size_t count, uint32_t alphabet, uint64_t* histogram);
  uint8_t* (*encode)(const uint8_t* symbols, std::size_t count, uint32_t alphabet, const RansEncodeTable& table,
                     uint8_t* floor, uint8_t* end, uint32_t* states);
  std::size_t (*decode)(const uint8_t* stream, std::size_t size, std::size_t* at, std::size_t count,
                        const RansDecodeTable& table, uint32_t* states, uint8_t* symbols);
};

// The variants for `isa` (which must be available, see IsaAvailable()).
const RansKernels& RansKernelsFor(Isa isa);

}  // namespace fedrt

#endif  // FEDRT_CODECS_SYMBOLS_RANS_KERNELS_H_
