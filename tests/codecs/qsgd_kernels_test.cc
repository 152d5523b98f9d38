// Every variant of the normalized-quantizer kernels (qsgd_kernels.h) gives the
// scalar reference's bits: awkward sizes, misaligned pointers, zeros,
// denormals, huge values, every level table shape.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "fedrt/codecs/levels.h"
#include "fedrt/codecs/philox.h"
#include "fedrt/platform/cpu.h"
#include "qsgd/qsgd_kernels.h"

namespace fedrt {
namespace {

constexpr std::size_t kSizes[] = {0, 1, 7, 8, 9, 31, 32, 33, 1007, 65539};

enum class Fill { kGaussian, kZeros, kDenormals, kHuge, kMixed };
constexpr Fill kFills[] = {Fill::kGaussian, Fill::kZeros, Fill::kDenormals, Fill::kHuge, Fill::kMixed};

std::vector<float> Values(std::size_t n, Fill fill, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n + 1);  // one spare float for the misaligned view
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float g = normal(rng);
    switch (fill) {
      case Fill::kGaussian: v[i] = g; break;
      case Fill::kZeros: v[i] = (i % 3 == 0) ? -0.0f : 0.0f; break;
      case Fill::kDenormals: v[i] = g * 1e-40f; break;
      case Fill::kHuge: v[i] = g * 1e37f; break;
      case Fill::kMixed: v[i] = i % 4 == 0 ? g * 1e-41f : i % 4 == 1 ? 0.0f : i % 4 == 2 ? std::copysign(3e38f, g) : g; break;
    }
  }
  return v;
}

bool SameBits(const float* a, const float* b, std::size_t n) { return n == 0 || std::memcmp(a, b, 4 * n) == 0; }
bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

std::vector<LevelTable> Tables() {
  LevelTable fitted;
  fitted.levels = {0.0f, 0.013f, 0.07f, 0.31f, 1.0f};
  return {UniformLevels(1), UniformLevels(4), ExponentialLevels(7, 0.5f), UniformLevels(127), fitted};
}

TEST_CASE("every qsgd kernel variant gives the scalar bits for every size, alignment and value class") {
  const QsgdKernels& ref = QsgdKernelsFor(Isa::kScalar);
  for (Isa isa : AvailableIsas()) {
    INFO("isa " << IsaName(isa));
    const QsgdKernels& k = QsgdKernelsFor(isa);
    for (std::size_t n : kSizes) {
      for (Fill fill : kFills) {
        // The largest size only for two value classes (test time under emulation).
        if (n > 10000 && fill != Fill::kGaussian && fill != Fill::kMixed) continue;
        for (std::size_t offset : {0u, 1u}) {
          INFO("n " << n << " fill " << static_cast<int>(fill) << " offset " << offset);
          const auto storage = Values(n, fill, static_cast<uint32_t>(n) + 7u * static_cast<uint32_t>(fill));
          const float* v = storage.data() + offset;
          CHECK(SameBits(k.l2_norm(v, n), ref.l2_norm(v, n)));
          CHECK(SameBits(k.mean_abs(v, n), ref.mean_abs(v, n)));
          CHECK(SameBits(k.max_abs(v, n), ref.max_abs(v, n)));

          std::vector<uint32_t> words(n + 1);
          std::mt19937 rng(static_cast<uint32_t>(n));
          for (uint32_t& w : words) w = static_cast<uint32_t>(rng());
          std::vector<uint8_t> sym_ref(n + 1), sym(n + 1);
          const float l2 = ref.l2_norm(v, n);
          const float max = ref.max_abs(v, n);
          for (const LevelTable& table : Tables()) {
            const int s = static_cast<int>(table.levels.size()) - 1;
            if (s > 100 && n > 10000) continue;  // O(s) per coordinate in the reference
            INFO("s " << s);
            for (float norm : {l2, max}) {
              if (!(norm > 0.0f) || !std::isfinite(norm)) continue;
              ref.quantize_levels(v, n, norm, table.levels.data(), s, words.data() + offset, sym_ref.data());
              k.quantize_levels(v, n, norm, table.levels.data(), s, words.data() + offset, sym.data() + offset);
              REQUIRE((n == 0 || std::memcmp(sym_ref.data(), sym.data() + offset, n) == 0));
              bool in_alphabet = true;
              for (std::size_t i = 0; i < n; ++i) in_alphabet = in_alphabet && sym_ref[i] <= 2 * s;
              REQUIRE(in_alphabet);

              std::vector<float> out_ref(n + 1), out(n + 1);
              ref.dequantize_levels(sym_ref.data(), n, norm, table.levels.data(), s, out_ref.data());
              k.dequantize_levels(sym.data() + offset, n, norm, table.levels.data(), s, out.data() + offset);
              REQUIRE(SameBits(out_ref.data(), out.data() + offset, n));

              std::vector<float> acc_ref(n + 1, 0.5f), acc(n + 1, 0.5f);
              ref.dequantize_levels_accumulate(sym_ref.data(), n, norm, table.levels.data(), s, -0.25f, acc_ref.data());
              k.dequantize_levels_accumulate(sym.data() + offset, n, norm, table.levels.data(), s, -0.25f,
                                             acc.data() + offset);
              REQUIRE(SameBits(acc_ref.data(), acc.data() + offset, n));
            }
          }

          ref.sign_quantize(v, n, sym_ref.data());
          k.sign_quantize(v, n, sym.data() + offset);
          REQUIRE((n == 0 || std::memcmp(sym_ref.data(), sym.data() + offset, n) == 0));
          const float scale = ref.mean_abs(v, n);
          std::vector<float> out_ref(n + 1), out(n + 1);
          ref.sign_dequantize(sym_ref.data(), n, scale, out_ref.data());
          k.sign_dequantize(sym.data() + offset, n, scale, out.data() + offset);
          REQUIRE(SameBits(out_ref.data(), out.data() + offset, n));
          std::vector<float> acc_ref(n + 1, 2.0f), acc(n + 1, 2.0f);
          ref.sign_dequantize_accumulate(sym_ref.data(), n, scale, 3.0f, acc_ref.data());
          k.sign_dequantize_accumulate(sym.data() + offset, n, scale, 3.0f, acc.data() + offset);
          REQUIRE(SameBits(acc_ref.data(), acc.data() + offset, n));
        }
      }
    }
  }
}

