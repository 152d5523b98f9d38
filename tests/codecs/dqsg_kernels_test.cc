// DQSG / NDQSG kernels: every ISA variant against the scalar reference over
// awkward sizes, alignments and values (zeros, subnormals, huge values), and
// the reference against the formulas, including the clamp at the boundary.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "dqsg/dqsg_kernels.h"
#include "fedrt/codecs/philox.h"
#include "fedrt/platform/cpu.h"

namespace fedrt {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

void RequireSameBits(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) return;
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("index " << i << ": " << a[i] << " vs " << b[i]);
    REQUIRE(Bits(a[i]) == Bits(b[i]));
  }
}

uint8_t MaxSymbol(const std::vector<uint8_t>& symbols, std::size_t n) {
  uint8_t best = 0;
  for (std::size_t i = 0; i < n; ++i) best = symbols[i] > best ? symbols[i] : best;
  return best;
}

enum class Values { kGaussian, kZeros, kSubnormal, kHuge, kMixed };

std::vector<float> MakeValues(std::size_t n, Values kind, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (kind) {
      case Values::kGaussian: v[i] = normal(rng); break;
      case Values::kZeros: v[i] = (i % 3 == 0) ? -0.0f : 0.0f; break;
      case Values::kSubnormal: v[i] = normal(rng) * 1e-39f; break;
      case Values::kHuge: v[i] = normal(rng) * 1e37f; break;
      case Values::kMixed: {
        const float choices[] = {normal(rng), 0.0f, 1e-41f, -3e-39f, normal(rng) * 1e30f, 1.0f, -1.0f};
        v[i] = choices[rng() % 7];
        break;
      }
    }
  }
  return v;
}

std::vector<float> Dither(std::size_t n, uint64_t first) {
  RandomStream stream;
  stream.seed = 0xfeedu;
  stream.tensor_id = 4;
  stream.round = 17;
  stream.sender_id = 2;
  std::vector<float> u(n);
  PhiloxDither(stream, first, n, u.data());
  return u;
}

TEST_CASE("every dqsg kernel variant matches the scalar reference bit for bit") {
  const DqsgKernels& ref = DqsgKernelsFor(Isa::kScalar);
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    const DqsgKernels& k = DqsgKernelsFor(isa);
    for (Values kind : {Values::kGaussian, Values::kZeros, Values::kSubnormal, Values::kHuge, Values::kMixed}) {
      for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 31u, 32u, 33u, 1007u, 65539u}) {
        if (n > 2000 && kind != Values::kMixed) continue;  // keeps the emulated run short
        for (std::size_t offset : {0u, 3u}) {
          INFO("values " << static_cast<int>(kind) << " n " << n << " offset " << offset);
          const auto storage = MakeValues(n + offset, kind, static_cast<uint32_t>(n + 13 * offset));
          const float* w = storage.data() + offset;
          const auto u_storage = Dither(n + offset, 5);
          const float* u = u_storage.data() + offset;
          const float max = ref.max_abs(w, n);
          REQUIRE(Bits(k.max_abs(w, n)) == Bits(max));
          if (max == 0.0f) continue;  // an all-zero bucket has no symbols
          for (int s : {1, 2, 3, 7, 127}) {
            const float scale = max / static_cast<float>(s);
            std::vector<uint8_t> sym_ref(n + 1, 0xEE), sym(n + 1, 0xEE);
            ref.quantize(w, u, n, scale, s, sym_ref.data());
            k.quantize(w, u, n, scale, s, sym.data());
            REQUIRE(sym == sym_ref);
            REQUIRE(MaxSymbol(sym, n) <= 2 * s);
            std::vector<float> out_ref(n + 1, 5.0f), out(n + 1, 5.0f);
            ref.dequantize(sym_ref.data(), u, n, scale, s, out_ref.data());
            k.dequantize(sym_ref.data(), u, n, scale, s, out.data());
            RequireSameBits(out, out_ref);
            std::vector<float> acc_ref(storage.begin() + offset, storage.end()), acc = acc_ref;
            acc_ref.push_back(9.0f);
            acc.push_back(9.0f);
            ref.dequantize_accumulate(sym_ref.data(), u, n, scale, s, 0.25f, acc_ref.data());
            k.dequantize_accumulate(sym_ref.data(), u, n, scale, s, 0.25f, acc.data());
            RequireSameBits(acc, acc_ref);
          }
          for (int rho : {2, 3, 4, 5, 255}) {
            const int s1 = 3;
            const float scale = max / static_cast<float>(s1);
            std::vector<uint8_t> sym_ref(n + 1, 0xEE), sym(n + 1, 0xEE);
            ref.nested_quantize(w, u, n, scale, s1, rho, sym_ref.data());
            k.nested_quantize(w, u, n, scale, s1, rho, sym.data());
            REQUIRE(sym == sym_ref);
            REQUIRE(MaxSymbol(sym, n) < rho);
            // Side information: the input, perturbed; some far away to force wraps.
            std::vector<float> y(w, w + n);
            for (std::size_t i = 0; i < n; ++i) y[i] += (i % 5 == 0 ? 2.0f : 0.1f) * scale * static_cast<float>(i % 7);
            std::vector<float> out_ref(n + 1, 5.0f), out(n + 1, 5.0f);
            ref.nested_dequantize(sym_ref.data(), u, y.data(), n, scale, rho, out_ref.data());
            k.nested_dequantize(sym_ref.data(), u, y.data(), n, scale, rho, out.data());
            RequireSameBits(out, out_ref);
          }
        }
      }
    }
  }
}

