// The aggregator host's /metrics text (src/star/aggregator_metrics.h): every
// optional family appears exactly when it applies, and Debian's promtool
// accepts the text with all of them.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "star/aggregator_metrics.h"
#include "temp_dir.h"

namespace fedrt {
namespace {

AggregatorCounters Busy() {
  AggregatorCounters c;
  c.rounds_completed = 7;
  c.rounds_not_applied = 1;
  c.joins = 9;
  c.updates_accepted = 50;
  c.updates_rejected[static_cast<int>(UpdateRejection::kBadValues)] = 3;
  c.bytes_up = uint64_t{1} << 40;  // large counts print as integers
  c.bytes_down = 12345;
  c.rounds_timed = 8;
  c.round_seconds_total = 12.5;
  c.last_round_seconds = 1.25;
  c.last_test_accuracy = 0.8125;
  c.best_test_accuracy = 0.875;
  c.dp_epsilon = 2.5;
  return c;
}

TEST_CASE("the metrics text has each optional family exactly when it applies") {
  star::AggregatorHostMetrics host;
  host.rounds_target = 10;
  const std::string bare = star::RenderAggregatorMetrics(AggregatorCounters(), host);
  CHECK(bare.find("fedrt_rounds_completed_total 0\n") != std::string::npos);
  CHECK(bare.find("fedrt_updates_rejected_total{reason=\"not_combined\"} 0\n") != std::string::npos);
  for (const char* absent : {"fedrt_test_accuracy_ratio", "fedrt_checkpoint_age_seconds", "fedrt_checkpoint_pending",
                             "fedrt_dp_epsilon", "fedrt_last_round_duration_seconds"}) {
    INFO(absent);
    CHECK(bare.find(absent) == std::string::npos);
  }
  host.dp = true;
  host.checkpointing = true;
  host.checkpoint_age_seconds = 3.5;
  host.checkpoint_pending = true;
  const std::string busy = star::RenderAggregatorMetrics(Busy(), host);
  CHECK(busy.find("fedrt_uplink_payload_bytes_total 1099511627776\n") != std::string::npos);
  CHECK(busy.find("fedrt_updates_rejected_total{reason=\"bad_values\"} 3\n") != std::string::npos);
  CHECK(busy.find("fedrt_round_duration_seconds_sum 12.5\n") != std::string::npos);
  CHECK(busy.find("fedrt_best_test_accuracy_ratio 0.875\n") != std::string::npos);
  CHECK(busy.find("fedrt_checkpoint_age_seconds 3.5\n") != std::string::npos);
  CHECK(busy.find("fedrt_checkpoint_pending 1\n") != std::string::npos);
  CHECK(busy.find("fedrt_dp_epsilon 2.5\n") != std::string::npos);
  // DP off: no epsilon even if the counters hold one.
  host.dp = false;
  CHECK(star::RenderAggregatorMetrics(Busy(), host).find("fedrt_dp_epsilon") == std::string::npos);

  if (std::string(FEDRT_PROMTOOL).empty()) {
    MESSAGE("promtool not found (Debian: prometheus): the format check is skipped");
    return;
  }
  testing::TempDir dir;
  REQUIRE(dir.ok());
  std::ofstream(dir.File("m.txt")) << busy;
  const std::string command = std::string(FEDRT_PROMTOOL) + " check metrics < " + dir.File("m.txt") + " > " +
                              dir.File("out.txt") + " 2>&1";
  const int status = std::system(command.c_str());
  INFO(testing::ReadFileBytes(dir.File("out.txt")));
  CHECK(status == 0);
}

}  // namespace
}  // namespace fedrt
