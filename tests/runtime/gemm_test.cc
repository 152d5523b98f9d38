#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "fedrt/platform/cpu.h"
#include "fedrt/runtime/gemm.h"
#include "train/gemm_kernels.h"

namespace fedrt {
namespace {

// Deterministic values with mixed signs and magnitudes.
std::vector<float> Values(std::size_t count, uint32_t seed) {
  std::vector<float> v(count);
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(static_cast<int32_t>(x >> 8) % 2001 - 1000) / 537.0f;
  }
  return v;
}

struct Shape {
  int m, n, k;
};

// Odd sizes around the micro-tiles (4x8, 6x16), layer shapes, and one that
// crosses every packing block (MC 120, NC 512, KC 256).
const Shape kShapes[] = {{1, 1, 1},   {7, 13, 5},    {13, 7, 1},    {6, 16, 3},    {5, 17, 300},
                         {31, 33, 2}, {64, 10, 100}, {1, 300, 784}, {300, 784, 3}, {121, 513, 257},
                         {3, 2, 0}};

// Large shapes run one transpose and beta combination each: all of them
// would take minutes under qemu, and the small shapes cover the combinations.
bool Large(const Shape& s) { return static_cast<long>(s.m) * s.n * s.k > 200000; }

void CheckVariant(const char* what, void (*gemm)(const GemmMicroKernel*, Transpose, Transpose, int, int, int,
                                                 const float*, int, const float*, int, float, float*, int),
                  const GemmMicroKernel* kernel) {
  for (const Shape& s : kShapes) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        for (float beta : {0.0f, 1.0f, -0.5f}) {
          if (Large(s) && !(beta == -0.5f && (ta == tb))) continue;
          INFO(what << " m=" << s.m << " n=" << s.n << " k=" << s.k << " ta=" << static_cast<int>(ta)
                    << " tb=" << static_cast<int>(tb) << " beta=" << beta);
          // Padded leading dimensions catch reads and writes outside the matrix.
          const int lda = (ta == Transpose::kNo ? s.k : s.m) + 3;
          const int ldb = (tb == Transpose::kNo ? s.n : s.k) + 2;
          const int ldc = s.n + 5;
          const int a_rows = ta == Transpose::kNo ? s.m : s.k;
          const int b_rows = tb == Transpose::kNo ? s.k : s.n;
          const std::vector<float> a = Values(static_cast<std::size_t>(a_rows) * lda + 1, 1);
          const std::vector<float> b = Values(static_cast<std::size_t>(b_rows) * ldb + 1, 2);
          std::vector<float> expected = Values(static_cast<std::size_t>(s.m) * ldc, 3);
          std::vector<float> actual = expected;
          ReferenceGemm(ta, tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, beta, expected.data(), ldc);
          gemm(kernel, ta, tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, beta, actual.data(), ldc);
          // Bit-identical: every variant sums each element in the reference's
          // order with separate multiply and add (the padding columns of C,
          // untouched, compare equal too).
          bool same = true;
          for (std::size_t i = 0; i < actual.size(); ++i) same = same && actual[i] == expected[i];
          CHECK(same);
        }
      }
    }
  }
}

