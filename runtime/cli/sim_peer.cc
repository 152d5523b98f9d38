// `fedrt sim --topology ring|gossip`: N `fedrt peer` processes on 127.0.0.1,
// once per codec, with the star simulation's live progress, metrics.jsonl
// and plot; and `fedrt sim --compare DIR...`: several runs on one plot.
//
// Every peer writes one JSON line per evaluation to <run>/rank-R.jsonl
// (`fedrt peer --metrics`). The launcher polls those files; when every peer
// still running has written its k-th line, it prints one progress line and
// appends one object to metrics.jsonl: the peers' mean test accuracy (each
// gossip peer evaluates its own model; ring peers hold the same one), the
// bytes all peers sent so far, and what dense fp32 would have sent.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/console.h"
#include "cli/kernel_links.h"
#include "cli/link_flags.h"
#include "cli/output_files.h"
#include "cli/peer_launch.h"
#include "cli/signals.h"
#include "cli/sim_report.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/runtime/collectives.h"
#include "fedrt/runtime/peer_trainer.h"

namespace fedrt::cli {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "fedrt sim: %s\n", message.c_str());
  return 1;
}

// How one codec argument maps onto `fedrt peer` flags.
struct PeerMode {
  std::vector<std::string> args;  // --reduce ... [--codec ...] [--density ...]
};

// Ring: fp32 (dense), fp16 (every hop fp16), iwp or iwp:density=F, or any
// other codec spec that decodes without side information (every peer's
// gradient compressed once: fedrt peer --reduce compressed --codec SPEC).
// Gossip: fp32, any codec spec (moniqua:bits=1[,theta=T]), or a replica
// spec choco[:gamma=G]+CODEC (peer::ParseChocoSpec).
// Either: local (the no-communication baseline: every peer trains alone
// with gossip's plain SGD step and sends nothing).
Result<PeerMode> ModeFor(const SimFlags& flags, const std::string& codec) {
  PeerMode mode;
  if (codec == "local") {
    mode.args = {"--reduce", "local"};
    return mode;
  }
  if (flags.topology == "ring") {
    if (codec == "fp32" || codec == "dense") {
      mode.args = {"--reduce", "dense"};
    } else if (codec == "fp16") {
      mode.args = {"--reduce", "fp16"};
    } else if (codec == "iwp" || codec.rfind("iwp:", 0) == 0) {
      mode.args = {"--reduce", "iwp"};
      if (codec.size() > 4) {
        const std::string key = "density=";
        const std::string rest = codec.substr(4);
        if (rest.rfind(key, 0) != 0) return InvalidArgument("ring codec '" + codec + "': iwp takes only density=F");
        mode.args.push_back("--density");
        mode.args.push_back(rest.substr(key.size()));
      }
    } else {
      const Status usable = peer::CheckCompressedRingCodec(codec, flags.momentum);
      if (!usable.ok()) return Status(usable.code(), "ring " + usable.message() + " (fedrt sim --momentum)");
      mode.args = {"--reduce", "compressed", "--codec", codec};
    }
    return mode;
  }
  mode.args = {"--reduce", "gossip", "--graph", flags.graph};
  if (codec != "fp32") {
    // A moniqua spec without theta is valid: the peers derive theta from the
    // learning rate (fedrt peer --moniqua-theta-per-lr).
    FEDRT_RETURN_IF_ERROR(peer::CheckGossipCodec(codec));
    mode.args.push_back("--codec");
    mode.args.push_back(codec);
  }
  return mode;
}

// One peer's metrics file, read as it grows (whole lines only).
struct RankFeed {
  std::string path;
  std::streamoff offset = 0;
  std::vector<nlohmann::json> rows;
  pid_t pid = -1;
  bool exited = false;
  bool failed = false;

  void Poll() {
    std::ifstream in(path, std::ios::binary);
    if (!in) return;
    in.seekg(offset);
    std::string line;
    while (std::getline(in, line)) {
      if (in.eof()) break;  // no newline yet: read it next time
      offset += static_cast<std::streamoff>(line.size()) + 1;
      nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (row.is_object()) rows.push_back(std::move(row));
    }
  }
};

