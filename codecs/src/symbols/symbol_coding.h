// Symbol streams: how quantizers store their symbols in a payload body
// (codec specification, section 6). Internal to fedrt_codecs.
//
// A symbol is a small unsigned integer in [0, alphabet), alphabet <= 256
// (DQSG's 2s+1 levels shifted to start at 0, NDQSG cosets, QSGD levels with
// sign, Moniqua's 2^b grid). Three codings, chosen with the `ec=` key:
//   none  one byte per symbol;
//   pack  ceil(log2(alphabet)) bits per symbol, LSB first; a 3-symbol
//         alphabet is packed 5 trits per byte (base 3) instead;
//   rans  static-model rANS: a frequency table, then the coded stream.
// The coding actually used is returned as payload flag bits
// (kFlagSymbolsPacked, kFlagSymbolsBase3, kFlagSymbolsRans; none = no bit), so
// a decoder never guesses. The stream is self-delimiting given `count`.
//
// Decoding treats the stream as untrusted: every table entry, state and
// symbol is checked, and anything inconsistent is kCorrupt.
#ifndef FEDRT_CODECS_SYMBOLS_SYMBOL_CODING_H_
#define FEDRT_CODECS_SYMBOLS_SYMBOL_CODING_H_

#include <cstddef>
#include <cstdint>

#include "common/codec_common.h"
#include "fedrt/platform/status.h"

namespace fedrt::codec_internal {

// Upper bound on the encoded size of `count` symbols with this coding.
std::size_t MaxSymbolStreamSize(std::size_t count, uint32_t alphabet, SymbolCoding coding);

// Encodes symbols[0..count) (each < alphabet) into out[0..capacity). Returns
// the number of bytes written and sets *flags to the flag bits describing the
// coding used. kInvalidArgument if a symbol is >= alphabet.
Result<std::size_t> EncodeSymbols(const uint8_t* symbols, std::size_t count, uint32_t alphabet,
                                  SymbolCoding coding, uint8_t* out, std::size_t capacity,
                                  uint16_t* flags);

// Decodes exactly `count` symbols from stream[0..size), which must be
// consumed completely, using the coding named by `flags`.
Status DecodeSymbols(const uint8_t* stream, std::size_t size, std::size_t count, uint32_t alphabet,
                     uint16_t flags, uint8_t* symbols);

}  // namespace fedrt::codec_internal

#endif  // FEDRT_CODECS_SYMBOLS_SYMBOL_CODING_H_
