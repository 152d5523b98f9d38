// `fedrt sim`: the star topology on one machine. Starts the aggregator in this
// process and N `fedrt device` processes (the same binary) on 127.0.0.1 with
// real TCP, once per codec; prints one progress line per round; writes
// metrics.jsonl and plot.svg (test accuracy against rounds and against
// megabytes uploaded, one line per codec). `--topology ring|gossip` runs peer
// processes instead (sim_peer.cc); `--compare` plots earlier runs together.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/console.h"
#include "cli/flag_scope.h"
#include "cli/kernel_links.h"
#include "cli/key_files.h"
#include "cli/link_flags.h"
#include "cli/output_files.h"
#include "cli/signals.h"
#include "cli/sim_report.h"
#include "cli/star_report.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/platform/log.h"
#include "fedrt/runtime/aggregator.h"
#include "fedrt/runtime/byzantine.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/tls.h"

extern char** environ;

namespace fedrt::cli {
namespace {

using Series = SimSeries;

// The downlink codec of a run with links when --downlink-codec is not given.
constexpr char kSlowLinkDownlinkCodec[] = "dqsg:s=4";

int Fail(const std::string& message) {
  std::fprintf(stderr, "fedrt sim: %s\n", message.c_str());
  return 1;
}

// Generates a key for every device: <out>/keys.txt (the aggregator's) and
// <out>/keys/<id>.key (each device's own line).
Status MakeKeys(const std::string& out, int devices) {
  std::vector<std::string> ids;
  for (int i = 0; i < devices; ++i) ids.push_back("dev-" + std::to_string(i));
  return WriteDeviceKeys(out, ids, /*overwrite=*/true);
}

// The last line a process wrote to its log (its error, when it failed), or "".
std::string LastLogLine(const std::string& path) {
  std::ifstream log(path);
  std::string line, last;
  while (std::getline(log, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}
// Where and how device i runs: the address it dials, the flags its link
// adds, and the program it runs under (its network namespace).
struct DeviceLink {
  std::string server_host = "127.0.0.1";
  std::vector<std::string> args;     // --link (user space), --io-timeout-ms
  std::vector<std::string> wrapper;  // ip netns exec NAME (kernel)
};

pid_t SpawnDevice(const SimFlags& flags, int i, uint16_t port, const std::string& log_path,
                  const std::string& byzantine, const DeviceLink& link) {
  const std::string id = "dev-" + std::to_string(i);
  std::vector<std::string> args = {"fedrt", "device", "--server", link.server_host + ":" + std::to_string(port),
                                   "--id", id, "--key-file", flags.out + "/keys/" + id + ".key",
                                   "--data", flags.data, "--model", flags.model, "--partition", flags.partition,
                                   "--devices", std::to_string(flags.devices), "--index", std::to_string(i),
                                   "--partition-seed", std::to_string(flags.partition_seed),
                                   "--batch", std::to_string(flags.batch), "--give-up-ms", "20000"};
  if (!flags.tls_ca_file.empty()) {
    args.push_back("--tls-ca");
    args.push_back(flags.tls_ca_file);
  }
  if (!byzantine.empty()) {
    args.push_back("--byzantine");
    args.push_back(byzantine);
  }
  args.insert(args.end(), link.args.begin(), link.args.end());
  return SpawnLogged(std::move(args), log_path, link.wrapper);
}

}  // namespace

Status ParseSimByzantine(const std::string& text, int members, int* count, std::string* kind) {
  const std::size_t colon = text.find(':');
  const long n = colon == std::string::npos ? -1 : std::strtol(text.substr(0, colon).c_str(), nullptr, 10);
  if (colon == std::string::npos || n < 1 || n > members ||
      text.substr(0, colon) != std::to_string(n)) {
    return InvalidArgument("--byzantine " + text + ": expected N:KIND with N from 1 to the device count (" +
                           std::to_string(members) + ")");
  }
  *count = static_cast<int>(n);
  *kind = text.substr(colon + 1);
  Result<ByzantineBehaviour> behaviour = ParseByzantine(*kind);
  return behaviour.ok() ? Status::Ok() : behaviour.status();
}

Result<std::vector<std::string>> PairDownlinkCodecs(const std::vector<std::string>& downlinks,
                                                    const std::vector<std::string>& codecs) {
  if (!downlinks.empty() && downlinks.size() != 1 && downlinks.size() != codecs.size()) {
    return InvalidArgument("--downlink-codec is given " + std::to_string(downlinks.size()) + " times for " +
                           std::to_string(codecs.size()) +
                           " codecs: give it once (every codec) or once per --codec, in order (none: fp32 models)");
  }
  std::vector<std::string> paired(codecs.size());
  for (std::size_t i = 0; i < codecs.size() && !downlinks.empty(); ++i) {
    const std::string& spec = downlinks.size() == 1 ? downlinks[0] : downlinks[i];
    if (spec == "none") continue;
    Result<std::unique_ptr<Codec>> made = MakeCodec(spec);
    if (!made.ok()) return InvalidArgument("--downlink-codec " + spec + ": " + made.status().message());
    paired[i] = spec;
  }
  return paired;
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "ended (wait status " + std::to_string(status) + ")";
}

std::string SimLabel(const std::string& codec) {
  std::string s = codec;
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  }
  return s;
}

std::string SimModelPath(const std::string& save_model, const std::string& codec) {
  std::string stem = save_model;
  if (stem.size() > 4 && stem.compare(stem.size() - 4, 4, ".npz") == 0) stem.resize(stem.size() - 4);
  return stem + "-" + SimLabel(codec) + ".npz";
}

std::vector<double> NiceTicks(double lo, double hi, int most, bool integers) {
  const double span = hi > lo ? hi - lo : 1.0;
  const double raw = span / std::max(1, most - 1);
  double step = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * step >= raw * (1 - 1e-9)) {
      step *= m;
      break;
    }
  }
  if (integers) step = std::max(1.0, std::round(step));
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::string TickLabel(double value, const std::vector<double>& ticks) {
  // As many decimals as the step needs, so that no two labels read the same.
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1.0;
  const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// Hand-written SVG: two panels (accuracy vs round, accuracy vs MB uploaded on
// a log axis), a third (accuracy vs wall time) when every series has its
// times, one polyline per codec with a marker on every point (a series of
// one evaluation is a marker alone), each marker titled with its values; the
// legend sits below the panels, clear of the curves.
std::string SimPlot(const std::vector<Series>& all, const std::string& title, const std::string& x_label,
                    const std::string& mb_label) {
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#7f7f7f"};
  const double W = 460, left = 60, top = 40, pw = 370, ph = 240;
  const int legend_columns = 3;
  const double legend_top = top + ph + 50;
  const double legend_rows = std::ceil(static_cast<double>(all.size()) / legend_columns);
  const double H = legend_top + 18 * legend_rows + 10;
  double max_round = 0, min_acc = 1, max_acc = 0, min_mb = 1e30, max_mb = 0, max_seconds = 0;
  bool whole_rounds = true;
  bool timed = !all.empty();
  for (const Series& s : all) {
    timed = timed && s.elapsed.size() == s.rounds.size();
    for (double t : s.elapsed) max_seconds = std::max(max_seconds, t);
    for (std::size_t i = 0; i < s.rounds.size(); ++i) {
      max_round = std::max(max_round, s.rounds[i]);
      whole_rounds = whole_rounds && s.rounds[i] == std::floor(s.rounds[i]);
      min_acc = std::min(min_acc, s.accuracy[i]);
      max_acc = std::max(max_acc, s.accuracy[i]);
      if (s.megabytes[i] > 0) {  // a run that sends nothing (local) has no point on the log axis
        min_mb = std::min(min_mb, s.megabytes[i]);
        max_mb = std::max(max_mb, s.megabytes[i]);
      }
    }
  }
  if (max_round <= 0) max_round = 1;
  timed = timed && max_seconds > 0;
  const int panels = timed ? 3 : 2;
  const std::vector<double> second_ticks = NiceTicks(0, timed ? max_seconds : 1, 6, false);
  max_seconds = std::max(max_seconds, second_ticks.back());
  const std::vector<double> round_ticks = NiceTicks(0, max_round, 6, whole_rounds);
  max_round = std::max(max_round, round_ticks.back());  // the axis ends on a tick
  if (max_acc <= min_acc) max_acc = min_acc + 0.01;
  min_acc = std::max(0.0, std::floor(min_acc * 20) / 20);
  max_acc = std::min(1.0, std::ceil(max_acc * 20) / 20);
  if (max_acc <= min_acc) min_acc = max_acc - 0.05;
  const std::vector<double> acc_ticks = NiceTicks(100 * min_acc, 100 * max_acc, 6, false);
  if (min_mb > max_mb) min_mb = max_mb = 1;
  if (!(min_mb < max_mb)) max_mb = min_mb * 10 + 1e-6;
  const double lmin = std::floor(std::log10(std::max(min_mb, 1e-6)));
  const double lmax = std::ceil(std::log10(std::max(max_mb, 1e-6)));
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << panels * W << "\" height=\"" << H
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << panels * W / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">" << title
      << "</text>\n";
  for (int panel = 0; panel < panels; ++panel) {
    const double ox = panel * W + left;
    svg << "<rect x=\"" << ox << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
        << "\" fill=\"none\" stroke=\"black\"/>\n";
    for (double a : acc_ticks) {
      const double y = top + ph - ph * (a / 100 - min_acc) / (max_acc - min_acc);
      svg << "<line x1=\"" << ox << "\" x2=\"" << ox + pw << "\" y1=\"" << y << "\" y2=\"" << y
          << "\" stroke=\"#ddd\"/><text class=\"ytick\" x=\"" << ox - 6 << "\" y=\"" << y + 4
          << "\" text-anchor=\"end\">" << TickLabel(a, acc_ticks) << "%</text>\n";
    }
    if (panel == 0) {
      for (double r : round_ticks) {
        svg << "<text class=\"xtick\" x=\"" << ox + pw * r / max_round << "\" y=\"" << top + ph + 16
            << "\" text-anchor=\"middle\">" << TickLabel(r, round_ticks) << "</text>\n";
      }
      svg << "<text x=\"" << ox + pw / 2 << "\" y=\"" << top + ph + 34 << "\" text-anchor=\"middle\">" << x_label << "</text>\n";
    } else if (panel == 2) {
      for (double t : second_ticks) {
        svg << "<text class=\"stick\" x=\"" << ox + pw * t / max_seconds << "\" y=\"" << top + ph + 16
            << "\" text-anchor=\"middle\">" << TickLabel(t, second_ticks) << "</text>\n";
      }
      svg << "<text x=\"" << ox + pw / 2 << "\" y=\"" << top + ph + 34
          << "\" text-anchor=\"middle\">wall time (s)</text>\n";
    } else {
      for (double e = lmin; e <= lmax; e += 1) {
        const double x = ox + pw * (e - lmin) / std::max(1.0, lmax - lmin);
        char label[32];
        std::snprintf(label, sizeof label, "%g", std::pow(10.0, e));
        svg << "<text class=\"mbtick\" x=\"" << x << "\" y=\"" << top + ph + 16 << "\" text-anchor=\"middle\">"
            << label << "</text>\n";
      }
      svg << "<text x=\"" << ox + pw / 2 << "\" y=\"" << top + ph + 34
          << "\" text-anchor=\"middle\">" << mb_label << "</text>\n";
    }
    svg << "<text x=\"" << ox - 45 << "\" y=\"" << top - 8 << "\">test accuracy</text>\n";
    for (std::size_t k = 0; k < all.size(); ++k) {
      const Series& s = all[k];
      std::ostringstream points, markers;
      for (std::size_t i = 0; i < s.rounds.size(); ++i) {
        if (panel == 1 && !(s.megabytes[i] > 0)) continue;
        const double fx = panel == 0   ? s.rounds[i] / max_round
                          : panel == 2 ? s.elapsed[i] / max_seconds
                                       : (std::log10(std::max(s.megabytes[i], 1e-6)) - lmin) / std::max(1.0, lmax - lmin);
        const double fy = (s.accuracy[i] - min_acc) / (max_acc - min_acc);
        const double x = ox + pw * std::clamp(fx, 0.0, 1.0), y = top + ph - ph * std::clamp(fy, 0.0, 1.0);
        points << x << "," << y << " ";
        char value[96];
        std::snprintf(value, sizeof value, "%s %g: %.2f%%", panel == 0 ? "x" : panel == 2 ? "s" : "MB",
                      panel == 0 ? s.rounds[i] : panel == 2 ? s.elapsed[i] : s.megabytes[i], 100 * s.accuracy[i]);
        markers << "<circle class=\"point\" cx=\"" << x << "\" cy=\"" << y << "\" r=\"3\" fill=\"" << colors[k % 8]
                << "\"><title>" << s.codec << " " << value << "</title></circle>\n";
      }
      if (!points.str().empty()) {
        svg << "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" << colors[k % 8] << "\" points=\""
            << points.str() << "\"/>\n";
      }
      svg << markers.str();
    }
  }
  for (std::size_t k = 0; k < all.size(); ++k) {  // the legend, below both panels
    const double lx = left + static_cast<double>(k % legend_columns) * (panels * W - left) / legend_columns;
    const double ly = legend_top + 18.0 * static_cast<double>(k / legend_columns);
    svg << "<g class=\"legend\"><line x1=\"" << lx << "\" x2=\"" << lx + 20 << "\" y1=\"" << ly << "\" y2=\"" << ly
        << "\" stroke-width=\"2\" stroke=\"" << colors[k % 8] << "\"/><text x=\"" << lx + 26 << "\" y=\"" << ly + 4
        << "\">" << all[k].codec << "</text></g>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

pid_t SpawnLogged(std::vector<std::string> args, const std::string& log_path,
                  const std::vector<std::string>& wrapper) {
  std::string program = "/proc/self/exe";
  if (!wrapper.empty()) {
    // The wrapper execs the binary by path: /proc/self/exe would be its own.
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return -1;
    std::vector<std::string> wrapped = wrapper;
    wrapped.emplace_back(self, static_cast<std::size_t>(n));
    wrapped.insert(wrapped.end(), args.begin() + 1, args.end());
    args = std::move(wrapped);
    program = wrapper[0];
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = {"OPENBLAS_NUM_THREADS=1"};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("OPENBLAS_NUM_THREADS=", 0) != 0) env_strings.push_back(*e);
  }
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc = wrapper.empty() ? posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), envp.data())
                                 : posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

void PrintSimTable(const std::vector<Series>& all, const char* name_header, const char* mb_header, double target) {
  std::printf("\n%-40s %10s %12s %10s %10s %10s %8s\n", name_header, "final acc", mb_header, "vs fp32", "MB down",
              "wraps", "time");
  for (const Series& s : all) {
    char down[32] = "-";  // peers have no downlink: what they send is all in the MB column
    if (s.bytes_down) std::snprintf(down, sizeof(down), "%.3f", static_cast<double>(s.bytes_down) / 1e6);
    std::printf("%-40s %9.2f%% %12.3f %9.1fx %10s %10llu %7.0fs\n", s.codec.c_str(),
                s.accuracy.empty() ? 0.0 : 100.0 * s.accuracy.back(), static_cast<double>(s.bytes_up) / 1e6,
                s.bytes_up ? static_cast<double>(s.fp32_bytes_up) / static_cast<double>(s.bytes_up) : 0.0, down,
                static_cast<unsigned long long>(s.near_wraps), s.seconds);
  }
  if (target <= 0) return;
  // Time to the target: what a user on these links waits for, and where
  // each codec's rounds spend it (means over applied rounds, along the
  // update that arrived last).
  const Series* fp32 = nullptr;
  for (const Series& s : all) {
    if (s.codec == "fp32" && fp32 == nullptr) fp32 = &s;
  }
  char target_header[32], mb_target_header[32];
  std::snprintf(target_header, sizeof(target_header), "time to %.4g%%", 100 * target);
  std::snprintf(mb_target_header, sizeof(mb_target_header), "MB to %.4g%%", 100 * target);
  std::printf("\n%-40s %14s %7s %12s %16s %9s   %s\n", name_header, target_header, "rounds", mb_target_header,
              "speed-up vs fp32", "missing", "mean round: download + compute + upload");
  for (const Series& s : all) {
    char time[32] = "not reached", rounds[16] = "-", mb[32] = "-", speedup[32] = "-";
    if (s.seconds_to_target >= 0) {
      std::snprintf(time, sizeof(time), "%.1f s", s.seconds_to_target);
      std::snprintf(rounds, sizeof(rounds), "%.0f", s.rounds_to_target);
      std::snprintf(mb, sizeof(mb), "%.3f", static_cast<double>(s.bytes_to_target) / 1e6);
      if (fp32 != nullptr && fp32->seconds_to_target > 0 && s.seconds_to_target > 0) {
        std::snprintf(speedup, sizeof(speedup), "x%.2f", fp32->seconds_to_target / s.seconds_to_target);
      }
    }
    const double n = std::max<double>(1, static_cast<double>(s.rounds.size()));
    std::printf("%-40s %14s %7s %12s %16s %9zu   %.2f + %.2f + %.2f s\n", s.codec.c_str(), time, rounds, mb, speedup,
                s.missing_updates, s.download_seconds / n, s.compute_seconds / n, s.upload_seconds / n);
  }
}

namespace {

// --tls: a throwaway CA and a certificate for `names` (127.0.0.1, and the
// bridge's address with kernel links) in <out>/tls, named in `flags`.
Status WriteSimTlsFiles(SimFlags* flags, const std::vector<std::string>& names = {"127.0.0.1"}) {
  FEDRT_RETURN_IF_ERROR(MakeOutputDirectory(flags->out + "/tls", 0700));
  Result<transport::TlsTestFiles> files = transport::WriteTlsTestFiles(flags->out + "/tls", names);
  if (!files.ok()) return files.status();
  flags->tls_ca_file = files->ca_cert;
  flags->tls_cert_file = files->server_cert;
  flags->tls_key_file = files->server_key;
  return Status::Ok();
}

// Every option that configures one topology (or one codec) only is refused
// in the others; --compare only plots, so it takes only --out.
Status CheckSimFlags(const SimFlags& flags, const CLI::App& app) {
  if (FlagGiven(app, "--compare")) {
    for (const CLI::Option* option : app.get_options()) {
      const std::string name = option->get_name();
      if (option->count() > 0 && name != "--compare" && name != "--out" && name != "--help") {
        return InvalidArgument(name + " does not apply to --compare, which only plots earlier runs (with --out)");
      }
    }
    return Status::Ok();
  }
  const bool star = flags.topology == "star";
  const bool peers = !star;
  bool ndqsg = star && flags.codecs.empty();  // the default star codecs include ndqsg
  for (const std::string& codec : flags.codecs) ndqsg = ndqsg || (star && codec.rfind("ndqsg", 0) == 0);
  const std::vector<FlagScope> scopes = {
      {"--devices", star, "--topology star"},
      {"--rounds", star, "--topology star"},
      {"--deadline-ms", star, "--topology star"},
      {"--fraction", star, "--topology star"},
      {"--over-selection", star, "--topology star"},
      {"--quorum", star, "--topology star"},
      {"--max-failed-rounds", star, "--topology star"},
      {"--partition-seed", star, "--topology star"},
      {"--downlink-codec", star, "--topology star"},
      {"--target-accuracy", star, "--topology star"},
      {"--shaper", !flags.link.empty() || !flags.link_file.empty(), "--link or --link-file"},
      {"--anchor-fraction", ndqsg, "--topology star with an ndqsg --codec"},
      {"--wrap-threshold", ndqsg, "--topology star with an ndqsg --codec"},
      {"--max-rho", ndqsg, "--topology star with an ndqsg --codec"},
      {"--anchor-levels", ndqsg, "--topology star with an ndqsg --codec"},
      {"--peers", peers, "--topology ring and gossip"},
      {"--evals-per-epoch", peers, "--topology ring and gossip"},
      {"--step-timeout-ms", peers, "--topology ring and gossip"},
      {"--repair", peers, "--topology ring and gossip"},
      {"--schedule", peers, "--topology ring and gossip"},
      {"--peer-arg", peers, "--topology ring and gossip"},
      {"--graph", flags.topology == "gossip", "--topology gossip"},
      // Gossip takes plain SGD steps; star devices train with plain SGD.
      {"--momentum", flags.topology == "ring", "--topology ring"},
  };
  return CheckFlagScopes(app, scopes, "--topology " + flags.topology);
}

int RunSim(SimFlags flags, const CLI::App& app) {
  const Status scoped = CheckSimFlags(flags, app);
  if (!scoped.ok()) {
    Fail(scoped.ToString());
    return 2;  // a usage error
  }
  if (!flags.compare.empty()) return RunSimCompare(flags);
  if (flags.tls) {
    const Status written = WriteSimTlsFiles(&flags);
    if (!written.ok()) return Fail("--tls: " + written.ToString());
  }
  if (flags.topology != "star") {
    // Robust rules judge the neighbours' models in gossip; the ring sums
    // (runtime/README.md, "Robust aggregation and differential privacy").
    if (flags.topology == "ring" &&
        (!flags.byzantine.empty() || flags.aggregation != "mean" || flags.star.clip_update_norm != 0)) {
      Fail("--byzantine, --aggregation and --clip-update-norm apply to --topology star and gossip: the ring "
           "all-reduce sums, and no rule applies to a sum");
      return 2;  // a usage error
    }
    Result<AggregationRule> peer_rule = ParseAggregationRule(flags.aggregation);
    if (!peer_rule.ok()) return Fail(peer_rule.status().ToString());
    if (!flags.byzantine.empty()) {
      int count = 0;
      std::string kind;
      const Status parsed = ParseSimByzantine(flags.byzantine, flags.peers, &count, &kind);
      if (!parsed.ok()) return Fail(parsed.ToString());
    }
    if (!flags.init_model.empty()) {
      // Read once here so a bad file stops the sim before any peer starts;
      // every peer then reads it again (they hold no shared memory).
      AggregatorOptions initial;
      initial.model = flags.model;
      const Status loaded = LoadInitialModel(flags.init_model, FlagGiven(app, "--model"), initial);
      if (!loaded.ok()) return Fail(loaded.ToString());
      flags.model = initial.model;
    }
    return RunPeerSim(flags);
  }
  Result<AggregationRule> rule = ParseAggregationRule(flags.aggregation);
  if (!rule.ok()) return Fail(rule.status().ToString());
  int byzantine_count = 0;
  std::string byzantine_kind;
  if (!flags.byzantine.empty()) {
    const Status parsed = ParseSimByzantine(flags.byzantine, flags.devices, &byzantine_count, &byzantine_kind);
    if (!parsed.ok()) return Fail(parsed.ToString());
  }
  if (flags.codecs.empty()) flags.codecs = {"fp32", "ndqsg:s1=1,rho=2,b=1024,ec=pack"};
  for (std::string& codec : flags.codecs) {
    Result<std::unique_ptr<Codec>> made = MakeCodec(codec);
    if (!made.ok()) return Fail(made.status().ToString());
  }
  std::vector<float> initial_parameters;
  if (!flags.init_model.empty()) {
    AggregatorOptions initial;
    initial.model = flags.model;
    const Status loaded = LoadInitialModel(flags.init_model, FlagGiven(app, "--model"), initial);
    if (!loaded.ok()) return Fail(loaded.ToString());
    flags.model = initial.model;  // the devices build the file's model
    initial_parameters = std::move(initial.initial_parameters);
  }
  Result<std::vector<std::string>> downlinks = PairDownlinkCodecs(flags.downlink_codecs, flags.codecs);
  if (!downlinks.ok()) {
    Fail(downlinks.status().ToString());
    return 2;  // a usage error
  }
  Result<std::vector<transport::LinkProfile>> links = FleetLinks(flags.link, flags.link_file, flags.devices);
  if (!links.ok()) {
    Fail(links.status().ToString());
    return 2;  // a usage error
  }
  // On a slow link the model broadcast is most of a round: without
  // --downlink-codec every compressed codec's run gets a compressed one
  // (per tensor, dqsg:s=4 reached 85% in the rounds of an fp16 downlink and
  // kept its accuracy over 10 rounds with a tenth of its bytes, 58% of
  // s=16's; docs/benchmarks/links.md), and the fp32 run stays the
  // uncompressed baseline. A --downlink-codec given (fp32 or none: full
  // models) always wins.
  const bool slow_link_default = !links->empty() && flags.downlink_codecs.empty();
  if (slow_link_default) {
    for (std::size_t i = 0; i < flags.codecs.size(); ++i) {
      if (flags.codecs[i] != "fp32") (*downlinks)[i] = kSlowLinkDownlinkCodec;
    }
  }
  // SIGINT and SIGTERM stop the run cleanly, so that what it set up (the
  // kernel links above all) is removed.
  std::atomic<bool>* interrupted = CatchStopSignals();
  // Which shaper does what (cli/kernel_links.h); the kernel links are
  // removed however this function returns.
  Result<ShaperPlan> plan = PlanShapers(*links, flags.shaper, "device");
  if (!plan.ok()) return Fail(plan.status().ToString());
  const std::unique_ptr<KernelLinks>& kernel_links = plan->kernel;
  std::string shaper_note = plan->note;
  if (kernel_links) {
    shaper_note.insert(shaper_note.find(')'), ", aggregator on " + kernel_links->host_address());
    if (flags.tls) {  // the devices dial the bridge's address
      const Status written = WriteSimTlsFiles(&flags, {"127.0.0.1", kernel_links->host_address()});
      if (!written.ok()) return Fail("--tls: " + written.ToString());
    }
  }
  // A slow link needs time for a frame: up to 16 queued frames of 4 MiB go
  // out in one write, which must finish within the I/O deadline.
  uint32_t io_timeout_ms = 10000;
  for (const transport::LinkProfile& link : *links) {
    for (uint64_t rate : {link.up_bits_per_second, link.down_bits_per_second}) {
      if (rate == 0) continue;
      const uint64_t ms = 10000 + (16ull * (4u << 20) * 8 * 1000) / rate + 4ull * link.delay_ms;
      io_timeout_ms = static_cast<uint32_t>(std::min<uint64_t>(3600000, std::max<uint64_t>(io_timeout_ms, ms)));
    }
  }
  std::vector<DeviceLink> device_links(static_cast<std::size_t>(flags.devices));
  for (int i = 0; i < flags.devices && !links->empty(); ++i) {
    DeviceLink& link = device_links[static_cast<std::size_t>(i)];
    link.args = {"--io-timeout-ms", std::to_string(io_timeout_ms)};
    if (kernel_links) {
      link.server_host = kernel_links->host_address();
      link.wrapper = {"ip", "netns", "exec", kernel_links->netns(i)};
    }
    const transport::LinkProfile& user = plan->user[static_cast<std::size_t>(i)];
    if (user.shaped()) {
      link.args.push_back("--link");
      link.args.push_back(transport::FormatLinkProfile(user));
    }
  }
  const Status out = MakeOutputDirectory(flags.out);
  if (!out.ok()) return Fail(out.ToString());
  const Status keys = MakeKeys(flags.out, flags.devices);
  if (!keys.ok()) return Fail(keys.ToString());
  transport::TlsConfig tls;
  tls.cert_file = flags.tls_cert_file;
  tls.key_file = flags.tls_key_file;
  std::ofstream metrics;
  const Status opened = OpenOutputFile(flags.out + "/metrics.jsonl", &metrics);
  if (!opened.ok()) return Fail(opened.ToString());
  std::printf("fedrt sim: %d devices, %u rounds, %s, %s partition, codecs:", flags.devices, flags.rounds,
              flags.model.c_str(), flags.partition.c_str());
  for (std::size_t i = 0; i < flags.codecs.size(); ++i) {
    std::printf(" %s", flags.codecs[i].c_str());
    if (!(*downlinks)[i].empty()) {
      std::printf(" (downlink %s%s)", (*downlinks)[i].c_str(), slow_link_default ? ", the default on links" : "");
    }
  }
  std::printf(", aggregation %s", AggregationRuleName(*rule).c_str());
  if (byzantine_count > 0) std::printf(", %d byzantine devices (%s)", byzantine_count, byzantine_kind.c_str());
  if (flags.star.dp.noise_multiplier > 0) {
    std::printf(", DP-FedAvg z=%g C=%g delta=%g", flags.star.dp.noise_multiplier, flags.star.dp.clip,
                flags.star.dp.delta);
  }
  if (flags.tls) std::printf(", TLS (throwaway CA in %s/tls)", flags.out.c_str());
  if (!links->empty()) {
    std::printf("\n  links: %s; shaper: %s", DescribeFleetLinks(*links).c_str(), shaper_note.c_str());
  }
  std::printf("\n  output in %s/ (metrics.jsonl, plot.svg, one folder of device logs per codec)\n", flags.out.c_str());
  std::fflush(stdout);
  if (!LogLevelGiven()) SetLogLevel(LogLevel::kWarning);  // the devices' and peers' own lines go to their logs

  std::vector<Series> all;
  for (std::size_t c = 0; c < flags.codecs.size(); ++c) {
    if (interrupted->load()) return 0;  // main() exits with 128 + the signal
    const std::string& codec = flags.codecs[c];
    const std::string& downlink = (*downlinks)[c];
    // The same codec may run with two downlinks: the label tells them apart.
    const std::string label = downlink.empty() ? codec : codec + " (down " + downlink + ")";
    const std::string dir = flags.out + "/" + SimLabel(label);
    const Status made = MakeOutputDirectory(dir);
    if (!made.ok()) return Fail(made.ToString());
    Series series;
    series.codec = label;
    // The device processes, as the aggregator's thread starts them; a
    // watcher thread reaps any that ends before the training does and stops
    // the aggregator (which would otherwise wait for it forever, or for
    // --deadline-ms every round).
    struct Child {
      pid_t pid;
      int index;
    };
    std::mutex children_mutex;
    std::vector<Child> children;
    std::string early_exit;  // under children_mutex: why the run was stopped
    std::atomic<bool> stop{false};
    std::atomic<uint32_t> applied{0};
    AggregatorOptions options;
    options.aggregation = *rule;
    options.clip_update_norm = flags.star.clip_update_norm;
    options.dp = flags.star.dp;
    options.key_file = flags.out + "/keys.txt";
    options.data_dir = flags.data;
    options.model = flags.model;
    options.codec = codec;
    options.rounds = flags.rounds;
    options.min_devices = static_cast<std::size_t>(flags.devices);
    options.round_deadline_ms = flags.deadline_ms;
    options.sampling.fraction = flags.fraction;
    options.sampling.over_selection = flags.over_selection;
    options.quorum = flags.quorum;
    options.max_failed_rounds = flags.star.max_failed_rounds;
    options.local_epochs = flags.epochs;
    options.learning_rate = flags.lr;
    options.session_seed = flags.seed;
    options.model_seed = flags.seed;
    options.anchor_fraction = flags.star.anchor_fraction;
    options.wrap_threshold = flags.star.wrap_threshold;
    options.max_rho = flags.star.max_rho;
    options.anchor_levels = flags.star.anchor_levels;
    options.downlink_codec = downlink;
    options.target_accuracy = flags.target_accuracy;
    options.idle_timeout_ms = 60000 + (links->empty() ? 0 : io_timeout_ms);
    options.io_timeout_ms = io_timeout_ms;
    options.join_timeout_ms = 10000;
    options.tls = tls;
    options.initial_parameters = initial_parameters;
    if (!flags.save_model.empty()) options.save_model = SimModelPath(flags.save_model, codec);
    if (kernel_links) options.host = kernel_links->host_address();
    const auto started = std::chrono::steady_clock::now();
    AggregatorHooks hooks;
    hooks.on_listening = [&](uint16_t port) {
      std::lock_guard<std::mutex> lock(children_mutex);
      for (int i = 0; i < flags.devices; ++i) {
        const pid_t pid = SpawnDevice(flags, i, port, dir + "/dev-" + std::to_string(i) + ".log",
                                      i < byzantine_count ? byzantine_kind : std::string(),
                                      device_links[static_cast<std::size_t>(i)]);
        if (pid > 0) children.push_back({pid, i});
      }
      std::printf("[%s] aggregator on %s:%u, %zu device processes started\n", label.c_str(), options.host.c_str(),
                  port, children.size());
      std::fflush(stdout);
    };
    RoundProgressLine progress("[" + label + "]", flags.rounds, /*whole_run=*/true);  // a terminal only
    hooks.on_round_progress = [&](const RoundProgress& p) { progress.Update(p); };
    hooks.on_round = [&](const RoundReport& report) {
      progress.Hide();
      if (report.applied) applied++;
      if (!report.applied) {  // the same round runs again: no point on the curves
        series.bytes_up += report.bytes_up;
        series.bytes_down += report.bytes_down;
        std::printf("[%s] %s\n", label.c_str(), FormatRound(report, flags.rounds).c_str());
        std::fflush(stdout);
        return;
      }
      series.bytes_up += report.bytes_up;
      if (report.updates < report.sampled) series.short_rounds++;
      series.missing_updates += report.sampled - std::min(report.sampled, report.updates);
      series.fp32_bytes_up += report.fp32_bytes_up;
      series.near_wraps += report.near_wraps;
      series.bytes_down += report.bytes_down;
      series.rounds.push_back(report.round);
      series.accuracy.push_back(report.test_accuracy);
      series.megabytes.push_back(static_cast<double>(series.bytes_up) / 1e6);
      series.download_seconds += report.download_seconds;
      series.compute_seconds += report.compute_seconds;
      series.upload_seconds += report.upload_seconds;
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      series.elapsed.push_back(elapsed);
      if (flags.target_accuracy > 0 && series.seconds_to_target < 0 && report.test_accuracy >= flags.target_accuracy) {
        series.seconds_to_target = elapsed;
        series.bytes_to_target = series.bytes_up + series.bytes_down;
        series.rounds_to_target = report.round;
      }
      std::printf("[%s] %s  total up %.2f MB  %.0f s\n", label.c_str(), FormatRound(report, flags.rounds).c_str(),
                  static_cast<double>(series.bytes_up) / 1e6, elapsed);
      std::fflush(stdout);
      nlohmann::json line = RoundJson(report, codec);
      if (!downlink.empty()) line["downlink_codec"] = downlink;
      line["topology"] = "star";
      line["partition"] = flags.partition;
      line["devices"] = flags.devices;
      line["aggregation"] = AggregationRuleName(options.aggregation);
      if (byzantine_count > 0) line["byzantine"] = flags.byzantine;
      line["total_bytes_up"] = series.bytes_up;
      line["total_bytes_down"] = series.bytes_down;
      line["elapsed_seconds"] = elapsed;
      if (!links->empty()) line["links"] = DescribeFleetLinks(*links);
      if (flags.target_accuracy > 0) {
        line["target_accuracy"] = flags.target_accuracy;
        line["reached_target"] = series.seconds_to_target >= 0;
      }
      metrics << line.dump() << "\n" << std::flush;
    };
    std::atomic<bool> aggregator_done{false};
    std::thread watcher([&] {
      while (!aggregator_done.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::lock_guard<std::mutex> lock(children_mutex);
        if (interrupted->load() && early_exit.empty()) {
          early_exit = "interrupted";
          stop = true;
        }
        for (Child& child : children) {
          int wait_status = 0;
          if (child.pid <= 0 || ::waitpid(child.pid, &wait_status, WNOHANG) != child.pid) continue;
          child.pid = -1;
          // Devices leave when the aggregator tells them (exit status 0), after
          // the last round or when a DP budget ends the training early.
          const bool told_to_leave = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
          if (applied.load() < flags.rounds && early_exit.empty() && !told_to_leave) {
            const std::string log = dir + "/dev-" + std::to_string(child.index) + ".log";
            const std::string said = LastLogLine(log);
            early_exit = "device dev-" + std::to_string(child.index) + " " + DescribeExit(wait_status) +
                         " before round " + std::to_string(applied.load() + 1) + " of " +
                         std::to_string(flags.rounds) + " (its log: " + log + ")" +
                         (said.empty() ? "" : ": " + said) + "; stopping";
            stop = true;
          }
        }
      }
    });
    const Status status = RunAggregator(options, hooks, &stop);
    aggregator_done = true;
    progress.Hide();
    watcher.join();
    // Devices leave when told; give them a moment (none after an early
    // stop: they were not told), then make sure.
    for (int waited = 0; waited < 100 && early_exit.empty(); ++waited) {
      bool all_done = true;
      for (Child& child : children) {
        if (child.pid > 0 && ::waitpid(child.pid, nullptr, WNOHANG) == child.pid) child.pid = -1;
        if (child.pid > 0) all_done = false;
      }
      if (all_done) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (const Child& child : children) {
      if (child.pid > 0) {
        ::kill(child.pid, SIGTERM);
        ::waitpid(child.pid, nullptr, 0);
      }
    }
    if (interrupted->load()) {
      std::printf("[%s] interrupted: stopped the devices%s\n", label.c_str(),
                  kernel_links ? " and removed the namespaces" : "");
      return 0;  // main() exits with 128 + the signal
    }
    if (!early_exit.empty()) return Fail(codec + ": " + early_exit);
    if (!status.ok()) return Fail(codec + ": " + status.ToString());
    series.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (series.short_rounds > 0 && flags.quorum >= 1 && flags.over_selection == 0) {
      std::printf("[%s] warning: %zu rounds closed with fewer updates than devices sampled (raise --deadline-ms)\n",
                  codec.c_str(), series.short_rounds);
    }
    if (!options.save_model.empty()) std::printf("[%s] saved the final model to %s\n", codec.c_str(), options.save_model.c_str());
    all.push_back(series);
  }

  std::ofstream plot;
  const Status plot_opened = OpenOutputFile(flags.out + "/plot.svg", &plot);
  if (!plot_opened.ok()) return Fail(plot_opened.ToString());
  plot << SimPlot(all, "fedrt sim: " + std::to_string(flags.devices) + " devices, " + flags.model + ", " +
                        flags.partition);
  PrintSimTable(all, "codec", "MB uploaded", flags.target_accuracy);
  std::printf("wrote %s/metrics.jsonl and %s/plot.svg\n", flags.out.c_str(), flags.out.c_str());
  return 0;
}

}  // namespace

void RegisterSim(CLI::App& app, CommandList& commands) {
  auto flags = std::make_shared<SimFlags>();
  CLI::App* sim = app.add_subcommand(
      "sim", "Simulate a fleet on this machine: one aggregator and N device processes over 127.0.0.1 TCP");
  sim->add_option("--devices", flags->devices, "Device processes")->capture_default_str()->check(CLI::Range(1, 256));
  sim->add_option("--rounds", flags->rounds, "Rounds per codec")->capture_default_str()->check(CLI::Range(1, 100000));
  sim->add_option("--codec", flags->codecs, "Codec spec; repeat to compare (default: fp32 and ndqsg:s1=1,rho=2,b=1024,ec=pack)");
  sim->add_option("--partition", flags->partition, "iid, dirichlet:<alpha> or shards:<k>")->capture_default_str();
  sim->add_option("--out", flags->out, "Output directory")->capture_default_str();
  sim->add_option("--data", flags->data, "MNIST-style directory")->capture_default_str();
  sim->add_option("--model", flags->model, "Model spec")->capture_default_str();
  sim->add_option("--epochs", flags->epochs, "Star: local epochs per round. Ring, gossip: epochs")->capture_default_str();
  sim->add_option("--lr", flags->lr, "Devices' local learning rate")->capture_default_str();
  sim->add_option("--batch", flags->batch, "Devices' batch size")->capture_default_str();
  sim->add_option("--deadline-ms", flags->deadline_ms, "Round deadline")->capture_default_str();
  sim->add_option("--fraction", flags->fraction, "Star: fraction of the devices a round wants")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  sim->add_option("--over-selection", flags->over_selection,
                  "Star: extra devices sampled as spares, as a fraction of those a round wants")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  sim->add_option("--quorum", flags->quorum,
                  "Star: fraction of the devices a round wants whose updates close it before --deadline-ms")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  sim->add_option("--max-failed-rounds", flags->star.max_failed_rounds,
                  "Star: stop (exit 1) after this many rounds in a row that applied nothing")
      ->capture_default_str()->check(CLI::Range(1u, 1000000u));
  sim->add_option("--seed", flags->seed, "Session seed (star: codec randomness, sampling, initial model)")
      ->capture_default_str();
  sim->add_option("--partition-seed", flags->partition_seed, "Star: seed of the devices' shares and data order")
      ->capture_default_str();
  sim->add_option("--anchor-fraction", flags->star.anchor_fraction, "NDQSG: share of anchors per round")
      ->capture_default_str();
  sim->add_option("--wrap-threshold", flags->star.wrap_threshold,
                  "NDQSG: near-wraps per coordinate that raise a device's rho")->capture_default_str();
  sim->add_option("--max-rho", flags->star.max_rho, "NDQSG: largest rho; past it a device sends DQSG")
      ->capture_default_str();
  sim->add_option("--downlink-codec", flags->downlink_codecs,
                  "Star: broadcast the model's delta with this codec; once: every codec's run, or once per --codec "
                  "in order (none: the full fp32 model; default: none, with --link or --link-file dqsg:s=4 "
                  "for every codec but fp32)");
  sim->add_option("--init-model", flags->init_model,
                  "Every codec's run starts from this model (.npz or a checkpoint); its spec unless --model is given");
  sim->add_option("--save-model", flags->save_model,
                  "Write each codec's final model to F-<codec>.npz (F without .npz; e.g. m-fp32.npz); ring and gossip: rank 0's");
  sim->add_option("--anchor-levels", flags->star.anchor_levels, "NDQSG: anchors' DQSG levels (0: s1)")
      ->capture_default_str();
  sim->add_option("--topology", flags->topology, "star (aggregator + devices), ring (all-reduce) or gossip (D-PSGD)")
      ->capture_default_str()->check(CLI::IsMember({"star", "ring", "gossip"}));
  sim->add_option("--peers", flags->peers, "Ring, gossip: peer processes")->capture_default_str()->check(CLI::Range(2, 256));
  sim->add_option("--evals-per-epoch", flags->evals_per_epoch, "Ring, gossip: test-set evaluations (plot points) per epoch")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  sim->add_option("--step-timeout-ms", flags->step_timeout_ms, "Ring, gossip: deadline of every step")
      ->capture_default_str()->check(CLI::Range(100, 3600000));
  sim->add_flag("--repair", flags->repair, "Ring, gossip: peers re-form without a failed peer and continue");
  sim->add_option("--graph", flags->graph, "Gossip: ring or torus (2-D, rows x columns as square as the peer count allows)")
      ->capture_default_str()->check(CLI::IsMember({"ring", "torus"}));
  sim->add_option("--momentum", flags->momentum, "Ring: SGD momentum")->capture_default_str()->check(CLI::Range(0.0, 0.999));
  sim->add_option("--schedule", flags->schedule, "Ring, gossip: learning rate schedule, constant or cosine (to 0 over the epochs)")
      ->capture_default_str()->check(CLI::IsMember({"constant", "cosine"}));
  sim->add_option("--peer-arg", flags->peer_args,
                  "Ring, gossip: one more argument for every `fedrt peer` (repeat: --peer-arg=--iwp-clip --peer-arg=5)")
      ->allow_extra_args(false);
  sim->add_option("--compare", flags->compare, "Only plot: earlier runs' --out directories, drawn on one plot in --out")
      ->expected(1, -1);
  AddRobustFlags(*sim, flags->aggregation, flags->star.clip_update_norm, flags->star.dp);
  sim->add_option("--byzantine", flags->byzantine,
                  "Star, gossip: N:KIND, devices dev-0..dev-(N-1) (peers of rank 0..N-1) misbehave (signflip[:k], scaled[:k], random[:s], stale)");
  sim->add_option("--target-accuracy", flags->target_accuracy,
                  "Star: end each codec's run at this test accuracy (a fraction) and report time and bytes to it")
      ->check(CLI::Range(0.0, 1.0));
  sim->add_option("--link", flags->link,
                  "Every device's (peer's) link, RATE[,delay=MS][,loss=PCT][,down=RATE] (1mbit,delay=50ms)");
  sim->add_option("--link-file", flags->link_file,
                  "A link profile per device (peer) or per share of the fleet (runtime/README.md)");
  sim->add_option("--shaper", flags->shaper,
                  "With links: kernel (root: namespaces and tc), user (in the devices or peers) or auto (kernel when it can; "
                  "without sch_netem the kernel shapes the rate and user space the delay)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "kernel", "user"}));
  sim->add_flag("--tls", flags->tls, "TLS on every connection, with a throwaway CA and certificate in <out>/tls");
  commands.push_back({sim, [flags, sim] { return RunSim(*flags, *sim); }});
}

}  // namespace fedrt::cli
