// The codecs a firmware build links (fp16, dqsg, ndqsg, topk) encode a fixed
// input to the same payload bytes and decode it to the same floats on every
// build: this file runs on the host (x86-64, AArch64, ARMv7) and on the
// Cortex-M4 under QEMU, and each checks the CRC-32C and size of the payload
// and of the decoded floats against the one list below. The input and the
// context (tests/codecs/support/golden_input.h) are those of
// tests/codecs/dqsg_golden_test.cc, whose golden files
// hold the same payloads (dqsg, ndqsg, fp16) as bytes.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/payload.h"
#include "golden_input.h"
#include "mini_test.h"

namespace {

struct Expected {
  const char* spec;
  std::size_t payload_size;
  uint32_t payload_crc;
  uint32_t decoded_crc;
};

// Made by the x86-64 build (payload format version 2: the seed check made
// every payload 4 bytes longer; the decoded floats did not change); every
// build must reproduce them. fp16, dqsg and
// ndqsg are the CRC-32C of tests/codecs/data/golden_{fp16,dqsg,ndqsg}.{bin,out}.
constexpr Expected kExpected[] = {
    {"fp16", 6061, 0x48ba8fd4u, 0x29b3bb05u},
    {"dqsg:s=2,b=0", 439, 0xc0b2155du, 0xa23ab86bu},
    {"ndqsg:s1=3,rho=3,b=0", 483, 0x67ce660fu, 0x4e486b23u},
    // The payload header carries the canonical spec "topk:k=0.05,...": a C
    // library whose printf has no floating point (newlib-nano as it comes)
    // writes "k=" and changes these bytes.
    {"topk:k=0.05", 796, 0x3a7dd22eu, 0x91a23640u},
};

void CheckCodec(const Expected& expected) {
  const std::size_t d = 3001;
  const std::vector<float> input = fedrt::testing::GoldenInput(d);
  const std::vector<float> side = fedrt::testing::GoldenSideInfo(input);
  const fedrt::CodecContext context = fedrt::testing::GoldenContext();

  // MakeCodec allocates the codec on the heap (caller storage is future work).
  auto codec = fedrt::MakeCodec(expected.spec);
  REQUIRE(codec.ok());
  std::vector<uint8_t> payload((*codec)->MaxEncodedSize(d));
  auto size = (*codec)->Encode(input.data(), d, context, payload.data(), payload.size());
  REQUIRE(size.ok());
  std::vector<float> decoded(d);
  const float* y = (*codec)->needs_side_info() ? side.data() : nullptr;
  REQUIRE((*codec)->Decode(payload.data(), *size, context, decoded.data(), d, y).ok());
  std::vector<uint8_t> decoded_bytes(d * 4);
  for (std::size_t i = 0; i < d; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &decoded[i], 4);
    for (int b = 0; b < 4; ++b) decoded_bytes[4 * i + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
  const uint32_t payload_crc = fedrt::Crc32c(payload.data(), *size);
  const uint32_t decoded_crc = fedrt::Crc32c(decoded_bytes.data(), decoded_bytes.size());
  std::printf("  %s: payload %u bytes crc32c 0x%08lx, decoded crc32c 0x%08lx\n", expected.spec,
              static_cast<unsigned>(*size), static_cast<unsigned long>(payload_crc),
              static_cast<unsigned long>(decoded_crc));
  CHECK(*size == expected.payload_size);
  CHECK(payload_crc == expected.payload_crc);
  CHECK(decoded_crc == expected.decoded_crc);
}

TEST("fp16 encodes the golden input to the same bytes on this build") { CheckCodec(kExpected[0]); }
TEST("dqsg encodes the golden input to the same bytes on this build") { CheckCodec(kExpected[1]); }
TEST("ndqsg encodes the golden input to the same bytes on this build") { CheckCodec(kExpected[2]); }
TEST("topk encodes the golden input to the same bytes on this build") { CheckCodec(kExpected[3]); }

// This program's registry lists fp16, dqsg, ndqsg and topk
// (fedrt_codec_registry in CMakeLists.txt).
TEST("a codec left out of the build's list is refused by name") {
  auto codec = fedrt::MakeCodec("moniqua:theta=0.5");
  REQUIRE(!codec.ok());
  CHECK(codec.status().code() == fedrt::StatusCode::kUnsupported);
  std::printf("  %s\n", codec.status().ToString().c_str());
  auto adaptive = fedrt::MakeAdaptiveCodec("alq");
  REQUIRE(!adaptive.ok());
  CHECK(adaptive.status().code() == fedrt::StatusCode::kUnsupported);
}

}  // namespace
