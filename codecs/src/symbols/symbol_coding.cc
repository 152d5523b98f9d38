// Symbol streams: argument checks, the choice of coding and the flag bits.
//
// `rans` falls back to packing whenever the coded stream would not be
// strictly shorter than the packed one (tiny or near-uniform streams, count 0,
// a one-symbol alphabet); the flags then say "packed", so the bound for `rans`
// is the packed size and a decoder never guesses.
#include "symbols/symbol_coding.h"

#include <cstring>
#include <string>

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

// Four interleaved tables, so runs of one symbol (the common case after
// quantization) do not serialize on one counter.
void Histogram(const uint8_t* symbols, std::size_t count, uint64_t* histogram) {
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
  const uint32_t largest = LargestSymbol(symbols, count);
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
        uint64_t histogram[256];
        Histogram(symbols, count, histogram);
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