TEST_CASE("level and sign accumulation give the scalar bits on every ISA where NEON would flush") {
  // Blocks of 16 with one hazard each at a varying lane: sums cancelling into
  // the subnormal range or to exact zero, subnormal and NaN accumulators,
  // products that underflow (a tiny norm or weight); zero values (symbol s)
  // are common and must not force the scalar path's result to differ either.
  const QsgdKernels& ref = QsgdKernelsFor(Isa::kScalar);
  const LevelTable table = UniformLevels(4);
  const int s = 4;
  const std::size_t n = 16 * 40 + 3;
  std::vector<uint8_t> symbols(n);
  std::vector<uint8_t> signs(n);  // sign symbols are 0 or 1 after validation
  for (std::size_t i = 0; i < n; ++i) {
    symbols[i] = static_cast<uint8_t>((i * 5 + i / 3) % 9);
    signs[i] = symbols[i] & 1;
  }
  for (float norm : {1.5f, 0x1p-100f, 1e-39f}) {
    for (float weight : {-0.25f, 0x1p-30f, 1e-41f}) {
      INFO("norm " << norm << " weight " << weight);
      std::vector<float> values(n);
      ref.dequantize_levels(symbols.data(), n, norm, table.levels.data(), s, values.data());
      std::vector<float> acc(n);
      for (std::size_t i = 0; i < n; ++i) {
        const float product = weight * values[i];
        const std::size_t block = i / 16;
        acc[i] = 2.0f + static_cast<float>(i % 5);
        if (i % 16 != block % 16) continue;
        const float hazards[] = {-product, std::nextafter(-product, 1.0f), -product + 0x1p-126f, 1e-39f,
                                 std::nanf("0x77"), 0.0f, -0.0f, acc[i]};
        acc[i] = hazards[block % 8];
      }
      for (int form = 0; form < 2; ++form) {
        std::vector<float> expected = acc;
        if (form == 0) {
          ref.dequantize_levels_accumulate(symbols.data(), n, norm, table.levels.data(), s, weight, expected.data());
        } else {
          ref.sign_dequantize_accumulate(signs.data(), n, norm, weight, expected.data());
        }
        for (Isa isa : AvailableIsas()) {
          INFO("isa " << IsaName(isa) << " form " << form);
          const QsgdKernels& k = QsgdKernelsFor(isa);
          std::vector<float> got = acc;
          if (form == 0) {
            k.dequantize_levels_accumulate(symbols.data(), n, norm, table.levels.data(), s, weight, got.data());
          } else {
            k.sign_dequantize_accumulate(signs.data(), n, norm, weight, got.data());
          }
          for (std::size_t i = 0; i < n; ++i) {
            if (!SameBits(got[i], expected[i])) FAIL("index " << i << ": " << got[i] << " vs " << expected[i]);
          }
        }
      }
    }
  }
}