// A flag value that reads back as the same double.
std::string FormatDouble(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

double Number(const nlohmann::json& row, const char* key) {
  auto it = row.find(key);
  return it != row.end() && it->is_number() ? it->get<double>() : 0.0;
}

// Runs one codec; appends its rows to `metrics`, its series to `all`.
// `shapers`: the peers run in its kernel links' namespaces (none: on
// 127.0.0.1), each with its user-space profile. A stop signal
// (`interrupted`) stops the peers and ends the run with kCancelled.
Status RunOne(const SimFlags& flags, const std::string& codec, std::ofstream& metrics, std::vector<SimSeries>* all,
              const ShaperPlan& shapers, const std::atomic<bool>* interrupted) {
  const KernelLinks* links = shapers.kernel.get();
  Result<PeerMode> mode = ModeFor(flags, codec);
  if (!mode.ok()) return mode.status();
  const std::string name = flags.topology + " " + codec + (flags.topology == "gossip" && flags.graph == "torus" ? " (torus)" : "");
  const std::string dir = flags.out + "/" + flags.topology + "-" + SimLabel(codec);
  FEDRT_RETURN_IF_ERROR(MakeOutputDirectory(dir));
  std::vector<std::string> hosts;
  for (int r = 0; links != nullptr && r < flags.peers; ++r) hosts.push_back(links->device_address(r));
  Result<LocalPeerFiles> files = WriteLocalPeerFiles(dir, flags.peers, flags.step_timeout_ms, hosts);
  if (!files.ok()) return files.status();
  int byzantine_count = 0;
  std::string byzantine_kind;
  if (!flags.byzantine.empty()) FEDRT_RETURN_IF_ERROR(ParseSimByzantine(flags.byzantine, flags.peers, &byzantine_count, &byzantine_kind));
  std::vector<RankFeed> feeds(static_cast<std::size_t>(flags.peers));
  const auto started = std::chrono::steady_clock::now();
  for (int r = 0; r < flags.peers; ++r) {
    RankFeed& feed = feeds[static_cast<std::size_t>(r)];
    feed.path = dir + "/rank-" + std::to_string(r) + ".jsonl";
    std::remove(feed.path.c_str());
    std::vector<std::string> args = {"fedrt", "peer", "--peers", files->config, "--keys", files->keys,
                                     "--rank", std::to_string(r), "--data", flags.data, "--model", flags.model,
                                     "--epochs", std::to_string(flags.epochs), "--batch", std::to_string(flags.batch),
                                     "--lr", std::to_string(flags.lr), "--seed", std::to_string(flags.seed), "--partition", flags.partition,
                                     "--metrics", feed.path,
                                     "--evals-per-epoch", std::to_string(flags.evals_per_epoch)};
    args.insert(args.end(), mode->args.begin(), mode->args.end());
    // Momentum configures the ring's all-reduce modes; gossip and the local
    // baseline take plain SGD steps (fedrt peer refuses it there).
    const std::string& reduce = mode->args[1];
    if (reduce == "dense" || reduce == "fp16" || reduce == "compressed" || reduce == "iwp") {
      args.push_back("--momentum");
      args.push_back(std::to_string(flags.momentum));
    }
    if (flags.schedule != "constant") {
      args.push_back("--schedule");
      args.push_back(flags.schedule);
    }
    if (flags.repair) args.push_back("--repair");
    if (!flags.init_model.empty()) args.insert(args.end(), {"--init-model", flags.init_model});
    // Ring peers end with one model; gossip peers each with their own, of
    // which rank 0's is kept (the others' are in its neighbourhood).
    if (!flags.save_model.empty() && r == 0) args.insert(args.end(), {"--save-model", SimModelPath(flags.save_model, codec)});
    // Robust gossip and local DP (checked by RunSim): the same flags for
    // every peer, --byzantine for ranks 0..N-1.
    if (flags.aggregation != "mean") args.insert(args.end(), {"--aggregation", flags.aggregation});
    if (flags.star.clip_update_norm > 0) {
      args.insert(args.end(), {"--clip-update-norm", FormatDouble(flags.star.clip_update_norm)});
    }
    if (r < byzantine_count) args.insert(args.end(), {"--byzantine", byzantine_kind});
    const DpOptions& dp = flags.star.dp;
    if (dp.noise_multiplier > 0) {
      args.insert(args.end(), {"--dp-noise-multiplier", FormatDouble(dp.noise_multiplier), "--dp-clip",
                               FormatDouble(dp.clip), "--dp-delta", FormatDouble(dp.delta)});
      if (dp.epsilon_budget > 0) args.insert(args.end(), {"--dp-epsilon-budget", FormatDouble(dp.epsilon_budget)});
      if (dp.noise_seed != 0) {
        args.insert(args.end(), {"--dp-noise-seed", std::to_string(dp.noise_seed + static_cast<uint64_t>(r))});
      }
    }
    args.insert(args.end(), flags.peer_args.begin(), flags.peer_args.end());
    if (flags.tls) {
      // Every peer presents the sim's 127.0.0.1 certificate (server and client use).
      args.insert(args.end(), {"--tls-cert", flags.tls_cert_file, "--tls-key", flags.tls_key_file, "--tls-ca",
                               flags.tls_ca_file});
    }
    if (!shapers.user.empty() && shapers.user[static_cast<std::size_t>(r)].shaped()) {
      args.insert(args.end(), {"--link", transport::FormatLinkProfile(shapers.user[static_cast<std::size_t>(r)])});
    }
    std::vector<std::string> wrapper;
    if (links != nullptr) wrapper = {"ip", "netns", "exec", links->netns(r)};
    feed.pid = SpawnLogged(args, dir + "/rank-" + std::to_string(r) + ".log", wrapper);
    if (feed.pid < 0) {
      feed.exited = feed.failed = true;
    }
  }
  std::printf("[%s] %d peer processes started (logs in %s/)\n", name.c_str(), flags.peers, dir.c_str());
  std::fflush(stdout);

  SimSeries series;
  series.codec = name;
  std::size_t next = 0;  // the next row index to report
  // Without --repair the first peer to fail ends the run: the others would
  // only wait for it until their step or join deadlines. A neighbour may fail
  // because of it within the same poll, so every peer found failed is named.
  std::string failures;
  // On a terminal: the run's share of epochs reported so far, with its ETA.
  Progress progress("[" + name + "]");
  for (;;) {
    bool running = false;
    for (std::size_t r = 0; r < feeds.size(); ++r) {
      RankFeed& feed = feeds[r];
      feed.Poll();
      if (!feed.exited) {
        int status = 0;
        if (::waitpid(feed.pid, &status, WNOHANG) == feed.pid) {
          feed.exited = true;
          feed.failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
          feed.Poll();  // its last lines
          if (feed.failed && !flags.repair) {
            failures += (failures.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " " +
                        DescribeExit(status);
          }
        } else {
          running = true;
        }
      }
    }
    // Report every row that all peers still able to write it have written.
    for (;;) {
      bool ready = true, any = false;
      for (const RankFeed& feed : feeds) {
        if (feed.rows.size() > next) {
          any = true;
        } else if (!feed.exited) {
          ready = false;
        }
      }
      if (!ready || !any) break;
      double accuracy = 0, lowest = 1, highest = 0, loss = 0, epoch = 0, elapsed = 0;
      uint64_t bytes = 0, fp32 = 0, wraps = 0, peers = 0, step = 0;
      std::vector<uint64_t> step_wraps;  // per step of the interval, summed over the peers
      int count = 0;
      for (const RankFeed& feed : feeds) {
        if (feed.rows.empty()) continue;
        // A peer that is gone contributes the bytes it had sent.
        const nlohmann::json& last = feed.rows[std::min(next, feed.rows.size() - 1)];
        bytes += static_cast<uint64_t>(Number(last, "total_bytes_sent"));
        fp32 += static_cast<uint64_t>(Number(last, "fp32_bytes"));
        if (feed.rows.size() <= next) continue;
        const nlohmann::json& row = feed.rows[next];
        const double a = Number(row, "test_accuracy");
        accuracy += a;
        lowest = std::min(lowest, a);
        highest = std::max(highest, a);
        loss += Number(row, "train_loss");
        wraps += static_cast<uint64_t>(Number(row, "near_wraps"));
        auto per_step = row.find("near_wraps_per_step");
        if (per_step != row.end() && per_step->is_array()) {
          if (step_wraps.size() < per_step->size()) step_wraps.resize(per_step->size(), 0);
          for (std::size_t k = 0; k < per_step->size(); ++k) {
            if ((*per_step)[k].is_number_unsigned()) step_wraps[k] += (*per_step)[k].get<uint64_t>();
          }
        }
        epoch = std::max(epoch, Number(row, "epoch"));
        step = std::max<uint64_t>(step, static_cast<uint64_t>(Number(row, "step")));
        peers = std::max<uint64_t>(peers, static_cast<uint64_t>(Number(row, "peers")));
        elapsed = std::max(elapsed, Number(row, "elapsed_seconds"));
        ++count;
      }
      accuracy /= count;
      loss /= count;
      // With byzantine peers: the mean over the honest ones (what the defense
      // protects), and the largest DP epsilon any peer reports.
      double honest = 0, dp_epsilon = -1;
      int honest_count = 0;
      for (std::size_t r = 0; r < feeds.size(); ++r) {
        if (feeds[r].rows.size() <= next) continue;
        dp_epsilon = std::max(dp_epsilon, feeds[r].rows[next].value("dp_epsilon", -1.0));
        if (static_cast<int>(r) < byzantine_count) continue;
        honest += Number(feeds[r].rows[next], "test_accuracy");
        ++honest_count;
      }
      series.rounds.push_back(epoch);
      series.accuracy.push_back(accuracy);
      series.megabytes.push_back(static_cast<double>(bytes) / 1e6);
      series.bytes_up = bytes;
      series.fp32_bytes_up = fp32;
      series.near_wraps += wraps;
      const double ratio = bytes ? static_cast<double>(fp32) / static_cast<double>(bytes) : 0.0;
      const uint64_t most_wraps = step_wraps.empty() ? 0 : *std::max_element(step_wraps.begin(), step_wraps.end());
      progress.Hide();
      std::printf("[%s] epoch %.2f/%u  peers %llu  test acc %.2f%% (%.2f..%.2f)  train loss %.4f  sent %.3f MB  "
                  "x%.1f vs fp32  wraps %llu (max %llu in a step)  %.0f s\n",
                  name.c_str(), epoch, flags.epochs, static_cast<unsigned long long>(peers), 100.0 * accuracy,
                  100.0 * lowest, 100.0 * highest, loss, static_cast<double>(bytes) / 1e6, ratio,
                  static_cast<unsigned long long>(wraps), static_cast<unsigned long long>(most_wraps), elapsed);
      std::fflush(stdout);
      nlohmann::json line = {{"topology", flags.topology},
                             {"codec", codec},
                             {"round", next + 1},
                             {"epoch", epoch},
                             {"step", step},
                             {"peers", peers},
                             {"reporting_peers", count},
                             {"test_accuracy", accuracy},
                             {"test_accuracy_min", lowest},
                             {"test_accuracy_max", highest},
                             {"train_loss", loss},
                             {"total_bytes_sent", bytes},
                             {"fp32_bytes", fp32},
                             {"near_wraps", wraps},
                             {"near_wraps_per_step", step_wraps},
                             {"partition", flags.partition},
                             {"elapsed_seconds", elapsed}};
      if (flags.topology == "gossip") {
        line["graph"] = flags.graph;
        line["aggregation"] = flags.aggregation;
      }
      if (byzantine_count > 0 && honest_count > 0) {
        line["byzantine"] = flags.byzantine;
        line["test_accuracy_honest"] = honest / honest_count;
        std::printf("[%s]   honest peers' test acc %.2f%%\n", name.c_str(), 100.0 * honest / honest_count);
      }
      if (dp_epsilon >= 0) {
        line["dp_epsilon"] = dp_epsilon;
        std::printf("[%s]   DP epsilon %.4g at delta %g\n", name.c_str(), dp_epsilon, flags.star.dp.delta);
      }
      std::fflush(stdout);
      metrics << line.dump() << "\n" << std::flush;
      ++next;
    }
    if (running) {
      const double epochs_done = series.rounds.empty() ? 0.0 : series.rounds.back();
      char detail[48];
      std::snprintf(detail, sizeof detail, "epoch %.2f/%u", epochs_done, flags.epochs);
      progress.Update(epochs_done / std::max(1u, flags.epochs), detail);
    }
    if (interrupted->load() && failures.empty()) failures = "interrupted";
    if (!failures.empty()) {
      for (RankFeed& feed : feeds) {
        if (!feed.exited) ::kill(feed.pid, SIGTERM);
      }
      for (RankFeed& feed : feeds) {
        if (feed.exited) continue;
        ::waitpid(feed.pid, nullptr, 0);
        feed.exited = true;
      }
      break;
    }
    if (!running) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  progress.Done();
  series.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  all->push_back(series);
  if (interrupted->load()) return Status(StatusCode::kCancelled, name + ": interrupted; the peers were stopped");
  if (!failures.empty()) {
    return Status(StatusCode::kUnavailable, name + ": peer " + failures + " before the run ended (logs: " + dir +
                                                "/rank-R.log); the other peers were stopped");
  }
  int failed = 0;
  for (const RankFeed& feed : feeds) failed += feed.failed ? 1 : 0;
  // With --repair the run may lose peers and still finish; without, any
  // failed peer fails the run.
  const bool finished = std::any_of(feeds.begin(), feeds.end(), [](const RankFeed& f) { return !f.failed; });
  if (failed > 0 && (!flags.repair || !finished)) {
    return Internal(name + ": " + std::to_string(failed) + " of " + std::to_string(flags.peers) +
                    " peer processes failed (see " + dir + "/rank-*.log)");
  }
  if (failed > 0) {
    std::printf("[%s] %d of %d peers failed; the others re-formed and finished\n", name.c_str(), failed, flags.peers);
  }
  if (!flags.save_model.empty()) {
    if (feeds[0].failed) {
      return Status(StatusCode::kFailedPrecondition, name + ": rank 0 failed, so its final model was not saved to " +
                                SimModelPath(flags.save_model, codec));
    }
    std::printf("[%s] saved rank 0's final model to %s\n", name.c_str(), SimModelPath(flags.save_model, codec).c_str());
  }
  return Status::Ok();
}

}  // namespace

int RunPeerSim(const SimFlags& flags_in) {
  SimFlags flags = flags_in;
  if (flags.codecs.empty()) {
    flags.codecs = flags.topology == "ring" ? std::vector<std::string>{"fp32", "iwp"}
                                            : std::vector<std::string>{"fp32", "moniqua:bits=1"};
  }
  for (const std::string& codec : flags.codecs) {
    Result<PeerMode> mode = ModeFor(flags, codec);
    if (!mode.ok()) return Fail(mode.status().ToString());
  }
  // Links: the kernel shaper puts each peer in a network namespace of its
  // own, its veth pair shaped both ways; the user-space shaper shapes each
  // peer's connections in the peer (`fedrt peer --link`); or both, the
  // kernel the rate and user space the delay (cli/kernel_links.h).
  Result<std::vector<transport::LinkProfile>> links = FleetLinks(flags.link, flags.link_file, flags.peers);
  if (!links.ok()) {
    Fail(links.status().ToString());
    return 2;  // a usage error
  }
  std::atomic<bool>* interrupted = CatchStopSignals();
  Result<ShaperPlan> plan = PlanShapers(*links, flags.shaper, "peer");  // removed however this function returns
  if (!plan.ok()) return Fail(plan.status().ToString());
  if (plan->kernel && flags.tls) {
    Fail("--tls with the kernel shaper: the peers' throwaway certificate names 127.0.0.1 only (--shaper user "
         "keeps the peers there)");
    return 2;  // a usage error
  }
  const Status out = MakeOutputDirectory(flags.out);
  if (!out.ok()) return Fail(out.ToString());
  std::ofstream metrics;
  const Status opened = OpenOutputFile(flags.out + "/metrics.jsonl", &metrics);
  if (!opened.ok()) return Fail(opened.ToString());
  const std::string what = flags.topology == "gossip" ? "gossip (" + flags.graph + " graph)" : flags.topology;
  std::printf("fedrt sim: %s, %d peers, %u epochs, %s, %s partition, codecs:", what.c_str(), flags.peers, flags.epochs,
              flags.model.c_str(), flags.partition.c_str());
  for (const std::string& c : flags.codecs) std::printf(" %s", c.c_str());
  if (!links->empty()) std::printf("\n  links: %s; shaper: %s", DescribeFleetLinks(*links).c_str(), plan->note.c_str());
  std::printf("\n  output in %s/ (metrics.jsonl, plot.svg, one folder of peer logs per codec)\n", flags.out.c_str());
  std::fflush(stdout);
  std::vector<SimSeries> all;
  for (const std::string& codec : flags.codecs) {
    Status s = RunOne(flags, codec, metrics, &all, *plan, interrupted);
    if (s.code() == StatusCode::kCancelled) {
      std::printf("%s\n", s.message().c_str());
      return 0;  // main() exits with 128 + the signal
    }
    if (!s.ok()) return Fail(s.ToString());
  }
  std::ofstream plot;
  const Status plot_opened = OpenOutputFile(flags.out + "/plot.svg", &plot);
  if (!plot_opened.ok()) return Fail(plot_opened.ToString());
  plot << SimPlot(all, "fedrt sim: " + what + ", " + std::to_string(flags.peers) + " peers, " + flags.model, "epoch",
                  "MB sent by all peers (log scale)");
  PrintSimTable(all, "run", "MB sent");
  std::printf("wrote %s/metrics.jsonl and %s/plot.svg\n", flags.out.c_str(), flags.out.c_str());
  return 0;
}

// Reads every DIR/metrics.jsonl (star lines have no "topology": star), one
// series per (topology, codec) in order of appearance.
int RunSimCompare(const SimFlags& flags) {
  std::vector<SimSeries> all;
  std::map<std::string, std::size_t> index;
  std::vector<std::string> topologies;
  for (const std::string& dir : flags.compare) {
    std::ifstream in(dir + "/metrics.jsonl");
    if (!in) return Fail(dir + "/metrics.jsonl: cannot open");
    std::string text;
    int line_number = 0;
    while (std::getline(in, text)) {
      ++line_number;
      if (text.empty()) continue;
      nlohmann::json row = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!row.is_object() || !row.contains("codec") || !row["codec"].is_string() ||
          !row.contains("test_accuracy")) {
        return Fail(dir + "/metrics.jsonl:" + std::to_string(line_number) + ": not a sim metrics line");
      }
      const std::string topology =
          row.contains("topology") && row["topology"].is_string() ? row["topology"].get<std::string>() : "star";
      const bool star = topology == "star";
      std::string name = topology + " " + row["codec"].get<std::string>();
      if (row.contains("graph") && row["graph"] == "torus") name += " (torus)";
      const std::string key = dir + "\n" + name;
      auto found = index.find(key);
      if (found == index.end()) {
        found = index.emplace(key, all.size()).first;
        all.emplace_back();
        all.back().codec = name;
        if (std::find(topologies.begin(), topologies.end(), topology) == topologies.end()) {
          topologies.push_back(topology);
        }
      }
      SimSeries& s = all[found->second];
      s.rounds.push_back(star ? Number(row, "round") : Number(row, "epoch"));
      s.accuracy.push_back(Number(row, "test_accuracy"));
      s.bytes_up = static_cast<uint64_t>(Number(row, star ? "total_bytes_up" : "total_bytes_sent"));
      if (star) {
        s.fp32_bytes_up += static_cast<uint64_t>(Number(row, "fp32_bytes_up"));
      } else {
        s.fp32_bytes_up = static_cast<uint64_t>(Number(row, "fp32_bytes"));
      }
      s.megabytes.push_back(static_cast<double>(s.bytes_up) / 1e6);
      s.near_wraps += static_cast<uint64_t>(Number(row, "near_wraps"));
      s.seconds = Number(row, "elapsed_seconds");
      if (star && row.contains("elapsed_seconds")) s.elapsed.push_back(s.seconds);  // the star's rounds are timed
    }
  }
  if (all.empty()) return Fail("the --compare directories hold no metrics");
  const Status out = MakeOutputDirectory(flags.out);
  if (!out.ok()) return Fail(out.ToString());
  std::string title = "fedrt sim:";
  for (const std::string& t : topologies) title += " " + t;
  std::ofstream plot;
  const Status opened = OpenOutputFile(flags.out + "/plot.svg", &plot);
  if (!opened.ok()) return Fail(opened.ToString());
  plot << SimPlot(all, title, "round (star) or epoch (ring, gossip)",
                  "MB sent: device uploads (star), all peers (ring, gossip); log scale");
  PrintSimTable(all, "run", "MB sent");
  std::printf("wrote %s/plot.svg\n", flags.out.c_str());
  return 0;
}

}  // namespace fedrt::cli
