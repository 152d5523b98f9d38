// CPU detection (instruction-set level) and the process-wide ISA choice.
#include "fedrt/platform/cpu.h"

#include <atomic>
#include <cstring>

#include "fedrt/platform/config.h"
#include "fedrt/platform/log.h"
#include "fedrt/platform/port.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#define FEDRT_ARCH_X86_64 1
#endif

namespace fedrt {
namespace {

#if defined(FEDRT_ARCH_X86_64)
// XGETBV without requiring -mxsave for this file: the instruction is only
// executed after CPUID said the OS enabled it (OSXSAVE).
uint64_t ReadXcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

void DetectX86(CpuFeatures* cpu) {
  cpu->architecture = "x86_64";
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return;
  const bool osxsave = (ecx & bit_OSXSAVE) != 0;
  const bool avx = (ecx & bit_AVX) != 0;
  const bool fma = (ecx & bit_FMA) != 0;
  const bool f16c = (ecx & bit_F16C) != 0;
  const bool sse42 = (ecx & bit_SSE4_2) != 0;
  // The CPU may have AVX while the OS does not save YMM registers on context
  // switch (XCR0 bits 1 and 2); then using them would corrupt state.
  const bool ymm_saved = osxsave && (ReadXcr0() & 0x6) == 0x6;
  bool avx2 = false;
  bool avx512 = false;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0) {
    avx2 = (ebx & bit_AVX2) != 0;
    const unsigned avx512_bits = bit_AVX512F | bit_AVX512DQ | bit_AVX512BW | bit_AVX512VL;
    avx512 = (ebx & avx512_bits) == avx512_bits;
  }
  // The AVX2 kernel set also uses SSE4.2 (crc32); every AVX2 CPU has it.
  cpu->avx2 = avx && avx2 && sse42 && ymm_saved;
  cpu->fma = fma && ymm_saved;
  cpu->f16c = f16c && ymm_saved;
  // ZMM state: XCR0 opmask, ZMM_Hi256 and Hi16_ZMM (bits 5-7) besides YMM.
  cpu->avx512 = avx512 && ymm_saved && (ReadXcr0() & 0xE0) == 0xE0;

  unsigned brand[12] = {};
  if (__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) != 0 && eax >= 0x80000004u) {
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002u + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
    }
    char text[49] = {};
    std::memcpy(text, brand, 48);
    const char* start = text;
    while (*start == ' ') ++start;
    cpu->model = start;
  }
}
#endif

CpuFeatures Detect() {
  CpuFeatures cpu;
#if defined(FEDRT_ARCH_X86_64)
  DetectX86(&cpu);
#elif defined(__aarch64__)
  cpu.architecture = "aarch64";
  cpu.neon = true;  // Advanced SIMD is mandatory in ARMv8-A
#elif defined(__arm__)
  cpu.architecture = "armv7";
  constexpr unsigned long kHwcapNeon = 1ul << 12;  // HWCAP_NEON in <asm/hwcap.h>
  cpu.neon = (port::ArmHwcaps() & kHwcapNeon) != 0;
#else
  cpu.architecture = "unknown";
#endif
  if (cpu.model.empty()) {
    char name[128];
    port::CpuModelName(name, sizeof name);
    cpu.model = name;
  }
  return cpu;
}

constexpr int kNoOverride = -1;
std::atomic<int> g_override{kNoOverride};

bool CompiledIn(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return FEDRT_HAVE_AVX2_KERNELS != 0;
    case Isa::kNeon: return FEDRT_HAVE_NEON_KERNELS != 0;
    case Isa::kAvx512: return FEDRT_HAVE_AVX512_KERNELS != 0;
  }
  return false;
}

Isa BestAvailable() {
  if (IsaAvailable(Isa::kAvx512)) return Isa::kAvx512;
  if (IsaAvailable(Isa::kAvx2)) return Isa::kAvx2;
  if (IsaAvailable(Isa::kNeon)) return Isa::kNeon;
  return Isa::kScalar;
}

// FEDRT_ISA, read once. Unknown or unavailable values are reported and ignored.
Isa AutomaticIsa() {
  static const Isa chosen = [] {
    const char* requested = port::GetConfig("FEDRT_ISA");
    if (requested == nullptr || requested[0] == '\0' || std::strcmp(requested, "auto") == 0) {
      return BestAvailable();
    }
    Isa isa;
    if (!ParseIsa(requested, &isa)) {
      Log(LogLevel::kWarning, "FEDRT_ISA=%s is not one of scalar, avx2, avx512, neon, auto; using %s",
          requested, IsaName(BestAvailable()));
      return BestAvailable();
    }
    if (!IsaAvailable(isa)) {
      Log(LogLevel::kWarning, "FEDRT_ISA=%s is not available on this CPU or build; using %s",
          requested, IsaName(BestAvailable()));
      return BestAvailable();
    }
    return isa;
  }();
  return chosen;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kNeon: return "neon";
    case Isa::kAvx512: return "avx512";
  }
  return "unknown";
}

bool ParseIsa(const std::string& name, Isa* isa) {
  for (Isa candidate : {Isa::kScalar, Isa::kAvx2, Isa::kNeon, Isa::kAvx512}) {
    if (name == IsaName(candidate)) {
      *isa = candidate;
      return true;
    }
  }
  return false;
}

const CpuFeatures& DetectCpu() {
  static const CpuFeatures cpu = Detect();
  return cpu;
}

bool IsaAvailable(Isa isa) {
  if (!CompiledIn(isa)) return false;
  const CpuFeatures& cpu = DetectCpu();
  switch (isa) {
    case Isa::kScalar: return true;
    // The AVX2 kernels may also use FMA-free F16C conversions; require all three.
    case Isa::kAvx2: return cpu.avx2 && cpu.fma && cpu.f16c;
    case Isa::kNeon: return cpu.neon;
    // An extension of the AVX2 set: families without AVX-512 kernels run AVX2.
    case Isa::kAvx512: return IsaAvailable(Isa::kAvx2) && cpu.avx512;
  }
  return false;
}

std::vector<Isa> AvailableIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    if (IsaAvailable(isa)) isas.push_back(isa);
  }
  return isas;
}

Isa ActiveIsa() {
  const int forced = g_override.load(std::memory_order_relaxed);
  if (forced != kNoOverride) return static_cast<Isa>(forced);
  return AutomaticIsa();
}

bool SetIsaOverride(Isa isa) {
  if (!IsaAvailable(isa)) return false;
  g_override.store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

void ClearIsaOverride() { g_override.store(kNoOverride, std::memory_order_relaxed); }

}  // namespace fedrt
