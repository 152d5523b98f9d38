// The `fedrt` command-line tool. Each subcommand lives in its own file and
// registers itself here; this file only parses the top level and dispatches.
//
// Argument parsing uses CLI11 (Debian's libcli11-dev): it gives consistent
// --help output, type checking and clear errors for wrong flags, which users
// of a tool with many subcommands rely on.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include "cli/commands.h"
#include "fedrt/platform/cpu.h"
#include "fedrt/runtime/build_info.h"
#include "fedrt/runtime/gemm.h"

namespace {

// OpenBLAS chooses its kernels when it loads, by CPU model. On an AVX2 + FMA
// CPU whose model it does not know (virtual CPUs often report a generic
// one) it settles for SSE3 "Prescott" kernels, about 3x slower for training.
// The only way to change that is OPENBLAS_CORETYPE before the library loads,
// so the tool sets it and starts itself again, once. Users who set the
// variable themselves keep their choice.
void RestartWithBetterOpenBlasKernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  if (std::strcmp(fedrt::OpenBlasCoreName(), "Prescott") != 0) return;
  const fedrt::CpuFeatures& cpu = fedrt::DetectCpu();
  if (!cpu.avx2 || !cpu.fma) return;
  if (setenv("OPENBLAS_CORETYPE", "Haswell", 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure: carry on as we are
}

}  // namespace

int main(int argc, char** argv) {
  RestartWithBetterOpenBlasKernels(argv);
  CLI::App app{"fedrt: federated training on edge devices"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", std::string("fedrt ") + fedrt::VersionString());
  app.fallthrough(false);

  fedrt::cli::CommandList commands;
  fedrt::cli::RegisterInfo(app, commands);
  fedrt::cli::RegisterCodec(app, commands);
  fedrt::cli::RegisterBench(app, commands);
  fedrt::cli::RegisterTrain(app, commands);
  fedrt::cli::RegisterModel(app, commands);
  fedrt::cli::RegisterPeer(app, commands);
  fedrt::cli::RegisterServe(app, commands);
  fedrt::cli::RegisterDevice(app, commands);
  fedrt::cli::RegisterSim(app, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  for (const fedrt::cli::Command& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  std::fputs(app.help().c_str(), stdout);
  return 0;
}
