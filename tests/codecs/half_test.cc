// fp16 / bf16 kernels and codecs: the scalar reference against exhaustive
// checks (every finite half round-trips; every midpoint between neighbours
// rounds to the even one), saturation, subnormals, and every ISA variant
// against the scalar reference.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/platform/cpu.h"
#include "half/half_kernels.h"

namespace fedrt {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

uint16_t ToFp16(float f) {
  uint16_t h;
  scalar::FloatToFp16(&f, 1, &h);
  return h;
}
uint16_t ToBf16(float f) {
  uint16_t h;
  scalar::FloatToBf16(&f, 1, &h);
  return h;
}
float Fp16Value(uint16_t h) {
  float f;
  scalar::Fp16ToFloat(&h, 1, &f);
  return f;
}

TEST_CASE("fp16 scalar conversion gives the known bit patterns") {
  CHECK(ToFp16(1.0f) == 0x3C00);
  CHECK(ToFp16(-2.0f) == 0xC000);
  CHECK(ToFp16(0.1f) == 0x2E66);
  CHECK(ToFp16(0.0f) == 0x0000);
  CHECK(ToFp16(-0.0f) == 0x8000);
  CHECK(ToFp16(65504.0f) == 0x7BFF);
  CHECK(ToFp16(0x1p-14f) == 0x0400);    // smallest normal
  CHECK(ToFp16(0x1p-24f) == 0x0001);    // smallest subnormal
  CHECK(ToFp16(0x1p-25f) == 0x0000);    // tie between 0 and 2^-24: even is 0
  CHECK(ToFp16(0x1.8p-25f) == 0x0001);
  CHECK(ToFp16(0x1.8p-24f) == 0x0002);  // tie between 1 and 2 units: even is 2
  CHECK(ToFp16(1.0f + 0x1p-11f) == 0x3C00);       // tie, even mantissa kept
  CHECK(ToFp16(1.0f + 3 * 0x1p-11f) == 0x3C02);   // tie, rounds up to even
  CHECK(ToFp16(0x1.ffcp-15f) == 0x0400);  // largest subnormal + 1/2 ulp rounds into the normals
}

TEST_CASE("fp16 saturates beyond 65504 instead of producing Inf") {
  for (float big : {65504.5f, 65519.0f, 65520.0f, 65536.0f, 1e10f, std::numeric_limits<float>::max()}) {
    INFO("value " << big);
    CHECK(ToFp16(big) == 0x7BFF);
    CHECK(ToFp16(-big) == 0xFBFF);
  }
}

TEST_CASE("fp16 flushes float subnormal inputs to signed zero by rounding") {
  CHECK(ToFp16(1e-40f) == 0x0000);
  CHECK(ToFp16(-1e-40f) == 0x8000);
  CHECK(ToFp16(std::numeric_limits<float>::denorm_min()) == 0x0000);
}

TEST_CASE("every finite fp16 value round-trips and every midpoint rounds to even") {
  for (uint32_t h = 0; h < 0x7BFF; ++h) {  // positive finite, with a next value
    const float lo = Fp16Value(static_cast<uint16_t>(h));
    const float hi = Fp16Value(static_cast<uint16_t>(h + 1));
    REQUIRE(ToFp16(lo) == h);
    REQUIRE(ToFp16(-lo) == (h | 0x8000u));
    const float mid = lo + (hi - lo) / 2;  // exact: halves have 11 significant bits
    const uint32_t even = (h % 2 == 0) ? h : h + 1;
    REQUIRE(ToFp16(mid) == even);
    REQUIRE(ToFp16(std::nextafter(mid, 0.0f)) == h);
    REQUIRE(ToFp16(std::nextafter(mid, 1e9f)) == h + 1);
  }
  CHECK(Fp16Value(0x7BFF) == 65504.0f);
  CHECK(Fp16Value(0x0001) == 0x1p-24f);
  CHECK(std::isinf(Fp16Value(0x7C00)));
}

TEST_CASE("bf16 rounds to nearest even and saturates at its largest finite value") {
  CHECK(ToBf16(1.0f) == 0x3F80);
  CHECK(ToBf16(FromBits(0x3F808000u)) == 0x3F80);  // tie, even kept
  CHECK(ToBf16(FromBits(0x3F818000u)) == 0x3F82);  // tie, rounds up to even
  CHECK(ToBf16(FromBits(0x3F808001u)) == 0x3F81);
  CHECK(ToBf16(std::numeric_limits<float>::max()) == 0x7F7F);
  CHECK(ToBf16(-std::numeric_limits<float>::max()) == 0xFF7F);
  CHECK(ToBf16(FromBits(0x7F7F8000u)) == 0x7F7F);  // would round to Inf without saturation
  // Subnormals keep their (rounded) top bits.
  CHECK(ToBf16(FromBits(0x00012345u)) == 0x0001);
  CHECK(ToBf16(FromBits(0x8000C000u)) == 0x8001);
  CHECK(ToBf16(FromBits(0x00008000u)) == 0x0000);  // tie to even zero
  for (uint32_t h = 0; h < 0x7F7F; ++h) {
    const float value = FromBits(h << 16);
    REQUIRE(ToBf16(value) == h);
    const uint32_t even = (h % 2 == 0) ? h : h + 1;
    REQUIRE(ToBf16(FromBits((h << 16) | 0x8000u)) == even);
  }
}

// Finite floats with every exponent, subnormals and zeros included, plus the
// special cases the kernels must agree on.
std::vector<float> AwkwardFloats(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  const float specials[] = {0.0f, -0.0f, 1e-40f, -1e-42f, 0x1p-25f, 0x1p-24f, 0x1.8p-25f, 65504.0f,
                            65520.0f, -70000.0f, 3e38f, -3.4e38f, 1.0f + 0x1p-11f, 0x1p-14f};
  for (std::size_t i = 0; i < n; ++i) {
    if (rng() % 8 == 0) {
      v[i] = specials[rng() % (sizeof specials / sizeof specials[0])];
    } else {
      uint32_t bits = static_cast<uint32_t>(rng());
      if ((bits & 0x7F800000u) == 0x7F800000u) bits &= 0xBFFFFFFFu;  // no Inf/NaN
      // Bias towards the fp16 range so both paths get exercised.
      if (rng() % 2 == 0) bits = (bits & 0x80FFFFFFu) | static_cast<uint32_t>((100u + rng() % 44u) << 23);
      v[i] = FromBits(bits);
    }
  }
  return v;
}

TEST_CASE("every half kernel variant gives the scalar bits for every size and alignment") {
  const auto& reference = HalfKernelsFor(Isa::kScalar);
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    const auto& kernels = HalfKernelsFor(isa);
    for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 31u, 32u, 33u, 1007u, 65539u}) {
      for (std::size_t offset : {0u, 1u}) {
        INFO("n " << n << " offset " << offset);
        const auto input = AwkwardFloats(n + offset, static_cast<uint32_t>(n));
        const float* in = input.data() + offset;
        for (int format = 0; format < 2; ++format) {
          const FloatToHalfFn to_half = format == 0 ? kernels.float_to_fp16 : kernels.float_to_bf16;
          const FloatToHalfFn to_half_ref = format == 0 ? reference.float_to_fp16 : reference.float_to_bf16;
          const HalfToFloatFn to_float = format == 0 ? kernels.fp16_to_float : kernels.bf16_to_float;
          const HalfToFloatFn to_float_ref = format == 0 ? reference.fp16_to_float : reference.bf16_to_float;
          std::vector<uint16_t> expected(n + 2, 0xABCD), actual(n + 2, 0xABCD);
          to_half_ref(in, n, expected.data() + 1);
          to_half(in, n, actual.data() + 1);
          REQUIRE(actual == expected);
          std::vector<float> back_expected(n + 2, 7.0f), back_actual(n + 2, 7.0f);
          to_float_ref(expected.data() + 1, n, back_expected.data() + 1);
          to_float(expected.data() + 1, n, back_actual.data() + 1);
          for (std::size_t i = 0; i < n + 2; ++i) REQUIRE(Bits(back_actual[i]) == Bits(back_expected[i]));
        }
      }
    }
  }
}

