// What this build of fedrt is and what it will use on this machine: the
// facts `fedrt info` prints, available to applications too.
// Thread-safety: pure functions.
#ifndef FEDRT_RUNTIME_BUILD_INFO_H_
#define FEDRT_RUNTIME_BUILD_INFO_H_

#include <string>

namespace fedrt {

const char* VersionString();  // "0.1.0"

struct BuildInfo {
  std::string version;
  std::string target_architecture;  // what the compiler targeted
  std::string compiled_isas;        // kernel variants in this binary, e.g. "scalar avx2"
  bool openblas = false;            // training GEMM: OpenBLAS (true) or built-in (false)
};
BuildInfo GetBuildInfo();

// A multi-line, human-readable report: CPU, features, ISA in use, GEMM.
std::string DescribeSystem();

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_BUILD_INFO_H_
