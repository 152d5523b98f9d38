// `fedrt info`: the CPU, the kernel ISA in use and the GEMM backend.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "fedrt/runtime/build_info.h"

namespace fedrt::cli {

void RegisterInfo(CLI::App& app, CommandList& commands) {
  CLI::App* info = app.add_subcommand("info", "Show the CPU, the kernel ISA fedrt uses and the GEMM backend");
  commands.push_back({info, [] {
                        std::fputs(DescribeSystem().c_str(), stdout);
                        return 0;
                      }});
}

}  // namespace fedrt::cli
