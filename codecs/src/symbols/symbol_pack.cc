// Fixed-length symbol packing (scalar reference).
//
// `bits` = ceil(log2(alphabet)) per symbol, LSB first: symbol i occupies bits
// [i*bits, (i+1)*bits) of the little-endian bit string. Eight symbols fill
// exactly `bits` bytes, so the main loops work on groups of eight through a
// 64-bit word; the tail writes ceil(r*bits/8) bytes with zero padding.
// A 3-symbol alphabet packs 5 trits per byte in base 3 (1.6 bits/symbol
// instead of 2); a short last group leaves the high trits zero.
#include <climits>
#include <cstring>
#include <string>

#include "symbols/symbol_streams.h"

namespace fedrt::codec_internal {
namespace {

constexpr uint32_t kPow3[6] = {1, 3, 9, 27, 81, 243};

void StoreLowBytes(uint64_t word, int bytes, uint8_t* out) {
  for (int k = 0; k < bytes; ++k) out[k] = static_cast<uint8_t>(word >> (8 * k));
}

uint64_t LoadLowBytes(const uint8_t* in, int bytes) {
  uint64_t word = 0;
  for (int k = 0; k < bytes; ++k) word |= static_cast<uint64_t>(in[k]) << (8 * k);
  return word;
}

Status SymbolOutOfRange(std::size_t index, uint32_t symbol, uint32_t alphabet) {
  return Corrupt("packed symbol " + std::to_string(symbol) + " at " + std::to_string(index) +
                 " is outside the alphabet of " + std::to_string(alphabet));
}

Status UnpackBase3(const uint8_t* stream, std::size_t count, uint8_t* symbols) {
  const std::size_t groups = count / 5;
  for (std::size_t g = 0; g < groups; ++g) {
    uint32_t v = stream[g];
    if (v >= 243) return Corrupt("base-3 byte " + std::to_string(v) + " at " + std::to_string(g) + " exceeds 242");
    for (int k = 0; k < 5; ++k) {
      symbols[5 * g + k] = static_cast<uint8_t>(v % 3);
      v /= 3;
    }
  }
  const std::size_t rest = count - 5 * groups;
  if (rest != 0) {
    uint32_t v = stream[groups];
    if (v >= kPow3[rest]) return Corrupt("base-3 padding trits are not zero");
    for (std::size_t k = 0; k < rest; ++k) {
      symbols[5 * groups + k] = static_cast<uint8_t>(v % 3);
      v /= 3;
    }
  }
  return Status::Ok();
}

}  // namespace

int PackedBits(uint32_t alphabet) {
  int bits = 0;
  while ((uint32_t{1} << bits) < alphabet) ++bits;
  return bits;
}

std::size_t PackedStreamSize(std::size_t count, uint32_t alphabet) {
  if (alphabet == 3) return count / 5 + (count % 5 != 0 ? 1 : 0);
  const std::size_t bits = static_cast<std::size_t>(PackedBits(alphabet));
  const std::size_t groups = count / 8;  // each group of 8 symbols is `bits` bytes
  if (bits != 0 && groups > SIZE_MAX / bits - 1) return SIZE_MAX;
  return groups * bits + ((count % 8) * bits + 7) / 8;
}

void PackSymbols(const uint8_t* symbols, std::size_t count, uint32_t alphabet, uint8_t* out) {
  if (alphabet == 3) {
    const std::size_t groups = count / 5;
    for (std::size_t g = 0; g < groups; ++g) {
      const uint8_t* t = symbols + 5 * g;
      out[g] = static_cast<uint8_t>(t[0] + 3 * t[1] + 9 * t[2] + 27 * t[3] + 81 * t[4]);
    }
    const std::size_t rest = count - 5 * groups;
    if (rest != 0) {
      uint32_t v = 0;
      for (std::size_t k = rest; k-- > 0;) v = 3 * v + symbols[5 * groups + k];
      out[groups] = static_cast<uint8_t>(v);
    }
    return;
  }
  const int bits = PackedBits(alphabet);
  if (bits == 0) return;
  if (bits == 8) {
    if (count != 0) std::memcpy(out, symbols, count);
    return;
  }
  const std::size_t groups = count / 8;
  for (std::size_t g = 0; g < groups; ++g) {
    const uint8_t* s = symbols + 8 * g;
    uint64_t word = 0;
    for (int k = 0; k < 8; ++k) word |= static_cast<uint64_t>(s[k]) << (k * bits);
    StoreLowBytes(word, bits, out + g * static_cast<std::size_t>(bits));
  }
  const int rest = static_cast<int>(count % 8);
  if (rest != 0) {
    uint64_t word = 0;
    for (int k = 0; k < rest; ++k) word |= static_cast<uint64_t>(symbols[8 * groups + k]) << (k * bits);
    StoreLowBytes(word, (rest * bits + 7) / 8, out + groups * static_cast<std::size_t>(bits));
  }
}

Status UnpackSymbols(const uint8_t* stream, std::size_t size, std::size_t count, uint32_t alphabet,
                     uint8_t* symbols) {
  const std::size_t expected = PackedStreamSize(count, alphabet);
  if (size != expected) {
    return Corrupt("packed symbol stream has " + std::to_string(size) + " bytes, " + std::to_string(count) +
                   " symbols need " + std::to_string(expected));
  }
  if (alphabet == 3) return UnpackBase3(stream, count, symbols);
  const int bits = PackedBits(alphabet);
  if (bits == 0) {
    if (count != 0) std::memset(symbols, 0, count);
    return Status::Ok();
  }
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  // A power-of-two alphabet has no invalid codes; skip the per-symbol check.
  const bool check = alphabet != (uint32_t{1} << bits);
  const std::size_t groups = count / 8;
  for (std::size_t g = 0; g < groups; ++g) {
    const uint64_t word = LoadLowBytes(stream + g * static_cast<std::size_t>(bits), bits);
    for (int k = 0; k < 8; ++k) {
      const uint32_t symbol = static_cast<uint32_t>((word >> (k * bits)) & mask);
      if (check && symbol >= alphabet) return SymbolOutOfRange(8 * g + static_cast<std::size_t>(k), symbol, alphabet);
      symbols[8 * g + static_cast<std::size_t>(k)] = static_cast<uint8_t>(symbol);
    }
  }
  const int rest = static_cast<int>(count % 8);
  if (rest != 0) {
    const int bytes = (rest * bits + 7) / 8;
    const uint64_t word = LoadLowBytes(stream + groups * static_cast<std::size_t>(bits), bytes);
    if ((word >> (rest * bits)) != 0) return Corrupt("packed symbol stream padding bits are not zero");
    for (int k = 0; k < rest; ++k) {
      const uint32_t symbol = static_cast<uint32_t>((word >> (k * bits)) & mask);
      const std::size_t index = 8 * groups + static_cast<std::size_t>(k);
      if (check && symbol >= alphabet) return SymbolOutOfRange(index, symbol, alphabet);
      symbols[index] = static_cast<uint8_t>(symbol);
    }
  }
  return Status::Ok();
}

}  // namespace fedrt::codec_internal