TEST_CASE("every fused dither kernel variant equals the dither followed by the scalar kernel") {
  const DqsgKernels& ref = DqsgKernelsFor(Isa::kScalar);
  RandomStream stream;
  stream.seed = 0x5eed0123456789ull;
  stream.tensor_id = 9;
  stream.round = 4;
  stream.sender_id = 0x123456;
  // Coordinate offsets on and off a block boundary, and one where the block
  // counter wraps past 2^32 inside the longer runs.
  const uint64_t firsts[] = {0, 1, 2, 3, 4, 517, 4 * uint64_t{0xfffffff0u} + 1};
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    const DqsgKernels& k = DqsgKernelsFor(isa);
    for (Values kind : {Values::kGaussian, Values::kZeros, Values::kSubnormal, Values::kHuge, Values::kMixed}) {
      for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 31u, 32u, 33u, 63u, 64u, 65u, 1007u, 65539u}) {
        if (n > 2000 && kind != Values::kMixed) continue;  // keeps the emulated run short
        for (uint64_t first : firsts) {
          const std::size_t offset = first % 2 == 0 ? 0 : 3;  // misaligned pointers too
          INFO("values " << static_cast<int>(kind) << " n " << n << " first " << first);
          const auto storage = MakeValues(n + offset, kind, static_cast<uint32_t>(n + first));
          const float* w = storage.data() + offset;
          std::vector<float> u(n);
          PhiloxDither(stream, first, n, u.data());
          const float max = ref.max_abs(w, n);
          const float scale = max == 0.0f ? 1.0f : max / 3.0f;
          std::vector<uint8_t> sym_ref(n + 1, 0xEE), sym(n + 1, 0xEE);
          ref.quantize(w, u.data(), n, scale, 3, sym_ref.data());
          k.dither_quantize(stream, first, w, n, scale, 3, sym.data());
          REQUIRE(sym == sym_ref);
          std::vector<float> out_ref(n + 1, 5.0f), out(n + 1, 5.0f);
          ref.dequantize(sym_ref.data(), u.data(), n, scale, 3, out_ref.data());
          k.dither_dequantize(stream, first, sym_ref.data(), n, scale, 3, out.data());
          RequireSameBits(out, out_ref);
          std::vector<float> acc_ref(storage.begin() + offset, storage.end()), acc = acc_ref;
          acc_ref.push_back(9.0f);
          acc.push_back(9.0f);
          ref.dequantize_accumulate(sym_ref.data(), u.data(), n, scale, 3, -1.5f, acc_ref.data());
          k.dither_dequantize_accumulate(stream, first, sym_ref.data(), n, scale, 3, -1.5f, acc.data());
          RequireSameBits(acc, acc_ref);
        }
      }
    }
    // The fused decoders at scales whose products are subnormal.
    const std::size_t n = 1007;
    std::vector<uint8_t> symbols(n);
    for (std::size_t i = 0; i < n; ++i) symbols[i] = static_cast<uint8_t>(i % 5);
    std::vector<float> u(n);
    PhiloxDither(stream, 8, n, u.data());
    for (float scale : {0x1p-102f, 0x1p-126f, 1e-40f, 0x1p-149f, 0x1p120f}) {
      INFO("scale " << scale);
      std::vector<float> out_ref(n), out(n);
      ref.dequantize(symbols.data(), u.data(), n, scale, 2, out_ref.data());
      k.dither_dequantize(stream, 8, symbols.data(), n, scale, 2, out.data());
      RequireSameBits(out, out_ref);
      std::vector<float> acc_ref(n, 1e-39f), acc(n, 1e-39f);
      ref.dequantize_accumulate(symbols.data(), u.data(), n, scale, 2, 0.75f, acc_ref.data());
      k.dither_dequantize_accumulate(stream, 8, symbols.data(), n, scale, 2, 0.75f, acc.data());
      RequireSameBits(acc, acc_ref);
    }
  }
}

