#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "crc/crc32c_kernels.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/platform/cpu.h"

namespace fedrt {
namespace {

std::vector<uint8_t> PseudoRandomBytes(std::size_t size, uint32_t seed) {
  std::vector<uint8_t> bytes(size);
  for (uint8_t& b : bytes) {
    seed = seed * 1103515245u + 12345u;
    b = static_cast<uint8_t>(seed >> 24);
  }
  return bytes;
}

TEST_CASE("every crc32c variant equals the scalar tables over sizes and alignments") {
  const std::vector<uint8_t> bytes = PseudoRandomBytes(70000, 12345);
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    for (std::size_t offset : {0u, 1u, 3u, 7u}) {
      for (std::size_t size : {0u, 1u, 7u, 8u, 9u, 31u, 32u, 33u, 1007u, 65539u}) {
        CHECK(Crc32cUpdateFor(isa)(0xffffffffu, bytes.data() + offset, size) ==
              scalar::Crc32cUpdate(0xffffffffu, bytes.data() + offset, size));
      }
    }
  }
}

TEST_CASE("the three scalar table sizes give the same crc32c as slicing-by-8") {
  const std::vector<uint8_t> bytes = PseudoRandomBytes(5000, 777);
  for (uint32_t state : {0u, 0xffffffffu, 0x12345678u}) {
    for (std::size_t offset : {0u, 1u, 5u}) {
      for (std::size_t size : {0u, 1u, 7u, 8u, 9u, 63u, 4093u}) {
        const uint32_t expected = scalar::Crc32cUpdateSlice8(state, bytes.data() + offset, size);
        CHECK(scalar::Crc32cUpdateByte(state, bytes.data() + offset, size) == expected);
        CHECK(scalar::Crc32cUpdateNibble(state, bytes.data() + offset, size) == expected);
        CHECK(scalar::Crc32cUpdate(state, bytes.data() + offset, size) == expected);
      }
    }
  }
  const uint8_t text[] = "The quick brown fox jumps over the lazy dog";
  CHECK(~scalar::Crc32cUpdateNibble(0xffffffffu, text, sizeof text - 1) == 0x22620404u);
  CHECK(~scalar::Crc32cUpdateByte(0xffffffffu, text, sizeof text - 1) == 0x22620404u);
}

TEST_CASE("crc32c can be computed in pieces") {
  const uint8_t text[] = "The quick brown fox jumps over the lazy dog";
  const std::size_t n = sizeof text - 1;
  const uint32_t whole = Crc32c(text, n);
  CHECK(whole == 0x22620404u);  // published CRC32C of this sentence
  CHECK(Crc32c(text + 10, n - 10, Crc32c(text, 10)) == whole);
}

}  // namespace
}  // namespace fedrt
