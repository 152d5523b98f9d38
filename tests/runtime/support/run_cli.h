// Runs the `fedrt` binary (FEDRT_CLI_PATH) with arguments through the shell,
// for the tests that use the tool as users do; stdout and stderr together.
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

inline CliRun RunCli(const std::string& arguments) {
  const std::string command = std::string(FEDRT_CLI_PATH) + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[512];
  while (fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

}  // namespace fedrt::testing

#endif  // FEDRT_TESTS_SUPPORT_RUN_CLI_H_