TEST_CASE("stochastic rounding agrees with the reference on every ISA next to level and probability boundaries") {
  // Per block of 16, one kind of input: |v| / norm within 4 ulps of a level
  // (which neighbours j picks; with u = 0 or 1 - 2^-24 in half the lanes), a
  // random word whose u is within 20 units of 2^-24 of the probability p (the
  // coin), or plain random values. Tables
  // include two levels 2^-24 apart; norms include the edges of ARMv7's
  // reciprocal range and a subnormal norm.
  const QsgdKernels& ref = QsgdKernelsFor(Isa::kScalar);
  LevelTable narrow;
  narrow.levels = {0.0f, 0.25f, 0.25f + 0x1p-24f, 0.5f, 1.0f};
  const std::vector<LevelTable> tables = {UniformLevels(4), ExponentialLevels(7, 0.5f), narrow, UniformLevels(127)};
  const std::size_t n = 512;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const LevelTable& table : tables) {
    const int s = static_cast<int>(table.levels.size()) - 1;
    const float* levels = table.levels.data();
    for (float norm : {1.0f, 3.7f, 0.77f, 1.3e-20f, 5e25f, 0x1p-100f, std::nextafter(0x1p-100f, 0.0f), 0x1p100f,
                       std::nextafter(0x1p100f, 1e38f), 1e-39f}) {
      INFO("s " << s << " norm " << norm);
      std::vector<float> v(n);
      std::vector<uint32_t> words(n);
      for (std::size_t i = 0; i < n; ++i) {
        const float sign = rng() % 2 == 0 ? 1.0f : -1.0f;
        words[i] = static_cast<uint32_t>(rng());
        switch ((i / 16) % 3) {
          case 0: {
            float x = levels[rng() % static_cast<uint32_t>(s + 1)] * norm;
            for (int step = static_cast<int>(i % 9) - 4; step != 0; step += step > 0 ? -1 : 1) {
              x = std::nextafter(x, step > 0 ? 1e38f : 0.0f);
            }
            v[i] = sign * x;
            // The extreme coins, where a wrong neighbour j is not hidden by the coin.
            if (i % 4 == 0) words[i] &= 0xFFu;
            if (i % 4 == 1) words[i] |= 0xFFFFFF00u;
            break;
          }
          case 1: {
            const float r_target = static_cast<float>(rng() % 1000000u) / 1000000.0f;
            v[i] = sign * r_target * norm;
            float r = std::fabs(v[i]) / norm;  // the reference's p, to aim u at it
            if (r > 1.0f) r = 1.0f;
            int j = 0;
            for (int k = 1; k < s; ++k) j += levels[k] <= r ? 1 : 0;
            const float p = (r - levels[j]) / (levels[j + 1] - levels[j]);
            const long units = std::lround(static_cast<double>(p) * 0x1p24) + static_cast<long>(i % 41) - 20;
            const long clamped = units < 0 ? 0 : units > 0xFFFFFF ? 0xFFFFFF : units;
            words[i] = (static_cast<uint32_t>(clamped) << 8) | (words[i] & 0xFFu);
            break;
          }
          default: v[i] = normal(rng) * 0.3f * norm; break;
        }
      }
      // Values whose quotient by the norm and its product with the norm's
      // reciprocal straddle a level (or one of them is the level), with the
      // extreme coins: the cases where only the check of j catches a wrong
      // neighbour. Appended as whole blocks after the others.
      std::vector<float> straddle;
      const float inverse = 1.0f / norm;
      for (int k = 1; k <= s && straddle.size() < 64; ++k) {
        float x = levels[k] * norm;
        for (int step = 0; step < 64; ++step, x = std::nextafter(x, 0.0f)) {
          const float divided = x / norm, multiplied = x * inverse;
          const float lo = std::fmin(divided, multiplied), hi = std::fmax(divided, multiplied);
          if (lo != hi && lo <= levels[k] && levels[k] <= hi) straddle.push_back(x);
        }
      }
      for (std::size_t t = 0; t < straddle.size(); ++t) {
        for (uint32_t word : {0x00000011u, 0xFFFFFF22u}) {
          v.push_back(t % 3 == 0 ? -straddle[t] : straddle[t]);
          words.push_back(word);
        }
      }
      while (v.size() % 16 != 0) {
        v.push_back(0.0f);
        words.push_back(0u);
      }
      const std::size_t count = v.size();
      std::vector<uint8_t> expected(count);
      ref.quantize_levels(v.data(), count, norm, levels, s, words.data(), expected.data());
      for (Isa isa : AvailableIsas()) {
        INFO("isa " << IsaName(isa));
        std::vector<uint8_t> got(count);
        QsgdKernelsFor(isa).quantize_levels(v.data(), count, norm, levels, s, words.data(), got.data());
        for (std::size_t i = 0; i < count; ++i) {
          if (got[i] != expected[i]) FAIL("index " << i << ": " << int{got[i]} << " vs " << int{expected[i]});
        }
      }
    }
  }
}

