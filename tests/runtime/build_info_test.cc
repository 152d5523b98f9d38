#include <doctest/doctest.h>

#include <string>

#include "fedrt/platform/config.h"
#include "fedrt/platform/cpu.h"
#include "fedrt/runtime/build_info.h"

namespace fedrt {
namespace {

TEST_CASE("build info reports the version, the compiled kernels and the GEMM") {
  const BuildInfo info = GetBuildInfo();
  CHECK(info.version == FEDRT_VERSION_STRING);
  CHECK(info.compiled_isas.rfind("scalar", 0) == 0);
  CHECK((info.compiled_isas.find("avx2") != std::string::npos) == (FEDRT_HAVE_AVX2_KERNELS != 0));
  CHECK((info.compiled_isas.find("neon") != std::string::npos) == (FEDRT_HAVE_NEON_KERNELS != 0));
  CHECK((info.compiled_isas.find("avx512") != std::string::npos) == (FEDRT_HAVE_AVX512_KERNELS != 0));
  CHECK(info.openblas == (FEDRT_HAVE_OPENBLAS != 0));
}

TEST_CASE("the system description names the ISA in use") {
  const std::string text = DescribeSystem();
  CHECK(text.find(std::string("kernel isa:    ") + IsaName(ActiveIsa())) != std::string::npos);
  CHECK(text.find("gemm:") != std::string::npos);
}

}  // namespace
}  // namespace fedrt