TEST_CASE("dequantize matches the reference on every ISA for scales around the subnormal range") {
  // Products (q - u) * scale reach the subnormal range when scale < 2^-102
  // (ARMv7 NEON flushes them, so it must use the reference there).
  const DqsgKernels& ref = DqsgKernelsFor(Isa::kScalar);
  const std::size_t n = 1007;
  const auto u = Dither(n, 11);
  std::vector<uint8_t> symbols(n);
  for (std::size_t i = 0; i < n; ++i) symbols[i] = static_cast<uint8_t>(i % 5);
  const float scales[] = {0x1p-100f, 0x1p-102f, std::nextafter(0x1p-102f, 0.0f), 0x1p-110f, 0x1p-126f,
                          1e-40f, 0x1p-149f, 3.0f, 0x1p120f};
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    const DqsgKernels& k = DqsgKernelsFor(isa);
    for (float scale : scales) {
      INFO("scale " << scale);
      std::vector<float> out_ref(n), out(n);
      ref.dequantize(symbols.data(), u.data(), n, scale, 2, out_ref.data());
      k.dequantize(symbols.data(), u.data(), n, scale, 2, out.data());
      RequireSameBits(out, out_ref);
      std::vector<float> acc_ref(n, 1e-39f), acc(n, 1e-39f);
      ref.dequantize_accumulate(symbols.data(), u.data(), n, scale, 2, 0.75f, acc_ref.data());
      k.dequantize_accumulate(symbols.data(), u.data(), n, scale, 2, 0.75f, acc.data());
      RequireSameBits(acc, acc_ref);
    }
  }
}

