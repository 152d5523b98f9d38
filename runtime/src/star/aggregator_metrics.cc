#include "star/aggregator_metrics.h"

#include <cmath>
#include <cstdio>

namespace fedrt {
namespace star {
namespace {

// One metric family: HELP, TYPE and its samples, built up by the caller.
class Text {
 public:
  void Family(const char* name, const char* type, const char* help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void Sample(const std::string& name, double value) {
    char number[64];
    // %.17g round-trips a double; integers up to 2^53 print as integers.
    if (std::isnan(value)) {
      std::snprintf(number, sizeof number, "NaN");
    } else {
      std::snprintf(number, sizeof number, "%.17g", value);
    }
    out_ += name;
    out_ += ' ';
    out_ += number;
    out_ += '\n';
  }
  void One(const char* name, const char* type, const char* help, double value) {
    Family(name, type, help);
    Sample(name, value);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

double U(uint64_t v) { return static_cast<double>(v); }

}  // namespace

std::string RenderAggregatorMetrics(const AggregatorCounters& c, const AggregatorHostMetrics& host) {
  Text t;
  t.One("fedrt_rounds_completed_total", "counter", "Rounds applied to the global model, resumed ones included.",
        U(c.rounds_completed));
  t.One("fedrt_rounds_target", "gauge", "Rounds the aggregator trains before it stops.", host.rounds_target);
  t.One("fedrt_rounds_not_applied_total", "counter", "Rounds that closed with nothing applied and ran again.",
        U(c.rounds_not_applied));
  t.One("fedrt_device_joins_total", "counter", "Devices that authenticated (a reconnect counts again).",
        U(c.joins));
  t.One("fedrt_devices_connected", "gauge", "Joined devices with an open connection.",
        static_cast<double>(host.devices_connected));
  t.One("fedrt_connections_open", "gauge", "Open device connections, joined or not.",
        static_cast<double>(host.open_connections));
  t.One("fedrt_connections_refused_total", "counter",
        "Connections closed at once for the caps on connections that have not joined.",
        U(c.connections_refused));
  t.One("fedrt_updates_accepted_total", "counter", "Device updates combined into a round.", U(c.updates_accepted));
  t.Family("fedrt_updates_rejected_total", "counter", "Device updates refused, by the first check they failed.");
  for (int r = 0; r < kUpdateRejectionCount; ++r) {
    t.Sample(std::string("fedrt_updates_rejected_total{reason=\"") +
                 UpdateRejectionName(static_cast<UpdateRejection>(r)) + "\"}",
             U(c.updates_rejected[r]));
  }
  t.One("fedrt_updates_deferred_total", "counter",
        "Device updates dropped because max waiting updates were waiting for their turn; the device is asked again.",
        U(c.updates_deferred));
  t.One("fedrt_updates_decoded_again_total", "counter",
        "Device updates that arrived before their turn in the sum when no decoded buffer was free (max decoded "
        "waiting), and were decoded again at their turn.",
        U(c.updates_decoded_again));
  t.One("fedrt_uplink_payload_bytes_total", "counter", "Update payload bytes received from devices.",
        U(c.bytes_up));
  t.One("fedrt_downlink_payload_bytes_total", "counter", "Model payload bytes sent to devices.", U(c.bytes_down));
  t.Family("fedrt_round_duration_seconds", "summary", "Time from a round's start to its close.");
  t.Sample("fedrt_round_duration_seconds_sum", c.round_seconds_total);
  t.Sample("fedrt_round_duration_seconds_count", U(c.rounds_timed));
  if (c.last_round_seconds >= 0) {
    t.One("fedrt_last_round_duration_seconds", "gauge", "Time of the last round that closed.", c.last_round_seconds);
  }
  if (c.last_test_accuracy >= 0) {
    t.One("fedrt_test_accuracy_ratio", "gauge", "Test accuracy of the global model after the last applied round.",
          c.last_test_accuracy);
    t.One("fedrt_best_test_accuracy_ratio", "gauge", "Best test accuracy of the global model so far.",
          c.best_test_accuracy);
  }
  if (host.checkpointing) {
    if (host.checkpoint_age_seconds >= 0) {
      t.One("fedrt_checkpoint_age_seconds", "gauge", "Time since the latest state reached the checkpoint file.",
            host.checkpoint_age_seconds);
    }
    t.One("fedrt_checkpoint_pending", "gauge", "1 while a newer state than the checkpoint file's is not saved.",
          host.checkpoint_pending ? 1 : 0);
  }
  if (host.dp && c.dp_epsilon >= 0) {
    t.One("fedrt_dp_epsilon", "gauge", "DP-FedAvg: privacy spent so far (epsilon at the configured delta).",
          c.dp_epsilon);
  }
  return t.Take();
}

}  // namespace star
}  // namespace fedrt
