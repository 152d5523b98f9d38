#include <doctest/doctest.h>

#include <string>

#include "fedrt/platform/config.h"
#include "fedrt/platform/cpu.h"

namespace fedrt {
namespace {

TEST_CASE("the kernels pick the ISA this machine is expected to run") {
  const std::string expected = FEDRT_TEST_EXPECT_ISA;
  if (expected.empty()) {
    MESSAGE("FEDRT_TEST_EXPECT_ISA not set for this build; nothing to compare");
    return;
  }
  INFO("cpu: " << DetectCpu().model << ", architecture " << DetectCpu().architecture);
  Isa isa;
  REQUIRE(ParseIsa(expected, &isa));
  CHECK(IsaAvailable(isa));
  // FEDRT_ISA in the environment may force another choice; the test runs
  // without it, so the automatic choice must be the expected one. AVX-512
  // extends the AVX2 set: a CPU that has it picks it where avx2 is expected.
  const Isa active = ActiveIsa();
  if (isa == Isa::kAvx2 && IsaAvailable(Isa::kAvx512)) {
    CHECK(active == Isa::kAvx512);
  } else {
    CHECK(std::string(IsaName(active)) == expected);
  }
}

TEST_CASE("cpu detection agrees with the architecture the build targets") {
  const CpuFeatures& cpu = DetectCpu();
#if defined(__x86_64__)
  CHECK(cpu.architecture == "x86_64");
  CHECK_FALSE(cpu.neon);
  // AVX2 without the OS saving YMM state would be unusable; detection folds both.
  if (cpu.avx2) CHECK(IsaAvailable(Isa::kAvx2) == (FEDRT_HAVE_AVX2_KERNELS && cpu.fma && cpu.f16c));
  // AVX-512 only ever adds to an available AVX2 set.
  CHECK(IsaAvailable(Isa::kAvx512) ==
        (FEDRT_HAVE_AVX512_KERNELS && cpu.avx512 && IsaAvailable(Isa::kAvx2)));
#elif defined(__aarch64__)
  CHECK(cpu.architecture == "aarch64");
  CHECK(cpu.neon);
  CHECK_FALSE(cpu.avx2);
  CHECK_FALSE(cpu.avx512);
#elif defined(__arm__)
  CHECK(cpu.architecture == "armv7");
  CHECK_FALSE(cpu.avx2);
#endif
}

TEST_CASE("scalar is always available and listed first") {
  const auto isas = AvailableIsas();
  REQUIRE_FALSE(isas.empty());
  CHECK(isas.front() == Isa::kScalar);
  CHECK(IsaAvailable(Isa::kScalar));
}

TEST_CASE("an ISA override forces the choice and can be cleared") {
  const Isa automatic = ActiveIsa();
  REQUIRE(SetIsaOverride(Isa::kScalar));
  CHECK(ActiveIsa() == Isa::kScalar);
  ClearIsaOverride();
  CHECK(ActiveIsa() == automatic);
}

TEST_CASE("an override to an ISA this machine lacks is refused") {
  const Isa automatic = ActiveIsa();
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    if (IsaAvailable(isa)) continue;
    CHECK_FALSE(SetIsaOverride(isa));
    CHECK(ActiveIsa() == automatic);
  }
}

TEST_CASE("ISA names round-trip and unknown names are rejected") {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kNeon, Isa::kAvx512}) {
    Isa parsed = Isa::kScalar;
    CHECK(ParseIsa(IsaName(isa), &parsed));
    CHECK(parsed == isa);
  }
  Isa untouched = Isa::kNeon;
  CHECK_FALSE(ParseIsa("sse2", &untouched));
  CHECK_FALSE(ParseIsa("", &untouched));
  CHECK(untouched == Isa::kNeon);
}

}  // namespace
}  // namespace fedrt
