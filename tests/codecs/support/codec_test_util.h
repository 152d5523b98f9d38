// Helpers shared by the codec tests: make a codec or fail the test, encode
// into a right-sized buffer, Gaussian test vectors.
#ifndef FEDRT_TESTS_CODECS_CODEC_TEST_UTIL_H_
#define FEDRT_TESTS_CODECS_CODEC_TEST_UTIL_H_

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"

namespace fedrt::testing {

inline std::unique_ptr<Codec> MakeOrFail(const std::string& spec) {
  auto codec = MakeCodec(spec);
  REQUIRE_MESSAGE(codec.ok(), codec.status().ToString());
  return std::move(*codec);
}

inline std::vector<uint8_t> EncodeOrFail(Codec& codec, const std::vector<float>& x, const CodecContext& context) {
  std::vector<uint8_t> payload(codec.MaxEncodedSize(x.size()));
  auto size = codec.Encode(x.data(), x.size(), context, payload.data(), payload.size());
  REQUIRE_MESSAGE(size.ok(), size.status().ToString());
  payload.resize(*size);
  return payload;
}

inline std::vector<float> GaussianVector(std::size_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(d);
  for (float& x : v) x = normal(rng);
  return v;
}

// The bit pattern of a float, for bit-exact comparisons.
inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace fedrt::testing

#endif  // FEDRT_TESTS_CODECS_CODEC_TEST_UTIL_H_
