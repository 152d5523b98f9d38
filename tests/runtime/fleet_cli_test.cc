// `fedrt bench fleet` end to end: the bench starts its own `fedrt serve`,
// joins every device over TCP with its key, and every update it sends in
// each round is accepted by the aggregator (fp32 and ndqsg: anchors and
// nested devices), with the figures of the JSON object present and sane.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "run_cli.h"

namespace fedrt {
namespace {

using testing::CliRun;
using testing::RunCli;

// The object --json prints: the output's line that starts with '{'.
nlohmann::json FleetJson(const std::string& output) {
  std::size_t at = output.rfind("\n{");
  at = at == std::string::npos ? (output.rfind('{', 0) == 0 ? 0 : std::string::npos) : at + 1;
  REQUIRE(at != std::string::npos);
  nlohmann::json json = nlohmann::json::parse(output.substr(at, output.find('\n', at) - at), nullptr, false);
  REQUIRE_FALSE(json.is_discarded());
  return json;
}

TEST_CASE("fedrt bench fleet: 50 devices join and every update of 2 rounds is accepted") {
  for (const char* codec : {"fp32", "ndqsg"}) {
    CAPTURE(codec);
    const CliRun run = RunCli(std::string("bench fleet --devices 50 --rounds 2 --codec ") + codec +
                              " --data " FEDRT_TINY_IDX_DIR " --json");
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    const nlohmann::json j = FleetJson(run.output);
    CHECK(j.at("joined") == 50);
    CHECK(j.at("failed") == 0);
    CHECK(j.at("updates_sent") == 100);
    CHECK(j.at("updates_accepted") == 100);
    CHECK(j.at("updates_rejected") == 0);
    CHECK(j.at("rounds_applied") == 2);
    CHECK(j.at("parameters") == 266610);
    CHECK(j.at("open_files_limit").get<double>() >= 50);
    CHECK(j.at("updates_per_second").get<double>() > 0);
    CHECK(j.at("round_seconds_p50").get<double>() > 0);
    CHECK(j.at("round_seconds_p99").get<double>() >= j.at("round_seconds_p50").get<double>());
    CHECK(j.at("decode_sum_bytes_per_second").get<double>() > 0);
    // The finish (a Leave to and the close of every connection) is counted
    // apart from the rounds.
    CHECK(j.at("server_finish_cpu_seconds").get<double>() >= 0);
    CHECK(j.at("server_cpu_seconds").get<double>() > 0);
    // The kernel's side: null only where /proc/slabinfo cannot be read.
    const nlohmann::json& kernel = j.at("kernel_socket_bytes_per_device");
    CHECK((kernel.is_null() || kernel.is_number()));
    // Some memory per connected device, and less than a model's worth.
    const double rss = j.at("rss_bytes_per_device").get<double>();
    CHECK(rss > 0);
    CHECK(rss < 266610.0 * 4);
    // A compressed update is smaller than the fp32 one.
    const double bytes = j.at("update_bytes_mean").get<double>();
    CHECK(bytes <= 266610.0 * 4 + 4096);
    if (std::string(codec) != "fp32") CHECK(bytes < 266610.0);
  }
}

TEST_CASE("fedrt bench fleet refuses options that do not apply, and a --server without keys") {
  CHECK(RunCli("bench fleet --devices 2 --key-file keys.txt").exit_code == 2);
  CHECK(RunCli("bench fleet --devices 2 --server-metrics m.jsonl").exit_code == 2);
  // One pid per --server address.
  CHECK(RunCli("bench fleet --devices 2 --server 127.0.0.1:1,127.0.0.1:2 --key-file k --server-pid 1").exit_code == 2);
  CHECK(RunCli("bench fleet --devices 2 --server 127.0.0.1:1").exit_code == 2);
  CHECK(RunCli("bench fleet --devices 2 --server nowhere --key-file k").exit_code == 2);
  const CliRun alq = RunCli("bench fleet --devices 2 --codec alq");
  CHECK(alq.exit_code == 1);
  CHECK(alq.output.find("level-table") != std::string::npos);
}

}  // namespace
}  // namespace fedrt
