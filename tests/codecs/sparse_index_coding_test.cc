// Gap coding of sorted index lists: round trips, the choice of code, and
// rejection of malformed streams.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "sparse/index_coding.h"

namespace fedrt::codec_internal {
namespace {

std::vector<uint32_t> RandomSubset(uint64_t d, std::size_t k, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> all;
  // Selection sampling: sorted, distinct, uniform.
  std::size_t left = k;
  for (uint64_t i = 0; i < d && left > 0; ++i) {
    if (rng() % (d - i) < left) {
      all.push_back(static_cast<uint32_t>(i));
      --left;
    }
  }
  return all;
}

std::vector<uint8_t> Encode(const std::vector<uint32_t>& indices, IndexMethod* method = nullptr) {
  std::vector<uint8_t> out(MaxIndexStreamSize(indices.size()));
  auto size = EncodeIndices(indices.data(), indices.size(), out.data(), out.size(), method);
  REQUIRE(size.ok());
  out.resize(*size);
  return out;
}

TEST_CASE("index lists round-trip for every density") {
  for (uint64_t d : {1u, 2u, 100u, 65539u}) {
    for (double fraction : {0.0, 0.001, 0.01, 0.1, 0.5, 1.0}) {
      const auto k = static_cast<std::size_t>(fraction * static_cast<double>(d));
      INFO("d " << d << " k " << k);
      const auto indices = RandomSubset(d, k, 11);
      IndexMethod method;
      const auto stream = Encode(indices, &method);
      const IndexStreamSizes sizes = MeasureIndexStream(indices.data(), indices.size());
      CHECK(stream.size() == std::min({sizes.varint, sizes.gamma, sizes.rice}));
      std::vector<uint32_t> decoded(indices.size());
      REQUIRE(DecodeIndices(stream.data(), stream.size(), indices.size(), d, decoded.data()).ok());
      CHECK(decoded == indices);
      CHECK(ValidateIndices(stream.data(), stream.size(), indices.size(), d).ok());
    }
  }
}

TEST_CASE("the largest gaps and indices near 2^32 round-trip") {
  const uint64_t d = uint64_t{1} << 32;
  const std::vector<uint32_t> indices = {0, 1, 0x7fffffffu, 0xfffffffeu, 0xffffffffu};
  const auto stream = Encode(indices);
  std::vector<uint32_t> decoded(indices.size());
  REQUIRE(DecodeIndices(stream.data(), stream.size(), indices.size(), d, decoded.data()).ok());
  CHECK(decoded == indices);
  // A lone index far away.
  const std::vector<uint32_t> single = {0xfffffff0u};
  const auto s = Encode(single);
  REQUIRE(DecodeIndices(s.data(), s.size(), 1, d, decoded.data()).ok());
  CHECK(decoded[0] == 0xfffffff0u);
}

TEST_CASE("sparse uniform indices are Rice coded near log2 of d over k plus 2 bits") {
  const uint64_t d = 1 << 20;
  const std::size_t k = d / 100;
  const auto indices = RandomSubset(d, k, 5);
  IndexMethod method;
  const auto stream = Encode(indices, &method);
  CHECK(method == IndexMethod::kRice);
  const double bits = 8.0 * static_cast<double>(stream.size()) / static_cast<double>(k);
  const double target = std::log2(static_cast<double>(d) / static_cast<double>(k)) + 2;
  MESSAGE("bits per index " << bits << " target " << target);
  CHECK(bits < target);
}

TEST_CASE("dense runs choose a short code and clustered indices choose gamma") {
  std::vector<uint32_t> run(1000);
  for (uint32_t i = 0; i < 1000; ++i) run[i] = i;
  IndexMethod method;
  auto stream = Encode(run, &method);
  CHECK(stream.size() <= 2 + 1000 / 8 + 1);  // one bit per index
  // Mostly adjacent with rare long jumps: gamma beats Rice and varint.
  std::vector<uint32_t> clustered;
  uint32_t at = 0;
  for (int c = 0; c < 200; ++c) {
    at += 100000;
    for (int j = 0; j < 20; ++j) clustered.push_back(at++);
  }
  stream = Encode(clustered, &method);
  CHECK(method == IndexMethod::kGamma);
  // Widely spaced indices (gaps >= 2^14 but < 2^21) with wide spread: varint can win.
  std::vector<uint32_t> spread;
  std::mt19937 rng(3);
  uint32_t pos = 0;
  for (int j = 0; j < 500; ++j) {
    pos += 1 + (rng() % 2 == 0 ? 1 : (1u << 20));
    spread.push_back(pos);
  }
  const IndexStreamSizes sizes = MeasureIndexStream(spread.data(), spread.size());
  stream = Encode(spread, &method);
  CHECK(stream.size() == std::min({sizes.varint, sizes.gamma, sizes.rice}));
}

TEST_CASE("malformed index streams are rejected") {
  const uint64_t d = 1000;
  const auto indices = RandomSubset(d, 50, 9);
  const auto stream = Encode(indices);
  std::vector<uint32_t> out(indices.size() + 1);
  SUBCASE("unknown method") {
    auto bad = stream;
    bad[0] = 3;
    CHECK(DecodeIndices(bad.data(), bad.size(), 50, d, out.data()).code() == StatusCode::kCorrupt);
  }
  SUBCASE("bad parameter") {
    auto bad = stream;
    bad[1] = 40;
    CHECK(DecodeIndices(bad.data(), bad.size(), 50, d, out.data()).code() == StatusCode::kCorrupt);
  }
  SUBCASE("count larger than d") {
    CHECK(DecodeIndices(stream.data(), stream.size(), 1001, d, out.data()).code() == StatusCode::kCorrupt);
  }
  SUBCASE("truncated stream") {
    for (std::size_t cut = 0; cut < stream.size(); ++cut) {
      CHECK_FALSE(DecodeIndices(stream.data(), cut, 50, d, out.data()).ok());
    }
  }
  SUBCASE("trailing bytes") {
    auto bad = stream;
    bad.push_back(0);
    CHECK(DecodeIndices(bad.data(), bad.size(), 50, d, out.data()).code() == StatusCode::kCorrupt);
  }
  SUBCASE("fewer indices than the stream holds") {
    CHECK(DecodeIndices(stream.data(), stream.size(), 49, d, out.data()).code() == StatusCode::kCorrupt);
  }
  SUBCASE("index beyond d") {
    CHECK(DecodeIndices(stream.data(), stream.size(), 50, indices.back(), out.data()).code() ==
          StatusCode::kCorrupt);
  }
  SUBCASE("varint that runs past the end or is over-long") {
    const uint8_t past[] = {0, 0, 0x80, 0x80};
    CHECK(DecodeIndices(past, sizeof past, 1, d, out.data()).code() == StatusCode::kCorrupt);
    const uint8_t overlong[] = {0, 0, 0x81, 0x00};
    CHECK(DecodeIndices(overlong, sizeof overlong, 1, d, out.data()).code() == StatusCode::kCorrupt);
    const uint8_t six[] = {0, 0, 0x81, 0x81, 0x81, 0x81, 0x81, 0x01};
    CHECK(DecodeIndices(six, sizeof six, 1, uint64_t{1} << 32, out.data()).code() == StatusCode::kCorrupt);
  }
  SUBCASE("gamma prefix of only zeros and non-zero padding") {
    const uint8_t zeros[] = {1, 0, 0, 0, 0, 0, 0};
    CHECK(DecodeIndices(zeros, sizeof zeros, 1, d, out.data()).code() == StatusCode::kCorrupt);
    // gamma "1" = gap 0, then padding bits 0b0000001 set.
    const uint8_t padding[] = {1, 0, 0x03};
    CHECK(DecodeIndices(padding, sizeof padding, 1, d, out.data()).code() == StatusCode::kCorrupt);
    const uint8_t good[] = {1, 0, 0x01};
    REQUIRE(DecodeIndices(good, sizeof good, 1, d, out.data()).ok());
    CHECK(out[0] == 0);
  }
  SUBCASE("rice quotient longer than d allows") {
    std::vector<uint8_t> bad = {2, 0};
    bad.resize(2 + 200, 0);  // 1600 zero bits with p = 0 and d = 1000
    bad.back() = 0x80;
    CHECK(DecodeIndices(bad.data(), bad.size(), 1, d, out.data()).code() == StatusCode::kCorrupt);
  }
  SUBCASE("random bytes never decode out of range") {
    std::mt19937 rng(77);
    for (int trial = 0; trial < 2000; ++trial) {
      std::vector<uint8_t> junk(2 + rng() % 40);
      for (auto& b : junk) b = static_cast<uint8_t>(rng());
      junk[0] = static_cast<uint8_t>(junk[0] % 3);
      junk[1] = static_cast<uint8_t>(junk[0] == 2 ? junk[1] % 12 : 0);
      const std::size_t count = rng() % 20;
      if (DecodeIndices(junk.data(), junk.size(), count, d, out.data()).ok()) {
        for (std::size_t j = 0; j < count; ++j) {
          CHECK(out[j] < d);
          if (j > 0) CHECK(out[j] > out[j - 1]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace fedrt::codec_internal