// Inputs whose quotient w / scale + u lies within a few ulps of a
// half-integer, where a variant that divides differently (ARMv7: multiply by
// the reciprocal, then check the distance to the tie) must defer to the
// reference. Scales include the edges of ARMv7's reciprocal range.
TEST_CASE("quantize agrees with the reference on every ISA next to every rounding tie") {
  const DqsgKernels& ref = DqsgKernelsFor(Isa::kScalar);
  const std::size_t n = 1024;
  const auto u = Dither(n, 21);
  const float scales[] = {0.37f,     1.0f,        3e-5f,      0x1.234568p-60f, 0x1p-100f, std::nextafter(0x1p-100f, 0.0f),
                          0x1p100f,  std::nextafter(0x1p100f, 1e38f), 1e-38f, 7e30f};
  std::mt19937 rng(7);
  for (int s : {1, 2, 7, 127}) {
    for (float scale : scales) {
      INFO("s " << s << " scale " << scale);
      std::vector<float> w(n);
      for (std::size_t i = 0; i < n; ++i) {
        const int k = static_cast<int>(rng() % static_cast<uint32_t>(2 * s + 3)) - (s + 1);
        float x = (static_cast<float>(k) + 0.5f - u[i]) * scale;
        for (int step = static_cast<int>(i % 9) - 4; step != 0; step += step > 0 ? -1 : 1) {
          x = std::nextafter(x, step > 0 ? 1e38f : -1e38f);
        }
        w[i] = x;
      }
      std::vector<uint8_t> expected(n), nested_expected(n);
      ref.quantize(w.data(), u.data(), n, scale, s, expected.data());
      for (Isa isa : AvailableIsas()) {
        INFO("isa " << IsaName(isa));
        std::vector<uint8_t> actual(n);
        DqsgKernelsFor(isa).quantize(w.data(), u.data(), n, scale, s, actual.data());
        REQUIRE(actual == expected);
        for (int rho : {3, 5, 255}) {
          INFO("rho " << rho);
          ref.nested_quantize(w.data(), u.data(), n, scale, s, rho, nested_expected.data());
          DqsgKernelsFor(isa).nested_quantize(w.data(), u.data(), n, scale, s, rho, actual.data());
          REQUIRE(actual == nested_expected);
        }
      }
    }
  }
}

// Accumulators and products placed where ARMv7 NEON would flush or produce a
// different NaN: sums that cancel into the subnormal range or to exact zero,
// subnormal and non-finite accumulators, products that underflow, subnormal
// and zero weights. Every variant must still give the reference's bits.
TEST_CASE("dequantize accumulate gives the reference bits on every ISA where NEON would flush") {
  const DqsgKernels& ref = DqsgKernelsFor(Isa::kScalar);
  const std::size_t n = 1024;
  const int s = 2;
  const auto u = Dither(n, 31);
  std::vector<uint8_t> symbols(n);
  for (std::size_t i = 0; i < n; ++i) symbols[i] = static_cast<uint8_t>((i * 7) % 5);
  const float nan_payload = std::nanf("0x1234");
  for (float scale : {0x1p-100f, 0x1.3p-110f, 0.75f, 0x1p90f}) {
    for (float weight : {1.0f, -0.3f, 0x1p-20f, 0x1p-60f, 1e-40f, 0.0f, -0.0f}) {
      INFO("scale " << scale << " weight " << weight);
      std::vector<float> values(n);
      ref.dequantize(symbols.data(), u.data(), n, scale, s, values.data());
      // One hazard per block of 16 (at a varying lane), so that no other lane
      // of the block hides it; every eighth block has none.
      std::vector<float> acc(n);
      for (std::size_t i = 0; i < n; ++i) {
        const float product = weight * values[i];
        const std::size_t block = i / 16;
        acc[i] = 3.0f - static_cast<float>(i % 11);
        if (i % 16 != block % 16) continue;
        switch (block % 8) {
          case 0: acc[i] = -product; break;                        // exact zero
          case 1: acc[i] = std::nextafter(-product, 1.0f); break;  // cancels to one ulp
          case 2: acc[i] = -product + 0x1p-126f; break;
          case 3: acc[i] = block % 3 == 0 ? 0.0f : 1e-39f; break;  // zero or subnormal accumulator
          case 4: acc[i] = nan_payload; break;
          case 5: acc[i] = -INFINITY; break;
          case 6: acc[i] = -0.0f; break;
          default: break;
        }
      }
      std::vector<float> expected = acc;
      ref.dequantize_accumulate(symbols.data(), u.data(), n, scale, s, weight, expected.data());
      for (Isa isa : AvailableIsas()) {
        INFO("isa " << IsaName(isa));
        std::vector<float> actual = acc;
        DqsgKernelsFor(isa).dequantize_accumulate(symbols.data(), u.data(), n, scale, s, weight, actual.data());
        RequireSameBits(actual, expected);
      }
    }
  }
}