TEST_CASE("stochastic rounding from the stream gives the bits of the reference on the stream's words on every ISA") {
  const QsgdKernels& ref = QsgdKernelsFor(Isa::kScalar);
  const RandomStream stream = {0x1234567890ABCDEFull, 3, 9, 5, RandomPurpose::kStochasticRounding};
  // Firsts on and off the block grid, and past 2^32 blocks (the counter word wraps).
  const uint64_t firsts[] = {0, 1, 3, 4, 512, (uint64_t{1} << 34) - 70};
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{33}, std::size_t{63},
                        std::size_t{64}, std::size_t{65}, std::size_t{512}, std::size_t{1007}}) {
    for (Fill fill : kFills) {
      const auto storage = Values(n, fill, static_cast<uint32_t>(n) * 3u + static_cast<uint32_t>(fill));
      for (std::size_t offset : {0u, 1u}) {
        const float* v = storage.data() + offset;
        const float norm = ref.l2_norm(v, n);
        if (!(norm > 0.0f) || !std::isfinite(norm)) continue;
        for (const LevelTable& table : Tables()) {
          const int s = static_cast<int>(table.levels.size()) - 1;
          for (uint64_t first : firsts) {
            INFO("n " << n << " fill " << static_cast<int>(fill) << " offset " << offset << " s " << s << " first "
                      << first);
            std::vector<uint32_t> words(n + 1);
            PhiloxWords(stream, first, n, words.data());
            std::vector<uint8_t> expected(n + 1);
            ref.quantize_levels(v, n, norm, table.levels.data(), s, words.data(), expected.data());
            for (Isa isa : AvailableIsas()) {
              INFO("isa " << IsaName(isa));
              std::vector<uint8_t> got(n + 2, 0xEE);
              QsgdKernelsFor(isa).quantize_levels_stream(v, n, norm, table.levels.data(), s, stream, first,
                                                         got.data() + offset);
              REQUIRE((n == 0 || std::memcmp(expected.data(), got.data() + offset, n) == 0));
              CHECK(got[n + offset] == 0xEE);  // nothing written past the end
            }
          }
        }
      }
    }
  }
}

