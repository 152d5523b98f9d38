// Fixed-length packing kernels: every ISA variant against the scalar
// reference (bytes written, symbols and largest value read back) over every
// packed width, awkward counts and misaligned pointers, plus the chunked
// writer and reader against the one-shot coding, and their rejection of
// invalid symbols and padding.
#include <doctest/doctest.h>

#include <random>
#include <utility>
#include <vector>

#include "fedrt/codecs/payload.h"
#include "fedrt/platform/cpu.h"
#include "symbols/pack_kernels.h"
#include "symbols/symbol_coding.h"
#include "symbols/symbol_streams.h"

namespace fedrt::codec_internal {
namespace {

constexpr std::size_t kCounts[] = {0, 1, 7, 8, 9, 31, 32, 33, 159, 160, 161, 1007, 65539};
constexpr uint32_t kAlphabets[] = {2, 3, 4, 5, 9, 16, 17, 33, 64, 65, 127, 128, 129, 256};

std::vector<uint8_t> Symbols(std::size_t count, uint32_t alphabet, uint32_t seed, bool extremes) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> s(count);
  for (std::size_t i = 0; i < count; ++i) {
    s[i] = static_cast<uint8_t>(extremes ? (rng() & 1 ? alphabet - 1 : 0) : rng() % alphabet);
  }
  return s;
}

TEST_CASE("every pack kernel variant writes and reads the scalar bytes for every width") {
  const PackKernels& ref = PackKernelsFor(Isa::kScalar);
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    const PackKernels& k = PackKernelsFor(isa);
    for (uint32_t alphabet : kAlphabets) {
      INFO("alphabet " << alphabet);
      for (std::size_t count : kCounts) {
        if (count > 2000 && alphabet % 16 > 5) continue;  // keeps the emulated run short
        INFO("count " << count);
        for (bool extremes : {false, true}) {
          for (std::size_t offset : {0u, 3u}) {
            const std::vector<uint8_t> source = Symbols(count, alphabet, alphabet * 31 + static_cast<uint32_t>(count), extremes);
            std::vector<uint8_t> symbols(count + offset);
            std::copy(source.begin(), source.end(), symbols.begin() + static_cast<std::ptrdiff_t>(offset));
            const std::size_t size = PackedStreamSize(count, alphabet);
            // A sentinel byte on each side of the stream catches stray writes.
            std::vector<uint8_t> expected(size + offset + 1, 0xA5), actual(size + offset + 1, 0xA5);
            ref.pack(symbols.data() + offset, count, alphabet, expected.data() + offset);
            k.pack(symbols.data() + offset, count, alphabet, actual.data() + offset);
            REQUIRE(actual == expected);
            std::vector<uint8_t> back_ref(count + offset + 1, 0x5A), back(count + offset + 1, 0x5A);
            const uint32_t largest_ref = ref.unpack(expected.data() + offset, count, alphabet, back_ref.data() + offset);
            const uint32_t largest = k.unpack(expected.data() + offset, count, alphabet, back.data() + offset);
            CHECK(largest == largest_ref);
            REQUIRE(back == back_ref);
            REQUIRE(std::equal(source.begin(), source.end(), back.begin() + static_cast<std::ptrdiff_t>(offset)));
          }
        }
      }
    }
  }
}

TEST_CASE("every unpack kernel variant reports invalid codes and base 3 bytes above 242") {
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    const PackKernels& k = PackKernelsFor(isa);
    for (uint32_t alphabet : {3u, 5u, 9u, 129u}) {
      INFO("alphabet " << alphabet);
      for (std::size_t at : {0u, 100u, 999u}) {
        const std::size_t count = 1000;
        std::vector<uint8_t> stream(PackedStreamSize(count, alphabet), 0);
        std::vector<uint8_t> symbols(count);
        CHECK(k.unpack(stream.data(), count, alphabet, symbols.data()) == 0);
        // All ones in the byte holding symbol `at`: a code >= alphabet (or a base-3 byte of 255).
        const std::size_t byte = alphabet == 3 ? at / 5 : at * static_cast<std::size_t>(PackedBits(alphabet)) / 8;
        stream[byte] = 0xFF;
        CHECK(k.unpack(stream.data(), count, alphabet, symbols.data()) >= alphabet);
      }
    }
  }
}

