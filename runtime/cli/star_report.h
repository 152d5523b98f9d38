// How the star commands print and record a round (shared by serve and sim).
#ifndef FEDRT_RUNTIME_CLI_STAR_REPORT_H_
#define FEDRT_RUNTIME_CLI_STAR_REPORT_H_

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/console.h"
#include "fedrt/runtime/aggregator.h"

namespace CLI {
class App;
}

namespace fedrt::cli {

// --aggregation, --clip-update-norm and the --dp-* options (serve, sim and peer).
void AddRobustFlags(CLI::App& command, std::string& aggregation, double& clip_update_norm, DpOptions& dp);
// --init-model of serve and sim: the file's model (cli/model_files.h) as the
// round-0 model, and its spec unless --model was given (then they must agree).
Status LoadInitialModel(const std::string& path, bool model_given, AggregatorOptions& options);

// The aggregator's progress line on a terminal (cli/console.h): the open
// round's updates against its quorum. Per round for `fedrt serve` (a new line
// and ETA each round), or over the whole run for `fedrt sim` (`whole_run`:
// the fraction of all `rounds` done, the ETA the run's). One thread.
class RoundProgressLine {
 public:
  RoundProgressLine(std::string prefix, uint32_t rounds, bool whole_run)
      : prefix_(std::move(prefix)), rounds_(rounds), whole_run_(whole_run) {}
  void Update(const RoundProgress& p);
  // Clears the line before other output (the round's report).
  void Hide();

 private:
  std::string prefix_;
  uint32_t rounds_;
  bool whole_run_;
  std::unique_ptr<Progress> progress_;
  uint32_t round_ = 0;
};

// Per device: role, nesting ratio used and next, near-wrap count, bytes.
inline nlohmann::json DevicesJson(const RoundReport& r) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceRoundReport& d : r.devices) {
    devices.push_back({{"id", d.device_id}, {"anchor", d.anchor}, {"rho", d.rho}, {"next_rho", d.next_rho},
                       {"near_wraps", d.near_wraps}, {"bytes", d.bytes}});
  }
  return devices;
}

// "rho 2-5" over the nested updates of the round; empty without any.
inline std::string RhoSummary(const RoundReport& r) {
  int lo = 0, hi = 0;
  for (const DeviceRoundReport& d : r.devices) {
    if (d.rho == 0) continue;
    lo = lo == 0 ? d.rho : std::min(lo, d.rho);
    hi = std::max(hi, d.rho);
  }
  if (hi == 0) return "";
  return "  rho " + std::to_string(lo) + (lo == hi ? "" : "-" + std::to_string(hi));
}

inline nlohmann::json RoundJson(const RoundReport& r, const std::string& codec) {
  nlohmann::json j = {{"codec", codec},           {"round", r.round},
          {"sampled", r.sampled},     {"updates", r.updates},
          {"rejected", r.rejected},   {"test_accuracy", r.test_accuracy},
          {"test_loss", r.test_loss}, {"train_loss", r.train_loss},
          {"bytes_up", r.bytes_up},   {"bytes_down", r.bytes_down},
          {"fp32_bytes_up", r.fp32_bytes_up}, {"near_wraps", r.near_wraps},
          {"anchors", r.anchors},     {"seconds", r.seconds},
          {"anchor_bytes_up", r.anchor_bytes_up}, {"rho_raised", r.rho_raised},
          {"rho_lowered", r.rho_lowered},         {"switched_to_dqsg", r.switched_to_dqsg},
          {"full_models_down", r.full_models_down}, {"per_device", DevicesJson(r)},
          {"download_seconds", r.download_seconds}, {"compute_seconds", r.compute_seconds},
          {"upload_seconds", r.upload_seconds}, {"applied", r.applied}};
  if (!r.applied) {
    j["failure"] = r.failure;
    j["failed_in_a_row"] = r.failed_in_a_row;
    j["stopped"] = r.stopped;
  }
  if (r.clipped > 0) j["clipped"] = r.clipped;
  if (!r.selected.empty()) j["selected"] = r.selected;  // krum, multi-krum
  if (r.dp_epsilon >= 0) {
    j["dp_epsilon"] = r.dp_epsilon;
    j["dp_sampling_rate"] = r.dp_sampling_rate;
  }
  if (!r.level_table.empty()) {  // ALQ / AMQ: the table the next round uses
    j["level_table_version"] = r.level_table_version;
    j["level_table"] = r.level_table;
  }
  return j;
}

inline std::string FormatRound(const RoundReport& r, uint32_t rounds) {
  char line[512];
  if (!r.applied) {
    std::snprintf(line, sizeof(line), "round %u/%u  not applied: %s  updates %zu/%zu  rejected %zu  (%s, %u in a row)",
                  r.round, rounds, r.failure.c_str(), r.updates, r.sampled, r.rejected,
                  r.stopped ? "stopping" : "running it again", r.failed_in_a_row);
    return line;
  }
  std::string extra = RhoSummary(r);
  if (r.clipped > 0) extra += "  clipped " + std::to_string(r.clipped);
  if (r.dp_epsilon >= 0) {
    char eps[64];
    std::snprintf(eps, sizeof(eps), "  DP epsilon %.3g", r.dp_epsilon);
    extra += eps;
  }
  char split[96] = "";  // where the time went, when the devices measure it
  if (r.download_seconds + r.compute_seconds + r.upload_seconds > 0) {
    std::snprintf(split, sizeof(split), " (down %.1f, compute %.1f, up %.1f)", r.download_seconds, r.compute_seconds,
                  r.upload_seconds);
  }
  const double ratio = r.bytes_up > 0 ? static_cast<double>(r.fp32_bytes_up) / static_cast<double>(r.bytes_up) : 0;
  std::snprintf(line, sizeof(line),
                "round %u/%u  updates %zu/%zu  test acc %.2f%%  train loss %.4f  up %.3f MB  down %.3f MB  "
                "x%.1f vs fp32  wraps %llu%s  %.1f s%s",
                r.round, rounds, r.updates, r.sampled, 100.0 * r.test_accuracy, r.train_loss, static_cast<double>(r.bytes_up) / 1e6,
                static_cast<double>(r.bytes_down) / 1e6, ratio, static_cast<unsigned long long>(r.near_wraps), extra.c_str(), r.seconds, split);
  return line;
}

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_STAR_REPORT_H_
