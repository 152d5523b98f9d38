// The tool's exit codes as scripts see them: 2 for usage errors (with a
// suggestion for a mistyped flag or subcommand), 1 for failures, and
// 128 + the signal after a clean stop on SIGINT or SIGTERM, never 0.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <csignal>
#include <fstream>
#include <string>

#include "child_process.h"
#include "run_cli.h"
#include "temp_dir.h"

namespace fedrt {
namespace {

using testing::CliRun;
using testing::RunCli;

TEST_CASE("usage errors exit 2 and suggest the flag or subcommand meant") {
  const CliRun flag = RunCli("train --epoch 3");
  CHECK(flag.exit_code == 2);
  CHECK(flag.output.find("'--epoch': did you mean '--epochs'?") != std::string::npos);

  const CliRun subcommand = RunCli("trian");
  CHECK(subcommand.exit_code == 2);
  CHECK(subcommand.output.find("'trian': did you mean 'train'?") != std::string::npos);

  const CliRun value = RunCli("train --epochs zero");
  CHECK(value.exit_code == 2);

  const CliRun codec = RunCli("bench codecs --quick --codec foo");
  CHECK(codec.exit_code == 2);
  CHECK(codec.output.find("--codec foo: invalid_argument: unknown codec 'foo'") != std::string::npos);
  CHECK(codec.output.find("GB/s") == std::string::npos);  // refused before measuring

  CHECK(RunCli("--version").exit_code == 0);
  CHECK(RunCli("train --help").exit_code == 0);
}

TEST_CASE("failures exit 1") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const CliRun missing = RunCli("train --data " + dir.File("nothing-here") + " --epochs 1");
  CHECK(missing.exit_code == 1);
}

TEST_CASE("fedrt serve stopped by SIGTERM or SIGINT exits 143 or 130 after a clean stop") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  std::ofstream(dir.File("keys.txt")) << "dev-0 00112233445566778899aabbccddeeff\n";
  ::chmod(dir.File("keys.txt").c_str(), 0600);
  for (const int signal : {SIGTERM, SIGINT}) {
    testing::ChildProcess serve({FEDRT_CLI_PATH, "serve", "--host", "127.0.0.1", "--port", "0", "--data", "",
                                 "--rounds", "5", "--key-file", dir.File("keys.txt")});
    REQUIRE(serve.started());
    REQUIRE(serve.WaitFor("listening on"));
    serve.Signal(signal);
    INFO(serve.output());
    CHECK(serve.Wait(60) == 128 + signal);
  }
}

}  // namespace
}  // namespace fedrt