TEST_CASE("nested dequantize gives the reference bits on every ISA next to every wrap decision") {
  const DqsgKernels& ref = DqsgKernelsFor(Isa::kScalar);
  const std::size_t n = 1024;
  const auto u = Dither(n, 41);
  std::mt19937 rng(5);
  for (int rho : {2, 3, 5, 255}) {
    const int half = (rho - 1) / 2;
    for (float scale : {0.37f, 0x1p-100f, std::nextafter(0x1p-100f, 0.0f), 0x1p-60f, 0x1p100f, 1e-39f}) {
      INFO("rho " << rho << " scale " << scale);
      std::vector<uint8_t> symbols(n);
      std::vector<float> y(n);
      const float d2 = static_cast<float>(rho) * scale;
      for (std::size_t i = 0; i < n; ++i) {
        symbols[i] = static_cast<uint8_t>(rng() % static_cast<uint32_t>(rho));
        const float q = static_cast<float>(static_cast<int>(symbols[i]) - half);
        const float a = (q - u[i]) * scale;
        // y - a within a few ulps of (k + 1/2) d2: the rounding of m is a tie decision.
        const int k = static_cast<int>(rng() % 41) - 20;
        float x = a + (static_cast<float>(k) + 0.5f) * d2;
        for (int step = static_cast<int>(i % 9) - 4; step != 0; step += step > 0 ? -1 : 1) {
          x = std::nextafter(x, step > 0 ? 1e38f : -1e38f);
        }
        y[i] = i % 97 == 0 ? 1e-41f : i % 89 == 0 ? 3e7f * d2 : x;
      }
      std::vector<float> expected(n);
      ref.nested_dequantize(symbols.data(), u.data(), y.data(), n, scale, rho, expected.data());
      for (Isa isa : AvailableIsas()) {
        INFO("isa " << IsaName(isa));
        std::vector<float> actual(n);
        DqsgKernelsFor(isa).nested_dequantize(symbols.data(), u.data(), y.data(), n, scale, rho, actual.data());
        RequireSameBits(actual, expected);
      }
    }
  }
}

TEST_CASE("max_abs is non-finite on every ISA when any coordinate is Inf or NaN") {
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    for (std::size_t n : {1u, 9u, 33u, 100u}) {
      for (std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
        for (float bad : {INFINITY, -INFINITY, NAN}) {
          auto w = MakeValues(n, Values::kGaussian, 3);
          w[at] = bad;
          INFO("n " << n << " at " << at << " value " << bad);
          CHECK_FALSE(std::isfinite(DqsgKernelsFor(isa).max_abs(w.data(), n)));
        }
      }
    }
  }
}

TEST_CASE("dqsg quantize follows the formula and decodes within half a step") {
  const auto w = MakeValues(4096, Values::kGaussian, 1);
  const auto u = Dither(w.size(), 0);
  const float max = scalar::MaxAbs(w.data(), w.size());
  float expected_max = 0;
  for (float x : w) expected_max = std::fmax(expected_max, std::fabs(x));
  CHECK(max == expected_max);
  const int s = 2;
  const float scale = max / s;
  std::vector<uint8_t> sym(w.size());
  scalar::Quantize(w.data(), u.data(), w.size(), scale, s, sym.data());
  std::vector<float> out(w.size());
  scalar::Dequantize(sym.data(), u.data(), w.size(), scale, s, out.data());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const float q = std::nearbyint(w[i] / scale + u[i]);
    REQUIRE(static_cast<int>(sym[i]) - s == static_cast<int>(std::fmax(-2.0f, std::fmin(2.0f, q))));
    REQUIRE(std::fabs(out[i] - w[i]) <= scale * 0.5f * (1 + 1e-6f));
  }
}