TEST_CASE("stochastic rounding agrees with the reference where the reciprocal of a level gap moves the probability") {
  // Non-uniform tables, norm 1 (so |v| / norm is exact): coordinates where
  // (r - l_j) * fl(1 / gap) rounds above (r - l_j) / gap, with the coin u
  // equal to the exact probability, so that only the margin on u keeps a
  // division-free kernel from rounding up.
  const QsgdKernels& ref = QsgdKernelsFor(Isa::kScalar);
  // Gaps that are not powers of two (ExponentialLevels' are: exact reciprocals).
  LevelTable fitted, tenths;
  fitted.levels = {0.0f, 0.013f, 0.07f, 0.31f, 1.0f};
  tenths.levels = {0.0f, 0.1f, 0.3f, 0.45f, 0.7f, 0.9f, 1.0f};
  for (const LevelTable& table : {fitted, tenths}) {
    const int s = static_cast<int>(table.levels.size()) - 1;
    const float* levels = table.levels.data();
    std::vector<float> v;
    std::vector<uint32_t> words;
    std::mt19937 rng(23);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    for (int tries = 0; tries < 2000000 && v.size() < 256; ++tries) {
      const float r = uniform(rng);
      int j = 0;
      for (int k = 1; k < s; ++k) j += levels[k] <= r ? 1 : 0;
      const float gap = levels[j + 1] - levels[j];
      const float exact = (r - levels[j]) / gap;
      const float approximate = (r - levels[j]) * (1.0f / gap);
      const double units = static_cast<double>(exact) * 0x1p24;
      if (!(approximate > exact) || units != std::floor(units) || units >= 0x1p24) continue;
      v.push_back(tries % 2 == 0 ? r : -r);
      words.push_back(static_cast<uint32_t>(units) << 8);
    }
    REQUIRE(v.size() >= 32);
    const std::size_t n = v.size() - v.size() % 32;
    std::vector<uint8_t> expected(n);
    ref.quantize_levels(v.data(), n, 1.0f, levels, s, words.data(), expected.data());
    for (Isa isa : AvailableIsas()) {
      INFO("isa " << IsaName(isa) << " s " << s);
      std::vector<uint8_t> got(n);
      QsgdKernelsFor(isa).quantize_levels(v.data(), n, 1.0f, levels, s, words.data(), got.data());
      for (std::size_t i = 0; i < n; ++i) {
        if (got[i] != expected[i]) FAIL("index " << i << ": " << int{got[i]} << " vs " << int{expected[i]});
      }
    }
  }
}

TEST_CASE("the norms follow their definitions") {
  const QsgdKernels& ref = QsgdKernelsFor(Isa::kScalar);
  const std::vector<float> v = {3.0f, -4.0f, 0.0f, 12.0f};
  CHECK(ref.l2_norm(v.data(), 4) == 13.0f);
  CHECK(ref.max_abs(v.data(), 4) == 12.0f);
  CHECK(ref.mean_abs(v.data(), 4) == 4.75f);
  CHECK(ref.l2_norm(v.data(), 0) == 0.0f);
  CHECK(ref.mean_abs(v.data(), 0) == 0.0f);
  // Squares beyond the float range still give a finite-or-clamped norm.
  const std::vector<float> huge = {3e38f, 3e38f};
  CHECK(ref.l2_norm(huge.data(), 2) > 3e38f);
}

TEST_CASE("stochastic rounding picks the neighbouring levels with the specified probabilities") {
  const QsgdKernels& ref = QsgdKernelsFor(Isa::kScalar);
  const LevelTable table = UniformLevels(4);
  // r = 0.3: between 0.25 and 0.5, up with probability 0.2.
  const std::size_t n = 20000;
  std::vector<float> v(n, -0.3f);
  std::vector<uint32_t> words(n);
  std::mt19937 rng(5);
  for (uint32_t& w : words) w = static_cast<uint32_t>(rng());
  std::vector<uint8_t> symbols(n);
  ref.quantize_levels(v.data(), n, 1.0f, table.levels.data(), 4, words.data(), symbols.data());
  std::size_t up = 0;
  std::size_t other = 0;
  for (uint8_t s : symbols) {
    other += s != 4 - 1 && s != 4 - 2;
    up += s == 4 - 2;
  }
  CHECK(other == 0);
  CHECK(static_cast<double>(up) / n == doctest::Approx(0.2).epsilon(0.05));
  // Exactly on a level: never moves; r = 1 is the top level.
  v.assign(3, 0.5f);
  v[2] = 1.0f;
  ref.quantize_levels(v.data(), 3, 1.0f, table.levels.data(), 4, words.data(), symbols.data());
  CHECK(symbols[0] == 6);
  CHECK(symbols[2] == 8);
}

}  // namespace
}  // namespace fedrt
