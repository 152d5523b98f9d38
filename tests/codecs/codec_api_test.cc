// The codec API and the properties every registered codec must have. New
// codecs are covered here automatically once they are in the registry.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "fedrt/codecs/payload.h"

#include "codec_test_util.h"

namespace fedrt {
namespace {

std::vector<float> Gaussian(std::size_t d, uint32_t seed) { return testing::GaussianVector(d, seed); }

// A registered name plus the keys a codec requires (moniqua has no default theta).
std::string WithRequiredKeys(const std::string& name) { return name == "moniqua" ? "moniqua:theta=1" : name; }

std::unique_ptr<Codec> Make(const std::string& name_or_spec) {
  auto codec = MakeCodec(WithRequiredKeys(name_or_spec));
  REQUIRE_MESSAGE(codec.ok(), codec.status().ToString());
  return std::move(*codec);
}

CodecContext Context() {
  CodecContext context;
  context.session_seed = 0x1234;
  context.round = 3;
  context.tensor_id = 1;
  context.sender_id = 2;
  return context;
}

TEST_CASE("spec strings parse into a name and typed keys") {
  auto spec = CodecSpec::Parse("qsgd:s=4,b=512,norm=max");
  REQUIRE(spec.ok());
  CHECK(spec->name() == "qsgd");
  CHECK(*spec->GetInt("s", 1, 1, 64) == 4);
  CHECK(*spec->GetInt("absent", 7, 1, 64) == 7);
  CHECK(*spec->GetChoice("norm", "l2", {"l2", "max"}) == "max");
  CHECK(spec->CheckKeys({"s", "b", "norm"}).ok());
  CHECK(spec->CheckKeys({"s", "b"}).code() == StatusCode::kInvalidArgument);
  CHECK(spec->GetInt("s", 1, 5, 64).status().code() == StatusCode::kInvalidArgument);
  CHECK(spec->GetChoice("norm", "l2", {"l2"}).status().code() == StatusCode::kInvalidArgument);
  CHECK(*CodecSpec::Parse("topk:k=0.01")->GetDouble("k", 1, 0, 1e12) == doctest::Approx(0.01));
}

TEST_CASE("malformed spec strings are rejected with the reason") {
  for (const char* bad : {"", ":s=1", "dqsg:", "dqsg:s", "dqsg:s=", "dqsg:=2", "dqsg:s=1,s=2",
                          "DQSG", "dqsg:s=1,,b=2", "dq sg"}) {
    INFO("spec '" << bad << "'");
    CHECK(CodecSpec::Parse(bad).status().code() == StatusCode::kInvalidArgument);
  }
  auto not_int = CodecSpec::Parse("dqsg:s=two");
  REQUIRE(not_int.ok());
  CHECK(not_int->GetInt("s", 2, 1, 8).status().message().find("not an integer") != std::string::npos);
}

TEST_CASE("unknown codecs and keys name what is accepted") {
  auto unknown = MakeCodec("dqgs:s=2");
  CHECK(unknown.status().code() == StatusCode::kInvalidArgument);
  CHECK(unknown.status().message().find("fp32") != std::string::npos);
  auto bad_key = MakeCodec("fp32:s=2");
  CHECK(bad_key.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad_key.status().message().find("'s'") != std::string::npos);
}

TEST_CASE("crc32c matches the standard check value") {
  const char* text = "123456789";
  CHECK(Crc32c(reinterpret_cast<const uint8_t*>(text), 9) == 0xE3069283u);
  CHECK(Crc32c(nullptr, 0) == 0u);
}

TEST_CASE("fp32 round-trips exactly and its payload names its spec") {
  auto codec = Make("fp32");
  CHECK(codec->spec() == "fp32:ef=off");
  const auto input = Gaussian(1000, 1);
  std::vector<uint8_t> payload(codec->MaxEncodedSize(input.size()));
  auto size = codec->Encode(input.data(), input.size(), Context(), payload.data(), payload.size());
  REQUIRE(size.ok());
  auto view = ParsePayload(payload.data(), *size);
  REQUIRE(view.ok());
  CHECK(view->spec == "fp32:ef=off");
  CHECK(view->header.d == 1000);
  CHECK(view->header.round == 3);
  std::vector<float> output(input.size());
  REQUIRE(codec->Decode(payload.data(), *size, Context(), output.data(), output.size()).ok());
  CHECK(output == input);
}

TEST_CASE("a payload for another round, tensor or sender is refused") {
  auto codec = Make("fp32");
  const auto input = Gaussian(16, 2);
  std::vector<uint8_t> payload(codec->MaxEncodedSize(16));
  auto size = codec->Encode(input.data(), 16, Context(), payload.data(), payload.size());
  REQUIRE(size.ok());
  std::vector<float> out(16);
  CodecContext other = Context();
  other.round = 4;
  CHECK(codec->Decode(payload.data(), *size, other, out.data(), 16).code() == StatusCode::kFailedPrecondition);
  CHECK(codec->Decode(payload.data(), *size, Context(), out.data(), 15).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a newer payload format version is reported as unsupported") {
  auto codec = Make("fp32");
  const auto input = Gaussian(4, 3);
  std::vector<uint8_t> payload(codec->MaxEncodedSize(4));
  auto size = codec->Encode(input.data(), 4, Context(), payload.data(), payload.size());
  REQUIRE(size.ok());
  payload[4] = kPayloadVersion + 1;
  CHECK(ParsePayload(payload.data(), *size).status().code() == StatusCode::kUnsupported);
}

// ---- Properties of every registered codec ---------------------------------------

struct Encoded {
  std::unique_ptr<Codec> codec;
  std::vector<float> input;
  std::vector<float> side_info;
  std::vector<uint8_t> payload;
};

Encoded EncodeWith(const std::string& name, std::size_t d) {
  Encoded e;
  e.codec = Make(name);
  e.input = Gaussian(d, 7);
  // Side information close to the input, as an aggregator's running mean is.
  e.side_info = e.input;
  for (float& x : e.side_info) x *= 0.99f;
  e.payload.resize(e.codec->MaxEncodedSize(d));
  auto size = e.codec->Encode(e.input.data(), d, Context(), e.payload.data(), e.payload.size());
  REQUIRE_MESSAGE(size.ok(), name << ": " << size.status().ToString());
  REQUIRE(*size <= e.payload.size());
  e.payload.resize(*size);
  return e;
}

TEST_CASE("every codec refuses a payload made under another session seed, naming the seed check") {
  for (const std::string& name : CodecNames()) {
    INFO("codec " << name);
    Encoded e = EncodeWith(name, 1000);
    Result<PayloadView> view = ParsePayload(e.payload.data(), e.payload.size());
    REQUIRE(view.ok());
    CHECK(view->header.seed_check == PayloadSeedCheck(0x1234, 3, 1, 2));
    CodecContext other = Context();
    other.session_seed = 0x1235;
    std::vector<float> out(1000), sum(1000, 0.0f);
    const float* y = e.codec->needs_side_info() ? e.side_info.data() : nullptr;
    const Status wrong = e.codec->Decode(e.payload.data(), e.payload.size(), other, out.data(), 1000, y);
    CHECK(wrong.code() == StatusCode::kFailedPrecondition);
    CHECK(wrong.message().find("payload was encoded under another session seed (payload seed check ") == 0);
    CHECK(e.codec->DecodeAccumulate(e.payload.data(), e.payload.size(), other, 1.0f, sum.data(), 1000, y).code() ==
          StatusCode::kFailedPrecondition);
    CHECK(std::all_of(sum.begin(), sum.end(), [](float v) { return v == 0.0f; }));
    CHECK(e.codec->Decode(e.payload.data(), e.payload.size(), Context(), out.data(), 1000, y).ok());
  }
}

TEST_CASE("a version 1 payload (44-byte header, no seed check) is refused by version") {
  auto codec = Make("fp32");
  const auto input = Gaussian(4, 3);
  std::vector<uint8_t> payload(codec->MaxEncodedSize(4));
  auto size = codec->Encode(input.data(), 4, Context(), payload.data(), payload.size());
  REQUIRE(size.ok());
  // Version 1's layout: the same fields without the seed check, CRC at 40.
  std::vector<uint8_t> v1(payload.begin(), payload.begin() + 40);
  v1.insert(v1.end(), 4, 0);
  v1.insert(v1.end(), payload.begin() + kPayloadHeaderSize, payload.begin() + static_cast<std::ptrdiff_t>(*size));
  v1[4] = 1;
  StoreLe32(v1.data() + 40, Crc32c(v1.data() + 44, v1.size() - 44, Crc32c(v1.data(), 40)));
  const Status refused = ParsePayload(v1.data(), v1.size()).status();
  CHECK(refused.code() == StatusCode::kUnsupported);
  CHECK(refused.message() ==
        "payload format version 1 (an earlier build, without the seed check); this build reads version 2: update "
        "the sender");
  std::vector<float> out(4);
  CHECK(codec->Decode(v1.data(), v1.size(), Context(), out.data(), 4).code() == StatusCode::kUnsupported);
}

TEST_CASE("every codec encodes the same input to the same bytes twice") {
  for (const std::string& name : CodecNames()) {
    INFO("codec " << name);
    for (std::size_t d : {0u, 1u, 7u, 33u, 1000u}) {
      INFO("d " << d);
      Encoded a = EncodeWith(name, d);
      Encoded b = EncodeWith(name, d);
      CHECK(a.payload == b.payload);
    }
  }
}

TEST_CASE("every codec decodes an empty vector's payload into no memory at all") {
  // Found by codec_roundtrip_fuzzer: a sparsifier cleared its output with
  // memset(nullptr, 0, 0), undefined behaviour (UBSan in the asan preset). An
  // empty std::vector's data() may be null, so d = 0 comes with null arrays.
  for (const std::string& name : CodecNames()) {
    INFO("codec " << name);
    Encoded e = EncodeWith(name, 0);
    CHECK(e.codec->Decode(e.payload.data(), e.payload.size(), Context(), nullptr, 0, nullptr).ok());
    CHECK(e.codec->DecodeAccumulate(e.payload.data(), e.payload.size(), Context(), 0.5f, nullptr, 0, nullptr).ok());
  }
}

TEST_CASE("every codec decodes to finite values close to the input") {
  for (const std::string& name : CodecNames()) {
    INFO("codec " << name);
    Encoded e = EncodeWith(name, 4096);
    std::vector<float> out(e.input.size());
    const float* side = e.codec->needs_side_info() ? e.side_info.data() : nullptr;
    REQUIRE(e.codec->Decode(e.payload.data(), e.payload.size(), Context(), out.data(), out.size(), side).ok());
    double error = 0, energy = 0, dot = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      REQUIRE(std::isfinite(out[i]));
      error += (out[i] - e.input[i]) * double{out[i] - e.input[i]};
      energy += e.input[i] * double{e.input[i]};
      dot += out[i] * double{e.input[i]};
    }
    // Loose on purpose: sparsifiers keep a small fraction; the bound catches
    // decoders that return garbage or the wrong scale. Unbiased stochastic
    // quantizers at their spec defaults (qsgd, terngrad, alq, amq: variance up
    // to sqrt(b)/s times the energy) may exceed it; they must then still point
    // the input's way with the right scale (E<decode, g> = ||g||^2).
    if (error / energy >= 1.01) {
      CHECK(error / energy < 16);
      CHECK(dot / energy == doctest::Approx(1.0).epsilon(0.2));
    }
  }
}

TEST_CASE("every codec accumulates weight times its decoded vector") {
  for (const std::string& name : CodecNames()) {
    INFO("codec " << name);
    Encoded e = EncodeWith(name, 777);
    const float* side = e.codec->needs_side_info() ? e.side_info.data() : nullptr;
    std::vector<float> decoded(e.input.size());
    REQUIRE(e.codec->Decode(e.payload.data(), e.payload.size(), Context(), decoded.data(), decoded.size(), side).ok());
    std::vector<float> accumulator(e.input.size(), 1.0f);
    REQUIRE(e.codec->DecodeAccumulate(e.payload.data(), e.payload.size(), Context(), 0.5f,
                                      accumulator.data(), accumulator.size(), side).ok());
    for (std::size_t i = 0; i < decoded.size(); ++i) REQUIRE(accumulator[i] == 1.0f + 0.5f * decoded[i]);
  }
}

TEST_CASE("every codec rejects NaN and Inf in its input") {
  for (const std::string& name : CodecNames()) {
    INFO("codec " << name);
    auto codec = Make(name);
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      auto input = Gaussian(100, 9);
      input[42] = bad;
      std::vector<uint8_t> payload(codec->MaxEncodedSize(100));
      auto size = codec->Encode(input.data(), 100, Context(), payload.data(), payload.size());
      CHECK(size.status().code() == StatusCode::kInvalidArgument);
    }
  }
}

TEST_CASE("every codec rejects truncated and bit-flipped payloads") {
  for (const std::string& name : CodecNames()) {
    INFO("codec " << name);
    Encoded e = EncodeWith(name, 300);
    const float* side = e.codec->needs_side_info() ? e.side_info.data() : nullptr;
    std::vector<float> out(e.input.size());
    for (std::size_t cut = 0; cut < e.payload.size(); cut += 1 + e.payload.size() / 50) {
      std::vector<uint8_t> truncated(e.payload.begin(), e.payload.begin() + static_cast<long>(cut));
      CHECK_FALSE(e.codec->Decode(truncated.data(), truncated.size(), Context(), out.data(), out.size(), side).ok());
    }
    for (std::size_t at = 0; at < e.payload.size(); at += 1 + e.payload.size() / 200) {
      std::vector<uint8_t> flipped = e.payload;
      flipped[at] ^= 0x10;
      CHECK_FALSE(e.codec->Decode(flipped.data(), flipped.size(), Context(), out.data(), out.size(), side).ok());
    }
  }
}

TEST_CASE("every codec refuses an output buffer smaller than MaxEncodedSize") {
  for (const std::string& name : CodecNames()) {
    INFO("codec " << name);
    auto codec = Make(name);
    const auto input = Gaussian(64, 5);
    std::vector<uint8_t> payload(codec->MaxEncodedSize(64) - 1);
    CHECK(codec->Encode(input.data(), 64, Context(), payload.data(), payload.size()).status().code() ==
          StatusCode::kOutOfRange);
  }
}

TEST_CASE("every codec's canonical spec creates an identical codec") {
  for (const std::string& name : CodecNames()) {
    INFO("codec " << name);
    auto codec = Make(name);
    auto again = Make(codec->spec());
    CHECK(again->spec() == codec->spec());
    CHECK(again->id() == codec->id());
  }
}

// On a 32-bit board a size_t bound that wraps would let Encode write past a
// buffer it believed large enough. Up to the largest vector a 32-bit process
// can hold (2^30 floats), every codec's bound grows with d (random-k sends
// no indices, so its bound may stay below d bytes).
TEST_CASE("every codec's MaxEncodedSize grows with d without wrapping, up to 2^30 coordinates") {
  for (const std::string& name : CodecNames()) {
    std::unique_ptr<Codec> codec = Make(name);
    std::size_t previous = 0;
    for (std::size_t d : {std::size_t{1}, std::size_t{1} << 20, std::size_t{1} << 28, std::size_t{1} << 29,
                          (std::size_t{1} << 30) - 1}) {
      INFO(name << " d=" << d);
      const std::size_t bound = codec->MaxEncodedSize(d);
      CHECK(bound > previous);
      previous = bound;
    }
  }
}

}  // namespace
}  // namespace fedrt
