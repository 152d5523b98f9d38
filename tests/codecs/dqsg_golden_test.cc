// Cross-architecture golden payloads: the x86-64 build wrote, for a fixed
// input, the payload and the decoded floats of every codec of this family
// (tests/codecs/data/golden_*.bin). Every build (x86-64, AArch64 and ARMv7
// under qemu) must encode the same bytes and decode the same floats.
// Regenerate after a deliberate format change with FEDRT_WRITE_GOLDEN=1.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/platform/cpu.h"
#include "golden_files.h"
#include "golden_input.h"

namespace fedrt {
namespace {

TEST_CASE("golden payloads from the x86-64 build encode and decode identically on this build") {
  const std::size_t d = 3001;
  const auto input = testing::GoldenInput(d);
  const std::vector<float> side = testing::GoldenSideInfo(input);
  const bool write = std::getenv("FEDRT_WRITE_GOLDEN") != nullptr;
  const struct {
    const char* file;
    const char* spec;
  } cases[] = {
      {"golden_dqsg", "dqsg:s=2,b=0"},          {"golden_dqsg_b256_pack", "dqsg:s=5,b=256,ec=pack"},
      {"golden_ndqsg", "ndqsg:s1=3,rho=3,b=0"}, {"golden_ndqsg_b100_pack", "ndqsg:s1=4,rho=5,b=100,ec=pack"},
      {"golden_fp16", "fp16"},                  {"golden_bf16", "bf16"},
  };
  const CodecContext context = testing::GoldenContext();
  for (const auto& c : cases) {
    INFO("codec " << std::string(c.spec));
    auto codec = MakeCodec(c.spec);
    REQUIRE(codec.ok());
    const float* y = (*codec)->needs_side_info() ? side.data() : nullptr;
    const std::string base = std::string(FEDRT_TEST_DATA_DIR) + "/" + c.file;
    for (Isa isa : AvailableIsas()) {
      INFO("isa " << std::string(IsaName(isa)));
      REQUIRE(SetIsaOverride(isa));
      std::vector<uint8_t> payload((*codec)->MaxEncodedSize(d));
      auto size = (*codec)->Encode(input.data(), d, context, payload.data(), payload.size());
      REQUIRE(size.ok());
      payload.resize(*size);
      std::vector<float> decoded(d);
      REQUIRE((*codec)->Decode(payload.data(), payload.size(), context, decoded.data(), d, y).ok());
      const auto decoded_bytes = testing::FloatsLe(decoded);
      if (write && isa == Isa::kScalar) {
        testing::WriteGoldenFile(base + ".bin", payload.data(), payload.size());
        testing::WriteGoldenFile(base + ".out", decoded_bytes.data(), decoded_bytes.size());
      }
      const auto golden_payload = testing::ReadGoldenFile(base + ".bin");
      const auto golden_decoded = testing::ReadGoldenFile(base + ".out");
      REQUIRE_MESSAGE(!golden_payload.empty(), "missing " << base << ".bin");
      CHECK(payload == golden_payload);
      CHECK(decoded_bytes == golden_decoded);
      // The committed payload itself decodes to the committed floats.
      std::vector<float> from_golden(d);
      REQUIRE((*codec)->Decode(golden_payload.data(), golden_payload.size(), context, from_golden.data(), d, y).ok());
      CHECK(testing::FloatsLe(from_golden) == golden_decoded);
    }
  }
  ClearIsaOverride();
}

}  // namespace
}  // namespace fedrt