void Blocked(const GemmMicroKernel* kernel, Transpose ta, Transpose tb, int m, int n, int k, const float* a,
             int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  BlockedGemm(*kernel, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

TEST_CASE("every built-in gemm variant matches the reference loop bit for bit on odd shapes") {
  for (Isa isa : AvailableIsas()) {
    const GemmMicroKernel kernel = GemmMicroKernelFor(isa);
    CheckVariant(IsaName(isa), &Blocked, &kernel);
  }
}

// ARMv7 NEON always flushes subnormal inputs and results to zero, where the
// scalar (VFP) path keeps them: training on tiny gradients then differed in
// every element. Inputs here are subnormal themselves, or normal with
// subnormal products (2^-66 x 2^-66 = 2^-132), or cancel to subnormal sums;
// each variant must give the reference's bytes (memcmp: +0 and -0 and every
// subnormal bit count).
TEST_CASE("every built-in gemm variant keeps subnormal inputs, products and sums like the reference") {
  const float tiny = std::ldexp(1.0f, -66);
  const float subnormal = std::numeric_limits<float>::denorm_min() * 12345.0f;
  auto scaled = [](std::vector<float> v, float scale) {
    for (float& f : v) f *= scale;
    return v;
  };
  for (Isa isa : AvailableIsas()) {
    const GemmMicroKernel kernel = GemmMicroKernelFor(isa);
    for (const Shape& s : {Shape{4, 8, 16}, Shape{7, 13, 5}, Shape{12, 24, 300}, Shape{1, 1, 1}}) {
      for (int kind = 0; kind < 4; ++kind) {
        INFO(std::string(IsaName(isa)) << " m=" << s.m << " n=" << s.n << " k=" << s.k << " kind=" << kind);
        const std::size_t a_size = static_cast<std::size_t>(s.m) * s.k;
        const std::size_t b_size = static_cast<std::size_t>(s.k) * s.n;
        const std::size_t c_size = static_cast<std::size_t>(s.m) * s.n;
        std::vector<float> a = Values(a_size, 8), b = Values(b_size, 9), c = Values(c_size, 10);
        if (kind == 0) {  // subnormal products of normal inputs, C zero
          a = scaled(a, tiny);
          b = scaled(b, tiny);
          c.assign(c_size, 0.0f);
        } else if (kind == 1) {  // subnormal inputs in A and C
          a = scaled(a, subnormal);
          c = scaled(c, subnormal);
        } else if (kind == 2) {  // subnormal products added to subnormal C
          a = scaled(a, tiny);
          b = scaled(b, tiny * 64.0f);
          c = scaled(c, subnormal);
        } else {  // normal terms that cancel into the subnormal range
          a = scaled(a, std::ldexp(1.0f, -63));
          b = scaled(b, std::ldexp(1.0f, -63));
        }
        std::vector<float> expected = c, actual = c;
        for (float beta : {0.0f, 1.0f}) {
          expected = c;
          actual = c;
          ReferenceGemm(Transpose::kNo, Transpose::kNo, s.m, s.n, s.k, a.data(), s.k, b.data(), s.n, beta,
                        expected.data(), s.n);
          BlockedGemm(kernel, Transpose::kNo, Transpose::kNo, s.m, s.n, s.k, a.data(), s.k, b.data(), s.n, beta,
                      actual.data(), s.n);
          std::size_t differ = 0, subnormals = 0;
          for (std::size_t i = 0; i < c_size; ++i) {
            differ += std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0;
            subnormals += std::fpclassify(expected[i]) == FP_SUBNORMAL;
          }
          INFO("beta=" << beta << ": " << differ << " of " << c_size << " elements differ, the reference has "
                       << subnormals << " subnormal");
          CHECK(differ == 0);
        }
      }
    }
  }
}

TEST_CASE("the reference loop agrees with a double-precision product within float rounding") {
  const int m = 9, n = 11, k = 300;
  const std::vector<float> a = Values(static_cast<std::size_t>(m) * k, 4);
  const std::vector<float> b = Values(static_cast<std::size_t>(k) * n, 5);
  std::vector<float> c(static_cast<std::size_t>(m) * n, 0.0f);
  ReferenceGemm(Transpose::kNo, Transpose::kNo, m, n, k, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double exact = 0, magnitude = 0;
      for (int p = 0; p < k; ++p) {
        exact += static_cast<double>(a[static_cast<std::size_t>(i) * k + p]) * b[static_cast<std::size_t>(p) * n + j];
        magnitude += std::abs(static_cast<double>(a[static_cast<std::size_t>(i) * k + p]) * b[static_cast<std::size_t>(p) * n + j]);
      }
      // Sequential float summation: error below k * eps * sum |terms|.
      CHECK(std::abs(c[static_cast<std::size_t>(i) * n + j] - exact) <= k * 6e-8 * magnitude);
    }
  }
}

TEST_CASE("the training gemm matches the reference within float rounding, whatever its backend") {
  // OpenBLAS sums in its own order (and may fuse), so this bound is relative
  // to the sum of absolute terms rather than bitwise.
  for (const Shape& s : kShapes) {
    if (Large(s) && s.m > 1) continue;
    const std::vector<float> a = Values(static_cast<std::size_t>(s.m) * s.k + 1, 6);
    const std::vector<float> b = Values(static_cast<std::size_t>(s.n) * s.k + 1, 7);
    std::vector<float> expected(static_cast<std::size_t>(s.m) * s.n, 1.0f), actual = expected;
    ReferenceGemm(Transpose::kNo, Transpose::kYes, s.m, s.n, s.k, a.data(), s.k > 0 ? s.k : 1, b.data(),
                  s.k > 0 ? s.k : 1, 0.5f, expected.data(), s.n);
    Gemm(Transpose::kNo, Transpose::kYes, s.m, s.n, s.k, a.data(), s.k > 0 ? s.k : 1, b.data(),
         s.k > 0 ? s.k : 1, 0.5f, actual.data(), s.n);
    for (std::size_t i = 0; i < actual.size(); ++i) {
      REQUIRE(std::abs(actual[i] - expected[i]) <= 2e-5f * static_cast<float>(s.k + 1) * (1.0f + std::abs(expected[i])));
    }
  }
  CHECK((std::string(GemmBackendName()) == "OpenBLAS" || std::string(GemmBackendName()) == "built-in"));
}

TEST_CASE("gemm with beta zero clears NaN already in C") {
  const float a[2] = {1.0f, 2.0f}, b[2] = {3.0f, 4.0f};
  for (Isa isa : AvailableIsas()) {
    float c[1] = {std::numeric_limits<float>::quiet_NaN()};
    BlockedGemm(GemmMicroKernelFor(isa), Transpose::kNo, Transpose::kNo, 1, 1, 2, a, 2, b, 1, 0.0f, c, 1);
    CHECK(c[0] == 11.0f);
  }
  float c[1] = {std::numeric_limits<float>::quiet_NaN()};
  Gemm(Transpose::kNo, Transpose::kNo, 1, 1, 2, a, 2, b, 1, 0.0f, c, 1);
  CHECK(c[0] == 11.0f);
}

}  // namespace
}  // namespace fedrt
