#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "fedrt/codecs/philox.h"
#include "fedrt/platform/cpu.h"
#include "philox/philox_kernels.h"

namespace fedrt {
namespace {

TEST_CASE("philox matches the specification's known answers") {
  CHECK(Philox4x32({0, 0, 0, 0}, {0, 0}) ==
        PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(Philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(Philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("every philox kernel variant gives the scalar words for every block count") {
  const PhiloxKey key = {0xa4093822u, 0x299f31d0u};
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    for (std::size_t blocks : {0u, 1u, 2u, 3u, 4u, 5u, 7u, 8u, 9u, 11u, 12u, 13u, 14u, 31u, 32u, 33u, 1007u}) {
      INFO("blocks " << blocks);
      // Start near 2^32 so the block counter wraps inside the run.
      const uint32_t first = 0xfffffff0u;
      // One word of slack on each side catches writes outside the range.
      std::vector<uint32_t> expected(4 * blocks + 2, 0xdeadbeefu), actual(4 * blocks + 2, 0xdeadbeefu);
      scalar::PhiloxBlocks(key, first, 7, 11, 0x1201, blocks, expected.data() + 1);
      PhiloxBlocksFor(isa)(key, first, 7, 11, 0x1201, blocks, actual.data() + 1);
      CHECK(actual == expected);
      CHECK(actual.front() == 0xdeadbeefu);
      CHECK(actual.back() == 0xdeadbeefu);
    }
  }
}

TEST_CASE("every philox dither kernel variant gives the scalar dither for every block count") {
  const PhiloxKey key = {0x01234567u, 0x89abcdefu};
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    for (std::size_t blocks : {0u, 1u, 2u, 3u, 4u, 5u, 7u, 8u, 9u, 11u, 12u, 13u, 14u, 15u, 16u, 17u, 31u, 32u, 33u, 1007u}) {
      INFO("blocks " << blocks);
      const uint32_t first = 0xfffffff3u;  // wraps inside the run
      std::vector<uint32_t> words(4 * blocks);
      scalar::PhiloxBlocks(key, first, 3, 5, 0x0701, blocks, words.data());
      // Misaligned by one float, with a sentinel on each side.
      std::vector<float> actual(4 * blocks + 2, 9.0f);
      PhiloxDitherBlocksFor(isa)(key, first, 3, 5, 0x0701, blocks, actual.data() + 1);
      CHECK(actual.front() == 9.0f);
      CHECK(actual.back() == 9.0f);
      for (std::size_t i = 0; i < words.size(); ++i) {
        REQUIRE(actual[i + 1] == UniformFromWord(words[i]) - 0.5f);
      }
    }
  }
}

TEST_CASE("stream words follow the specification's counter layout") {
  RandomStream stream;
  stream.seed = 0x0123456789abcdefull;
  stream.tensor_id = 5;
  stream.round = 9;
  stream.sender_id = 3;
  stream.purpose = RandomPurpose::kStochasticRounding;
  std::vector<uint32_t> words(13);
  PhiloxWords(stream, 0, words.size(), words.data());
  for (uint32_t i = 0; i < words.size(); ++i) {
    const PhiloxCounter block = Philox4x32({i / 4, 5, 9, (3u << 8) | 2u}, {0x89abcdefu, 0x01234567u});
    CHECK(words[i] == block[i % 4]);
  }
}

TEST_CASE("a stream can be read from any offset and gives the same words on every ISA") {
  RandomStream stream;
  stream.seed = 42;
  stream.purpose = RandomPurpose::kDither;
  std::vector<uint32_t> whole(5000);
  std::vector<float> whole_dither(5000);
  SUBCASE("scalar reference") { REQUIRE(SetIsaOverride(Isa::kScalar)); }
  SUBCASE("best ISA") { ClearIsaOverride(); }
  PhiloxWords(stream, 0, whole.size(), whole.data());
  PhiloxDither(stream, 0, whole_dither.size(), whole_dither.data());
  for (uint64_t first : {0u, 1u, 2u, 3u, 5u, 1023u, 1025u}) {
    for (std::size_t count : {0u, 1u, 2u, 3u, 6u, 1029u, 3000u}) {
      std::vector<uint32_t> part(count);
      std::vector<float> dither(count);
      PhiloxWords(stream, first, count, part.data());
      PhiloxDither(stream, first, count, dither.data());
      for (std::size_t i = 0; i < count; ++i) {
        REQUIRE(part[i] == whole[static_cast<std::size_t>(first) + i]);
        REQUIRE(dither[i] == UniformFromWord(part[i]) - 0.5f);
      }
    }
  }
  ClearIsaOverride();
}

TEST_CASE("dither values are u01(r) - 1/2 and lie between -1/2 inclusive and 1/2 exclusive") {
  RandomStream stream;
  stream.seed = 7;
  std::vector<uint32_t> words(4099);
  std::vector<float> dither(words.size());
  PhiloxWords(stream, 0, words.size(), words.data());
  PhiloxDither(stream, 0, dither.size(), dither.data());
  double sum = 0;
  for (std::size_t i = 0; i < words.size(); ++i) {
    CHECK(dither[i] == static_cast<float>(words[i] >> 8) * 0x1p-24f - 0.5f);
    CHECK(dither[i] >= -0.5f);
    CHECK(dither[i] < 0.5f);
    sum += dither[i];
  }
  // Mean of 4099 uniforms on [-1/2, 1/2): standard error 0.0045; 5 sigma bound.
  CHECK(std::abs(sum / static_cast<double>(words.size())) < 0.0226);
  CHECK(UniformFromWord(0) == 0.0f);
  CHECK(UniformFromWord(0xffffffffu) < 1.0f);
}

TEST_CASE("streams with different purposes, senders or rounds differ") {
  RandomStream a;
  a.seed = 99;
  RandomStream b = a;
  b.purpose = RandomPurpose::kRandomSubset;
  RandomStream c = a;
  c.sender_id = 1;
  RandomStream d = a;
  d.round = 1;
  std::vector<uint32_t> wa(64), wb(64), wc(64), wd(64);
  PhiloxWords(a, 0, 64, wa.data());
  PhiloxWords(b, 0, 64, wb.data());
  PhiloxWords(c, 0, 64, wc.data());
  PhiloxWords(d, 0, 64, wd.data());
  CHECK(wa != wb);
  CHECK(wa != wc);
  CHECK(wa != wd);
}

}  // namespace
}  // namespace fedrt
