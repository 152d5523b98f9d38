// Cross-platform golden payloads of the normalized quantizers: the bytes an
// x86 build wrote (tests/codecs/data/qsgd_golden/) must be what every build
// and ISA encodes from the same input, and must decode to the same floats.
// Regenerate (after a deliberate format change) with FEDRT_UPDATE_GOLDEN=1.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/platform/cpu.h"
#include "golden_files.h"

namespace fedrt {
namespace {

const char* const kSpecs[] = {"qsgd:s=4,b=128", "qsgd:s=3,b=0,norm=max,ec=pack", "qsgd:s=60,b=100,ec=none",
                              "terngrad:b=64", "sign:b=100,ec=pack", "alq:bits=3,b=256", "amq:bits=4,b=200"};

// A heavy-tailed input from integer arithmetic only, identical everywhere.
std::vector<float> Input(std::size_t d) {
  std::vector<float> v(d);
  uint32_t state = 12345;
  for (std::size_t i = 0; i < d; ++i) {
    state = state * 1664525u + 1013904223u;
    const float u = static_cast<float>(state >> 8) * 0x1p-24f;  // [0, 1)
    const float magnitude = u * u * u * 4.0f;
    v[i] = (state & 1u) ? -magnitude : magnitude;
  }
  v[5] = 0.0f;
  v[6] = 1e-41f;
  return v;
}

std::string FileFor(const std::string& spec, const char* kind) {
  std::string name;
  for (char c : spec) name += (c == ':' || c == ',' || c == '=') ? '_' : c;
  return std::string(FEDRT_TEST_DATA_DIR) + "/qsgd_golden/" + name + "." + kind;
}

TEST_CASE("golden payloads are reproduced bit for bit on every platform and isa") {
  const bool update = std::getenv("FEDRT_UPDATE_GOLDEN") != nullptr;
  const auto input = Input(777);
  CodecContext context;
  context.session_seed = 0x0123456789abcdefull;
  context.round = 42;
  context.tensor_id = 3;
  context.sender_id = 0x123456;
  for (const char* spec : kSpecs) {
    INFO("codec " << std::string(spec));
    auto made = MakeCodec(spec);
    REQUIRE(made.ok());
    Codec& codec = **made;
    const std::string payload_file = FileFor(spec, "payload");
    const std::string decoded_file = FileFor(spec, "decoded");
    for (Isa isa : AvailableIsas()) {
      INFO("isa " << IsaName(isa));
      REQUIRE(SetIsaOverride(isa));
      std::vector<uint8_t> payload(codec.MaxEncodedSize(input.size()));
      auto size = codec.Encode(input.data(), input.size(), context, payload.data(), payload.size());
      REQUIRE(size.ok());
      payload.resize(*size);
      std::vector<float> decoded(input.size());
      REQUIRE(codec.Decode(payload.data(), payload.size(), context, decoded.data(), decoded.size()).ok());
      if (update && isa == Isa::kScalar) {
        testing::WriteGoldenFile(payload_file, payload.data(), payload.size());
        testing::WriteGoldenFile(decoded_file, decoded.data(), 4 * decoded.size());  // host order: little-endian targets only
      }
      CHECK(payload == testing::ReadGoldenFile(payload_file));
      const std::vector<uint8_t> golden = testing::ReadGoldenFile(decoded_file);
      REQUIRE(golden.size() == 4 * decoded.size());
      CHECK(std::memcmp(golden.data(), decoded.data(), golden.size()) == 0);
    }
  }
  ClearIsaOverride();
}

}  // namespace
}  // namespace fedrt
