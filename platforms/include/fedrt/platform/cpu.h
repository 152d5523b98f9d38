// CPU feature detection and the choice of kernel ISA.
//
// Every SIMD kernel family in fedrt has a scalar reference and, where the
// build compiled them, AVX2 (x86-64) and NEON (AArch64, ARMv7) variants that
// produce the same bytes. Which one runs is decided here, once per process:
// the best ISA that both this build and this CPU support. Two ways to force
// another choice, so every path can be tested on one machine:
//   - the environment variable FEDRT_ISA=scalar|avx2|avx512|neon|auto, read on first use;
//   - SetIsaOverride() for tests (takes effect for calls made after it).
//
// Thread-safety: all functions may be called from any thread. DetectCpu() is
// computed once. SetIsaOverride() is meant for tests and tools; calling it while
// kernels run on other threads makes those threads switch at an unspecified point.
#ifndef FEDRT_PLATFORM_CPU_H_
#define FEDRT_PLATFORM_CPU_H_

#include <string>
#include <vector>

namespace fedrt {

// kAvx512 extends the AVX2 set (AVX-512F/BW/DQ/VL on top of everything AVX2
// needs): a kernel family with AVX-512 variants runs them, every other family
// runs its AVX2 kernels (Avx2ForAvx512). Its kernels produce the same bytes.
enum class Isa : int { kScalar = 0, kAvx2 = 1, kNeon = 2, kAvx512 = 3 };

// "scalar", "avx2", "neon", "avx512".
const char* IsaName(Isa isa);
// Parses "scalar", "avx2", "neon" or "avx512"; returns false for anything else.
bool ParseIsa(const std::string& name, Isa* isa);

// The ISA whose kernels a family without AVX-512 variants runs: kAvx2 for
// kAvx512, `isa` otherwise.
inline Isa Avx2ForAvx512(Isa isa) { return isa == Isa::kAvx512 ? Isa::kAvx2 : isa; }

struct CpuFeatures {
  std::string architecture;  // "x86_64", "aarch64", "armv7", or what the compiler targets
  std::string model;         // human-readable model name; may be empty
  bool avx2 = false;         // AVX2 usable: CPUID bit and the OS saves YMM state (XGETBV)
  bool fma = false;
  bool f16c = false;
  bool avx512 = false;       // AVX-512F, BW, DQ and VL usable: CPUID bits and the OS saves ZMM state
  bool neon = false;         // always on AArch64; AT_HWCAP on ARMv7
};

// The features of the CPU this process runs on (detected once).
const CpuFeatures& DetectCpu();

// True when this build compiled the ISA's kernels and the CPU can run them.
bool IsaAvailable(Isa isa);
// Every available ISA, the scalar reference first. Tests iterate this list.
std::vector<Isa> AvailableIsas();

// The ISA kernels use now: the override if one is set, else FEDRT_ISA if set
// and available, else the best available one.
Isa ActiveIsa();
// Forces the ISA kernels use from now on. Returns false (and changes nothing)
// when the ISA is not available.
bool SetIsaOverride(Isa isa);
// Back to the automatic choice (FEDRT_ISA or the best available).
void ClearIsaOverride();

}  // namespace fedrt

#endif  // FEDRT_PLATFORM_CPU_H_