TEST_CASE("every half kernel variant agrees on every fp16 midpoint and every fp16 value") {
  std::vector<float> values;
  for (uint32_t h = 0; h < 0x7BFF; ++h) {
    const float lo = Fp16Value(static_cast<uint16_t>(h));
    const float hi = Fp16Value(static_cast<uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;
    for (float v : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  std::vector<uint16_t> all_halves(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) all_halves[h] = static_cast<uint16_t>(h);
  std::vector<uint16_t> expected(values.size());
  std::vector<float> expected_floats(all_halves.size());
  scalar::FloatToFp16(values.data(), values.size(), expected.data());
  scalar::Fp16ToFloat(all_halves.data(), all_halves.size(), expected_floats.data());
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    std::vector<uint16_t> actual(values.size());
    HalfKernelsFor(isa).float_to_fp16(values.data(), values.size(), actual.data());
    CHECK(actual == expected);
    std::vector<float> floats(all_halves.size());
    HalfKernelsFor(isa).fp16_to_float(all_halves.data(), all_halves.size(), floats.data());
    for (uint32_t h = 0; h < 0x10000; ++h) {
      if (Fp16IsNonFinite(static_cast<uint16_t>(h))) continue;  // callers reject these
      REQUIRE(Bits(floats[h]) == Bits(expected_floats[h]));
    }
  }
}

// True for the variants whose float -> half conversion is the scalar integer
// algorithm, so that even NaN/Inf inputs (which the codecs reject) give the
// scalar bits: everything but the hardware converters of AVX2 (F16C) and
// AArch64 (FCVTN). On ARMv7 the NEON variant is integer NEON.
bool MatchesScalarOnNonFinite(Isa isa) {
#if defined(__arm__) && !defined(__aarch64__)
  return isa == Isa::kScalar || isa == Isa::kNeon;
#else
  return isa == Isa::kScalar;
#endif
}

TEST_CASE("every half kernel variant gives the scalar bits on a sweep of all float bit patterns") {
  // Every 4096th pattern with varying low bits: every exponent (subnormals,
  // Inf and NaN included) and both signs, 2^20 values.
  std::vector<float> values(std::size_t{1} << 20);
  for (uint32_t k = 0; k < values.size(); ++k) values[k] = FromBits((k << 12) | ((k * 0x9E37u) & 0xFFFu));
  std::vector<uint16_t> fp16_expected(values.size()), bf16_expected(values.size());
  scalar::FloatToFp16(values.data(), values.size(), fp16_expected.data());
  scalar::FloatToBf16(values.data(), values.size(), bf16_expected.data());
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    std::vector<uint16_t> fp16(values.size()), bf16(values.size());
    HalfKernelsFor(isa).float_to_fp16(values.data(), values.size(), fp16.data());
    HalfKernelsFor(isa).float_to_bf16(values.data(), values.size(), bf16.data());
    const bool all = MatchesScalarOnNonFinite(isa);
    std::size_t compared = 0, mismatches = 0, first = 0;
    for (std::size_t k = 0; k < values.size(); ++k) {
      if (!all && !std::isfinite(values[k])) continue;
      ++compared;
      if (fp16[k] != fp16_expected[k] || bf16[k] != bf16_expected[k]) {
        if (mismatches++ == 0) first = k;
      }
    }
    INFO("first mismatch at float bits " << Bits(values[first]) << ": fp16 " << fp16[first] << " against "
                                         << fp16_expected[first] << ", bf16 " << bf16[first] << " against "
                                         << bf16_expected[first]);
    CHECK(mismatches == 0);
    CHECK(compared >= values.size() - values.size() / 128);
  }
}

TEST_CASE("all 65536 fp16 patterns go to float and back to the same half on every ISA") {
  std::vector<uint16_t> halves(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<float> floats_expected(halves.size());
  std::vector<uint16_t> back_expected(halves.size());
  scalar::Fp16ToFloat(halves.data(), halves.size(), floats_expected.data());
  scalar::FloatToFp16(floats_expected.data(), floats_expected.size(), back_expected.data());
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    const auto& kernels = HalfKernelsFor(isa);
    std::vector<float> floats(halves.size());
    std::vector<uint16_t> back(halves.size());
    kernels.fp16_to_float(halves.data(), halves.size(), floats.data());
    kernels.float_to_fp16(floats.data(), floats.size(), back.data());
    for (uint32_t h = 0; h < 0x10000; ++h) {
      INFO("half " << h);
      const bool finite = !Fp16IsNonFinite(static_cast<uint16_t>(h));
      if (finite || MatchesScalarOnNonFinite(isa)) {
        REQUIRE(Bits(floats[h]) == Bits(floats_expected[h]));
        REQUIRE(back[h] == back_expected[h]);
      }
      if (finite) REQUIRE(back[h] == h);  // exact round trip, subnormal halves and -0 included
    }
  }
  // Non-finite halves decode to Inf/NaN and, being beyond 65504, saturate.
  CHECK(std::isinf(floats_expected[0x7C00]));
  CHECK(std::isnan(floats_expected[0x7E01]));
  CHECK(Bits(floats_expected[0xFE01]) == 0xFFC02000u);
  CHECK(back_expected[0x7C00] == 0x7BFF);
  CHECK(back_expected[0xFC00] == 0xFBFF);
}

TEST_CASE("float to fp16 agrees on every ISA at the subnormal and overflow boundaries") {
  // Around each power of two from 2^-27 to 2^17 (the subnormal/normal seam
  // at 2^-14, the round-to-zero edge at 2^-25, the saturation at 65504 and
  // 65520) a window of 64 consecutive float patterns each way.
  std::vector<float> values;
  for (int e = -27; e <= 17; ++e) {
    const uint32_t center = Bits(std::ldexp(1.0f, e));
    for (uint32_t d = 0; d < 64; ++d) {
      for (uint32_t bits : {center + d, center - d - 1}) {
        values.push_back(FromBits(bits));
        values.push_back(-FromBits(bits));
      }
    }
  }
  for (uint32_t bits : {Bits(65504.0f), Bits(65520.0f), Bits(0x1.ffcp-15f)}) {
    for (uint32_t d = 0; d < 64; ++d) {
      values.push_back(FromBits(bits + d));
      values.push_back(FromBits(bits - d));
    }
  }
  std::vector<uint16_t> expected(values.size());
  scalar::FloatToFp16(values.data(), values.size(), expected.data());
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    for (std::size_t offset = 0; offset < 8; ++offset) {  // every position within a vector
      std::vector<uint16_t> actual(values.size() - offset);
      HalfKernelsFor(isa).float_to_fp16(values.data() + offset, actual.size(), actual.data());
      REQUIRE(std::equal(actual.begin(), actual.end(), expected.begin() + static_cast<std::ptrdiff_t>(offset)));
    }
  }
  CHECK(ToFp16(65519.996f) == 0x7BFF);
  CHECK(ToFp16(0x1.ffcp-15f) == 0x0400);
}

