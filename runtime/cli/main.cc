// The `fedrt` command-line tool. Each subcommand lives in its own file and
// registers itself here; this file only parses the top level and dispatches.
//
// Argument parsing uses CLI11 (Debian's libcli11-dev): it gives consistent
// --help output, type checking and clear errors for wrong flags, which users
// of a tool with many subcommands rely on.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "fedrt/runtime/build_info.h"

int main(int argc, char** argv) {
  CLI::App app{"fedrt: federated training on edge devices"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", std::string("fedrt ") + fedrt::VersionString());
  app.fallthrough(false);

  fedrt::cli::CommandList commands;
  fedrt::cli::RegisterInfo(app, commands);
  fedrt::cli::RegisterCodec(app, commands);
  fedrt::cli::RegisterBench(app, commands);

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
