// Fixed-length symbol packing: the scalar reference kernels (pack_kernels.h),
// the validated entry points of symbol_streams.h and the chunked writer and
// reader of symbol_coding.h.
//
// `bits` = ceil(log2(alphabet)) per symbol, LSB first: symbol i occupies bits
// [i*bits, (i+1)*bits) of the little-endian bit string. Eight symbols fill
// exactly `bits` bytes, so the main loops work on groups of eight through a
// 64-bit word; the tail writes ceil(r*bits/8) bytes with zero padding.
// A 3-symbol alphabet packs 5 trits per byte in base 3 (1.6 bits/symbol
// instead of 2); a short last group leaves the high trits zero.
#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "fedrt/platform/config.h"
#include "symbols/pack_kernels.h"
#include "symbols/symbol_coding.h"
#include "symbols/symbol_streams.h"

namespace fedrt {
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

// Groups of eight symbols into `kBits` bytes each; a constant width lets
// the compiler unroll the shifts.
template <int kBits>
void PackGroups(const uint8_t* symbols, std::size_t groups, uint8_t* out) {
  for (std::size_t g = 0; g < groups; ++g) {
    const uint8_t* s = symbols + 8 * g;
    uint64_t word = 0;
    for (int k = 0; k < 8; ++k) word |= static_cast<uint64_t>(s[k]) << (k * kBits);
    StoreLowBytes(word, kBits, out + g * kBits);
  }
}

// Trit k of base-3 byte v; the last trit is not reduced (see pack_kernels.h).
uint32_t Trit(uint32_t v, int k) { return k == 4 ? v / 81 : v / kPow3[k] % 3; }

}  // namespace

namespace scalar {

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
  const int bits = codec_internal::PackedBits(alphabet);
  if (bits == 0) return;
  if (bits == 8) {
    if (count != 0) std::memcpy(out, symbols, count);
    return;
  }
  const std::size_t groups = count / 8;
  switch (bits) {
    case 1: PackGroups<1>(symbols, groups, out); break;
    case 2: PackGroups<2>(symbols, groups, out); break;
    case 3: PackGroups<3>(symbols, groups, out); break;
    case 4: PackGroups<4>(symbols, groups, out); break;
    case 5: PackGroups<5>(symbols, groups, out); break;
    case 6: PackGroups<6>(symbols, groups, out); break;
    default: PackGroups<7>(symbols, groups, out); break;
  }
  const int rest = static_cast<int>(count % 8);
  if (rest != 0) {
    uint64_t word = 0;
    for (int k = 0; k < rest; ++k) word |= static_cast<uint64_t>(symbols[8 * groups + k]) << (k * bits);
    StoreLowBytes(word, (rest * bits + 7) / 8, out + groups * static_cast<std::size_t>(bits));
  }
}

uint32_t UnpackSymbols(const uint8_t* stream, std::size_t count, uint32_t alphabet, uint8_t* symbols) {
  uint32_t largest = 0;
  const auto put = [&](std::size_t index, uint32_t symbol) {
    symbols[index] = static_cast<uint8_t>(symbol);
    largest = symbol > largest ? symbol : largest;
  };
  if (alphabet == 3) {
    for (std::size_t i = 0; i < count; ++i) put(i, Trit(stream[i / 5], static_cast<int>(i % 5)));
    return largest;
  }
  const int bits = codec_internal::PackedBits(alphabet);
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  const std::size_t groups = count / 8;
  for (std::size_t g = 0; g < groups; ++g) {
    const uint64_t word = LoadLowBytes(stream + g * static_cast<std::size_t>(bits), bits);
    for (int k = 0; k < 8; ++k) put(8 * g + static_cast<std::size_t>(k), static_cast<uint32_t>((word >> (k * bits)) & mask));
  }
  const int rest = static_cast<int>(count % 8);
  if (rest != 0) {
    const uint64_t word = LoadLowBytes(stream + groups * static_cast<std::size_t>(bits), (rest * bits + 7) / 8);
    for (int k = 0; k < rest; ++k) {
      put(8 * groups + static_cast<std::size_t>(k), static_cast<uint32_t>((word >> (k * bits)) & mask));
    }
  }
  return largest;
}

}  // namespace scalar

