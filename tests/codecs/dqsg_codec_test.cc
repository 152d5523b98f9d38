// DQSG and NDQSG codecs: identical payloads and decoded floats on every ISA,
// the formulas, payload validation, NDQSG against DQSG with side information
// inside and outside the bound, the paper's bit accounting, and the
// aggregator helpers of fedrt/codecs/ndqsg.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dqsg/dqsg_kernels.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/ndqsg.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/codecs/philox.h"
#include "fedrt/platform/cpu.h"

namespace fedrt {
namespace {

std::unique_ptr<Codec> Make(const std::string& spec) {
  auto codec = MakeCodec(spec);
  REQUIRE_MESSAGE(codec.ok(), codec.status().ToString());
  return std::move(*codec);
}

CodecContext Context(uint32_t sender = 5) {
  CodecContext context;
  context.session_seed = 0x5eed0001ull;
  context.round = 12;
  context.tensor_id = 3;
  context.sender_id = sender;
  return context;
}

std::vector<float> Gaussian(std::size_t d, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(d);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<uint8_t> Encode(Codec& codec, const std::vector<float>& input, const CodecContext& context) {
  std::vector<uint8_t> payload(codec.MaxEncodedSize(input.size()));
  auto size = codec.Encode(input.data(), input.size(), context, payload.data(), payload.size());
  REQUIRE_MESSAGE(size.ok(), size.status().ToString());
  payload.resize(*size);
  return payload;
}

std::vector<float> Decode(const Codec& codec, const std::vector<uint8_t>& payload, std::size_t d,
                          const CodecContext& context, const float* side_info = nullptr) {
  std::vector<float> out(d);
  const Status status = codec.Decode(payload.data(), payload.size(), context, out.data(), d, side_info);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Awkward content: a zero bucket, subnormals, a large bucket.
std::vector<float> Awkward(std::size_t d) {
  auto v = Gaussian(d, static_cast<uint32_t>(d));
  for (std::size_t i = 0; i < d; ++i) {
    if (i >= 100 && i < 200) v[i] = 0.0f;
    if (i >= 200 && i < 300) v[i] *= 1e-39f;
    if (i >= 300 && i < 400) v[i] *= 1e30f;
  }
  return v;
}

TEST_CASE("dqsg and ndqsg give the same payload and the same floats on every ISA") {
  for (const char* spec : {"dqsg", "dqsg:s=1,b=100,ec=pack", "dqsg:s=7,b=64,ec=none", "dqsg:s=127,b=33",
                           "ndqsg", "ndqsg:s1=5,rho=5,b=100,ec=pack", "ndqsg:s1=3,rho=3,b=7,ec=none", "ndqsg:s1=3,rho=2,ec=pack",
                           "ndqsg:s1=2,rho=4,b=64"}) {
    INFO("codec " << std::string(spec));
    auto codec = Make(spec);
    for (std::size_t d : {0u, 1u, 7u, 33u, 1007u, 65539u}) {
      INFO("d " << d);
      const auto input = Awkward(d);
      auto side = input;
      for (float& y : side) y *= 0.999f;
      const float* side_info = codec->needs_side_info() ? side.data() : nullptr;
      std::vector<uint8_t> reference;
      std::vector<float> reference_out, reference_acc;
      for (Isa isa : AvailableIsas()) {
        INFO("isa " << std::string(IsaName(isa)));
        REQUIRE(SetIsaOverride(isa));
        const auto payload = Encode(*codec, input, Context());
        const auto out = Decode(*codec, payload, d, Context(), side_info);
        std::vector<float> acc(input);
        REQUIRE(codec->DecodeAccumulate(payload.data(), payload.size(), Context(), -0.75f, acc.data(), d, side_info).ok());
        if (reference.empty() && reference_out.empty()) {
          reference = payload;
          reference_out = out;
          reference_acc = acc;
        }
        CHECK(payload == reference);
        CHECK(SameBits(out, reference_out));
        CHECK(SameBits(acc, reference_acc));
        for (std::size_t i = 0; i < d; ++i) REQUIRE(acc[i] == input[i] + -0.75f * out[i]);
      }
      ClearIsaOverride();
    }
  }
}

TEST_CASE("dqsg decodes to the formula with the shared dither and one scale per bucket") {
  const std::size_t d = 1000, b = 300;
  auto codec = Make("dqsg:s=3,b=300");
  CHECK(codec->spec() == "dqsg:s=3,b=300,ef=off,ec=rans");
  const auto input = Gaussian(d, 4);
  const auto payload = Encode(*codec, input, Context());
  const auto out = Decode(*codec, payload, d, Context());
  RandomStream stream;
  stream.seed = Context().session_seed;
  stream.tensor_id = Context().tensor_id;
  stream.round = Context().round;
  stream.sender_id = Context().sender_id;
  std::vector<float> u(d);
  PhiloxDither(stream, 0, d, u.data());
  for (std::size_t start = 0; start < d; start += b) {
    const std::size_t end = std::min(d, start + b);
    float max = 0;
    for (std::size_t i = start; i < end; ++i) max = std::fmax(max, std::fabs(input[i]));
    const float scale = max / 3.0f;
    for (std::size_t i = start; i < end; ++i) {
      const float q = std::fmax(-3.0f, std::fmin(3.0f, std::nearbyint(input[i] / scale + u[i])));
      REQUIRE(out[i] == (q - u[i]) * scale);
      REQUIRE(std::fabs(out[i] - input[i]) <= 0.5f * scale * (1 + 1e-5f));
    }
  }
}

TEST_CASE("an all-zero bucket carries no symbols and decodes to zeros") {
  auto codec = Make("dqsg:b=10,ec=none");
  std::vector<float> input(30, 0.0f);
  for (std::size_t i = 10; i < 20; ++i) input[i] = static_cast<float>(i);
  const auto payload = Encode(*codec, input, Context());
  auto view = ParsePayload(payload.data(), payload.size());
  REQUIRE(view.ok());
  CHECK(view->body_size == 3 * 4 + 10);  // three scales, ten one-byte symbols
  const auto out = Decode(*codec, payload, 30, Context());
  for (std::size_t i = 0; i < 10; ++i) CHECK(out[i] == 0.0f);
  for (std::size_t i = 20; i < 30; ++i) CHECK(out[i] == 0.0f);
}

TEST_CASE("dqsg refuses inputs whose reconstruction would overflow float") {
  auto codec = Make("dqsg:s=2");
  std::vector<float> input = {1.0f, 3.3e38f, -2.0f};
  std::vector<uint8_t> payload(codec->MaxEncodedSize(3));
  CHECK(codec->Encode(input.data(), 3, Context(), payload.data(), payload.size()).status().code() ==
        StatusCode::kInvalidArgument);
  input[1] = 1e38f;  // (2 + 1/2) * 1e38 / 2 is finite
  CHECK(codec->Encode(input.data(), 3, Context(), payload.data(), payload.size()).ok());
}

// Rewrites the first bucket scale of a payload and fixes the CRC, so only the
// semantic checks can reject it.
std::vector<uint8_t> WithScale(std::vector<uint8_t> payload, float scale) {
  auto view = ParsePayload(payload.data(), payload.size());
  REQUIRE(view.ok());
  StoreFloatLe(payload.data() + kPayloadHeaderSize + view->spec.size(), scale);
  FinishPayload(view->header, view->spec, payload.data());
  return payload;
}

TEST_CASE("dqsg and ndqsg decoders reject invalid scales even with a valid CRC") {
  for (const char* spec : {"dqsg", "ndqsg"}) {
    INFO("codec " << std::string(spec));
    auto codec = Make(spec);
    const auto input = Gaussian(50, 1);
    const auto payload = Encode(*codec, input, Context());
    std::vector<float> out(50);
    for (float bad : {-1.0f, -0.0f, NAN, INFINITY, 3e38f}) {
      INFO("scale " << bad);
      const auto tampered = WithScale(payload, bad);
      CHECK(codec->Decode(tampered.data(), tampered.size(), Context(), out.data(), 50, input.data()).code() ==
            StatusCode::kCorrupt);
    }
    // A zero scale leaves the symbols unaccounted for: trailing bytes.
    const auto zero = WithScale(payload, 0.0f);
    CHECK(codec->Decode(zero.data(), zero.size(), Context(), out.data(), 50, input.data()).code() ==
          StatusCode::kCorrupt);
  }
}

TEST_CASE("codec keys are checked") {
  for (const char* bad : {"dqsg:s=0", "dqsg:s=128", "dqsg:rho=3", "ndqsg:rho=256", "ndqsg:rho=1", "ndqsg:s=2",
                          "ndqsg:s1=0", "dqsg:b=-1", "dqsg:ec=zip"}) {
    INFO("spec " << bad);
    CHECK(MakeCodec(bad).status().code() == StatusCode::kInvalidArgument);
  }
  CHECK(Make("ndqsg")->spec() == "ndqsg:s1=3,rho=3,b=0,ef=off,ec=rans");
  CHECK(Make("ndqsg")->needs_side_info());
  CHECK_FALSE(Make("dqsg")->needs_side_info());
}

TEST_CASE("the nesting ratio ladder and respelled specs keep every other key") {
  CHECK(NdqsgNextRho(2) == 3);
  CHECK(NdqsgNextRho(3) == 5);
  CHECK(NdqsgNextRho(4) == 5);
  CHECK(NdqsgPreviousRho(5) == 3);
  CHECK(NdqsgPreviousRho(3) == 2);
  CHECK(NdqsgPreviousRho(2) == 2);
  CHECK(*NdqsgSpecWithRho("ndqsg:s1=1,rho=2,ec=pack,b=64", 5) == "ndqsg:s1=1,rho=5,b=64,ef=off,ec=pack");
  CHECK(NdqsgSpecWithRho("ndqsg", 256).status().code() == StatusCode::kInvalidArgument);
  CHECK(NdqsgSpecWithRho("dqsg", 3).status().code() == StatusCode::kInvalidArgument);
  CHECK(*NdqsgAnchorSpec("ndqsg:s1=3,ec=pack", 1) == "dqsg:s=1,b=0,ef=off,ec=pack");
  CHECK(*NdqsgAnchorSpec("ndqsg:s1=3,ec=pack", 0) == "dqsg:s=3,b=0,ef=off,ec=pack");
  CHECK(NdqsgAnchorSpec("ndqsg", 128).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("ndqsg without side information is an invalid argument") {
  auto codec = Make("ndqsg");
  const auto input = Gaussian(40, 2);
  const auto payload = Encode(*codec, input, Context());
  std::vector<float> out(40);
  CHECK(codec->Decode(payload.data(), payload.size(), Context(), out.data(), 40).code() ==
        StatusCode::kInvalidArgument);
  CHECK(codec->DecodeAccumulate(payload.data(), payload.size(), Context(), 1.0f, out.data(), 40).code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("ndqsg rejects NaN or Inf side information and leaves an accumulator untouched") {
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    REQUIRE(SetIsaOverride(isa));
    for (const char* spec : {"ndqsg:ec=pack", "ndqsg:ec=rans,b=64"}) {
      INFO(spec);
      auto codec = Make(spec);
      const std::size_t d = 1007;
      const auto input = Gaussian(d, 3);
      const auto payload = Encode(*codec, input, Context());
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        std::vector<float> side = input;
        side[d - 5] = bad;
        std::vector<float> out(d);
        CHECK(codec->Decode(payload.data(), payload.size(), Context(), out.data(), d, side.data()).code() ==
              StatusCode::kInvalidArgument);
        std::vector<float> accumulator(d, 2.0f);
        CHECK(codec->DecodeAccumulate(payload.data(), payload.size(), Context(), 1.0f, accumulator.data(), d,
                                      side.data())
                  .code() == StatusCode::kInvalidArgument);
        CHECK(accumulator == std::vector<float>(d, 2.0f));
      }
    }
  }
  ClearIsaOverride();
}

// Per-coordinate coarse step D2 = rho * scale of each bucket, recomputed as the codec does.
std::vector<float> CoarseSteps(const std::vector<float>& input, std::size_t b, int s1, int rho) {
  std::vector<float> steps(input.size());
  const std::size_t bucket = b == 0 ? input.size() : b;
  for (std::size_t start = 0; start < input.size(); start += bucket) {
    const std::size_t end = std::min(input.size(), start + bucket);
    const float scale = scalar::MaxAbs(input.data() + start, end - start) / static_cast<float>(s1);
    for (std::size_t i = start; i < end; ++i) steps[i] = static_cast<float>(rho) * scale;
  }
  return steps;
}

TEST_CASE("ndqsg decodes bit-identically to dqsg when the side information is within the bound") {
  for (const char* b : {"0", "128"}) {
    for (int rho : {2, 3, 5}) {
      const std::string nested_spec = "ndqsg:s1=3,rho=" + std::to_string(rho) + ",b=" + b;
      INFO("codec " << nested_spec);
      auto nested = Make(nested_spec);
      auto anchor_spec = NdqsgAnchorSpec(nested_spec);
      REQUIRE(anchor_spec.ok());
      auto plain = Make(*anchor_spec);
      const auto input = Gaussian(5003, 11);
      const auto steps = CoarseSteps(input, std::stoul(b), 3, rho);
      const auto dqsg = Decode(*plain, Encode(*plain, input, Context()), input.size(), Context());
      std::mt19937 rng(4);
      std::uniform_real_distribution<float> offset(-0.49f, 0.49f);
      std::vector<float> y(input.size());
      for (std::size_t i = 0; i < y.size(); ++i) y[i] = dqsg[i] + offset(rng) * steps[i];
      for (Isa isa : AvailableIsas()) {
        INFO("isa " << std::string(IsaName(isa)));
        REQUIRE(SetIsaOverride(isa));
        const auto payload = Encode(*nested, input, Context());
        CHECK(SameBits(Decode(*nested, payload, input.size(), Context(), y.data()), dqsg));
      }
      ClearIsaOverride();
    }
  }
}

TEST_CASE("ndqsg outside the bound is off by the predicted multiple of the coarse step") {
  auto nested = Make("ndqsg:s1=3,rho=3");
  auto plain = Make("dqsg:s=3");
  const auto input = Gaussian(4000, 12);
  const auto steps = CoarseSteps(input, 0, 3, 3);
  const auto dqsg = Decode(*plain, Encode(*plain, input, Context()), input.size(), Context());
  std::vector<float> y(input.size());
  std::vector<float> predicted_wraps(input.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    // Offsets of 0.7, 1.3, -1.6, 2.2 coarse steps: wraps of 1, 1, -2, 2 steps.
    const float offsets[] = {0.7f, 1.3f, -1.6f, 2.2f, 0.2f};
    const float offset = offsets[i % 5];
    y[i] = dqsg[i] + offset * steps[i];
    predicted_wraps[i] = std::nearbyint(offset);
  }
  const auto out = Decode(*nested, Encode(*nested, input, Context()), input.size(), Context(), y.data());
  for (std::size_t i = 0; i < out.size(); ++i) {
    INFO("coordinate " << i);
    const float wraps = (out[i] - dqsg[i]) / steps[i];
    REQUIRE(std::fabs(wraps - predicted_wraps[i]) < 1e-3f);
    if (predicted_wraps[i] == 0.0f) REQUIRE(out[i] == dqsg[i]);
  }
}

TEST_CASE("the fixed-length rate reproduces the paper's FC 784-300-100-10 figures") {
  const std::vector<std::size_t> tensors = {784 * 300, 300, 300 * 100, 100, 100 * 10, 10};
  std::size_t d = 0;
  for (std::size_t n : tensors) d += n;
  REQUIRE(d == 266610);
  const double dqsg_bits = IdealFixedLengthBits(d, tensors.size(), 5);
  const double ndqsg_bits = IdealFixedLengthBits(d, tensors.size(), 3);
  CHECK(std::llround(dqsg_bits) == 619241);
  CHECK(std::llround(ndqsg_bits) == 422759);

  // Measured payloads with fixed-length packing, one scale per tensor.
  auto nested = Make("ndqsg:s1=3,rho=3,ec=pack");
  auto plain = Make("dqsg:s=2,ec=pack");
  std::size_t nested_bytes = 0, plain_bytes = 0, nested_headers = 0, plain_headers = 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const auto input = Gaussian(tensors[t], static_cast<uint32_t>(100 + t), 0.01f);
    CodecContext context = Context();
    context.tensor_id = static_cast<uint32_t>(t);
    nested_bytes += Encode(*nested, input, context).size();
    plain_bytes += Encode(*plain, input, context).size();
    nested_headers += kPayloadHeaderSize + nested->spec().size();
    plain_headers += kPayloadHeaderSize + plain->spec().size();
    // Base-3 packing: exactly ceil(n / 5) bytes of trits after the 4-byte scale.
    CHECK(Encode(*nested, input, context).size() == kPayloadHeaderSize + nested->spec().size() + 4 + (tensors[t] + 4) / 5);
  }
  const double nested_body_bits = 8.0 * static_cast<double>(nested_bytes - nested_headers);
  const double plain_body_bits = 8.0 * static_cast<double>(plain_bytes - plain_headers);
  MESSAGE("ndqsg ec=pack: " << 8 * nested_bytes << " bits with headers, " << nested_body_bits
                            << " body bits, ideal " << ndqsg_bits);
  MESSAGE("dqsg s=2 ec=pack: " << 8 * plain_bytes << " bits with headers, " << plain_body_bits
                               << " body bits, ideal " << dqsg_bits);
  // Base 3 costs 1.6 bits per trit against log2(3) = 1.585: under 1% over the ideal body.
  CHECK(nested_body_bits >= ndqsg_bits);
  CHECK(nested_body_bits < ndqsg_bits * 1.0095 + 8.0 * static_cast<double>(tensors.size()));
  // Fixed-length packing of 5 symbols takes 3 bits: exactly 3/log2(5) of the symbol part.
  CHECK(plain_body_bits == doctest::Approx(3.0 * static_cast<double>(d) + 32.0 * 6).epsilon(1e-4));
}

TEST_CASE("anchors are a deterministic subset that changes with the round") {
  const std::vector<uint32_t> senders = {9, 3, 7, 1, 12, 40, 41, 2};
  CHECK(NdqsgAnchorCount(8, 0.5) == 4);
  CHECK(NdqsgAnchorCount(8, 0.01) == 1);
  CHECK(NdqsgAnchorCount(8, 2.0) == 8);
  CHECK(NdqsgAnchorCount(0, 0.5) == 0);
  const auto a = ChooseNdqsgAnchors(77, 5, senders, 4);
  CHECK(a == ChooseNdqsgAnchors(77, 5, {1, 2, 3, 7, 9, 12, 40, 41}, 4));
  REQUIRE(a.size() == 4);
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(std::find(senders.begin(), senders.end(), a[i]) != senders.end());
    if (i > 0) CHECK(a[i - 1] < a[i]);
  }
  bool differs = false;
  for (uint32_t round = 6; round < 16; ++round) differs = differs || ChooseNdqsgAnchors(77, round, senders, 4) != a;
  CHECK(differs);
  CHECK(ChooseNdqsgAnchors(77, 5, senders, 20).size() == 8);
  // Every sender is chosen sometimes (no stuck slot).
  std::vector<int> chosen(42, 0);
  for (uint32_t round = 0; round < 200; ++round) {
    for (uint32_t id : ChooseNdqsgAnchors(3, round, senders, 2)) ++chosen[id];
  }
  for (uint32_t id : senders) CHECK(chosen[id] > 20);
}

TEST_CASE("the running mean decodes anchors then nested updates to the dqsg round average") {
  const std::string nested_spec = "ndqsg:s1=3,rho=5,b=256";
  auto nested = Make(nested_spec);
  auto plain = Make(*NdqsgAnchorSpec(nested_spec));
  CHECK(plain->spec() == "dqsg:s=3,b=256,ef=off,ec=rans");
  const std::size_t d = 2000, senders = 6;
  // Workers' updates: a shared signal plus small individual noise, as gradients are.
  const auto common = Gaussian(d, 50);
  std::vector<std::vector<float>> updates(senders);
  for (std::size_t k = 0; k < senders; ++k) {
    updates[k] = Gaussian(d, static_cast<uint32_t>(60 + k), 0.05f);
    for (std::size_t i = 0; i < d; ++i) updates[k][i] += common[i];
  }
  std::vector<uint32_t> ids(senders);
  for (uint32_t k = 0; k < senders; ++k) ids[k] = k;
  const auto anchors = ChooseNdqsgAnchors(Context().session_seed, Context().round, ids, NdqsgAnchorCount(senders, 0.5));
  REQUIRE(anchors.size() == 3);
  NdqsgRunningMean mean(d), reference(d);
  std::vector<float> scratch(d);
  std::size_t near_wraps = 0;
  CHECK(mean.AddNested(*nested, nullptr, 0, Context(), scratch.data(), 0.05f, nullptr).code() ==
        StatusCode::kFailedPrecondition);
  for (int pass = 0; pass < 2; ++pass) {  // anchors first, then the nested senders
    for (uint32_t k = 0; k < senders; ++k) {
      const bool anchor = std::find(anchors.begin(), anchors.end(), k) != anchors.end();
      if (anchor != (pass == 0)) continue;
      const CodecContext context = Context(k);
      Codec& codec = anchor ? *plain : *nested;
      const auto payload = Encode(codec, updates[k], context);
      NdqsgWrapReport report;
      if (anchor) {
        REQUIRE(mean.AddAnchor(*plain, payload.data(), payload.size(), context, scratch.data()).ok());
      } else {
        REQUIRE(mean.AddNested(*nested, payload.data(), payload.size(), context, scratch.data(), 0.05f, &report).ok());
        near_wraps += report.near_wrap;
      }
      // The reference: every sender with dqsg, same order.
      const auto dqsg = Decode(*plain, Encode(*plain, updates[k], context), d, context);
      reference.Add(dqsg.data());
    }
  }
  CHECK(mean.count() == senders);
  CHECK(near_wraps == 0);
  CHECK(std::memcmp(mean.mean(), reference.mean(), d * sizeof(float)) == 0);
  mean.Reset();
  CHECK(mean.count() == 0);
  CHECK(mean.mean()[7] == 0.0f);
}

TEST_CASE("the wrap diagnostic counts coordinates near the coarse boundary") {
  auto nested = Make("ndqsg:s1=3,rho=3");
  const auto input = Gaussian(1000, 21);
  const auto steps = CoarseSteps(input, 0, 3, 3);
  const auto payload = Encode(*nested, input, Context());
  auto plain = Make("dqsg:s=3");
  const auto dqsg = Decode(*plain, Encode(*plain, input, Context()), input.size(), Context());
  std::vector<float> y(input.size());
  std::size_t expected = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const float offset = (i % 4 == 0) ? 0.47f : 0.2f;  // 0.47 is within margin 0.05 of 1/2
    y[i] = dqsg[i] + offset * steps[i];
    expected += (i % 4 == 0) ? 1 : 0;
  }
  const auto out = Decode(*nested, payload, input.size(), Context(), y.data());
  auto near = CountNearWrap(*nested, payload.data(), payload.size(), Context(), out.data(), y.data(), y.size(), 0.05f);
  REQUIRE(near.ok());
  CHECK(*near == expected);
  auto none = CountNearWrap(*nested, payload.data(), payload.size(), Context(), out.data(), y.data(), y.size(), 0.0f);
  CHECK(*none == 0);
  CHECK(CountNearWrap(*plain, payload.data(), payload.size(), Context(), out.data(), y.data(), y.size(), 0.05f)
            .status()
            .code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedrt
