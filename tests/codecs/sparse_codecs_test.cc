// topk, randk and rtopk: selection exactness, the tie rule, uniformity,
// the rTop-k edge cases, index forms, fp16 values, error feedback over many
// steps, malformed payloads, and the kernel variants against the scalar one.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "codec_test_util.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/platform/cpu.h"
#include "sparse/half.h"
#include "sparse/sparse_kernels.h"
#include "sparse/sparse_select.h"

namespace fedrt {
namespace {

using codec_internal::FloatToHalfSaturating;
using codec_internal::HalfToFloat;

std::vector<float> Gaussian(std::size_t d, uint32_t seed) { return testing::GaussianVector(d, seed); }

// Few distinct magnitudes: ties everywhere.
std::vector<float> Coarse(std::size_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(d);
  for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 9) - 4);
  return v;
}

std::unique_ptr<Codec> Make(const std::string& spec) { return testing::MakeOrFail(spec); }

CodecContext Context(uint32_t round = 3) {
  CodecContext c;
  c.session_seed = 0xfeedbeef12345ull;
  c.round = round;
  c.tensor_id = 4;
  c.sender_id = 6;
  return c;
}

std::vector<uint8_t> EncodeOk(Codec& codec, const std::vector<float>& x, const CodecContext& c = Context()) {
  return testing::EncodeOrFail(codec, x, c);
}

