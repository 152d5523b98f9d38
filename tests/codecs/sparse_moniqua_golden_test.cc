// Golden payloads: fixed inputs encoded by topk, randk, rtopk and moniqua must
// give these exact payload bytes and decoded floats on every ISA and
// platform (the constants were written by the x86 build, payload format
// version 2; the AArch64 and
// ARMv7 builds check them under qemu).
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "codec_test_util.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/platform/cpu.h"

namespace fedrt {
namespace {

// Deterministic on every platform: an LCG mapped to roughly [-4, 4) with a
// spread of exponents (no library distribution involved).
std::vector<float> FixedInput(std::size_t d) {
  std::vector<float> v(d);
  uint32_t state = 12345;
  for (std::size_t i = 0; i < d; ++i) {
    state = state * 1664525u + 1013904223u;
    const float u = static_cast<float>(state >> 8) * 0x1p-24f;  // [0, 1)
    v[i] = (u - 0.5f) * 8.0f * (i % 5 == 0 ? 0.01f : 1.0f);
  }
  return v;
}

struct Golden {
  const char* spec;
  uint32_t payload_crc;
  uint32_t decoded_crc;
};

uint32_t Crc(const void* data, std::size_t size) { return Crc32c(static_cast<const uint8_t*>(data), size); }

TEST_CASE("golden payloads and decoded floats are identical on every ISA and platform") {
  const Golden goldens[] = {
      {"topk:k=0.05", 3997077293u, 4257576273u},
      {"topk:k=0.05,v=fp16", 1695051246u, 1361682734u},
      {"randk:k=0.05", 1721404343u, 1228417290u},
      {"randk:k=0.05,idx=list", 1043955606u, 1228417290u},
      {"rtopk:k=0.05,r=0.2", 4106143387u, 513559745u},
      {"moniqua:bits=1,theta=0.5", 4073232355u, 163904873u},
      {"moniqua:bits=3,theta=0.25,round=stochastic", 2000146231u, 3270725859u},
      {"moniqua:bits=8,theta=2,ec=rans", 4026180010u, 3836826578u},
  };
  const std::size_t d = 70001;
  const auto x = FixedInput(d);
  std::vector<float> side(x);
  for (std::size_t i = 0; i < d; ++i) side[i] = x[i] * 0.97f;
  CodecContext context;
  context.session_seed = 0x5eed5eed5eedull;
  context.round = 17;
  context.tensor_id = 3;
  context.sender_id = 9;
  for (const Golden& g : goldens) {
    for (Isa isa : AvailableIsas()) {
      REQUIRE(SetIsaOverride(isa));
      INFO(g.spec << " isa " << IsaName(isa));
      auto codec = testing::MakeOrFail(g.spec);
      const auto payload = testing::EncodeOrFail(*codec, x, context);
      std::vector<float> out(d);
      REQUIRE(codec->Decode(payload.data(), payload.size(), context, out.data(), d,
                            codec->needs_side_info() ? side.data() : nullptr)
                  .ok());
      const uint32_t pc = Crc(payload.data(), payload.size());
      const uint32_t dc = Crc(out.data(), out.size() * sizeof(float));
      if (pc != g.payload_crc || dc != g.decoded_crc) {
        MESSAGE("{\"" << std::string(g.spec) << "\", " << std::to_string(pc) << "u, " << std::to_string(dc) << "u},");
      }
      CHECK(pc == g.payload_crc);
      CHECK(dc == g.decoded_crc);
    }
  }
  ClearIsaOverride();
}

}  // namespace
}  // namespace fedrt
