// The three symbol codings behind symbol_coding.h, one function pair each.
// Internal to src/symbols/: symbol_coding.cc validates arguments and flags and
// dispatches here, so these functions may assume 1 <= alphabet <= 256,
// symbols < alphabet on encode, and `capacity` >= the coding's bound.
#ifndef FEDRT_CODECS_SYMBOLS_SYMBOL_STREAMS_H_
#define FEDRT_CODECS_SYMBOLS_SYMBOL_STREAMS_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/platform/status.h"

namespace fedrt::codec_internal {

// Bits per symbol of fixed-length packing: ceil(log2(alphabet)), 0 for a
// one-symbol alphabet (the stream is then empty).
int PackedBits(uint32_t alphabet);

// Exact size of the packed stream (base 3 for alphabet 3), or SIZE_MAX when
// it does not fit a size_t.
std::size_t PackedStreamSize(std::size_t count, uint32_t alphabet);

// Fixed-length packing, LSB first; alphabet 3 packs 5 trits per byte
// (first symbol least significant: byte = t0 + 3 t1 + 9 t2 + 27 t3 + 81 t4).
// Writes exactly PackedStreamSize(count, alphabet) bytes.
void PackSymbols(const uint8_t* symbols, std::size_t count, uint32_t alphabet, uint8_t* out);
// Checks size, padding (unused bits or trits must be zero) and every symbol.
Status UnpackSymbols(const uint8_t* stream, std::size_t size, std::size_t count, uint32_t alphabet,
                     uint8_t* symbols);

// Static-model rANS (symbol_rans.cc). `histogram` holds the count of every
// symbol of the alphabet. Returns the stream size if it is at most `limit`
// bytes, 0 if the coded stream would be longer (the caller then packs).
std::size_t RansEncode(const uint8_t* symbols, std::size_t count, uint32_t alphabet,
                       const uint64_t* histogram, uint8_t* out, std::size_t limit);
Status RansDecode(const uint8_t* stream, std::size_t size, std::size_t count, uint32_t alphabet,
                  uint8_t* symbols);

// Largest rANS frequency-table precision: a decoder's slot table has
// 2^kRansMaxScaleBits bytes (on the stack).
inline constexpr int kRansMaxScaleBits = 12;

// Quantizes `histogram` (alphabet entries, `count` total) to frequencies
// summing to 2^scale_bits with every present symbol >= 1. Exposed for tests.
void QuantizeFrequencies(const uint64_t* histogram, uint32_t alphabet, uint64_t count, int scale_bits,
                         uint32_t* freqs);

}  // namespace fedrt::codec_internal

#endif  // FEDRT_CODECS_SYMBOLS_SYMBOL_STREAMS_H_
