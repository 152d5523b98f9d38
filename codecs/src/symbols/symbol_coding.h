// Symbol streams: how quantizers store their symbols in a payload body
// (codecs/README.md, "Symbol streams"). Internal to fedrt_codecs.
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

// Fixed-length packing (`ec=pack`) chunk by chunk, so that a quantizer packs
// its symbols while they are still in L1 cache instead of staging all of them
// in memory first. The bytes equal EncodeSymbols(..., kPack, ...) of the
// concatenated symbols, and its flags are flags().
class PackedSymbolWriter {
 public:
  // Symbols per chunk: a multiple of 8 and of 5 (whole packing groups).
  static constexpr std::size_t kChunk = 4000;  // bytes of stack per writer or reader

  // `out` receives PackedStreamSize(total count) bytes.
  PackedSymbolWriter(uint32_t alphabet, uint8_t* out);
  // Room for the next n <= kChunk - 7 symbols (each < alphabet, unchecked:
  // the quantizer kernels produce them); Commit(n) once written.
  uint8_t* Reserve(std::size_t n);
  void Commit(std::size_t n) { fill_ += n; }
  // Packs what is left; returns the stream size.
  std::size_t Finish();
  uint16_t flags() const;

 private:
  void Flush();

  uint32_t alphabet_;
  std::size_t group_;
  uint8_t* out_;
  void (*pack_)(const uint8_t*, std::size_t, uint32_t, uint8_t*);
  std::size_t fill_ = 0;
  std::size_t written_ = 0;
  uint8_t buffer_[kChunk];
};

// Reads a packed stream (flags kFlagSymbolsPacked or kFlagSymbolsBase3, as
// DecodeSymbols checks them) chunk by chunk. Validate() checks the whole
// stream first (size, every symbol < alphabet, zero padding), so that a
// decoder fails before it writes anything; then Next(n) hands out the
// symbols in order, n <= kChunk - 7 at a time, count in total.
class PackedSymbolReader {
 public:
  static constexpr std::size_t kChunk = PackedSymbolWriter::kChunk;

  PackedSymbolReader(const uint8_t* stream, std::size_t count, uint32_t alphabet);
  Status Validate(std::size_t size);
  const uint8_t* Next(std::size_t n);

 private:
  const uint8_t* stream_;
  std::size_t count_;
  uint32_t alphabet_;
  uint32_t (*unpack_)(const uint8_t*, std::size_t, uint32_t, uint8_t*);
  bool (*codes_valid_)(const uint8_t*, std::size_t, uint32_t);
  std::size_t position_ = 0;
  std::size_t buffered_start_ = 0;
  std::size_t buffered_end_ = 0;
  uint8_t buffer_[kChunk];
};

// True when `flags` name fixed-length packing for this alphabet.
inline bool IsPackedCoding(uint16_t flags, uint32_t alphabet) {
  const uint16_t coding = flags & (kFlagSymbolsRans | kFlagSymbolsPacked | kFlagSymbolsBase3);
  return coding == (alphabet == 3 ? kFlagSymbolsBase3 : kFlagSymbolsPacked);
}

}  // namespace fedrt::codec_internal

#endif  // FEDRT_CODECS_SYMBOLS_SYMBOL_CODING_H_
