// The normalized quantizers (qsgd, terngrad, sign, alq, amq) and level tables:
// unbiasedness, variance, value sets, adaptive tables and malformed payloads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/levels.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/platform/cpu.h"

#include "codec_test_util.h"

namespace fedrt {
namespace {

std::vector<float> Gaussian(std::size_t d, uint32_t seed) { return testing::GaussianVector(d, seed); }

std::vector<float> Laplace(std::size_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::exponential_distribution<float> exponential(1.0f);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> v(d);
  for (float& x : v) x = (sign(rng) ? 1.0f : -1.0f) * exponential(rng);
  return v;
}

std::unique_ptr<Codec> Make(const std::string& spec) {
  auto codec = MakeCodec(spec);
  REQUIRE_MESSAGE(codec.ok(), codec.status().ToString());
  return std::move(*codec);
}

CodecContext Context(uint32_t round = 5) {
  CodecContext context;
  context.session_seed = 0xfeedbeefcafeull;
  context.round = round;
  context.tensor_id = 2;
  context.sender_id = 9;
  return context;
}

std::vector<uint8_t> EncodeOrDie(Codec& codec, const std::vector<float>& input, const CodecContext& context) {
  std::vector<uint8_t> payload(codec.MaxEncodedSize(input.size()));
  auto size = codec.Encode(input.data(), input.size(), context, payload.data(), payload.size());
  REQUIRE_MESSAGE(size.ok(), size.status().ToString());
  payload.resize(*size);
  return payload;
}

std::vector<float> RoundTrip(Codec& codec, const std::vector<float>& input, const CodecContext& context) {
  const auto payload = EncodeOrDie(codec, input, context);
  std::vector<float> out(input.size());
  const Status status = codec.Decode(payload.data(), payload.size(), context, out.data(), out.size());
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return out;
}

double SquaredDistance(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
  return sum;
}

double Energy(const std::vector<float>& a) {
  double sum = 0;
  for (float x : a) sum += double{x} * x;
  return sum;
}

// Expected squared error of stochastic rounding on `levels` with L2 or max
// norms per bucket: sum over i of norm^2 (l_{j+1} - r)(r - l_j).
double ExpectedVariance(const std::vector<float>& v, std::size_t bucket, const std::vector<float>& levels,
                        bool l2) {
  double total = 0;
  for (std::size_t begin = 0; begin < v.size(); begin += bucket) {
    const std::size_t end = std::min(v.size(), begin + bucket);
    double norm = 0;
    for (std::size_t i = begin; i < end; ++i) norm = l2 ? norm + double{v[i]} * v[i] : std::max(norm, double{std::fabs(v[i])});
    if (l2) norm = std::sqrt(norm);
    for (std::size_t i = begin; i < end; ++i) {
      const double r = std::fabs(v[i]) / norm;
      std::size_t j = 0;
      while (j + 2 < levels.size() && levels[j + 1] <= r) ++j;
      total += norm * norm * (levels[j + 1] - r) * (r - levels[j]);
    }
  }
  return total;
}

// ---- Level tables -------------------------------------------------------------------

TEST_CASE("uniform and exponential level tables have the specified levels") {
  CHECK(UniformLevels(4).levels == std::vector<float>{0.0f, 0.25f, 0.5f, 0.75f, 1.0f});
  CHECK(ExponentialLevels(3, 0.5f).levels == std::vector<float>{0.0f, 0.25f, 0.5f, 1.0f});
  CHECK(UniformLevels(4).version == 0);
  CHECK(ValidateLevels(UniformLevels(1)).ok());
  CHECK(ValidateLevels(ExponentialLevels(7, 0.3f)).ok());
  LevelTable bad;
  CHECK(ValidateLevels(bad).code() == StatusCode::kInvalidArgument);
  bad.levels = {0.0f, 0.5f, 0.5f, 1.0f};
  CHECK(ValidateLevels(bad).code() == StatusCode::kInvalidArgument);
  bad.levels = {0.1f, 0.5f, 1.0f};
  CHECK(ValidateLevels(bad).code() == StatusCode::kInvalidArgument);
  bad.levels = {0.0f, 0.5f, 0.99f};
  CHECK(ValidateLevels(bad).code() == StatusCode::kInvalidArgument);
  bad.levels = {0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  CHECK(ValidateLevels(bad).code() == StatusCode::kInvalidArgument);
  CHECK(ValidateLevels(ExponentialLevels(3, 1.5f)).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("level statistics merge by adding moments and keeping the largest norms") {
  LevelStatistics a, b;
  a.count = 10, a.sum = 2, a.sum_sq = 1, a.bucket_norms = {1.0f, 5.0f};
  b.count = 5, b.sum = 1, b.sum_sq = 0.5, b.bucket_norms = {3.0f};
  LevelStatistics ab = a, ba = b;
  ab.Merge(b);
  ba.Merge(a);
  CHECK(ab.count == 15);
  CHECK(ab.sum == 3);
  CHECK(ab.sum_sq == 1.5);
  CHECK(ab.bucket_norms == std::vector<float>{5.0f, 3.0f, 1.0f});
  CHECK(ba.bucket_norms == ab.bucket_norms);
}

// ---- Statistical properties -------------------------------------------------------

struct UnbiasedCase {
  const char* spec;
  std::size_t bucket;
  std::vector<float> levels;
  bool l2;
};

TEST_CASE("stochastic quantizers are unbiased and have the predicted variance") {
  const std::vector<UnbiasedCase> cases = {
      {"qsgd:s=4,b=64", 64, UniformLevels(4).levels, true},
      {"qsgd:s=2,b=64,norm=max", 64, UniformLevels(2).levels, false},
      {"terngrad:b=64", 64, UniformLevels(1).levels, false},
      {"alq:bits=3,b=64", 64, UniformLevels(3).levels, true},
      {"amq:bits=3,b=64", 64, ExponentialLevels(3, 0.5f).levels, true},
  };
  const std::size_t d = 200;  // a short last bucket
  const int trials = 400;
  const auto input = Laplace(d, 17);
  for (const UnbiasedCase& c : cases) {
    INFO("codec " << std::string(c.spec));
    auto codec = Make(c.spec);
    std::vector<double> mean(d, 0.0);
    double error = 0;
    for (int t = 0; t < trials; ++t) {
      const auto out = RoundTrip(*codec, input, Context(static_cast<uint32_t>(1000 + t)));
      for (std::size_t i = 0; i < d; ++i) mean[i] += out[i] / double{trials};
      error += SquaredDistance(out, input) / trials;
    }
    const double expected = ExpectedVariance(input, c.bucket, c.levels, c.l2);
    // The empirical variance matches the closed form (a wrong probability or
    // level choice moves it by far more than 10 %).
    CHECK(error == doctest::Approx(expected).epsilon(0.1));
    // Unbiased: the mean's squared error shrinks like variance / trials. A
    // biased rounding (e.g. to nearest) keeps a bias of order the variance.
    double bias = 0;
    for (std::size_t i = 0; i < d; ++i) bias += (mean[i] - input[i]) * (mean[i] - input[i]);
    CHECK(bias < 3 * expected / trials);
    // QSGD's bound: normalized variance <= min(b / s^2, sqrt(b) / s) per bucket.
    if (c.l2 && c.levels.size() == 5) {
      const double s = 4, b = 64;
      CHECK(error / Energy(input) <= std::min(b / (s * s), std::sqrt(b) / s));
    }
  }
}

TEST_CASE("terngrad decodes to zero or plus or minus the bucket's max magnitude") {
  auto codec = Make("terngrad:b=100");
  const auto input = Gaussian(350, 4);
  const auto out = RoundTrip(*codec, input, Context());
  for (std::size_t begin = 0; begin < input.size(); begin += 100) {
    const std::size_t end = std::min(input.size(), begin + 100);
    float scale = 0;
    for (std::size_t i = begin; i < end; ++i) scale = std::max(scale, std::fabs(input[i]));
    int nonzero = 0;
    for (std::size_t i = begin; i < end; ++i) {
      REQUIRE((out[i] == 0.0f || out[i] == scale || out[i] == -scale));
      if (out[i] != 0.0f) {
        ++nonzero;
        CHECK((out[i] > 0) == (input[i] > 0));
      }
    }
    CHECK(nonzero > 0);
  }
}

TEST_CASE("sign decodes to plus or minus the bucket's mean magnitude") {
  auto codec = Make("sign:b=64");
  CHECK(codec->spec() == "sign:b=64,ef=on,ec=rans");
  CHECK(codec->wants_error_feedback());
  auto input = Gaussian(150, 8);
  input[3] = 0.0f;  // sign(0) = +
  const auto out = RoundTrip(*codec, input, Context());
  for (std::size_t begin = 0; begin < input.size(); begin += 64) {
    const std::size_t end = std::min(input.size(), begin + 64);
    double sum = 0;
    for (std::size_t i = begin; i < end; ++i) sum += std::fabs(input[i]);
    const float scale = static_cast<float>(sum / static_cast<double>(end - begin));
    for (std::size_t i = begin; i < end; ++i) {
      CHECK(out[i] == doctest::Approx(input[i] < 0 ? -scale : scale).epsilon(1e-6));
    }
  }
  CHECK(out[3] > 0);
}

TEST_CASE("sign refuses to run without error feedback") {
  auto codec = MakeCodec("sign:ef=off");
  CHECK(codec.status().code() == StatusCode::kInvalidArgument);
  CHECK(codec.status().message().find("error feedback") != std::string::npos);
  CHECK(MakeCodec("sign:ef=on").ok());
}

TEST_CASE("canonical specs spell out every key with the documented defaults") {
  CHECK(Make("qsgd")->spec() == "qsgd:s=4,b=512,norm=l2,ef=off,ec=rans");
  CHECK(Make("qsgd:norm=max,ec=pack,s=8")->spec() == "qsgd:s=8,b=512,norm=max,ef=off,ec=pack");
  CHECK(Make("terngrad")->spec() == "terngrad:b=512,ef=off,ec=rans");
  CHECK(Make("sign")->spec() == "sign:b=512,ef=on,ec=rans");
  CHECK(Make("alq")->spec() == "alq:bits=3,b=1024,ef=off,ec=rans");
  CHECK(Make("amq:ef=on")->spec() == "amq:bits=3,b=1024,ef=on,ec=rans");
  CHECK(MakeCodec("qsgd:s=0").status().code() == StatusCode::kInvalidArgument);
  CHECK(MakeCodec("qsgd:s=128").status().code() == StatusCode::kInvalidArgument);
  CHECK(MakeCodec("qsgd:norm=l1").status().code() == StatusCode::kInvalidArgument);
  CHECK(MakeCodec("alq:bits=1").status().code() == StatusCode::kInvalidArgument);
  CHECK(MakeCodec("terngrad:s=2").status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("every symbol coding decodes to the same values") {
  const auto input = Gaussian(3000, 21);
  for (const char* base : {"qsgd:s=4,b=512", "qsgd:s=1,b=0", "terngrad:b=512", "sign:b=512", "alq:bits=4,b=1024"}) {
    INFO("codec " << std::string(base));
    std::vector<float> reference;
    std::size_t packed_bytes = 0;
    for (const char* ec : {"none", "pack", "rans"}) {
      auto codec = Make(std::string(base) + ",ec=" + ec);
      const auto out = RoundTrip(*codec, input, Context());
      if (reference.empty()) reference = out;
      CHECK(out == reference);
      const std::size_t bytes = EncodeOrDie(*codec, input, Context()).size();
      if (std::string(ec) == "pack") packed_bytes = bytes;
      if (std::string(ec) == "rans") CHECK(bytes <= packed_bytes);
    }
  }
}

TEST_CASE("NaN and Inf are rejected in any bucket with every norm and on every ISA, naming the coordinate") {
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    REQUIRE(SetIsaOverride(isa));
    for (const char* spec : {"qsgd:ec=pack", "qsgd:norm=max", "terngrad", "sign", "alq:ec=pack", "qsgd:b=0"}) {
      INFO("codec " << std::string(spec));
      auto codec = Make(spec);
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()}) {
        for (std::size_t at : {0u, 700u, 1499u}) {
          std::vector<float> input(1500, 1.0f);
          for (std::size_t i = 600; i < 900; ++i) input[i] = 3.0e38f;  // a finite bucket whose L2 norm overflows
          input[at] = bad;
          std::vector<uint8_t> payload(codec->MaxEncodedSize(input.size()));
          auto size = codec->Encode(input.data(), input.size(), Context(), payload.data(), payload.size());
          REQUIRE(size.status().code() == StatusCode::kInvalidArgument);
          CHECK(size.status().message().find("coordinate " + std::to_string(at)) != std::string::npos);
        }
      }
    }
  }
  ClearIsaOverride();
}

TEST_CASE("zero buckets, huge values and denormals decode to finite values") {
  for (const char* spec : {"qsgd", "qsgd:norm=max", "terngrad", "sign", "alq", "amq"}) {
    INFO("codec " << std::string(spec));
    auto codec = Make(spec);
    std::vector<float> input(1500, 0.0f);
    for (std::size_t i = 600; i < 900; ++i) input[i] = (i % 2 ? 1 : -1) * 3.0e38f;
    for (std::size_t i = 1100; i < 1300; ++i) input[i] = (i % 3 ? 1 : -1) * 1.0e-42f;
    const auto out = RoundTrip(*codec, input, Context());
    for (std::size_t i = 0; i < 512; ++i) REQUIRE(out[i] == 0.0f);
    for (float x : out) REQUIRE(std::isfinite(x));
    for (std::size_t i = 600; i < 900; ++i) REQUIRE((out[i] == 0.0f || (out[i] > 0) == (input[i] > 0)));
  }
}

// ---- Adaptive level tables ----------------------------------------------------------

TEST_CASE("alq and amq start from version 0 tables and accept fitted tables") {
  auto alq = MakeAdaptiveCodec("alq:bits=3");
  REQUIRE(alq.ok());
  CHECK((*alq)->levels_per_sign() == 3);
  CHECK((*alq)->level_table().version == 0);
  CHECK((*alq)->level_table().levels == UniformLevels(3).levels);
  auto amq = MakeAdaptiveCodec("amq:bits=4,b=256");
  REQUIRE(amq.ok());
  CHECK((*amq)->levels_per_sign() == 7);
  CHECK((*amq)->level_table().levels == ExponentialLevels(7, 0.5f).levels);
  CHECK(MakeAdaptiveCodec("qsgd").status().code() == StatusCode::kInvalidArgument);

  LevelTable wrong_size = UniformLevels(4);
  CHECK((*alq)->SetLevelTable(wrong_size).code() == StatusCode::kInvalidArgument);
  LevelTable not_increasing;
  not_increasing.levels = {0.0f, 0.6f, 0.4f, 1.0f};
  CHECK((*alq)->SetLevelTable(not_increasing).code() == StatusCode::kInvalidArgument);
  CHECK((*alq)->level_table().version == 0);
}

std::unique_ptr<AdaptiveCodec> MakeAdaptive(const std::string& spec) {
  auto codec = MakeAdaptiveCodec(spec);
  REQUIRE_MESSAGE(codec.ok(), codec.status().ToString());
  return std::move(*codec);
}

LevelTable Table(uint32_t version, std::vector<float> levels) {
  LevelTable table;
  table.version = version;
  table.levels = std::move(levels);
  return table;
}

TEST_CASE("a payload encoded with another level table version is refused") {
  auto encoder = MakeAdaptive("alq:bits=3,b=128");
  auto decoder = MakeAdaptive("alq:bits=3,b=128");
  const LevelTable fitted = Table(7, {0.0f, 0.05f, 0.2f, 1.0f});
  REQUIRE(encoder->SetLevelTable(fitted).ok());
  const auto input = Laplace(500, 3);
  const auto payload = EncodeOrDie(*encoder, input, Context());
  std::vector<float> out(input.size());
  CHECK(decoder->Decode(payload.data(), payload.size(), Context(), out.data(), out.size()).code() ==
        StatusCode::kFailedPrecondition);
  std::vector<float> acc(input.size(), 0.0f);
  CHECK(decoder->DecodeAccumulate(payload.data(), payload.size(), Context(), 1.0f, acc.data(), acc.size()).code() ==
        StatusCode::kFailedPrecondition);
  REQUIRE(decoder->SetLevelTable(fitted).ok());
  REQUIRE(decoder->Decode(payload.data(), payload.size(), Context(), out.data(), out.size()).ok());
  // Every decoded magnitude is a fitted level times its bucket's norm.
  for (std::size_t i = 0; i < 128; ++i) {
    double norm = 0;
    for (std::size_t k = 0; k < 128; ++k) norm += double{input[k]} * input[k];
    const double level = std::fabs(out[i]) / std::sqrt(norm);
    const bool on_table = std::any_of(fitted.levels.begin(), fitted.levels.end(),
                                      [level](float l) { return std::fabs(level - l) < 1e-5; });
    CHECK(on_table);
  }
}

TEST_CASE("a fitted table lowers the error of alq on heavy-tailed input") {
  // Not the fitting itself (level_fit.cc): a hand-made table closer to the
  // Laplace magnitudes' distribution shows that the table is really used.
  auto uniform = MakeAdaptive("alq:bits=3,b=1024");
  auto fitted = MakeAdaptive("alq:bits=3,b=1024");
  REQUIRE(fitted->SetLevelTable(Table(1, {0.0f, 0.04f, 0.1f, 1.0f})).ok());
  const auto input = Laplace(8192, 5);
  double uniform_error = 0, fitted_error = 0;
  for (uint32_t round = 0; round < 8; ++round) {
    uniform_error += SquaredDistance(RoundTrip(*uniform, input, Context(round)), input);
    fitted_error += SquaredDistance(RoundTrip(*fitted, input, Context(round)), input);
  }
  CHECK(fitted_error < 0.5 * uniform_error);
}

// ---- Malformed payloads --------------------------------------------------------------

// Rewrites the body with `edit` and fixes the CRC, so only the codec's own
// checks can catch the change.
template <typename Edit>
StatusCode DecodeEdited(const Codec& codec, std::vector<uint8_t> payload, std::size_t d, Edit edit) {
  auto view = ParsePayload(payload.data(), payload.size());
  REQUIRE(view.ok());
  PayloadHeader header = view->header;
  const std::string spec(view->spec);  // the view dies with the bytes resized below
  const std::size_t body_at = kPayloadHeaderSize + spec.size();
  std::vector<uint8_t> body(payload.begin() + static_cast<long>(body_at), payload.end());
  edit(header, body);
  payload.resize(body_at);
  payload.insert(payload.end(), body.begin(), body.end());
  header.body_size = static_cast<uint32_t>(body.size());
  FinishPayload(header, spec, payload.data());
  std::vector<float> out(d);
  return codec.Decode(payload.data(), payload.size(), Context(), out.data(), d).code();
}

TEST_CASE("malformed bodies with a valid crc are rejected") {
  const auto input = Gaussian(1000, 12);
  for (const char* spec : {"qsgd:s=4,b=512,ec=none", "qsgd:s=4,b=512,ec=pack", "qsgd:s=4,b=512,ec=rans",
                           "terngrad:ec=pack", "sign:ec=none", "alq:ec=rans"}) {
    INFO("codec " << std::string(spec));
    auto codec = Make(spec);
    const auto payload = EncodeOrDie(*codec, input, Context());
    const std::size_t scales = std::string(spec).rfind("alq", 0) == 0 ? 4 : 0;
    using Body = std::vector<uint8_t>;
    CHECK(DecodeEdited(*codec, payload, 1000, [](PayloadHeader&, Body&) {}) == StatusCode::kOk);
    // Scales: NaN, negative, infinite.
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), -1.0f, std::numeric_limits<float>::infinity()}) {
      CHECK(DecodeEdited(*codec, payload, 1000, [&](PayloadHeader&, Body& b) { StoreFloatLe(b.data() + scales, bad); }) ==
            StatusCode::kCorrupt);
    }
    // Truncated and extended symbol streams, and a body without all scales.
    CHECK(DecodeEdited(*codec, payload, 1000, [](PayloadHeader&, Body& b) { b.pop_back(); }) == StatusCode::kCorrupt);
    CHECK(DecodeEdited(*codec, payload, 1000, [](PayloadHeader&, Body& b) { b.push_back(0); }) == StatusCode::kCorrupt);
    CHECK(DecodeEdited(*codec, payload, 1000, [&](PayloadHeader&, Body& b) { b.resize(scales + 6); }) ==
          StatusCode::kCorrupt);
    // Flags naming another symbol coding, and a header bucket size that
    // disagrees with the spec.
    CHECK(DecodeEdited(*codec, payload, 1000, [](PayloadHeader& h, Body&) {
            h.flags ^= kFlagSymbolsBase3;
          }) == StatusCode::kCorrupt);
    CHECK(DecodeEdited(*codec, payload, 1000, [](PayloadHeader& h, Body&) { h.bucket += 1; }) == StatusCode::kCorrupt);
  }
}

TEST_CASE("unpacked symbols outside the alphabet are rejected") {
  auto codec = Make("qsgd:s=4,b=512,ec=none");
  const auto input = Gaussian(600, 13);
  const auto payload = EncodeOrDie(*codec, input, Context());
  // Two scales, then one byte per symbol; 9 is the first symbol past 2s.
  CHECK(DecodeEdited(*codec, payload, 600, [](PayloadHeader&, std::vector<uint8_t>& b) { if (b.size() > 85) b[85] = 9; }) ==
        StatusCode::kCorrupt);
  CHECK(DecodeEdited(*codec, payload, 600, [](PayloadHeader&, std::vector<uint8_t>& b) { if (b.size() > 85) b[85] = 8; }) ==
        StatusCode::kOk);
}

// ---- Figures ----------------------------------------------------------------------------

TEST_CASE("qsgd with 4 levels on gaussian input reports its rate and error") {
  const auto input = Gaussian(std::size_t{1} << 16, 99);
  for (const char* spec : {"qsgd:s=4,b=512,ec=pack", "qsgd:s=4,b=512,ec=rans", "qsgd:s=4,b=512,norm=max,ec=rans",
                           "terngrad:ec=rans", "sign:ec=pack", "alq:ec=rans", "amq:ec=rans"}) {
    auto codec = Make(spec);
    const auto payload = EncodeOrDie(*codec, input, Context());
    std::vector<float> out(input.size());
    REQUIRE(codec->Decode(payload.data(), payload.size(), Context(), out.data(), out.size()).ok());
    const CodecStats stats = MakeCodecStats(payload.size(), input.size());
    const double error = SquaredDistance(out, input) / Energy(input);
    std::printf("%-36s %6.3f bits/coordinate, normalized error %.4f\n", spec, stats.bits_per_coordinate, error);
    CHECK(stats.bits_per_coordinate < 5.0);
  }
}

}  // namespace
}  // namespace fedrt