TEST_CASE("the clamp catches the one-step overshoot at the boundary and only there") {
  // Search (max, s) where fl(max / fl(max / s)) > s: the rounded scale lets
  // the largest coordinate's quotient exceed s by an ulp.
  int overshoots = 0;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(0.5f, 2.0f);
  for (int trial = 0; trial < 20000; ++trial) {
    const int s = 1 + static_cast<int>(rng() % 127);
    const float max = unit(rng);
    const float scale = max / static_cast<float>(s);
    const float quotient = max / scale;
    // The quotient never exceeds s by more than a few ulps: the clamp changes at most one step.
    if (quotient > static_cast<float>(s) * (1 + 4 * 0x1p-24f)) FAIL("quotient " << quotient << " for s " << s);
    if (quotient <= static_cast<float>(s)) continue;
    ++overshoots;
    // Largest dither below 1/2: without the clamp the symbol would be s + 1.
    const float u_hi = 0.5f - 0x1p-24f;
    REQUIRE(std::nearbyint(quotient + u_hi) == static_cast<float>(s + 1));
    const float w[2] = {max, -max};
    const float u[2] = {u_hi, -0.5f};
    REQUIRE(std::nearbyint(-max / scale + u[1]) == static_cast<float>(-s - 1));
    for (Isa isa : AvailableIsas()) {
      uint8_t sym[2];
      DqsgKernelsFor(isa).quantize(w, u, 2, scale, s, sym);
      REQUIRE(sym[0] == 2 * s);
      REQUIRE(sym[1] == 0);
      float out[2];
      DqsgKernelsFor(isa).dequantize(sym, u, 2, scale, s, out);
      // The clamped error exceeds scale/2 by at most the quotient's overshoot
      // (a few ulps of s) plus the rounding of the decode.
      const float bound = scale * (0.5f + static_cast<float>(s + 1) * 0x1p-21f);
      REQUIRE(std::fabs(out[0] - w[0]) <= bound);
      REQUIRE(std::fabs(out[1] - w[1]) <= bound);
    }
  }
  CHECK(overshoots > 10);
}

TEST_CASE("every fused quantize variant clamps the boundary overshoot as the reference does") {
  // The fused kernels draw their own dither, so the overshoot needs a stream
  // position whose dither is within the quotient's excess of +-1/2: with
  // s = 127 the excess is a few times 2^-17, a few such positions per 2^20.
  const int s = 127;
  float max = 0.0f, scale = 0.0f, excess = 0.0f;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> unit(0.5f, 2.0f);
  for (int trial = 0; trial < 20000; ++trial) {
    const float m = unit(rng);
    const float sc = m / static_cast<float>(s);
    if (m / sc - static_cast<float>(s) > excess) {
      max = m;
      scale = sc;
      excess = m / sc - static_cast<float>(s);
    }
  }
  REQUIRE(excess > 0.0f);
  RandomStream stream;
  stream.seed = 0xc1a3bull;
  stream.purpose = RandomPurpose::kDither;
  const std::size_t count = std::size_t{1} << 20;
  std::vector<float> u(count);
  PhiloxDither(stream, 0, count, u.data());
  // Positions where +max would round to s + 1 or -max to -s - 1 unclamped.
  std::vector<std::pair<std::size_t, float>> hits;
  for (std::size_t i = 0; i < count; ++i) {
    if (std::nearbyint(max / scale + u[i]) == static_cast<float>(s + 1)) hits.emplace_back(i, max);
    if (std::nearbyint(-max / scale + u[i]) == static_cast<float>(-s - 1)) hits.emplace_back(i, -max);
  }
  int upper = 0, lower = 0;
  for (const auto& hit : hits) (hit.second > 0 ? upper : lower) += 1;
  MESSAGE("overshooting positions: " << upper << " above, " << lower << " below, excess " << excess);
  REQUIRE(upper > 0);
  REQUIRE(lower > 0);
  const DqsgKernels& ref = DqsgKernelsFor(Isa::kScalar);
  for (const auto& hit : hits) {
    // A window of whole vector steps around the position, on a block boundary.
    const std::size_t first = hit.first / 256 * 256, n = 512;
    if (first + n > count) continue;
    std::vector<float> w(n);
    for (std::size_t i = 0; i < n; ++i) w[i] = max * (static_cast<float>(i % 17) / 8.0f - 1.0f);
    w[hit.first - first] = hit.second;
    std::vector<uint8_t> sym_ref(n);
    ref.quantize(w.data(), u.data() + first, n, scale, s, sym_ref.data());
    REQUIRE(sym_ref[hit.first - first] == (hit.second > 0 ? 2 * s : 0));
    for (Isa isa : AvailableIsas()) {
      INFO("isa " << IsaName(isa) << " position " << hit.first);
      std::vector<uint8_t> sym(n, 0xEE);
      DqsgKernelsFor(isa).dither_quantize(stream, first, w.data(), n, scale, s, sym.data());
      REQUIRE(sym == sym_ref);
    }
  }
}

