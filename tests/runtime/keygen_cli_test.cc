// `fedrt keygen` as an operator runs it: the aggregator's key file and one
// file per device, owner-only, and no silent replacement of deployed keys.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

#include "run_cli.h"
#include "temp_dir.h"

namespace fedrt {
namespace {

using testing::CliRun;
using testing::RunCli;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

unsigned Mode(const std::string& path) {
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

TEST_CASE("fedrt keygen writes owner-only key files and does not replace them unasked") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string out = dir.File("keys-dir");
  const CliRun made = RunCli("keygen --devices 3 --out " + out);
  INFO(made.output);
  REQUIRE(made.exit_code == 0);
  CHECK(Mode(out) == 0700);
  CHECK(Mode(out + "/keys.txt") == 0600);
  const std::string all = Read(out + "/keys.txt");
  for (int i = 0; i < 3; ++i) {
    const std::string file = out + "/keys/dev-" + std::to_string(i) + ".key";
    CHECK(Mode(file) == 0600);
    const std::string line = Read(file);
    REQUIRE(line.size() == 6 + 64 + 1);  // "dev-N " + 64 hex digits + newline
    CHECK(line.compare(0, 6, "dev-" + std::to_string(i) + " ") == 0);
    CHECK(line.find_first_not_of("0123456789abcdef", 6) == 70);
    CHECK(all.find(line) != std::string::npos);
  }

  const CliRun again = RunCli("keygen --devices 3 --out " + out);
  CHECK(again.exit_code == 1);
  CHECK(again.output.find("would lock out every device") != std::string::npos);
  CHECK(Read(out + "/keys.txt") == all);

  REQUIRE(RunCli("keygen --devices 3 --out " + out + " --force").exit_code == 0);
  CHECK(Read(out + "/keys.txt") != all);
}

}  // namespace
}  // namespace fedrt