uint32_t UnpackBase3ByTable(const uint8_t* stream, std::size_t count, uint8_t* symbols) {
  static constexpr Base3Table kBase3;
  std::size_t g = 0;
  uint32_t head = 0;
  // Each lookup writes 8 bytes: stop while 16 symbols remain so it never
  // writes past `count`.
  for (; 5 * g + 16 <= count; ++g) {
    const uint8_t v = stream[g];
    head = kBase3.largest[v] > head ? kBase3.largest[v] : head;
    std::memcpy(symbols + 5 * g, &kBase3.trits[v], 8);
  }
  const uint32_t rest = scalar::UnpackSymbols(stream + g, count - 5 * g, 3, symbols + 5 * g);
  return rest > head ? rest : head;
}

const PackKernels& PackKernelsFor(Isa requested) {
#if FEDRT_HAVE_AVX512_KERNELS
  // The AVX-512 unpack needs VBMI on top of the AVX-512 level; without it AVX2.
  if (requested == Isa::kAvx512) {
    static const bool vbmi = [] {
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512vbmi") != 0;
    }();
    static const PackKernels kAvx512 = {&avx2::PackSymbols, &avx512::UnpackSymbols, nullptr};
    if (vbmi) return kAvx512;
  }
#endif
  const Isa isa = Avx2ForAvx512(requested);
  static const PackKernels kScalar = {&scalar::PackSymbols, &scalar::UnpackSymbols, nullptr};
  switch (isa) {
#if FEDRT_HAVE_AVX2_KERNELS
    case Isa::kAvx2: {
      static const PackKernels kAvx2 = {&avx2::PackSymbols, &avx2::UnpackSymbols, &avx2::CodesValid};
      return kAvx2;
    }
#endif
#if FEDRT_HAVE_NEON_KERNELS
    case Isa::kNeon: {
      static const PackKernels kNeon = {&neon::PackSymbols, &neon::UnpackSymbols, nullptr};
      return kNeon;
    }
#endif
    default: return kScalar;
  }
}