std::vector<float> DecodeOk(const Codec& codec, const std::vector<uint8_t>& payload, std::size_t d,
                            const CodecContext& c = Context()) {
  std::vector<float> out(d, 123.0f);
  const Status status = codec.Decode(payload.data(), payload.size(), c, out.data(), d);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return out;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Reference top-k: magnitude descending, lower index first among equals.
std::vector<uint32_t> ReferenceTop(const std::vector<float>& x, std::size_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<uint32_t> Support(const std::vector<float>& decoded) {
  std::vector<uint32_t> s;
  for (uint32_t i = 0; i < decoded.size(); ++i) {
    if (decoded[i] != 0.0f) s.push_back(i);
  }
  return s;
}

TEST_CASE("topk selects exactly the k largest magnitudes with lower indices winning ties") {
  for (Isa isa : AvailableIsas()) {
    REQUIRE(SetIsaOverride(isa));
    INFO("isa " << IsaName(isa));
    for (std::size_t d : {1u, 7u, 33u, 1007u, 65539u, 131072u}) {
      for (int data = 0; data < 3; ++data) {
        auto x = data == 0 ? Gaussian(d, 3) : Coarse(d, 4);
        if (data == 2) {  // denormals, zeros and huge values mixed in
          for (std::size_t i = 0; i < d; i += 3) x[i] = std::numeric_limits<float>::denorm_min() * float(i % 5);
          if (d > 10) x[d / 2] = 3e38f, x[d / 3] = -3e38f;
        }
        if (d > 100000 && data == 2) continue;  // the long size with Gaussian and tied data only
        for (std::size_t k : {std::size_t{1}, d / 100 + 1, d / 10 + 1, d / 2 + 1, d}) {
          if (d > 100000 && (k == d / 2 + 1 || k == d)) continue;  // the sampled path is for small k
          const auto expected = ReferenceTop(x, k);
          for (bool with_scratch : {false, true}) {
            INFO("d " << d << " data " << data << " k " << k << " scratch " << with_scratch);
            std::vector<uint32_t> got(k + 1, 0xdeadbeefu);
            auto threshold = codec_internal::FindMagnitudeThreshold(x.data(), d, k, with_scratch ? got.data() : nullptr,
                                                                    with_scratch ? k : 0);
            REQUIRE(threshold.ok());
            CHECK(got.back() == 0xdeadbeefu);
            codec_internal::CollectTop(x.data(), d, *threshold, got.data());
            CHECK(got.back() == 0xdeadbeefu);
            got.pop_back();
            CHECK(got == expected);
          }
        }
      }
    }
  }
  ClearIsaOverride();
}

TEST_CASE("topk sends the selected values exactly and zero elsewhere") {
  const auto x = Gaussian(10000, 8);
  auto codec = Make("topk:k=100");
  CHECK(codec->spec() == "topk:k=100,v=fp32,ef=on");
  CHECK(codec->wants_error_feedback());
  const auto out = DecodeOk(*codec, EncodeOk(*codec, x), x.size());
  const auto top = ReferenceTop(x, 100);
  std::size_t nonzero = 0;
  for (uint32_t i = 0; i < x.size(); ++i) {
    const bool in = std::binary_search(top.begin(), top.end(), i);
    CHECK(out[i] == (in ? x[i] : 0.0f));
    nonzero += out[i] != 0.0f;
  }
  CHECK(nonzero == 100);
  // A fraction resolves against d.
  auto fraction = Make("topk:k=0.01");
  const auto payload = EncodeOk(*fraction, x);
  CHECK(LoadLe32(payload.data() + kPayloadHeaderSize + fraction->spec().size()) == 100);
}

TEST_CASE("randk indices are distinct sorted and uniform") {
  const std::size_t d = 50, k = 5, rounds = 4000;
  std::vector<double> hits(d, 0);
  auto codec = Make("randk:k=5,idx=list");
  std::vector<float> x(d);
  for (std::size_t i = 0; i < d; ++i) x[i] = 1.0f + static_cast<float>(i);
  for (uint32_t round = 0; round < rounds; ++round) {
    const auto out = DecodeOk(*codec, EncodeOk(*codec, x, Context(round)), d, Context(round));
    std::size_t count = 0;
    for (std::size_t i = 0; i < d; ++i) {
      if (out[i] != 0.0f) {
        CHECK(out[i] == x[i]);
        hits[i] += 1;
        ++count;
      }
    }
    REQUIRE(count == k);
  }
  // Chi-square with 49 degrees of freedom: the 0.999 quantile is 85.4.
  const double expected = static_cast<double>(rounds * k) / d;
  double chi2 = 0;
  for (double h : hits) chi2 += (h - expected) * (h - expected) / expected;
  MESSAGE("randk chi-square " << chi2 << " (49 dof)");
  CHECK(chi2 < 85.4);
  CHECK(chi2 > 20.0);  // too good to be random would be suspicious too (0.001 quantile is 26.5)
}

TEST_CASE("randk with a shared seed sends no index list and says so") {
  const auto x = Gaussian(5000, 9);
  auto implicit = Make("randk:k=0.02");
  auto listed = Make("randk:k=0.02,idx=list");
  CHECK(implicit->spec() == "randk:k=0.02,v=fp32,idx=seed,ef=on");
  const auto a = EncodeOk(*implicit, x);
  const auto b = EncodeOk(*listed, x);
  CHECK((ParsePayload(a.data(), a.size())->header.flags & kFlagIndicesImplicit) != 0);
  CHECK((ParsePayload(b.data(), b.size())->header.flags & kFlagIndicesImplicit) == 0);
  CHECK(a.size() < b.size());
  CHECK(DecodeOk(*implicit, a, x.size()) == DecodeOk(*listed, b, x.size()));
  // Another seed gives another subset.
  CodecContext other = Context();
  other.session_seed ^= 1;
  const auto c = EncodeOk(*implicit, x, other);
  CHECK(DecodeOk(*implicit, c, x.size(), other) != DecodeOk(*implicit, a, x.size()));
}

TEST_CASE("rtopk with r equal to k is topk and with r equal to d is randk") {
  const std::size_t d = 4099;
  const auto x = Gaussian(d, 10);
  auto top = Make("topk:k=41");
  auto r_is_k = Make("rtopk:k=41,r=41");
  CHECK(DecodeOk(*top, EncodeOk(*top, x), d) == DecodeOk(*r_is_k, EncodeOk(*r_is_k, x), d));
  auto rand = Make("randk:k=41,idx=list");
  auto r_is_d = Make("rtopk:k=41,r=4099");
  CHECK(DecodeOk(*rand, EncodeOk(*rand, x), d) == DecodeOk(*r_is_d, EncodeOk(*r_is_d, x), d));
  // In between: k of the top r, each of them about equally often.
  auto mid = Make("rtopk:k=10,r=40");
  const auto pool = ReferenceTop(x, 40);
  std::vector<int> count(d, 0);
  for (uint32_t round = 0; round < 400; ++round) {
    const auto out = DecodeOk(*mid, EncodeOk(*mid, x, Context(round)), d, Context(round));
    const auto s = Support(out);
    REQUIRE(s.size() == 10);
    for (uint32_t i : s) {
      CHECK(std::binary_search(pool.begin(), pool.end(), i));
      ++count[i];
    }
  }
  for (uint32_t i : pool) CHECK(count[i] > 50);  // expected 100 each
}

TEST_CASE("rtopk rescales by r over k only when asked") {
  const auto x = Gaussian(1000, 11);
  auto plain = Make("rtopk:k=10,r=40");
  auto scaled = Make("rtopk:k=10,r=40,rescale=on");
  CHECK(plain->spec() == "rtopk:k=10,r=40,v=fp32,rescale=off,ef=on");
  const auto a = DecodeOk(*plain, EncodeOk(*plain, x), x.size());
  const auto b = DecodeOk(*scaled, EncodeOk(*scaled, x), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(b[i] == a[i] * 4.0f);
  CHECK(MakeCodec("rtopk:k=10,r=5").status().code() == StatusCode::kInvalidArgument);
  CHECK(MakeCodec("topk:k=1.5").status().code() == StatusCode::kInvalidArgument);
  CHECK(MakeCodec("topk:k=0").status().code() == StatusCode::kInvalidArgument);
  CHECK(MakeCodec("randk:k=3,idx=maybe").status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("fp16 values round to nearest even and saturate at the largest half") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00u) == 0x7c00u) continue;  // Inf and NaN are never produced
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    REQUIRE(FloatToHalfSaturating(f) == static_cast<uint16_t>(h == 0x8000u ? 0x8000u : h));
  }
  CHECK(FloatToHalfSaturating(1e9f) == 0x7bffu);
  CHECK(FloatToHalfSaturating(-65520.0f) == 0xfbffu);
  CHECK(FloatToHalfSaturating(65519.0f) == 0x7bffu);
  CHECK(FloatToHalfSaturating(1.0f + 0x1p-11f) == 0x3c00u);       // tie to even, down
  CHECK(FloatToHalfSaturating(1.0f + 3 * 0x1p-11f) == 0x3c02u);   // tie to even, up
  CHECK(FloatToHalfSaturating(0x1p-25f) == 0u);                   // half the smallest subnormal
  CHECK(FloatToHalfSaturating(0x1.8p-25f) == 1u);
  CHECK(FloatToHalfSaturating(1e-30f) == 0u);
  // Against a double-precision reference on random floats.
  std::mt19937 rng(12);
  for (int trial = 0; trial < 100000; ++trial) {
    uint32_t bits = static_cast<uint32_t>(rng());
    bits = (bits & 0x807fffffu) | ((100u + static_cast<uint32_t>(rng() % 42u)) << 23);
    float f;
    std::memcpy(&f, &bits, 4);
    const float back = HalfToFloat(FloatToHalfSaturating(f));
    const double err = std::fabs(static_cast<double>(back) - f);
    const double ulp = std::ldexp(1.0, std::max(-24, std::ilogb(static_cast<double>(f)) - 10));
    REQUIRE(err <= ulp / 2);
  }
  auto codec = Make("topk:k=20,v=fp16");
  const auto x = Gaussian(300, 13);
  const auto payload = EncodeOk(*codec, x);
  CHECK((ParsePayload(payload.data(), payload.size())->header.flags & kFlagValuesFp16) != 0);
  const auto out = DecodeOk(*codec, payload, x.size());
  for (uint32_t i : ReferenceTop(x, 20)) CHECK(out[i] == HalfToFloat(FloatToHalfSaturating(x[i])));
}

TEST_CASE("error feedback keeps everything over 1000 steps") {
  for (std::string spec : {"topk:k=0.05", "randk:k=0.05", "rtopk:k=0.05,r=0.2", "topk:k=0.05,v=fp16"}) {
    INFO(spec);
    auto codec = Make(spec);
    const std::size_t d = 500;
    std::vector<float> residual(d, 0.0f), p(d), decoded(d);
    std::vector<double> sum_in(d, 0), sum_out(d, 0);
    std::vector<uint8_t> payload(codec->MaxEncodedSize(d));
    std::mt19937 rng(14);
    std::normal_distribution<float> normal;
    for (uint32_t step = 0; step < 1000; ++step) {
      for (std::size_t i = 0; i < d; ++i) {
        const float g = normal(rng);
        sum_in[i] += g;
        p[i] = g + residual[i];
      }
      auto size = codec->Encode(p.data(), d, Context(step), payload.data(), payload.size());
      REQUIRE(size.ok());
      REQUIRE(codec->Decode(payload.data(), *size, Context(step), decoded.data(), d).ok());
      for (std::size_t i = 0; i < d; ++i) {
        residual[i] = p[i] - decoded[i];
        sum_out[i] += decoded[i];
      }
    }
    double worst = 0;
    for (std::size_t i = 0; i < d; ++i) worst = std::max(worst, std::fabs(sum_out[i] + residual[i] - sum_in[i]));
    MESSAGE(spec << ": worst |sum decoded + residual - sum inputs| = " << worst);
    CHECK(worst < 1e-3);
  }
}

// Rewrites the body of a valid payload and fixes its CRC, so the decoder's
// own checks (not the CRC) must catch the problem.
std::vector<uint8_t> WithBody(const std::vector<uint8_t>& payload, const std::vector<uint8_t>& body) {
  auto view = ParsePayload(payload.data(), payload.size());
  REQUIRE(view.ok());
  PayloadHeader h = view->header;
  h.body_size = static_cast<uint32_t>(body.size());
  std::vector<uint8_t> out(kPayloadHeaderSize + view->spec.size() + body.size());
  std::memcpy(out.data() + kPayloadHeaderSize + view->spec.size(), body.data(), body.size());
  FinishPayload(h, view->spec, out.data());
  return out;
}

std::vector<uint8_t> Body(uint32_t k, const std::vector<float>& values, const std::vector<uint8_t>& stream) {
  std::vector<uint8_t> body(4 + 4 * values.size());
  StoreLe32(body.data(), k);
  for (std::size_t j = 0; j < values.size(); ++j) StoreFloatLe(body.data() + 4 + 4 * j, values[j]);
  body.insert(body.end(), stream.begin(), stream.end());
  return body;
}

TEST_CASE("malformed sparse payloads are rejected with typed errors") {
  const std::size_t d = 16;
  auto codec = Make("topk:k=2");
  const auto x = Gaussian(d, 15);
  const auto good = EncodeOk(*codec, x);
  std::vector<float> out(d);
  auto decode = [&](const std::vector<uint8_t>& p) {
    return codec->Decode(p.data(), p.size(), Context(), out.data(), d).code();
  };
  REQUIRE(decode(good) == StatusCode::kOk);
  // varint gaps: {3, 5} is gaps 3, 1.
  CHECK(decode(WithBody(good, Body(2, {1, 2}, {0, 0, 3, 1}))) == StatusCode::kOk);
  CHECK(out[3] == 1.0f);
  CHECK(out[5] == 2.0f);
  CHECK(decode(WithBody(good, Body(2, {1, 2}, {0, 0, 3, 12}))) == StatusCode::kCorrupt);  // index 16 >= d
  CHECK(decode(WithBody(good, Body(3, {1, 2, 3}, {0, 0, 3, 1, 1}))) == StatusCode::kCorrupt);  // count != k
  CHECK(decode(WithBody(good, Body(17, {1, 2}, {0, 0, 3, 1}))) == StatusCode::kCorrupt);  // count > d
  CHECK(decode(WithBody(good, Body(2, {1, 2}, {0, 0, 3}))) == StatusCode::kCorrupt);  // truncated
  CHECK(decode(WithBody(good, Body(2, {1, 2}, {0, 0, 3, 1, 0}))) == StatusCode::kCorrupt);  // trailing
  CHECK(decode(WithBody(good, Body(2, {1}, {}))) == StatusCode::kCorrupt);  // values cut short
  CHECK(decode(WithBody(good, Body(2, {1, std::numeric_limits<float>::infinity()}, {0, 0, 3, 1}))) ==
        StatusCode::kCorrupt);
  CHECK(decode(WithBody(good, {1, 0})) == StatusCode::kCorrupt);
  // Unsorted or duplicate indices cannot be written as gaps; a gap that
  // would wrap past 2^32 is out of range.
  CHECK(decode(WithBody(good, Body(2, {1, 2}, {0, 0, 3, 0xff, 0xff, 0xff, 0xff, 0x0f}))) == StatusCode::kCorrupt);
  // Flags that do not match the codec.
  auto view = ParsePayload(good.data(), good.size());
  PayloadHeader h = view->header;
  h.flags |= kFlagValuesFp16;
  std::vector<uint8_t> flagged = good;
  FinishPayload(h, view->spec, flagged.data());
  CHECK(decode(flagged) == StatusCode::kCorrupt);
  // A decode that fails leaves an accumulator untouched.
  std::vector<float> acc(d, 1.0f);
  const auto bad = WithBody(good, Body(2, {1, 2}, {0, 0, 3, 12}));
  CHECK_FALSE(codec->DecodeAccumulate(bad.data(), bad.size(), Context(), 1.0f, acc.data(), d).ok());
  CHECK(acc == std::vector<float>(d, 1.0f));
}

TEST_CASE("every sparse kernel variant matches the scalar reference including candidate compaction") {
  const std::vector<std::size_t> sizes = {0, 1, 7, 8, 9, 31, 32, 33, 1007, 65539};
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    const SparseKernels& k = SparseKernelsFor(isa);
    const SparseKernels& ref = SparseKernelsFor(Isa::kScalar);
    for (std::size_t n : sizes) {
      for (int data = 0; data < 5; ++data) {
        INFO("n " << n << " data " << data);
        std::vector<float> storage(n + 1);
        float* x = storage.data() + 1;  // misaligned for every vector width
        const auto g = data == 1 ? Coarse(n, 16) : Gaussian(n, 17);
        for (std::size_t i = 0; i < n; ++i) {
          x[i] = data == 2   ? std::numeric_limits<float>::denorm_min() * float(i % 7)
                 : data == 3 ? g[i] * 1e37f
                 : data == 4 ? (i % 3 == 0 ? 0.0f : g[i])  // zeros
                             : g[i];
        }
        const uint32_t mid = n > 0 ? Bits(x[n / 2]) & 0x7fffffffu : 1u;
        for (uint32_t low : {0u, 1u, 3u, 0x3f800000u, mid, 0x7f7fffffu, 0x7f800000u, 0x80000000u}) {
          for (std::size_t cap : {std::size_t{0}, std::size_t{5}, n / 3, n}) {
            INFO("low " << low << " cap " << cap);
            std::vector<uint32_t> i1(cap + 8, 7), i2(cap + 8, 7), m1(cap + 8, 7), m2(cap + 8, 7);
            const std::size_t n1 = ref.compact_at_least(x, n, 11, low, i1.data(), m1.data(), cap);
            const std::size_t n2 = k.compact_at_least(x, n, 11, low, i2.data(), m2.data(), cap);
            CHECK(n1 == n2);
            std::size_t expected = 0;
            for (std::size_t i = 0; i < n; ++i) expected += (Bits(x[i]) & 0x7fffffffu) >= low ? 1 : 0;
            CHECK(n1 == (expected > cap ? cap + 1 : expected));
            // Nothing past cap is written.
            for (std::size_t j = cap; j < cap + 8; ++j) {
              CHECK(i2[j] == 7u);
              CHECK(m2[j] == 7u);
            }
            if (n1 <= cap) {
              i1.resize(n1), i2.resize(n1), m1.resize(n1), m2.resize(n1);
              CHECK(i1 == i2);
              CHECK(m1 == m2);
            }
          }
        }
        std::vector<uint32_t> h1(4 * kMagnitudeBins, 0), h2(4 * kMagnitudeBins, 0);
        ref.magnitude_histogram(x, n, h1.data());
        k.magnitude_histogram(x, n, h2.data());
        h1.resize(kMagnitudeBins), h2.resize(kMagnitudeBins);
        CHECK(h1 == h2);
        uint32_t prefix = n > 0 ? ((Bits(x[n / 2]) & 0x7fffffffu) >> 20) : 0;
        for (uint32_t low : {0u, 0x3f800000u, prefix << 20, 0x7f800000u}) {
          std::vector<uint32_t> a1(kMagnitudeBins, 0), a2(kMagnitudeBins, 0);
          ref.histogram_above(x, n, low, a1.data());
          k.histogram_above(x, n, low, a2.data());
          CHECK(a1 == a2);
        }
        std::vector<uint32_t> v1(n + 1, 9), v2(n + 1, 9);
        CHECK(ref.values_in_bin(x, n, prefix, v1.data()) == k.values_in_bin(x, n, prefix, v2.data()));
        CHECK(v1 == v2);
        std::vector<uint32_t> p1(kMagnitudeBins, 0), p2(kMagnitudeBins, 0);
        ref.prefix_histogram(x, n, prefix, 9, 11, p1.data());
        k.prefix_histogram(x, n, prefix, 9, 11, p2.data());
        CHECK(p1 == p2);
        for (std::size_t r : {std::size_t{0}, n / 3, n}) {
          auto t = codec_internal::FindMagnitudeThreshold(x, n, r);
          REQUIRE(t.ok());
          for (uint32_t threshold : {t->bits, 0u, 0xffffffffu}) {
            std::size_t ties1 = t->ties, ties2 = t->ties;
            std::vector<uint32_t> c1(n + 1, 7), c2(n + 1, 7);
            const std::size_t n1 = ref.collect_above(x, n, 5, threshold, &ties1, c1.data());
            const std::size_t n2 = k.collect_above(x, n, 5, threshold, &ties2, c2.data());
            CHECK(n1 == n2);
            CHECK(ties1 == ties2);
            CHECK(c1 == c2);
          }
        }
      }
    }
  }
}