TEST_CASE("nested quantize keeps ties of t over rho inside the coset alphabet") {
  // t = 2/1 - 1/2 = 1.5: round(t) = 2 and round(t/3) = round(0.5) = 0, so the
  // written formula gives 2, outside {-1, 0, 1}; ours gives 2 - 3 = -1.
  const float w[1] = {2.0f};
  const float u[1] = {-0.5f};
  for (Isa isa : AvailableIsas()) {
    uint8_t sym[1];
    DqsgKernelsFor(isa).nested_quantize(w, u, 1, 1.0f, 3, 3, sym);
    CHECK(sym[0] == 0);
  }
}

TEST_CASE("even rho takes the coset in the half-open range around zero on every ISA") {
  // n = round(w / scale + u) for scale 1 and u = 0 is w itself.
  const float w[7] = {-3.0f, -2.0f, -1.0f, 0.0f, 1.0f, 2.0f, 3.0f};
  const float u[7] = {};
  // rho = 2: q in {0, 1}, symbol = q. rho = 4: q in {-1..2}, symbol = q + 1.
  const uint8_t want2[7] = {1, 0, 1, 0, 1, 0, 1};
  const uint8_t want4[7] = {2, 3, 0, 1, 2, 3, 0};
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    uint8_t sym[7];
    DqsgKernelsFor(isa).nested_quantize(w, u, 7, 1.0f, 3, 2, sym);
    CHECK(std::vector<uint8_t>(sym, sym + 7) == std::vector<uint8_t>(want2, want2 + 7));
    DqsgKernelsFor(isa).nested_quantize(w, u, 7, 1.0f, 3, 4, sym);
    CHECK(std::vector<uint8_t>(sym, sym + 7) == std::vector<uint8_t>(want4, want4 + 7));
  }
}

TEST_CASE("nested dequantize equals the dqsg value when the side information is within the bound") {
  for (int rho : {2, 3, 4}) {
  INFO("rho " << rho);
  const auto w = MakeValues(5000, Values::kGaussian, 8);
  const auto u = Dither(w.size(), 100);
  const int s1 = 3;
  const float scale = scalar::MaxAbs(w.data(), w.size()) / s1;
  std::vector<uint8_t> fine(w.size()), coset(w.size());
  scalar::Quantize(w.data(), u.data(), w.size(), scale, s1, fine.data());
  scalar::NestedQuantize(w.data(), u.data(), w.size(), scale, s1, rho, coset.data());
  std::vector<float> dqsg(w.size()), nested(w.size());
  scalar::Dequantize(fine.data(), u.data(), w.size(), scale, s1, dqsg.data());
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> offset(-0.49f, 0.49f);
  std::vector<float> y(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) y[i] = dqsg[i] + offset(rng) * static_cast<float>(rho) * scale;
  scalar::NestedDequantize(coset.data(), u.data(), y.data(), w.size(), scale, rho, nested.data());
  RequireSameBits(nested, dqsg);
  }
}

}  // namespace
}  // namespace fedrt
