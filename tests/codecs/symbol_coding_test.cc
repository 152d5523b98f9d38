// Symbol streams (codecs/src/symbols): round trips of every coding, the
// fallbacks, rejection of corrupt streams and the rANS efficiency target.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "fedrt/codecs/payload.h"
#include "symbols/symbol_coding.h"
#include "symbols/symbol_streams.h"

namespace fedrt::codec_internal {
namespace {

constexpr SymbolCoding kCodings[] = {SymbolCoding::kNone, SymbolCoding::kPack, SymbolCoding::kRans};
constexpr std::size_t kCounts[] = {0, 1, 2, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 33, 255, 1000, 4099};

// Symbols with a peaked (two-sided geometric) distribution around the middle
// of the alphabet, as quantizers produce.
std::vector<uint8_t> PeakedSymbols(std::size_t count, uint32_t alphabet, double p, uint32_t seed) {
  std::mt19937 rng(seed);
  // Geometric by counting failures (cheap under emulation): P(k) = p (1-p)^k.
  const double continue_below = (1.0 - p) * 4294967296.0;
  std::vector<uint8_t> symbols(count);
  const int middle = static_cast<int>(alphabet / 2);
  for (uint8_t& s : symbols) {
    int k = 0;
    while (k < 300 && static_cast<double>(rng()) < continue_below) ++k;
    int v = middle + ((rng() & 1) ? 1 : -1) * k;
    if (v < 0) v = 0;
    if (v >= static_cast<int>(alphabet)) v = static_cast<int>(alphabet) - 1;
    s = static_cast<uint8_t>(v);
  }
  return symbols;
}

std::vector<uint8_t> UniformSymbols(std::size_t count, uint32_t alphabet, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> pick(0, alphabet - 1);
  std::vector<uint8_t> symbols(count);
  for (uint8_t& s : symbols) s = static_cast<uint8_t>(pick(rng));
  return symbols;
}

struct Stream {
  std::vector<uint8_t> bytes;
  uint16_t flags = 0;
};

Stream Encode(const std::vector<uint8_t>& symbols, uint32_t alphabet, SymbolCoding coding) {
  Stream stream;
  stream.bytes.resize(MaxSymbolStreamSize(symbols.size(), alphabet, coding));
  auto size = EncodeSymbols(symbols.data(), symbols.size(), alphabet, coding, stream.bytes.data(),
                            stream.bytes.size(), &stream.flags);
  REQUIRE_MESSAGE(size.ok(), size.status().ToString());
  REQUIRE(*size <= stream.bytes.size());
  stream.bytes.resize(*size);
  return stream;
}

Status Decode(const Stream& stream, std::size_t count, uint32_t alphabet, std::vector<uint8_t>* out) {
  out->assign(count, 0xEE);
  return DecodeSymbols(stream.bytes.data(), stream.bytes.size(), count, alphabet, stream.flags, out->data());
}

void CheckRoundTrip(const std::vector<uint8_t>& symbols, uint32_t alphabet, SymbolCoding coding) {
  const Stream stream = Encode(symbols, alphabet, coding);
  std::vector<uint8_t> decoded;
  const Status status = Decode(stream, symbols.size(), alphabet, &decoded);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  REQUIRE(decoded == symbols);
  // Encoding is deterministic.
  CHECK(Encode(symbols, alphabet, coding).bytes == stream.bytes);
}

double EntropyBits(const std::vector<uint8_t>& symbols) {
  std::vector<double> counts(256, 0.0);
  for (uint8_t s : symbols) counts[s] += 1;
  double bits = 0;
  const double n = static_cast<double>(symbols.size());
  for (double c : counts) {
    if (c > 0) bits -= c * std::log2(c / n);
  }
  return bits;
}

// Bytes of a coded rANS stream's header and frequency table (symbol_rans.cc).
std::size_t RansTableSize(const std::vector<uint8_t>& bytes) {
  std::size_t at = 2;
  for (std::size_t s = 0; s <= bytes[1];) {
    if (bytes[at] == 0) {  // absent symbol, then a run of more absent ones
      s += 1 + bytes[at + 1];
      at += 2;
    } else {
      at += (bytes[at] & 0x80) ? 2 : 1;
      ++s;
    }
  }
  return at;
}

TEST_CASE("every coding round-trips every alphabet from 1 to 256 at awkward counts") {
  for (uint32_t alphabet = 1; alphabet <= 256; ++alphabet) {
    INFO("alphabet " << alphabet);
    for (std::size_t count : kCounts) {
      // Every count for small alphabets, a few for the rest (test time under emulation).
      if (alphabet > 17 && alphabet % 16 != 0 && alphabet % 16 != 1 && count > 9 && count != 1000) continue;
      INFO("count " << count);
      for (SymbolCoding coding : kCodings) {
        INFO("coding " << SymbolCodingName(coding));
        CheckRoundTrip(PeakedSymbols(count, alphabet, 0.4, alphabet * 7 + static_cast<uint32_t>(count)),
                       alphabet, coding);
        CheckRoundTrip(UniformSymbols(count, alphabet, alphabet + static_cast<uint32_t>(count)), alphabet, coding);
      }
    }
  }
}

TEST_CASE("every coding round-trips streams of the extreme symbols") {
  for (uint32_t alphabet : {2u, 3u, 5u, 16u, 17u, 255u, 256u}) {
    INFO("alphabet " << alphabet);
    for (SymbolCoding coding : kCodings) {
      std::vector<uint8_t> symbols(1001, static_cast<uint8_t>(alphabet - 1));
      CheckRoundTrip(symbols, alphabet, coding);
      symbols[500] = 0;
      CheckRoundTrip(symbols, alphabet, coding);
      std::vector<uint8_t> zeros(77, 0);
      CheckRoundTrip(zeros, alphabet, coding);
    }
  }
}

TEST_CASE("packing uses ceil of log2 of the alphabet bits and base 3 for three symbols") {
  CHECK(MaxSymbolStreamSize(1000, 2, SymbolCoding::kPack) == 125);
  CHECK(MaxSymbolStreamSize(1000, 3, SymbolCoding::kPack) == 200);
  CHECK(MaxSymbolStreamSize(1001, 3, SymbolCoding::kPack) == 201);
  CHECK(MaxSymbolStreamSize(1000, 4, SymbolCoding::kPack) == 250);
  CHECK(MaxSymbolStreamSize(1000, 5, SymbolCoding::kPack) == 375);
  CHECK(MaxSymbolStreamSize(1000, 9, SymbolCoding::kPack) == 500);
  CHECK(MaxSymbolStreamSize(1000, 256, SymbolCoding::kPack) == 1000);
  CHECK(MaxSymbolStreamSize(1000, 1, SymbolCoding::kPack) == 0);
  CHECK(MaxSymbolStreamSize(1000, 5, SymbolCoding::kNone) == 1000);
  CHECK(MaxSymbolStreamSize(1000, 5, SymbolCoding::kRans) == 375);

  const std::vector<uint8_t> trits = {2, 1, 0, 2, 1, 1, 2};
  const Stream base3 = Encode(trits, 3, SymbolCoding::kPack);
  CHECK(base3.flags == kFlagSymbolsBase3);
  REQUIRE(base3.bytes.size() == 2);
  CHECK(base3.bytes[0] == 2 + 3 * 1 + 9 * 0 + 27 * 2 + 81 * 1);
  CHECK(base3.bytes[1] == 1 + 3 * 2);

  const std::vector<uint8_t> fives = {1, 4, 3, 0, 2};
  const Stream packed = Encode(fives, 5, SymbolCoding::kPack);
  CHECK(packed.flags == kFlagSymbolsPacked);
  REQUIRE(packed.bytes.size() == 2);
  // LSB first, 3 bits each: 001 100 011 000 010 -> bits 0..14.
  const uint32_t word = packed.bytes[0] | (packed.bytes[1] << 8);
  CHECK(word == (1u | 4u << 3 | 3u << 6 | 0u << 9 | 2u << 12));

  const Stream raw = Encode(fives, 5, SymbolCoding::kNone);
  CHECK(raw.flags == 0);
  CHECK(raw.bytes == fives);
}

TEST_CASE("rans falls back to packing when coding would not be shorter") {
  // Empty, tiny and uniform streams: the flags say packed.
  CHECK(Encode({}, 7, SymbolCoding::kRans).flags == kFlagSymbolsPacked);
  CHECK(Encode({1, 0, 1}, 2, SymbolCoding::kRans).flags == kFlagSymbolsPacked);
  CHECK(Encode({1, 0, 1}, 3, SymbolCoding::kRans).flags == kFlagSymbolsBase3);
  CHECK(Encode(UniformSymbols(4096, 256, 3), 256, SymbolCoding::kRans).flags == kFlagSymbolsPacked);
  // A long constant stream is the two-byte single-symbol form.
  const Stream constant = Encode(std::vector<uint8_t>(5000, 3), 7, SymbolCoding::kRans);
  CHECK(constant.flags == kFlagSymbolsRans);
  CHECK(constant.bytes.size() == 2);
  // A peaked stream is coded.
  CHECK(Encode(PeakedSymbols(5000, 9, 0.6, 4), 9, SymbolCoding::kRans).flags == kFlagSymbolsRans);
}

TEST_CASE("encoding rejects symbols outside the alphabet and too small buffers") {
  std::vector<uint8_t> symbols = {0, 1, 2, 5};
  std::vector<uint8_t> out(16);
  uint16_t flags = 0;
  for (SymbolCoding coding : kCodings) {
    CHECK(EncodeSymbols(symbols.data(), symbols.size(), 5, coding, out.data(), out.size(), &flags).status().code() ==
          StatusCode::kInvalidArgument);
    CHECK(EncodeSymbols(symbols.data(), symbols.size(), 6, coding, out.data(), 0, &flags).status().code() ==
          StatusCode::kOutOfRange);
  }
  CHECK(EncodeSymbols(symbols.data(), symbols.size(), 0, SymbolCoding::kNone, out.data(), out.size(), &flags)
            .status()
            .code() == StatusCode::kInvalidArgument);
  CHECK(EncodeSymbols(symbols.data(), symbols.size(), 257, SymbolCoding::kNone, out.data(), out.size(), &flags)
            .status()
            .code() == StatusCode::kInvalidArgument);
}

TEST_CASE("frequency quantization sums to the power of two and keeps every present symbol") {
  uint64_t histogram[256] = {};
  histogram[0] = 1000000;
  for (uint32_t s = 1; s < 200; ++s) histogram[s] = 1;
  uint64_t count = 0;
  for (uint64_t c : histogram) count += c;
  for (int bits = 8; bits <= kRansMaxScaleBits; ++bits) {
    uint32_t freqs[256];
    QuantizeFrequencies(histogram, 256, count, bits, freqs);
    uint32_t sum = 0;
    for (uint32_t s = 0; s < 256; ++s) {
      sum += freqs[s];
      CHECK((histogram[s] == 0) == (freqs[s] == 0));
    }
    CHECK(sum == (1u << bits));
  }
}

// ---- Corrupt streams -----------------------------------------------------------

TEST_CASE("truncated and extended streams are rejected for every coding") {
  for (uint32_t alphabet : {2u, 3u, 5u, 7u, 17u, 200u}) {
    INFO("alphabet " << alphabet);
    const auto symbols = PeakedSymbols(3001, alphabet, 0.5, alphabet);
    for (SymbolCoding coding : kCodings) {
      INFO("coding " << SymbolCodingName(coding));
      const Stream stream = Encode(symbols, alphabet, coding);
      std::vector<uint8_t> out;
      for (std::size_t cut = 0; cut < stream.bytes.size(); cut += 1 + stream.bytes.size() / 97) {
        Stream truncated = stream;
        truncated.bytes.resize(cut);
        CHECK(Decode(truncated, symbols.size(), alphabet, &out).code() == StatusCode::kCorrupt);
      }
      Stream extended = stream;
      extended.bytes.push_back(0);
      CHECK(Decode(extended, symbols.size(), alphabet, &out).code() == StatusCode::kCorrupt);
      // The count is part of the contract: one symbol more or less fails
      // (packing can only tell when the size changes; `rans` packs streams
      // it cannot make shorter, such as this one at alphabet 3).
      if (coding != SymbolCoding::kPack && !IsPackedCoding(stream.flags, alphabet)) {
        CHECK_FALSE(Decode(stream, symbols.size() + 1, alphabet, &out).ok());
        CHECK_FALSE(Decode(stream, symbols.size() - 1, alphabet, &out).ok());
      }
    }
  }
}

TEST_CASE("out of range symbols and nonzero padding are rejected") {
  std::vector<uint8_t> out;
  Stream raw;
  raw.bytes = {0, 1, 5};
  CHECK(Decode(raw, 3, 5, &out).code() == StatusCode::kCorrupt);
  Stream packed;
  packed.flags = kFlagSymbolsPacked;
  packed.bytes = {0x07, 0x00};  // alphabet 5: first 3-bit code is 7
  CHECK(Decode(packed, 5, 5, &out).code() == StatusCode::kCorrupt);
  packed.bytes = {0x00, 0x80};  // bit 15 is padding after five 3-bit codes
  CHECK(Decode(packed, 5, 5, &out).code() == StatusCode::kCorrupt);
  packed.bytes = {0x00, 0x00};
  CHECK(Decode(packed, 5, 5, &out).ok());
  Stream base3;
  base3.flags = kFlagSymbolsBase3;
  base3.bytes = {243};
  CHECK(Decode(base3, 5, 3, &out).code() == StatusCode::kCorrupt);
  base3.bytes = {242};
  CHECK(Decode(base3, 5, 3, &out).ok());
  base3.bytes = {9};  // third trit set in a two-trit stream
  CHECK(Decode(base3, 2, 3, &out).code() == StatusCode::kCorrupt);
}

TEST_CASE("flags that do not name a coding for the alphabet are rejected") {
  std::vector<uint8_t> out;
  Stream stream = Encode({0, 1, 2, 1, 0}, 3, SymbolCoding::kPack);
  stream.flags = kFlagSymbolsPacked;  // alphabet 3 is always base 3
  CHECK(Decode(stream, 5, 3, &out).code() == StatusCode::kCorrupt);
  stream.flags = kFlagSymbolsPacked | kFlagSymbolsRans;
  CHECK(Decode(stream, 5, 3, &out).code() == StatusCode::kCorrupt);
  Stream five = Encode({0, 1, 2, 1, 0}, 5, SymbolCoding::kPack);
  five.flags = kFlagSymbolsBase3;
  CHECK(Decode(five, 5, 5, &out).code() == StatusCode::kCorrupt);
  // Flag bits outside the symbol coding (error feedback) are ignored.
  five.flags = kFlagSymbolsPacked | kFlagErrorFeedback;
  CHECK(Decode(five, 5, 5, &out).ok());
}

TEST_CASE("rans streams with bad tables, states or symbols are rejected") {
  const auto symbols = PeakedSymbols(20000, 9, 0.5, 11);
  const Stream good = Encode(symbols, 9, SymbolCoding::kRans);
  REQUIRE(good.flags == kFlagSymbolsRans);
  std::vector<uint8_t> out;
  REQUIRE(Decode(good, symbols.size(), 9, &out).ok());
  const std::size_t last = good.bytes[1];
  REQUIRE(last < 9);

  auto corrupt = [&](auto edit) {
    Stream bad = good;
    edit(bad.bytes);
    return Decode(bad, symbols.size(), 9, &out).code();
  };
  CHECK(corrupt([](std::vector<uint8_t>& b) { b[0] = 0; }) == StatusCode::kCorrupt);  // single-symbol form, wrong size
  CHECK(corrupt([](std::vector<uint8_t>& b) { b[0] = kRansMaxScaleBits + 1; }) == StatusCode::kCorrupt);
  CHECK(corrupt([](std::vector<uint8_t>& b) { b[0] = static_cast<uint8_t>(b[0] - 1); }) == StatusCode::kCorrupt);
  CHECK(corrupt([](std::vector<uint8_t>& b) { b[1] = 9; }) == StatusCode::kCorrupt);      // last symbol >= alphabet
  CHECK(corrupt([](std::vector<uint8_t>& b) { b[2] ^= 0x01; }) == StatusCode::kCorrupt);  // table no longer sums
  // Decoding the same stream with a smaller alphabet than its table names.
  Stream same = good;
  CHECK(Decode(same, symbols.size(), static_cast<uint32_t>(last), &out).code() == StatusCode::kCorrupt);
  // Initial state out of range.
  const std::size_t at = RansTableSize(good.bytes);
  CHECK(corrupt([at](std::vector<uint8_t>& b) { b[at + 3] = b[at + 2] = 0x00; }) == StatusCode::kCorrupt);  // state < 2^23
  CHECK(corrupt([at](std::vector<uint8_t>& b) { b[at + 3] = 0x80; }) == StatusCode::kCorrupt);  // state >= 2^31
  // Any flipped byte of the coded part breaks the final-state check or the length.
  int rejected = 0, tried = 0;
  for (std::size_t i = at; i < good.bytes.size(); i += 1 + good.bytes.size() / 61) {
    ++tried;
    Stream bad = good;
    bad.bytes[i] ^= 0x5A;
    if (!Decode(bad, symbols.size(), 9, &out).ok()) ++rejected;
  }
  CHECK(rejected == tried);
}

TEST_CASE("random garbage never decodes out of bounds") {
  std::mt19937 rng(99);
  std::vector<uint8_t> out;
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Stream stream;
    stream.bytes.resize(rng() % 64);
    for (uint8_t& b : stream.bytes) b = static_cast<uint8_t>(rng());
    if (!stream.bytes.empty() && trial % 2 == 0) stream.bytes[0] = static_cast<uint8_t>(1 + rng() % 12);
    stream.flags = kFlagSymbolsRans;
    const uint32_t alphabet = 2 + static_cast<uint32_t>(rng() % 255);
    if (Decode(stream, rng() % 100, alphabet, &out).ok()) {
      ++accepted;
      for (uint8_t s : out) REQUIRE(s < alphabet);
    }
  }
  CHECK(accepted < 30);
}

// ---- Efficiency ------------------------------------------------------------------

TEST_CASE("rans on 2^20 peaked symbols lands within 2 percent of the entropy plus its table") {
  for (uint32_t alphabet : {5u, 17u}) {
    for (double p : {0.5, 0.9}) {
      const auto symbols = PeakedSymbols(std::size_t{1} << 20, alphabet, p, 1234 + alphabet);
      const Stream stream = Encode(symbols, alphabet, SymbolCoding::kRans);
      REQUIRE(stream.flags == kFlagSymbolsRans);
      std::vector<uint8_t> decoded;
      REQUIRE(Decode(stream, symbols.size(), alphabet, &decoded).ok());
      REQUIRE(decoded == symbols);
      // Table, then the 4-byte state.
      const std::size_t table = RansTableSize(stream.bytes) + 4;
      const double entropy_bytes = EntropyBits(symbols) / 8;
      const double coded = static_cast<double>(stream.bytes.size() - table);
      std::printf("rans alphabet %3u p %.1f: %zu bytes = %zu table + %.0f coded, entropy %.0f bytes, "
                  "coded/entropy %.4f\n",
                  alphabet, p, stream.bytes.size(), table, coded, entropy_bytes, coded / entropy_bytes);
      CHECK(coded <= 1.02 * entropy_bytes);
    }
  }
}

}  // namespace
}  // namespace fedrt::codec_internal
