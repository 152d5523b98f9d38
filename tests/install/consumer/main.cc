// Uses the installed headers and libraries of three components; exits 0 when
// the installed library computes what the specification says.
#include <cstdio>

#include "fedrt/codecs/philox.h"
#include "fedrt/platform/cpu.h"
#include "fedrt/runtime/build_info.h"

int main() {
  const fedrt::PhiloxCounter words = fedrt::Philox4x32({0, 0, 0, 0}, {0, 0});
  const bool philox_ok = words[0] == 0x6627e8d5u && words[3] == 0x9b00dbd8u;
  std::printf("fedrt %s, kernels use %s, philox %s\n", fedrt::VersionString(),
              fedrt::IsaName(fedrt::ActiveIsa()), philox_ok ? "ok" : "WRONG");
  return philox_ok ? 0 : 1;
}