namespace codec_internal {
namespace {

// Zero padding after the last whole group: unused high bits of the last byte,
// or unused high trits of the last base-3 byte.
Status CheckPadding(const uint8_t* stream, std::size_t size, std::size_t count, uint32_t alphabet) {
  if (size == 0) return Status::Ok();
  const uint32_t last = stream[size - 1];
  if (alphabet == 3) {
    const std::size_t rest = count % 5;
    if (rest != 0 && last >= kPow3[rest]) return Corrupt("base-3 padding trits are not zero");
    return Status::Ok();
  }
  const std::size_t used = (count * static_cast<std::size_t>(PackedBits(alphabet))) % 8;
  if (used != 0 && (last >> used) != 0) return Corrupt("packed symbol stream padding bits are not zero");
  return Status::Ok();
}

// The first symbol >= alphabet in an unpacked chunk, as the decoder's error.
Status FirstBadSymbol(const uint8_t* stream, const uint8_t* symbols, std::size_t count, std::size_t first,
                      uint32_t alphabet) {
  for (std::size_t i = 0; i < count; ++i) {
    if (symbols[i] < alphabet) continue;
    const std::size_t index = first + i;
    if (alphabet == 3) {
      return Corrupt("base-3 byte " + std::to_string(stream[index / 5]) + " at " + std::to_string(index / 5) +
                     " exceeds 242");
    }
    return Corrupt("packed symbol " + std::to_string(symbols[i]) + " at " + std::to_string(index) +
                   " is outside the alphabet of " + std::to_string(alphabet));
  }
  return Status::Ok();
}

// Symbols per group: chunks start on group boundaries, so every chunk's
// stream starts on a byte boundary.
std::size_t GroupSize(uint32_t alphabet) { return alphabet == 3 ? 5 : 8; }

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
  if (alphabet < 2) return;
  PackKernelsFor(ActiveIsa()).pack(symbols, count, alphabet, out);
}

Status UnpackSymbols(const uint8_t* stream, std::size_t size, std::size_t count, uint32_t alphabet,
                     uint8_t* symbols) {
  const std::size_t expected = PackedStreamSize(count, alphabet);
  if (size != expected) {
    return Corrupt("packed symbol stream has " + std::to_string(size) + " bytes, " + std::to_string(count) +
                   " symbols need " + std::to_string(expected));
  }
  if (alphabet < 2) {
    if (count != 0) std::memset(symbols, 0, count);
    return Status::Ok();
  }
  const uint32_t largest = PackKernelsFor(ActiveIsa()).unpack(stream, count, alphabet, symbols);
  if (largest >= alphabet) return FirstBadSymbol(stream, symbols, count, 0, alphabet);
  return CheckPadding(stream, size, count, alphabet);
}

// ---- Chunked writer and reader ------------------------------------------------

PackedSymbolWriter::PackedSymbolWriter(uint32_t alphabet, uint8_t* out)
    : alphabet_(alphabet), group_(GroupSize(alphabet)), out_(out), pack_(PackKernelsFor(ActiveIsa()).pack) {}

uint8_t* PackedSymbolWriter::Reserve(std::size_t n) {
  if (fill_ + n > sizeof buffer_) Flush();
  return buffer_ + fill_;
}

void PackedSymbolWriter::Flush() {
  const std::size_t whole = fill_ - fill_ % group_;
  if (alphabet_ >= 2 && whole != 0) {
    pack_(buffer_, whole, alphabet_, out_ + written_);
    written_ += PackedStreamSize(whole, alphabet_);
  }
  std::memmove(buffer_, buffer_ + whole, fill_ - whole);
  fill_ -= whole;
}

std::size_t PackedSymbolWriter::Finish() {
  if (alphabet_ >= 2 && fill_ != 0) {
    pack_(buffer_, fill_, alphabet_, out_ + written_);
    written_ += PackedStreamSize(fill_, alphabet_);
  }
  fill_ = 0;
  return written_;
}

uint16_t PackedSymbolWriter::flags() const { return alphabet_ == 3 ? kFlagSymbolsBase3 : kFlagSymbolsPacked; }

PackedSymbolReader::PackedSymbolReader(const uint8_t* stream, std::size_t count, uint32_t alphabet)
    : stream_(stream),
      count_(count),
      alphabet_(alphabet),
      unpack_(PackKernelsFor(ActiveIsa()).unpack),
      codes_valid_(PackKernelsFor(ActiveIsa()).codes_valid) {}

Status PackedSymbolReader::Validate(std::size_t size) {
  const std::size_t expected = PackedStreamSize(count_, alphabet_);
  if (size != expected) {
    return Corrupt("packed symbol stream has " + std::to_string(size) + " bytes, " + std::to_string(count_) +
                   " symbols need " + std::to_string(expected));
  }
  if (alphabet_ < 2) return Status::Ok();
  if (alphabet_ == 3) {
    // Base 3 is valid iff every byte is < 243: a byte maximum, no unpacking.
    uint8_t largest = 0;
    for (std::size_t i = 0; i < size; ++i) largest = stream_[i] > largest ? stream_[i] : largest;
    if (largest >= 243) {
      std::size_t at = 0;
      while (stream_[at] < 243) ++at;
      return Corrupt("base-3 byte " + std::to_string(stream_[at]) + " at " + std::to_string(at) + " exceeds 242");
    }
    return CheckPadding(stream_, size, count_, alphabet_);
  }
  // Power-of-two alphabets have no invalid codes, only padding to check.
  bool check = alphabet_ != (uint32_t{1} << PackedBits(alphabet_));
  // A kernel that only tests the codes; the unpacking below then names the first bad one.
  if (check && codes_valid_ != nullptr && codes_valid_(stream_, count_, alphabet_)) check = false;
  for (std::size_t first = 0; check && first < count_; first += kChunk) {
    const std::size_t n = std::min(kChunk, count_ - first);
    const uint8_t* at = stream_ + PackedStreamSize(first, alphabet_);
    if (unpack_(at, n, alphabet_, buffer_) >= alphabet_) return FirstBadSymbol(stream_, buffer_, n, first, alphabet_);
  }
  return CheckPadding(stream_, size, count_, alphabet_);
}

const uint8_t* PackedSymbolReader::Next(std::size_t n) {
  // Symbols [position_, position_ + n) come from the buffered chunk; a new
  // chunk starts at a group boundary.
  if (position_ + n > buffered_end_) {
    const std::size_t start = position_ - position_ % GroupSize(alphabet_);
    const std::size_t end = std::min(count_, start + kChunk);
    if (alphabet_ >= 2) {
      unpack_(stream_ + PackedStreamSize(start, alphabet_), end - start, alphabet_, buffer_);
    } else {
      std::memset(buffer_, 0, end - start);
    }
    buffered_start_ = start;
    buffered_end_ = end;
  }
  const uint8_t* symbols = buffer_ + (position_ - buffered_start_);
  position_ += n;
  return symbols;
}

}  // namespace codec_internal
}  // namespace fedrt
