// Reduction kernels: the scalar reference is one float32 addition per
// element; every ISA variant gives the same bits over awkward sizes,
// misaligned pointers, zeros, subnormals and huge values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fedrt/codecs/reduce.h"
#include "fedrt/platform/cpu.h"
#include "reduce/reduce_kernels.h"
#include "support/codec_test_util.h"

namespace fedrt {
namespace {

using fedrt::testing::FloatBits;

// Values that stress rounding: mixed magnitudes, subnormals, zeros of both
// signs, values near the overflow threshold.
std::vector<float> Awkward(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> kind(0, 7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) {
    switch (kind(rng)) {
      case 0: x = 0.0f; break;
      case 1: x = -0.0f; break;
      case 2: x = normal(rng) * std::numeric_limits<float>::denorm_min() * 1000.0f; break;  // subnormal
      case 3: x = normal(rng) * 1e38f; break;                                           // huge
      case 4: x = normal(rng) * 1e-30f; break;
      default: x = normal(rng) * 100.0f; break;
    }
  }
  return v;
}

TEST_CASE("the scalar add is one float32 addition per element") {
  const float in[] = {1.0f, 0.1f, 1e-45f, 3e38f, -0.0f};
  float inout[] = {2.0f, 0.2f, 1e-45f, 3e38f, 0.0f};
  scalar::AddFloats(in, 5, inout);
  CHECK(inout[0] == 3.0f);
  CHECK(FloatBits(inout[1]) == FloatBits(0.2f + 0.1f));
  CHECK(inout[2] == 2.0f * std::numeric_limits<float>::denorm_min());  // subnormals are not flushed
  CHECK(std::isinf(inout[3]));
  CHECK(FloatBits(inout[4]) == FloatBits(0.0f));
}

TEST_CASE("every add variant gives the scalar bits for awkward sizes and misaligned pointers") {
  for (Isa isa : AvailableIsas()) {
    const ReduceKernels& k = ReduceKernelsFor(isa);
    for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 31u, 32u, 33u, 1007u, 65539u}) {
      for (std::size_t shift : {0u, 1u, 3u}) {
        INFO("isa ", IsaName(isa), " n ", n, " shift ", shift);
        const std::vector<float> in = Awkward(n + shift, static_cast<uint32_t>(n + 1));
        const std::vector<float> start = Awkward(n + shift, static_cast<uint32_t>(n + 7));
        std::vector<float> expected = start, got = start;
        scalar::AddFloats(in.data() + shift, n, expected.data() + shift);
        k.add(in.data() + shift, n, got.data() + shift);
        bool same = true;
        for (std::size_t i = 0; i < got.size(); ++i) same = same && FloatBits(got[i]) == FloatBits(expected[i]);
        CHECK(same);
      }
    }
  }
}

TEST_CASE("every add variant keeps subnormal sums exact") {
  const float tiny = std::numeric_limits<float>::denorm_min();
  std::vector<float> in(37, tiny), start(37, 3.0f * tiny);
  for (Isa isa : AvailableIsas()) {
    INFO("isa ", IsaName(isa));
    std::vector<float> got = start;
    ReduceKernelsFor(isa).add(in.data(), in.size(), got.data());
    for (float v : got) CHECK(v == 4.0f * tiny);
  }
}

TEST_CASE("every add variant gives the scalar bits where ARMv7 NEON would flush or change a NaN") {
  // Normal blocks of 16 with one hazard each (at a varying lane, so no other
  // lane of the block hides it): sums cancelling into the subnormal range or
  // to exact zero, subnormal inputs, NaN payloads, Inf, negative zeros.
  const std::size_t n = 16 * 64 + 5;
  std::vector<float> in(n), start(n);
  for (std::size_t i = 0; i < n; ++i) {
    in[i] = 0.5f + static_cast<float>(i % 13);
    start[i] = -3.0f - static_cast<float>(i % 7);
    const std::size_t block = i / 16;
    if (i % 16 != block % 16) continue;
    const float small = std::ldexp(1.0f + static_cast<float>(i % 5) / 8.0f, -125);
    switch (block % 9) {
      case 0: start[i] = -small + 0x1p-126f; in[i] = small; break;           // sum near the smallest normal
      case 1: start[i] = std::nextafter(-small, 0.0f); in[i] = small; break;  // subnormal sum
      case 2: start[i] = -small; in[i] = small; break;                         // exact zero
      case 3: in[i] = 1e-40f; break;                                           // subnormal input
      case 4: start[i] = -1e-39f; break;                                       // subnormal accumulator
      case 5: in[i] = std::nanf("0x2a"); break;
      case 6: start[i] = INFINITY; in[i] = -INFINITY; break;
      case 7: start[i] = -0.0f; in[i] = -0.0f; break;
      default: break;
    }
  }
  std::vector<float> expected = start;
  scalar::AddFloats(in.data(), n, expected.data());
  for (Isa isa : AvailableIsas()) {
    INFO("isa ", IsaName(isa));
    std::vector<float> got = start;
    ReduceKernelsFor(isa).add(in.data(), n, got.data());
    for (std::size_t i = 0; i < n; ++i) {
      if (FloatBits(got[i]) != FloatBits(expected[i])) FAIL("index ", i, ": ", got[i], " vs ", expected[i]);
    }
  }
}

TEST_CASE("AddFloats follows the forced ISA and adds in place") {
  std::vector<float> a(100, 1.5f), b(100, 2.25f);
  for (Isa isa : AvailableIsas()) {
    SetIsaOverride(isa);
    std::vector<float> x = b;
    AddFloats(a.data(), a.size(), x.data());
    for (float v : x) CHECK(v == 3.75f);
  }
  ClearIsaOverride();
  AddFloats(a.data(), a.size(), a.data());  // in == inout doubles the vector
  CHECK(a[99] == 3.0f);
}

}  // namespace
}  // namespace fedrt
