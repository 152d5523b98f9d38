// Interleaved rANS kernels: every ISA variant against the scalar reference
// (histogram, the coded bytes, the decoded symbols and the verdict on damaged
// streams) over awkward counts (around multiples of the 16 lanes and of the
// vector steps), alphabets on both sides of the vector paths' limits (8, 16),
// skewed and near-uniform symbol distributions, and output limits that stop
// the encoder in its vector loop.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "fedrt/codecs/payload.h"
#include "fedrt/platform/cpu.h"
#include "symbols/rans_kernels.h"
#include "symbols/symbol_coding.h"
#include "symbols/symbol_streams.h"

namespace fedrt::codec_internal {
namespace {

constexpr std::size_t kCounts[] = {1, 2, 15, 16, 17, 31, 32, 33, 47, 48, 49, 100, 255, 1007, 4099, 65539};
constexpr uint32_t kAlphabets[] = {2, 3, 5, 7, 8, 9, 15, 16, 17, 33, 255, 256};

// Two-sided geometric around the middle symbol (what quantizers produce):
// p = 0.5 is skewed, p = 0.05 close to uniform over small alphabets.
std::vector<uint8_t> Symbols(std::size_t count, uint32_t alphabet, double p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::geometric_distribution<int> magnitude(p);
  std::bernoulli_distribution sign(0.5);
  std::vector<uint8_t> s(count);
  const int mid = static_cast<int>(alphabet / 2);
  for (auto& v : s) {
    int x = mid + (sign(rng) ? magnitude(rng) : -magnitude(rng));
    x = x < 0 ? 0 : x >= static_cast<int>(alphabet) ? static_cast<int>(alphabet) - 1 : x;
    v = static_cast<uint8_t>(x);
  }
  return s;
}

struct Coded {
  std::vector<uint8_t> bytes;
  uint16_t flags = 0;
};

Coded Encode(const std::vector<uint8_t>& symbols, uint32_t alphabet) {
  Coded c;
  c.bytes.resize(MaxSymbolStreamSize(symbols.size(), alphabet, SymbolCoding::kRans));
  auto size = EncodeSymbols(symbols.data(), symbols.size(), alphabet, SymbolCoding::kRans, c.bytes.data(),
                            c.bytes.size(), &c.flags);
  REQUIRE(size.ok());
  c.bytes.resize(*size);
  return c;
}

TEST_CASE("every rANS histogram variant counts like the reference, symbols outside the alphabet included") {
  const RansKernels& ref = RansKernelsFor(Isa::kScalar);
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    const RansKernels& k = RansKernelsFor(isa);
    for (uint32_t alphabet : kAlphabets) {
      for (std::size_t count : {std::size_t{0}, std::size_t{31}, std::size_t{8160}, std::size_t{8161},
                                std::size_t{70001}}) {
        INFO("alphabet " << alphabet << " count " << count);
        std::vector<uint8_t> symbols = Symbols(count, alphabet, 0.3, alphabet + static_cast<uint32_t>(count));
        for (bool outside : {false, true}) {
          if (outside && count > 0) symbols[count / 2] = static_cast<uint8_t>(alphabet == 256 ? 255 : alphabet);
          uint64_t expected[256], actual[256];
          ref.histogram(symbols.data(), count, alphabet, expected);
          k.histogram(symbols.data(), count, alphabet, actual);
          REQUIRE(std::vector<uint64_t>(actual, actual + 256) == std::vector<uint64_t>(expected, expected + 256));
        }
      }
    }
  }
}

TEST_CASE("every ISA writes the scalar reference's rANS bytes and decodes them back") {
  for (uint32_t alphabet : kAlphabets) {
    for (std::size_t count : kCounts) {
      for (double p : {0.5, 0.05}) {
        INFO("alphabet " << alphabet << " count " << count << " p " << p);
        const std::vector<uint8_t> symbols = Symbols(count, alphabet, p, alphabet * 131 + static_cast<uint32_t>(count));
        REQUIRE(SetIsaOverride(Isa::kScalar));
        const Coded expected = Encode(symbols, alphabet);
        for (Isa isa : AvailableIsas()) {
          INFO("isa " << IsaName(isa));
          REQUIRE(SetIsaOverride(isa));
          const Coded actual = Encode(symbols, alphabet);
          CHECK(actual.flags == expected.flags);
          REQUIRE(actual.bytes == expected.bytes);
          std::vector<uint8_t> back(count + 1, 0xA5);  // sentinel past the end
          REQUIRE(DecodeSymbols(expected.bytes.data(), expected.bytes.size(), count, alphabet, expected.flags,
                                back.data())
                      .ok());
          CHECK(back[count] == 0xA5);
          back.resize(count);
          REQUIRE(back == symbols);
        }
      }
    }
  }
  ClearIsaOverride();
}

TEST_CASE("every ISA decodes small alphabets with absent symbols between, before and after the present ones") {
  // The small-alphabet decoder finds a slot's symbol by counting starts; an
  // absent symbol's start equals its successor's.
  struct Case {
    uint32_t alphabet;
    std::vector<uint8_t> present;
  };
  const Case cases[] = {{5, {0, 2, 4}}, {8, {1, 3, 5, 7}}, {8, {2, 6}}, {7, {0, 1, 6}}, {3, {0, 2}}};
  for (const Case& c : cases) {
    for (std::size_t count : {std::size_t{1000}, std::size_t{4099}, std::size_t{65539}}) {
      INFO("alphabet " << c.alphabet << " present " << c.present.size() << " count " << count);
      std::mt19937 rng(static_cast<uint32_t>(count) + c.alphabet);
      std::vector<uint8_t> symbols(count);
      for (auto& v : symbols) v = c.present[rng() % c.present.size()];
      REQUIRE(SetIsaOverride(Isa::kScalar));
      const Coded coded = Encode(symbols, c.alphabet);
      REQUIRE(coded.flags == kFlagSymbolsRans);  // coded with rANS, not packed
      for (Isa isa : AvailableIsas()) {
        INFO("isa " << IsaName(isa));
        REQUIRE(SetIsaOverride(isa));
        std::vector<uint8_t> back(count);
        REQUIRE(DecodeSymbols(coded.bytes.data(), coded.bytes.size(), count, c.alphabet, coded.flags, back.data())
                    .ok());
        REQUIRE(back == symbols);
      }
    }
  }
  ClearIsaOverride();
}

TEST_CASE("the vector encoders stop at the output limit exactly where the reference does") {
  // Limits from far too small to ample: the coder gives up (0) or writes the
  // same bytes on every ISA; a sentinel below the buffer catches stray stores.
  for (uint32_t alphabet : {5u, 9u, 17u}) {
    const std::size_t count = 3001;
    const std::vector<uint8_t> symbols = Symbols(count, alphabet, 0.5, alphabet);
    uint64_t histogram[256];
    RansKernelsFor(Isa::kScalar).histogram(symbols.data(), count, alphabet, histogram);
    for (std::size_t limit = 40; limit < 1400; limit += 37) {
      INFO("alphabet " << alphabet << " limit " << limit);
      REQUIRE(SetIsaOverride(Isa::kScalar));
      std::vector<uint8_t> expected(limit + 1, 0x5A);
      const std::size_t expected_size = RansEncode(symbols.data(), count, alphabet, histogram, expected.data() + 1, limit);
      for (Isa isa : AvailableIsas()) {
        INFO("isa " << IsaName(isa));
        REQUIRE(SetIsaOverride(isa));
        std::vector<uint8_t> actual(limit + 1, 0x5A);
        const std::size_t size = RansEncode(symbols.data(), count, alphabet, histogram, actual.data() + 1, limit);
        REQUIRE(size == expected_size);
        CHECK(actual[0] == 0x5A);
        if (size != 0) {
          REQUIRE(std::vector<uint8_t>(actual.begin() + 1, actual.begin() + 1 + static_cast<std::ptrdiff_t>(size)) ==
                  std::vector<uint8_t>(expected.begin() + 1, expected.begin() + 1 + static_cast<std::ptrdiff_t>(size)));
        }
      }
    }
  }
  ClearIsaOverride();
}

TEST_CASE("every ISA refuses damaged rANS streams as the reference does") {
  for (const uint32_t alphabet : {5u, 13u}) {  // both below the vector decoders' limits (8, 16) and between
    INFO("alphabet " << alphabet);
    const std::size_t count = 5000;
    const std::vector<uint8_t> symbols = Symbols(count, alphabet, 0.5, 3);
    REQUIRE(SetIsaOverride(Isa::kScalar));
    const Coded coded = Encode(symbols, alphabet);
    REQUIRE(coded.flags == kFlagSymbolsRans);
    std::vector<uint8_t> out(count);
    std::mt19937 rng(5);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<uint8_t> bytes = coded.bytes;
      if (trial % 3 == 0) {
        bytes.resize(bytes.size() - 2 * (1 + rng() % 40));  // truncated by whole words
      } else {
        bytes[14 + rng() % (bytes.size() - 14)] ^= static_cast<uint8_t>(1 + rng() % 255);
      }
      REQUIRE(SetIsaOverride(Isa::kScalar));
      std::vector<uint8_t> expected(count);
      const Status want = DecodeSymbols(bytes.data(), bytes.size(), count, alphabet, coded.flags, expected.data());
      CHECK(!want.ok());  // a damaged stream cannot end in every initial state
      for (Isa isa : AvailableIsas()) {
        INFO("isa " << IsaName(isa) << " trial " << trial);
        REQUIRE(SetIsaOverride(isa));
        const Status got = DecodeSymbols(bytes.data(), bytes.size(), count, alphabet, coded.flags, out.data());
        CHECK(got.code() == want.code());
        CHECK(got.message() == want.message());
      }
    }
  }
  ClearIsaOverride();
}

