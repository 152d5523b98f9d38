// Symbol streams: argument checks, the choice of coding and the flag bits.
//
// `rans` falls back to packing whenever the coded stream would not be
// strictly shorter than the packed one (tiny or near-uniform streams, count 0,
// a one-symbol alphabet); the flags then say "packed", so the bound for `rans`
// is the packed size and a decoder never guesses.
#include "symbols/symbol_coding.h"

#include <cstring>
#include <string>

#include "symbols/rans_kernels.h"
#include "symbols/symbol_streams.h"

namespace fedrt::codec_internal {
namespace {

constexpr uint16_t kSymbolFlagMask = kFlagSymbolsRans | kFlagSymbolsPacked | kFlagSymbolsBase3;

Status CheckAlphabet(uint32_t alphabet) {
  if (alphabet < 1 || alphabet > 256) {
    return InvalidArgument("symbol alphabet " + std::to_string(alphabet) + " is not in 1..256");
  }
  return Status::Ok();
}

// A max over bytes: the compiler vectorizes it.
uint32_t LargestSymbol(const uint8_t* symbols, std::size_t count) {
  uint8_t largest = 0;
  for (std::size_t i = 0; i < count; ++i) largest = symbols[i] > largest ? symbols[i] : largest;
  return largest;
}

uint16_t PackedFlag(uint32_t alphabet) { return alphabet == 3 ? kFlagSymbolsBase3 : kFlagSymbolsPacked; }

}  // namespace

std::size_t MaxSymbolStreamSize(std::size_t count, uint32_t alphabet, SymbolCoding coding) {
  if (coding == SymbolCoding::kNone) return count;
  // rANS is used only when strictly shorter than packing.
  return PackedStreamSize(count, alphabet);
}

Result<std::size_t> EncodeSymbols(const uint8_t* symbols, std::size_t count, uint32_t alphabet,
                                  SymbolCoding coding, uint8_t* out, std::size_t capacity,
                                  uint16_t* flags) {
  FEDRT_RETURN_IF_ERROR(CheckAlphabet(alphabet));
  const std::size_t bound = MaxSymbolStreamSize(count, alphabet, coding);
  if (bound == SIZE_MAX) return OutOfRange("symbol stream too long");
  if (capacity < bound) {
    return OutOfRange("symbol stream needs " + std::to_string(bound) + " bytes, capacity is " +
                      std::to_string(capacity));
  }
  // rANS needs the histogram, which also finds the largest symbol: one pass.
  uint64_t histogram[256];
  uint32_t largest = 0;
  if (coding == SymbolCoding::kRans && bound > 0) {
    RansKernelsFor(ActiveIsa()).histogram(symbols, count, alphabet, histogram);
    for (uint32_t s = 0; s < 256; ++s) largest = histogram[s] != 0 ? s : largest;
  } else {
    largest = LargestSymbol(symbols, count);
  }
  if (count != 0 && largest >= alphabet) {
    return InvalidArgument("symbol " + std::to_string(largest) + " is outside the alphabet of " +
                           std::to_string(alphabet));
  }
  switch (coding) {
    case SymbolCoding::kNone:
      if (count != 0) std::memcpy(out, symbols, count);
      *flags = 0;
      return count;
    case SymbolCoding::kRans: {
      // Strictly shorter than packing, or not at all.
      if (bound > 0) {
        const std::size_t size = RansEncode(symbols, count, alphabet, histogram, out, bound - 1);
        if (size != 0) {
          *flags = kFlagSymbolsRans;
          return size;
        }
      }
      break;
    }
    case SymbolCoding::kPack:
      break;
  }
  PackSymbols(symbols, count, alphabet, out);
  *flags = PackedFlag(alphabet);
  return bound;
}

Status DecodeSymbols(const uint8_t* stream, std::size_t size, std::size_t count, uint32_t alphabet,
                     uint16_t flags, uint8_t* symbols) {
  FEDRT_RETURN_IF_ERROR(CheckAlphabet(alphabet));
  const uint16_t coding = flags & kSymbolFlagMask;
  if (coding == 0) {
    if (size != count) {
      return Corrupt("unpacked symbol stream has " + std::to_string(size) + " bytes for " +
                     std::to_string(count) + " symbols");
    }
    for (std::size_t i = 0; i < count; ++i) {
      if (stream[i] >= alphabet) {
        return Corrupt("symbol " + std::to_string(stream[i]) + " at " + std::to_string(i) +
                       " is outside the alphabet of " + std::to_string(alphabet));
      }
    }
    if (count != 0) std::memcpy(symbols, stream, count);
    return Status::Ok();
  }
  if (coding == PackedFlag(alphabet)) return UnpackSymbols(stream, size, count, alphabet, symbols);
  if (coding == kFlagSymbolsRans) return RansDecode(stream, size, count, alphabet, symbols);
  return Corrupt("symbol coding flags " + std::to_string(coding) + " are not valid for an alphabet of " +
                 std::to_string(alphabet));
}

}  // namespace fedrt::codec_internal