TEST_CASE("the chunked writer and reader equal the one-shot packed coding on every ISA") {
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    REQUIRE(SetIsaOverride(isa));
    for (uint32_t alphabet : {1u, 2u, 3u, 5u, 9u, 256u}) {
      INFO("alphabet " << alphabet);
      for (std::size_t count : {0u, 1u, 33u, 3999u, 4000u, 4001u, 20011u}) {
        INFO("count " << count);
        const std::vector<uint8_t> symbols = Symbols(count, alphabet, 7, false);
        std::vector<uint8_t> expected(MaxSymbolStreamSize(count, alphabet, SymbolCoding::kPack) + 1, 0);
        uint16_t flags = 0;
        auto size = EncodeSymbols(symbols.data(), count, alphabet, SymbolCoding::kPack, expected.data(),
                                  expected.size(), &flags);
        REQUIRE(size.ok());
        expected.resize(*size);
        // Pieces of uneven lengths, as buckets produce them.
        std::vector<uint8_t> actual(*size + 1, 0xEE);
        PackedSymbolWriter writer(alphabet, actual.data());
        std::size_t done = 0;
        for (std::size_t piece = 1; done < count; piece = piece * 3 % 997 + 1) {
          const std::size_t n = std::min(piece, count - done);
          std::copy(symbols.begin() + static_cast<std::ptrdiff_t>(done),
                    symbols.begin() + static_cast<std::ptrdiff_t>(done + n), writer.Reserve(n));
          writer.Commit(n);
          done += n;
        }
        CHECK(writer.Finish() == *size);
        CHECK(writer.flags() == flags);
        CHECK(actual.back() == 0xEE);
        actual.pop_back();
        REQUIRE(actual == expected);

        PackedSymbolReader reader(expected.data(), count, alphabet);
        REQUIRE(reader.Validate(expected.size()).ok());
        done = 0;
        for (std::size_t piece = 5; done < count; piece = piece * 7 % 3001 + 1) {
          const std::size_t n = std::min(piece, count - done);
          const uint8_t* got = reader.Next(n);
          REQUIRE(std::equal(got, got + n, symbols.begin() + static_cast<std::ptrdiff_t>(done)));
          done += n;
        }
      }
    }
  }
  ClearIsaOverride();
}

TEST_CASE("the chunked reader rejects wrong sizes, invalid symbols and nonzero padding") {
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    REQUIRE(SetIsaOverride(isa));
    for (uint32_t alphabet : {3u, 5u, 8u}) {
      INFO("alphabet " << alphabet);
      const std::size_t count = 9001;  // leaves padding in every width
      std::vector<uint8_t> stream(PackedStreamSize(count, alphabet), 0);
      CHECK(PackedSymbolReader(stream.data(), count, alphabet).Validate(stream.size()).ok());
      CHECK(PackedSymbolReader(stream.data(), count, alphabet).Validate(stream.size() - 1).code() ==
            StatusCode::kCorrupt);
      std::vector<uint8_t> padded = stream;
      padded.back() = 0x80;
      CHECK(PackedSymbolReader(padded.data(), count, alphabet).Validate(padded.size()).code() == StatusCode::kCorrupt);
      if (alphabet != 8) {
        std::vector<uint8_t> bad = stream;
        bad[bad.size() / 2] = 0xFF;
        CHECK(PackedSymbolReader(bad.data(), count, alphabet).Validate(bad.size()).code() == StatusCode::kCorrupt);
        std::vector<uint8_t> out(count);
        CHECK(UnpackSymbols(bad.data(), bad.size(), count, alphabet, out.data()).code() == StatusCode::kCorrupt);
      }
    }
  }
  ClearIsaOverride();
}

TEST_CASE("every code test kernel gives the verdict of the scalar unpack") {
  const PackKernels& ref = PackKernelsFor(Isa::kScalar);
  for (Isa isa : AvailableIsas()) {
    const PackKernels& k = PackKernelsFor(isa);
    if (k.codes_valid == nullptr) continue;
    INFO("isa " << IsaName(isa));
    for (uint32_t alphabet : {5u, 6u, 7u, 9u, 13u, 15u, 17u, 33u, 129u}) {
      INFO("alphabet " << alphabet);
      // Streams of the full width (alphabet 2^b) hold codes >= alphabet too.
      const uint32_t full = uint32_t{1} << PackedBits(alphabet);
      for (std::size_t count : kCounts) {
        if (count > 2000 && alphabet > 16) continue;  // keeps the emulated run short
        INFO("count " << count);
        for (std::size_t offset : {0u, 3u}) {
          std::vector<uint8_t> symbols = Symbols(count, alphabet, alphabet + static_cast<uint32_t>(count), false);
          // Valid, then one code of every value >= alphabet at the start, middle and end.
          std::vector<std::pair<std::size_t, uint32_t>> cases = {{0, 0}};
          for (uint32_t code = alphabet; code < full && count > 0; ++code) {
            for (std::size_t at : {std::size_t{0}, count / 2, count - 1}) cases.emplace_back(at, code);
          }
          for (const auto& [at, code] : cases) {
            std::vector<uint8_t> bad = symbols;
            if (code != 0) bad[at] = static_cast<uint8_t>(code);
            std::vector<uint8_t> stream(PackedStreamSize(count, full) + offset);
            ref.pack(bad.data(), count, full, stream.data() + offset);
            std::vector<uint8_t> back(count + 1);
            const bool expected = count == 0 || ref.unpack(stream.data() + offset, count, alphabet, back.data()) < alphabet;
            CHECK(expected == (code == 0));
            CHECK(k.codes_valid(stream.data() + offset, count, alphabet) == expected);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace fedrt::codec_internal