TEST_CASE("every ISA's rANS decode kernel matches the reference on random tables, states and words") {
  // The kernel's whole contract, on input no encoder made: any table (absent
  // symbols, scale 1..12 bits, alphabets on both sides of 16), any states in
  // [2^15, 2^31), any words, streams that end inside the vector loop or
  // before it: the same symbols, the same count, position and final states.
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    RansDecodeTable table;
    table.scale_bits = 1 + static_cast<int>(rng() % kRansMaxScaleBits);
    const uint32_t total = 1u << table.scale_bits;
    const uint32_t alphabet = 2 + static_cast<uint32_t>(rng() % 17);  // 2..18
    // Frequencies summing to 2^L over a random subset (at least two symbols
    // when 2^L allows; one otherwise is still a valid table for the kernel).
    std::vector<uint32_t> freq(alphabet, 0);
    for (uint32_t k = 0; k < total; ++k) {
      uint32_t s = static_cast<uint32_t>(rng() % alphabet);
      if (rng() % 3 == 0) s = (s / 3) * 3;  // favour some symbols, leave others absent
      ++freq[s];
    }
    table.alphabet = 0;
    uint32_t cumulative = 0;
    for (uint32_t s = 0; s < 256; ++s) {
      table.freq[s] = s < alphabet ? freq[s] : 0;
      table.start[s] = cumulative;
      for (uint32_t k = 0; k < table.freq[s]; ++k) table.slot_symbol[cumulative + k] = static_cast<uint8_t>(s);
      if (table.freq[s] != 0) table.alphabet = s + 1;
      cumulative += table.freq[s];
    }
    uint32_t states[kRansLanes];
    for (uint32_t& x : states) x = kRansLow + static_cast<uint32_t>(rng() % ((kRansLow << 16) - kRansLow));
    std::vector<uint8_t> stream(rng() % 600);
    for (uint8_t& b : stream) b = static_cast<uint8_t>(rng());
    const std::size_t start = stream.empty() ? 0 : rng() % (stream.size() / 4 + 1);
    const std::size_t count = rng() % 700;
    INFO("trial " << trial << " alphabet " << table.alphabet << " bits " << table.scale_bits << " size "
                  << stream.size() << " count " << count);
    std::size_t want_at = start;
    uint32_t want_states[kRansLanes];
    std::copy(states, states + kRansLanes, want_states);
    std::vector<uint8_t> want(count + 1, 0xA5);
    const std::size_t want_count = RansKernelsFor(Isa::kScalar)
                                       .decode(stream.data(), stream.size(), &want_at, count, table, want_states,
                                               want.data());
    for (Isa isa : AvailableIsas()) {
      INFO("isa " << IsaName(isa));
      std::size_t at = start;
      uint32_t got_states[kRansLanes];
      std::copy(states, states + kRansLanes, got_states);
      std::vector<uint8_t> got(count + 1, 0xA5);
      const std::size_t got_count =
          RansKernelsFor(isa).decode(stream.data(), stream.size(), &at, count, table, got_states, got.data());
      REQUIRE(got_count == want_count);
      CHECK(at == want_at);
      CHECK(std::vector<uint32_t>(got_states, got_states + kRansLanes) ==
            std::vector<uint32_t>(want_states, want_states + kRansLanes));
      CHECK(got[count] == 0xA5);  // nothing written past the symbols asked for
      got.resize(want_count);
      want.resize(want_count);
      REQUIRE(got == want);
      want.resize(count + 1, 0xA5);
    }
  }
}

TEST_CASE("a stream of the single-state rANS format is refused by name") {
  // Scale byte 1..12 then a table: the format of earlier versions.
  const uint8_t old[] = {4, 1, 8, 8, 0, 0, 0x80, 0, 0, 0};
  std::vector<uint8_t> out(10);
  const Status s = DecodeSymbols(old, sizeof old, 10, 2, kFlagSymbolsRans, out.data());
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find("single-state format") != std::string::npos);
}

}  // namespace
}  // namespace fedrt::codec_internal
