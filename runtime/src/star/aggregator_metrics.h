// Private to the runtime: the aggregator host's monitoring text. The engine
// counts (AggregatorCounters); RunAggregator adds what only the host knows
// (connections, the checkpoint file) and renders both in the Prometheus text
// exposition format (version 0.0.4) for `GET /metrics`.
#ifndef FEDRT_RUNTIME_SRC_STAR_AGGREGATOR_METRICS_H_
#define FEDRT_RUNTIME_SRC_STAR_AGGREGATOR_METRICS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "fedrt/runtime/aggregator_engine.h"

namespace fedrt {
namespace star {

struct AggregatorHostMetrics {
  uint32_t rounds_target = 0;
  std::size_t devices_connected = 0;  // joined, connection open
  std::size_t open_connections = 0;   // joined or not
  bool dp = false;                    // DP-FedAvg on: epsilon is exported
  bool checkpointing = false;         // --checkpoint given: its age is exported
  double checkpoint_age_seconds = -1; // since the latest state reached the file (-1: never)
  bool checkpoint_pending = false;    // a newer state than the file's waits to be written
};

constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string RenderAggregatorMetrics(const AggregatorCounters& counters, const AggregatorHostMetrics& host);

}  // namespace star
}  // namespace fedrt

#endif  // FEDRT_RUNTIME_SRC_STAR_AGGREGATOR_METRICS_H_