TEST_CASE("one-pass candidate selection chooses the same top set as the radix select") {
  for (Isa isa : AvailableIsas()) {
    REQUIRE(SetIsaOverride(isa));
    INFO("isa " << IsaName(isa));
    for (std::size_t d : {std::size_t{65539}}) {
      for (int data = 0; data < 5; ++data) {
        auto x = data == 1 ? Coarse(d, 5) : Gaussian(d, 6);
        if (data == 2) {  // denormals, zeros and huge values mixed in
          for (std::size_t i = 0; i < d; i += 3) x[i] = std::numeric_limits<float>::denorm_min() * float(i % 5);
          x[d / 2] = 3e38f, x[d / 3] = -3e38f, x[d - 1] = -3e38f;
        }
        if (data == 3) {  // mostly zeros
          for (std::size_t i = 0; i < d; ++i) x[i] = i % 50 == 0 ? x[i] : 0.0f;
        }
        if (data == 4) {  // every magnitude tied with another: +v and -v in pairs
          for (std::size_t i = 1; i < d; i += 2) x[i] = -x[i - 1];
        }
        std::vector<uint32_t> order(d);  // magnitude descending, lower index first among equals
        std::iota(order.begin(), order.end(), 0u);
        std::stable_sort(order.begin(), order.end(),
                         [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
        for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{7}, d / 100, d / 16, d / 16 + 1, d}) {
          INFO("d " << d << " data " << data << " k " << k);
          std::vector<uint32_t> expected(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
          std::sort(expected.begin(), expected.end());
          for (std::size_t words : {std::size_t{0}, std::size_t{1000}, 2 * k, 4 * k + 4096}) {
            std::vector<uint32_t> work(words + 1, 0xdeadbeefu);
            auto fast = codec_internal::SelectTopByCandidates(x.data(), d, k, work.data(), words);
            REQUIRE(fast.ok());
            CHECK(work.back() == 0xdeadbeefu);
            if (k == 0 || k > d / 16 || words < 2 * k) CHECK_FALSE(*fast);
            // Gaussian and paired data at k = 1% with room take the one-pass path.
            if ((data == 0 || data == 4) && k == d / 100 && words > 4 * k) CHECK(*fast);
            if (*fast) {
              work.resize(k);
              CHECK(work == expected);
            }
          }
          // The codec (whichever path it takes) sends exactly this set.
          if (k > 0) {
            auto codec = Make("topk:k=" + std::to_string(k));
            CHECK(Support(DecodeOk(*codec, EncodeOk(*codec, x), d)).size() <= k);
            const auto decoded = DecodeOk(*codec, EncodeOk(*codec, x), d);
            std::vector<uint32_t> sent, wanted;
            for (uint32_t i : expected) sent.push_back(Bits(decoded[i])), wanted.push_back(Bits(x[i]));
            CHECK(sent == wanted);
          }
        }
      }
    }
  }
  ClearIsaOverride();
}

TEST_CASE("the one-pass selection takes its path on typical input and rejects NaN by name") {
  const std::size_t d = 1 << 17;
  auto x = Gaussian(d, 8);
  std::vector<uint32_t> work(4 * (d / 100));
  auto fast = codec_internal::SelectTopByCandidates(x.data(), d, d / 100, work.data(), work.size());
  REQUIRE(fast.ok());
  CHECK(*fast);
  x[4321] = std::numeric_limits<float>::infinity();
  auto bad = codec_internal::SelectTopByCandidates(x.data(), d, d / 100, work.data(), work.size());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("4321") != std::string::npos);
}

