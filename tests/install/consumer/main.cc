// Uses the installed headers and libraries of the components; exits 0 when
// the installed library computes what the specification says.
#include <cstdio>

#include "fedrt/codecs/philox.h"
#include "fedrt/platform/cpu.h"
#include "fedrt/runtime/build_info.h"
#include "fedrt/runtime/model.h"

int main() {
  const fedrt::PhiloxCounter words = fedrt::Philox4x32({0, 0, 0, 0}, {0, 0});
  const bool philox_ok = words[0] == 0x6627e8d5u && words[3] == 0x9b00dbd8u;
  // The training core links zlib (and OpenBLAS when built with it).
  const fedrt::Result<fedrt::Model> model = fedrt::Model::Create("mlp:4-3-2", 1);
  const bool train_ok = model.ok() && model->parameter_count() == 4 * 3 + 3 + 3 * 2 + 2;
  std::printf("fedrt %s, kernels use %s, philox %s, training core %s\n", fedrt::VersionString(),
              fedrt::IsaName(fedrt::ActiveIsa()), philox_ok ? "ok" : "WRONG", train_ok ? "ok" : "WRONG");
  return philox_ok && train_ok ? 0 : 1;
}
