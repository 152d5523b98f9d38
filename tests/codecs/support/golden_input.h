// The fixed input of the cross-architecture golden payloads
// (dqsg_golden_test.cc, and tests/firmware/codec_payload_test.cc on the
// microcontroller): integer arithmetic only, so the same floats on every
// target -- a spread of magnitudes, zeros and subnormals. Free of doctest, so
// the firmware tests can include it.
#ifndef FEDRT_TESTS_CODECS_GOLDEN_INPUT_H_
#define FEDRT_TESTS_CODECS_GOLDEN_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fedrt/codecs/codec.h"

namespace fedrt::testing {

inline std::vector<float> GoldenInput(std::size_t d) {
  std::vector<float> v(d);
  uint32_t state = 12345;
  for (std::size_t i = 0; i < d; ++i) {
    state = state * 1664525u + 1013904223u;
    const int32_t mantissa = static_cast<int32_t>(state) >> 8;  // [-2^23, 2^23)
    float x = static_cast<float>(mantissa) * 0x1p-23f;
    if (i % 17 == 0) x *= 8.0f;
    if (i % 29 == 0) x = 0.0f;
    if (i % 31 == 0) x *= 0x1p-130f;  // subnormal
    v[i] = x;
  }
  return v;
}

// The decoder's side information of the golden payloads (dqsg, ndqsg).
inline std::vector<float> GoldenSideInfo(const std::vector<float>& input) {
  std::vector<float> side(input.size());
  for (std::size_t i = 0; i < input.size(); ++i) side[i] = input[i] * 0.75f;
  return side;
}

// The context the golden payloads were encoded in.
inline CodecContext GoldenContext() {
  CodecContext context;
  context.session_seed = 0x0123456789abcdefull;
  context.round = 77;
  context.tensor_id = 4;
  context.sender_id = 9;
  return context;
}

}  // namespace fedrt::testing

#endif  // FEDRT_TESTS_CODECS_GOLDEN_INPUT_H_