TEST_CASE("the half kernels run the ISA this build expects") {
  // The variant loops above cover every available ISA; under qemu the ARM
  // builds must include NEON, or they would only have tested scalar.
  const std::string expected = FEDRT_TEST_EXPECT_ISA;
  if (expected.empty()) {
    MESSAGE("FEDRT_TEST_EXPECT_ISA not set for this build; nothing to compare");
    return;
  }
  Isa isa;
  REQUIRE(ParseIsa(expected, &isa));
  const auto isas = AvailableIsas();
  CHECK(std::find(isas.begin(), isas.end(), isa) != isas.end());
  MESSAGE("half kernels tested on " << isas.size() << " ISAs, expected " << expected);
}

CodecContext Context() {
  CodecContext context;
  context.session_seed = 99;
  context.round = 1;
  context.tensor_id = 2;
  context.sender_id = 3;
  return context;
}

TEST_CASE("fp16 and bf16 codecs decode to the rounded input on every ISA") {
  const auto input = AwkwardFloats(1003, 5);
  for (const char* name : {"fp16", "bf16"}) {
    INFO("codec " << name);
    auto codec = MakeCodec(name);
    REQUIRE(codec.ok());
    std::vector<uint16_t> halves(input.size());
    std::vector<float> expected(input.size());
    const bool fp16 = std::strcmp(name, "fp16") == 0;
    (fp16 ? scalar::FloatToFp16 : scalar::FloatToBf16)(input.data(), input.size(), halves.data());
    (fp16 ? scalar::Fp16ToFloat : scalar::Bf16ToFloat)(halves.data(), halves.size(), expected.data());
    std::vector<uint8_t> reference_payload;
    for (Isa isa : AvailableIsas()) {
      INFO("isa " << IsaName(isa));
      REQUIRE(SetIsaOverride(isa));
      std::vector<uint8_t> payload((*codec)->MaxEncodedSize(input.size()));
      auto size = (*codec)->Encode(input.data(), input.size(), Context(), payload.data(), payload.size());
      REQUIRE(size.ok());
      CHECK(*size == kPayloadHeaderSize + (*codec)->spec().size() + 2 * input.size());
      if (reference_payload.empty()) reference_payload = payload;
      CHECK(payload == reference_payload);
      std::vector<float> out(input.size());
      REQUIRE((*codec)->Decode(payload.data(), *size, Context(), out.data(), out.size()).ok());
      for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(Bits(out[i]) == Bits(expected[i]));
      std::vector<float> acc(input.size(), 1.0f);
      REQUIRE((*codec)->DecodeAccumulate(payload.data(), *size, Context(), -2.0f, acc.data(), acc.size()).ok());
      for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(acc[i] == 1.0f + -2.0f * expected[i]);
    }
    ClearIsaOverride();
  }
}

TEST_CASE("fp16 and bf16 decoders reject Inf and NaN bit patterns with a valid CRC") {
  for (const char* name : {"fp16", "bf16"}) {
    INFO("codec " << name);
    auto codec = MakeCodec(name);
    REQUIRE(codec.ok());
    const std::vector<float> input(10, 1.0f);
    std::vector<uint8_t> payload((*codec)->MaxEncodedSize(10));
    auto size = (*codec)->Encode(input.data(), 10, Context(), payload.data(), payload.size());
    REQUIRE(size.ok());
    auto view = ParsePayload(payload.data(), *size);
    REQUIRE(view.ok());
    const std::size_t body = kPayloadHeaderSize + view->spec.size();
    const uint16_t inf = std::strcmp(name, "fp16") == 0 ? 0x7C00 : 0x7F80;
    payload[body + 8] = static_cast<uint8_t>(inf);
    payload[body + 9] = static_cast<uint8_t>(inf >> 8);
    FinishPayload(view->header, view->spec, payload.data());
    std::vector<float> out(10);
    CHECK((*codec)->Decode(payload.data(), *size, Context(), out.data(), 10).code() == StatusCode::kCorrupt);
  }
}

}  // namespace
}  // namespace fedrt
