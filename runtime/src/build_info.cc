#include "fedrt/runtime/build_info.h"

#include "fedrt/platform/config.h"
#include "fedrt/platform/cpu.h"
#include "fedrt/runtime/gemm.h"

namespace fedrt {

const char* VersionString() { return FEDRT_VERSION_STRING; }

BuildInfo GetBuildInfo() {
  BuildInfo info;
  info.version = VersionString();
#if defined(__x86_64__)
  info.target_architecture = "x86_64";
#elif defined(__aarch64__)
  info.target_architecture = "aarch64";
#elif defined(__arm__)
  info.target_architecture = "armv7";
#else
  info.target_architecture = "unknown";
#endif
  info.compiled_isas = "scalar";
  if (FEDRT_HAVE_AVX2_KERNELS) info.compiled_isas += " avx2";
  if (FEDRT_HAVE_NEON_KERNELS) info.compiled_isas += " neon";
  if (FEDRT_HAVE_AVX512_KERNELS) info.compiled_isas += " avx512";
  info.openblas = FEDRT_HAVE_OPENBLAS != 0;
  return info;
}

std::string DescribeSystem() {
  const CpuFeatures& cpu = DetectCpu();
  const BuildInfo build = GetBuildInfo();
  auto yes_no = [](bool b) { return b ? "yes" : "no"; };
  std::string text;
  text += "fedrt " + build.version + "\n";
  text += "cpu:           " + (cpu.model.empty() ? std::string("(model unknown)") : cpu.model) + "\n";
  text += "architecture:  " + cpu.architecture + "\n";
  if (cpu.architecture == "x86_64") {
    text += std::string("features:      avx2=") + yes_no(cpu.avx2) + " fma=" + yes_no(cpu.fma) +
            " f16c=" + yes_no(cpu.f16c) + " avx512=" + yes_no(cpu.avx512) + "\n";
  } else {
    text += std::string("features:      neon=") + yes_no(cpu.neon) + "\n";
  }
  text += "kernels built: " + build.compiled_isas + "\n";
  std::string available;
  for (Isa isa : AvailableIsas()) available += std::string(available.empty() ? "" : " ") + IsaName(isa);
  text += "kernels usable: " + available + "\n";
  text += std::string("kernel isa:    ") + IsaName(ActiveIsa()) + "\n";
  text += std::string("gemm:          ") + (build.openblas ? "OpenBLAS" : "built-in");
  if (build.openblas) text += std::string(" (") + OpenBlasCoreName() + " kernels)";
  text += "\n";
  return text;
}

}  // namespace fedrt