TEST_CASE("NaN and Inf are rejected by name") {
  auto x = Gaussian(100, 18);
  x[77] = std::numeric_limits<float>::quiet_NaN();
  auto t = codec_internal::FindMagnitudeThreshold(x.data(), x.size(), 5);
  CHECK(t.status().code() == StatusCode::kInvalidArgument);
  CHECK(t.status().message().find("77") != std::string::npos);
}

TEST_CASE("bits per sent coordinate against 32 plus log2 of d over k") {
  const std::size_t d = std::size_t{1} << 18;
  const auto x = Gaussian(d, 19);
  for (const char* name : {"topk", "randk", "rtopk"}) {
    for (double fraction : {0.001, 0.01, 0.1}) {
      for (const char* v : {"fp32", "fp16"}) {
        std::string spec = std::string(name) + ":k=" + std::to_string(fraction) + ",v=" + v;
        if (std::string(name) == "randk") spec += ",idx=list";
        auto codec = Make(spec);
        const auto payload = EncodeOk(*codec, x);
        const double k = std::nearbyint(fraction * static_cast<double>(d));
        const double bits = 8.0 * static_cast<double>(payload.size()) / k;
        const double reference = 32 + std::log2(static_cast<double>(d) / k);
        MESSAGE(spec << ": " << bits << " bits per sent coordinate, reference " << reference);
        // Index bits stay below log2(d/k) + 2; the fixed header (48 bytes,
        // the spec, the count and the method bytes) is amortised over k.
        const double header_bits = 8.0 * static_cast<double>(kPayloadHeaderSize + codec->spec().size() + 6) / k;
        if (std::string(v) == "fp32") CHECK(bits < reference + 2 + header_bits);
      }
    }
  }
}

}  // namespace
}  // namespace fedrt
