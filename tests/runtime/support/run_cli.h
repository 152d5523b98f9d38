// Runs the `fedrt` binary (FEDRT_CLI_PATH) with arguments through the shell,
// for the tests that use the tool as users do, or any other command line;
// stdout and stderr together.
#ifndef FEDRT_TESTS_SUPPORT_RUN_CLI_H_
#define FEDRT_TESTS_SUPPORT_RUN_CLI_H_

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace fedrt::testing {

struct CliRun {
  int exit_code;  // -1 when the process did not exit normally
  std::string output;
};

// Runs a shell command line; stdout and stderr together.
inline CliRun RunCommand(const std::string& command_line) {
  const std::string command = command_line + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[512];
  while (fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

#ifdef FEDRT_CLI_PATH
inline CliRun RunCli(const std::string& arguments) { return RunCommand(std::string(FEDRT_CLI_PATH) + " " + arguments); }
#endif

#ifdef FEDRT_PYTHON
// Runs Python `code` in `dir` with the python3 the build found with NumPy
// (numpy as np, gzip and os imported); its output. The run must succeed.
inline std::string RunPython(const std::string& dir, const std::string& code) {
  const CliRun run = RunCommand("cd '" + dir + "' && " FEDRT_PYTHON " -c \"import numpy as np, gzip, os\n" + code + "\"");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  return run.output;
}
#endif

}  // namespace fedrt::testing

#endif  // FEDRT_TESTS_SUPPORT_RUN_CLI_H_
