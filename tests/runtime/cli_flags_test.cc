// An option given for a run it does not configure is an error naming why,
// in `fedrt peer`, `fedrt sim` and `fedrt serve` (cli/flag_scope.h). The
// checks run before any file is read or socket opened, so the files named
// here need not exist.
#include <doctest/doctest.h>

#include <unistd.h>

#include <string>

#include "run_cli.h"

namespace fedrt {
namespace {

using testing::RunCli;

// `fedrt ARGS` fails as a usage error (exit status 2) and prints `message`.
void Refused(const std::string& args, const std::string& message) {
  const testing::CliRun run = RunCli(args);
  INFO(args << "\n" << run.output);
  CHECK(run.exit_code == 2);
  CHECK(run.output.find(message) != std::string::npos);
}

const std::string kPeer = "peer --peers /nonexistent/peers.json --keys /nonexistent/keys --rank 0 ";

TEST_CASE("fedrt peer refuses options of another reduce mode") {
  Refused(kPeer + "--reduce dense --codec alq:bits=3",
          "--codec applies to --reduce gossip and compressed only; this run is --reduce dense");
  Refused(kPeer + "--reduce compressed", "--reduce compressed needs --codec SPEC");
  Refused(kPeer + "--reduce compressed --codec ndqsg", "'ndqsg' needs side information");
  Refused(kPeer + "--reduce compressed --codec nosuch", "nosuch");
  // Random sparsifiers take rTop-k's plain SGD step (the peer's default momentum is 0.9).
  Refused(kPeer + "--reduce compressed --codec rtopk:k=0.01", "'rtopk:k=0.01' picks coordinates at random");
  Refused(kPeer + "--reduce compressed --codec randk:k=0.01 --momentum 0.5", "needs --momentum 0");
  Refused(kPeer + "--reduce fp16 --density 0.01", "--density applies to --reduce iwp only; this run is --reduce fp16");
  Refused(kPeer + "--reduce gossip --iwp-clip 5", "--iwp-clip applies to --reduce iwp only; this run is --reduce gossip");
  // A gossip codec the trainer refuses is refused before the peers file is read.
  Refused(kPeer + "--reduce gossip --codec nosuch", "gossip codec 'nosuch'");
  Refused(kPeer + "--reduce gossip --codec choco+ndqsg", "decodes without side information");
  Refused(kPeer + "--reduce dense --graph torus", "--graph applies to --reduce gossip and local only");
  Refused(kPeer + "--reduce local --gossip-algorithm d2", "--gossip-algorithm applies to --reduce gossip");
  Refused(kPeer + "--reduce gossip --codec choco+sign --gossip-algorithm d2", "'choco+sign' sends replica differences");
  Refused(kPeer + "--reduce gossip --momentum 0.5", "--momentum applies to --reduce dense, fp16, compressed and iwp only");
  Refused(kPeer + "--reduce local --repair", "--repair applies to peers that communicate");
  Refused(kPeer + "--reduce gossip --codec moniqua:bits=1,theta=0.5 --moniqua-theta-per-lr 0.1",
          "--moniqua-theta-per-lr applies to --reduce gossip with a moniqua --codec that names no theta");
  Refused(kPeer + "--reduce gossip --codec sign --print-wraps", "--print-wraps applies to --reduce gossip with a moniqua --codec");
}

TEST_CASE("fedrt peer accepts the options of its mode and goes on to read its files") {
  // Past the option checks: the missing peer list is the error.
  const testing::CliRun run = RunCli(kPeer + "--reduce iwp --density 0.01 --iwp-clip 5 --momentum 0.5");
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK(run.output.find("applies to") == std::string::npos);
  CHECK(run.output.find("/nonexistent/peers.json") != std::string::npos);
  const testing::CliRun compressed = RunCli(kPeer + "--reduce compressed --codec alq:bits=3,refit=4 --momentum 0.5");
  INFO(compressed.output);
  CHECK(compressed.exit_code == 1);
  CHECK(compressed.output.find("/nonexistent/peers.json") != std::string::npos);
  const testing::CliRun rtopk = RunCli(kPeer + "--reduce compressed --codec rtopk:k=0.01 --momentum 0");
  INFO(rtopk.output);
  CHECK(rtopk.exit_code == 1);
  CHECK(rtopk.output.find("/nonexistent/peers.json") != std::string::npos);
}

TEST_CASE("fedrt sim refuses a random sparsifier on the ring with momentum before any peer starts") {
  const testing::CliRun run = RunCli("sim --topology ring --codec rtopk:k=0.01");
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK(run.output.find("ring codec 'rtopk:k=0.01' picks coordinates at random") != std::string::npos);
  CHECK(run.output.find("needs --momentum 0") != std::string::npos);
  CHECK(run.output.find("peer processes started") == std::string::npos);
}

TEST_CASE("fedrt sim refuses options of another topology, of an absent codec, and beside --compare") {
  Refused("sim --topology ring --devices 4", "--devices applies to --topology star only; this run is --topology ring");
  Refused("sim --topology gossip --rounds 3", "--rounds applies to --topology star only");
  Refused("sim --topology star --peers 4", "--peers applies to --topology ring and gossip only; this run is --topology star");
  Refused("sim --topology ring --graph torus", "--graph applies to --topology gossip only");
  Refused("sim --topology gossip --momentum 0.5", "--momentum applies to --topology ring only");
  Refused("sim --codec fp32 --codec dqsg --max-rho 7", "--max-rho applies to --topology star with an ndqsg --codec only");
  Refused("sim --compare a b --devices 3", "--devices does not apply to --compare");
  // Peer topologies take links from either shaper; a profile is checked
  // before any peer starts.
  Refused("sim --topology ring --link unlimited", "--link: link profile 'unlimited' shapes nothing");
  Refused(kPeer + "--link 1mbps", "fedrt peer: invalid_argument: --link: link profile '1mbps'");
  Refused("sim --topology gossip --target-accuracy 0.8", "--target-accuracy applies to --topology star only");
  Refused("sim --shaper user", "--shaper applies to --link or --link-file only");
}

TEST_CASE("fedrt sim refuses wrong links and downlink codecs that do not pair with the codecs") {
  Refused("sim --link 1mbps", "--link: link profile '1mbps'");
  Refused("sim --link 1mbit --link-file /nonexistent/links.txt", "give --link or --link-file, not both");
  Refused("sim --link 1mbit --shaper fast", "--shaper");
  Refused("sim --codec fp32 --codec dqsg --codec topk --downlink-codec none --downlink-codec dqsg:s=4",
          "--downlink-codec is given 2 times for 3 codecs");
  Refused("sim --codec fp32 --downlink-codec bogus", "--downlink-codec bogus: unknown codec");
}

TEST_CASE("fedrt serve refuses the ndqsg options with another codec, from flags and from its config file") {
  Refused("serve --key-file /nonexistent/keys --codec dqsg --max-rho 7",
          "--max-rho applies to an ndqsg --codec only; this run is --codec dqsg");
  const std::string config = "/tmp/fedrt-cli-flags-test-" + std::to_string(::getpid()) + ".json";
  REQUIRE(testing::RunCommand("printf '{\"codec\": \"qsgd\", \"anchor-fraction\": 0.25}' > " + config).exit_code == 0);
  Refused("serve --key-file /nonexistent/keys --config " + config, "--anchor-fraction applies to an ndqsg --codec only");
  testing::RunCommand("rm -f " + config);
}

TEST_CASE("fedrt serve takes the aggregator's memory bounds and refuses the waiting pool for ndqsg") {
  Refused("serve --key-file /nonexistent/keys --codec ndqsg --max-waiting-updates 8",
          "--max-waiting-updates applies to a --codec other than ndqsg only; this run is --codec ndqsg");
  Refused("serve --key-file /nonexistent/keys --codec ndqsg --max-decoded-waiting 4",
          "--max-decoded-waiting applies to a --codec other than ndqsg only; this run is --codec ndqsg");
  Refused("serve --key-file /nonexistent/keys --max-devices 0", "--max-devices");
  // Past the option checks: the missing key file is the error.
  const testing::CliRun run = RunCli(
      "serve --key-file /nonexistent/keys --codec dqsg --max-waiting-updates 8 --max-decoded-waiting 4 --max-devices 100");
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK(run.output.find("/nonexistent/keys") != std::string::npos);
}

TEST_CASE("fedrt serve takes --max-held-updates with a robust rule and refuses it with mean") {
  Refused("serve --key-file /nonexistent/keys --max-held-updates 8",
          "--max-held-updates applies to an --aggregation other than mean only; this run is --aggregation mean");
  const testing::CliRun run = RunCli("serve --key-file /nonexistent/keys --aggregation median --max-held-updates 8");
  INFO(run.output);
  CHECK(run.exit_code == 1);  // past the option checks: the missing key file
  CHECK(run.output.find("/nonexistent/keys") != std::string::npos);
}

}  // namespace
}  // namespace fedrt
