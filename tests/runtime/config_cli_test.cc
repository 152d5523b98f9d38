// `--config F` for serve, device and peer: every flag can come from a JSON file,
// the command line wins, unknown keys and wrong values are usage errors.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "run_cli.h"
#include "temp_dir.h"

namespace fedrt {
namespace {

using testing::CliRun;
using testing::RunCli;

TEST_CASE("serve takes any flag from its JSON config, and the command line wins") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  std::ofstream(dir.File("keys.txt")) << "dev-0 00112233445566778899aabbccddeeff\n";
  ::chmod(dir.File("keys.txt").c_str(), 0600);
  const std::string config = dir.File("serve.json");
  // rounds 0: a serve that starts ends at once; max-unjoined-per-address is a
  // flag a hand-kept list of keys once missed.
  std::ofstream(config) << "{\"host\": \"127.0.0.1\", \"port\": 0, \"data\": \"\", \"rounds\": 0,\n"
                           " \"key-file\": \"" + dir.File("keys.txt") + "\", \"max-unjoined-per-address\": 3,\n"
                           " \"codec\": \"dqsg:s=2\"}\n";
  const CliRun served = RunCli("serve --config " + config + " --codec fp16");
  INFO(served.output);
  CHECK(served.exit_code == 0);
  CHECK(served.output.find("fp16") != std::string::npos);
  CHECK(served.output.find("dqsg") == std::string::npos);

  std::ofstream(dir.File("typo.json")) << "{\"key-file\": \"k\", \"rouns\": 3}\n";
  const CliRun typo = RunCli("serve --config " + dir.File("typo.json"));
  CHECK(typo.exit_code == 2);
  CHECK(typo.output.find("rouns") != std::string::npos);

  std::ofstream(dir.File("value.json")) << "{\"rounds\": \"many\"}\n";
  CHECK(RunCli("serve --config " + dir.File("value.json")).exit_code == 2);

  std::ofstream(dir.File("broken.json")) << "{\"rounds\": \n";
  const CliRun broken = RunCli("serve --config " + dir.File("broken.json"));
  CHECK(broken.exit_code == 2);
  CHECK(broken.output.find("not a JSON object") != std::string::npos);

  CHECK(RunCli("serve --config " + dir.File("missing.json")).exit_code == 2);
}

TEST_CASE("device takes its required flags from its JSON config") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  std::ofstream(dir.File("dev.json")) << "{\"server\": \"127.0.0.1:1\", \"key-file\": \"" + dir.File("none.key") +
                                             "\"}\n";
  const CliRun run = RunCli("device --config " + dir.File("dev.json"));
  INFO(run.output);
  // Parsed (no "is required" usage error); it fails on the key file it names.
  CHECK(run.exit_code == 1);
  CHECK(run.output.find(dir.File("none.key")) != std::string::npos);
  CHECK(run.output.find("is required") == std::string::npos);
}

TEST_CASE("peer takes any flag from its JSON config, the peer list included, and names --peers for an old peer list") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  // Scope checks run before any file is read: a gossip-only flag in a dense
  // run from the file is refused like a typed one, so the file was read.
  std::ofstream(dir.File("peer.json")) << "{\"peers\": \"" + dir.File("none.json") + "\", \"keys\": \"k\", \"rank\": 0,\n"
                                          " \"reduce\": \"dense\", \"graph\": \"torus\"}\n";
  const CliRun scoped = RunCli("peer --config " + dir.File("peer.json"));
  INFO(scoped.output);
  CHECK(scoped.exit_code == 2);
  CHECK(scoped.output.find("--graph applies to --reduce gossip and local only") != std::string::npos);
  // The command line wins: gossip makes --graph torus apply; the run then
  // fails on the peer list the file names.
  const CliRun gossip = RunCli("peer --config " + dir.File("peer.json") + " --reduce gossip");
  INFO(gossip.output);
  CHECK(gossip.exit_code == 1);
  CHECK(gossip.output.find(dir.File("none.json")) != std::string::npos);
  CHECK(gossip.output.find("is required") == std::string::npos);
  // A peer list where the option file goes: the error says where it belongs.
  std::ofstream(dir.File("list.json")) << "{\"peers\": [{\"id\": \"p0\", \"host\": \"127.0.0.1\", \"port\": 1}]}\n";
  const CliRun old = RunCli("peer --config " + dir.File("list.json") + " --keys k --rank 0");
  CHECK(old.exit_code == 2);
  CHECK(old.output.find("give it with --peers " + dir.File("list.json")) != std::string::npos);
}

}  // namespace
}  // namespace fedrt
