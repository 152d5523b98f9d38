// `fedrt serve` (the star aggregator) and `fedrt device` (one device).
#include <CLI/CLI.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/console.h"
#include "cli/flag_scope.h"
#include "cli/model_files.h"
#include "cli/signals.h"
#include "cli/star_report.h"
#include "cli/tls_flags.h"
#include "fedrt/runtime/aggregator.h"
#include "fedrt/runtime/aggregator_tier.h"
#include "fedrt/runtime/device.h"
#if FEDRT_HAVE_MPI
#include "fedrt/runtime/mpi_tier.h"
#endif

namespace fedrt::cli {
namespace {

// "HOST:PORT" (the port 1 to 65535, or 0 where `any_port`).
bool ParseHostPort(const std::string& text, bool any_port, std::string* host, uint16_t* port) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return false;
  char* end = nullptr;
  const long value = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || value < (any_port ? 0 : 1) || value > 65535) return false;
  *host = text.substr(0, colon);
  *port = static_cast<uint16_t>(value);
  return true;
}

struct ServeFlags {
  std::string config;  // expanded into flags before parsing (json_config.h)
  AggregatorOptions options;
  std::string http;
  std::string metrics;
  std::string optimizer = "fedavg";
  std::string aggregation = "mean";
  double fraction = 1.0;
  std::size_t sample_minimum = 1;
  double over_selection = 0.0;
  std::string init_model;
  bool mpi = false;
};


int RunServe(ServeFlags& flags, const CLI::App& app) {
  if (flags.options.key_file.empty()) {
    std::fprintf(stderr, "fedrt serve: --key-file is required\n");
    return 2;
  }
  // The NDQSG options configure the anchors and nesting ratios of an ndqsg codec.
  const bool ndqsg = flags.options.codec.rfind("ndqsg", 0) == 0;
  const Status scoped = CheckFlagScopes(app,
                                        {{"--anchor-fraction", ndqsg, "an ndqsg --codec"},
                                         {"--wrap-threshold", ndqsg, "an ndqsg --codec"},
                                         {"--max-rho", ndqsg, "an ndqsg --codec"},
                                         {"--anchor-levels", ndqsg, "an ndqsg --codec"},
                                         // NDQSG holds every sampled device's payload until the close.
                                         {"--max-waiting-updates", !ndqsg, "a --codec other than ndqsg"},
                                         {"--max-decoded-waiting", !ndqsg, "a --codec other than ndqsg"}},
                                        "--codec " + flags.options.codec);
  if (!scoped.ok()) {
    std::fprintf(stderr, "fedrt serve: %s\n", scoped.ToString().c_str());
    return 2;
  }
  // Only a rule that holds the round's decoded updates has them to bound.
  const Status held = CheckFlagScopes(
      app, {{"--max-held-updates", flags.aggregation != "mean", "an --aggregation other than mean"}},
      "--aggregation " + flags.aggregation);
  if (!held.ok()) {
    std::fprintf(stderr, "fedrt serve: %s\n", held.ToString().c_str());
    return 2;
  }
  if (!flags.options.tls.ca_file.empty() && flags.options.tls.cert_file.empty()) {
    std::fprintf(stderr, "fedrt serve: --tls-client-ca needs --tls-cert and --tls-key\n");
    return 2;
  }
  if (const int tls_status = CheckTlsFlags("serve", flags.options.tls); tls_status != 0) return tls_status;
  if (!flags.http.empty() &&
      !ParseHostPort(flags.http, /*any_port=*/true, &flags.options.http_host, &flags.options.http_port)) {
    std::fprintf(stderr, "fedrt serve: --http must be HOST:PORT (an IP address; port 0: any free one), not '%s'\n",
                 flags.http.c_str());
    return 2;
  }
  if (flags.http.empty() && FlagGiven(app, "--http-linger-ms")) {
    std::fprintf(stderr, "fedrt serve: --http-linger-ms needs --http (it keeps the monitoring endpoint up)\n");
    return 2;
  }
  Result<ServerOptimizerKind> kind = ParseServerOptimizer(flags.optimizer);
  if (!kind.ok()) {
    std::fprintf(stderr, "fedrt serve: %s\n", kind.status().ToString().c_str());
    return 1;
  }
  flags.options.server_optimizer.kind = *kind;
  Result<AggregationRule> rule = ParseAggregationRule(flags.aggregation);
  if (!rule.ok()) {
    std::fprintf(stderr, "fedrt serve: %s\n", rule.status().ToString().c_str());
    return 1;
  }
  flags.options.aggregation = *rule;
  flags.options.sampling.fraction = flags.fraction;
  flags.options.sampling.minimum = flags.sample_minimum;
  flags.options.sampling.over_selection = flags.over_selection;
  if (!flags.init_model.empty()) {
    const Status loaded = LoadInitialModel(flags.init_model, FlagGiven(app, "--model"), flags.options);
    if (!loaded.ok()) {
      std::fprintf(stderr, "fedrt serve: %s\n", loaded.ToString().c_str());
      return 1;
    }
  }
  std::unique_ptr<AggregatorTier> tier;
  if (flags.mpi) {
#if FEDRT_HAVE_MPI
    Result<std::unique_ptr<AggregatorTier>> started = StartMpiTier();
    if (!started.ok()) {
      std::fprintf(stderr, "fedrt serve: %s\n", started.status().ToString().c_str());
      return 2;
    }
    tier = std::move(*started);
#else
    std::fprintf(stderr, "fedrt serve: --mpi: this fedrt was built without MPI (configure with FEDRT_WITH_MPI=ON and "
                         "an MPI installed, e.g. Debian's openmpi-bin libopenmpi-dev)\n");
    return 2;
#endif
  }
  // Rank 0 speaks for an aggregator tier; the other ranks print only their port.
  const bool rank0 = !tier || tier->rank() == 0;
  std::atomic<bool>* stop = CatchStopSignals();
  std::ofstream metrics;
  if (!flags.metrics.empty() && rank0) {
    metrics.open(flags.metrics, std::ios::app);
    if (!metrics) {
      std::fprintf(stderr, "fedrt serve: %s: cannot open for writing\n", flags.metrics.c_str());
      return 1;
    }
  }
  AggregatorHooks hooks;
  hooks.on_listening = [rank = tier ? tier->rank() : -1](uint16_t port) {
    if (rank >= 0) {
      std::printf("rank %d listening on port %u\n", rank, port);
    } else {
      std::printf("listening on port %u\n", port);
    }
    std::fflush(stdout);
  };
  hooks.tier = tier.get();
  hooks.on_http_listening = [](uint16_t port) {
    std::printf("metrics on port %u\n", port);
    std::fflush(stdout);
  };
  RoundProgressLine progress("", flags.options.rounds, /*whole_run=*/false);  // a terminal only
  hooks.on_round_progress = [&](const RoundProgress& p) {
    if (rank0) progress.Update(p);
  };
  const std::string codec = flags.options.codec;
  hooks.on_round = [&](const RoundReport& report) {
    if (!rank0) return;
    progress.Hide();
    std::printf("%s\n", FormatRound(report, flags.options.rounds).c_str());
    std::fflush(stdout);
    if (metrics.is_open()) metrics << RoundJson(report, codec).dump() << "\n" << std::flush;
  };
  const Status status = RunAggregator(flags.options, hooks, stop);
  if (!status.ok()) {
    std::fprintf(stderr, "fedrt serve: %s\n", status.ToString().c_str());
#if FEDRT_HAVE_MPI
    // The other ranks may wait in a collective for this one: end them too.
    if (tier) AbortMpiJob(1);
#endif
    return 1;
  }
  return 0;
}

struct DeviceFlags {
  std::string config;  // expanded into flags before parsing (json_config.h)
  std::string init_model;
  DeviceOptions options;
  std::string server;
  std::string link;  // parsed into options.link
};

int RunDeviceCommand(DeviceFlags& flags) {
  if (!flags.init_model.empty()) {
    std::fprintf(stderr, "fedrt device: --init-model does not apply to a device: it receives the global model from "
                         "the aggregator every round; give --init-model to fedrt serve\n");
    return 2;
  }
  // HOST:PORT, or a comma-separated list of an aggregator tier's ranks.
  for (std::size_t start = 0; start <= flags.server.size();) {
    const std::size_t comma = std::min(flags.server.find(',', start), flags.server.size());
    const std::string address = flags.server.substr(start, comma - start);
    std::string host;
    uint16_t port = 0;
    if (!ParseHostPort(address, /*any_port=*/false, &host, &port)) {
      std::fprintf(stderr, "fedrt device: --server must be HOST:PORT[,HOST:PORT...] (port 1 to 65535), not '%s'\n",
                   flags.server.c_str());
      return 1;
    }
    if (start == 0) {
      flags.options.host = host;
      flags.options.port = port;
    } else {
      flags.options.more_servers.push_back(address);
    }
    start = comma + 1;
  }
  if (!flags.link.empty()) {
    Result<transport::LinkProfile> link = transport::ParseLinkProfile(flags.link);
    if (!link.ok()) {
      std::fprintf(stderr, "fedrt device: --link: %s\n", link.status().ToString().c_str());
      return 2;
    }
    flags.options.link = *link;
  }
  if (flags.options.tls.ca_file.empty() &&
      (!flags.options.tls.server_name.empty() || !flags.options.tls.cert_file.empty())) {
    std::fprintf(stderr, "fedrt device: TLS flags need --tls-ca (the CA that verifies the server)\n");
    return 2;
  }
  if (const int tls_status = CheckTlsFlags("device", flags.options.tls); tls_status != 0) return tls_status;
  std::atomic<bool>* stop = CatchStopSignals();
  DeviceHooks hooks;
  std::unique_ptr<Progress> progress;  // of the round being trained (a terminal only)
  uint32_t progress_round = 0;
  hooks.on_progress = [&](uint32_t round, double fraction) {
    if (!progress || round != progress_round) {
      progress = std::make_unique<Progress>("round " + std::to_string(round) + " training");
      progress_round = round;
    }
    progress->Update(fraction);
  };
  hooks.on_trained = [&](uint32_t) { progress.reset(); };
  const Status status = RunDevice(flags.options, hooks, stop);
  if (!status.ok()) {
    std::fprintf(stderr, "fedrt device: %s\n", status.ToString().c_str());
    return status.code() == StatusCode::kCancelled ? 0 : 1;
  }
  return 0;
}

}  // namespace

void RoundProgressLine::Update(const RoundProgress& p) {
  const double in_round = static_cast<double>(p.received) / static_cast<double>(std::max<std::size_t>(1, p.quorum));
  const std::string updates = std::to_string(p.received) + "/" + std::to_string(p.sampled) + " updates";
  const std::string round = "round " + std::to_string(p.round) + "/" + std::to_string(rounds_);
  if (whole_run_) {
    if (!progress_) progress_ = std::make_unique<Progress>(prefix_);
    const double done = static_cast<double>(p.round > 0 ? p.round - 1 : 0) + std::min(1.0, in_round);
    progress_->Update(done / static_cast<double>(std::max<uint32_t>(1, rounds_)), round + ", " + updates);
    return;
  }
  if (!progress_ || p.round != round_) {
    progress_ = std::make_unique<Progress>(prefix_.empty() ? round : prefix_ + " " + round);
    round_ = p.round;
  }
  progress_->Update(in_round, updates + ", deadline in " + std::to_string(p.deadline_in_ms / 1000) + " s");
}

void RoundProgressLine::Hide() {
  if (!progress_) return;
  if (whole_run_) {
    progress_->Hide();
  } else {
    progress_.reset();
  }
}

Status LoadInitialModel(const std::string& path, bool model_given, AggregatorOptions& options) {
  Result<LoadedModel> init = LoadAnyModel(path, model_given ? options.model : "");
  if (!init.ok()) return init.status();
  options.model = init->spec;
  options.initial_parameters = std::move(init->parameters);
  std::printf("starting from %s (%s, model %s)\n", path.c_str(), init->kind.c_str(), options.model.c_str());
  return Status::Ok();
}

void AddRobustFlags(CLI::App& command, std::string& aggregation, double& clip_update_norm, DpOptions& dp) {
  command.add_option("--aggregation", aggregation,
                     "How updates (star) or the neighbours' models (gossip) are combined: mean, median, "
                     "trimmed-mean:F, krum:F or multi-krum:F")
      ->capture_default_str();
  command.add_option("--clip-update-norm", clip_update_norm,
                     "Scale every decoded update (gossip: every neighbour's model's distance from this peer's) down "
                     "to this L2 norm (0: no clipping)")
      ->capture_default_str();
  command.add_option("--dp-noise-multiplier", dp.noise_multiplier,
                     "DP: Gaussian noise std in units of --dp-clip, on the sum (star, DP-FedAvg) or on every step's "
                     "gradient (peers) (0: no DP)")
      ->capture_default_str();
  command.add_option("--dp-clip", dp.clip, "DP: every update's (peers: every step's gradient's) L2 norm is clipped to this");
  command.add_option("--dp-delta", dp.delta, "DP: the delta epsilon is reported at")->capture_default_str();
  command.add_option("--dp-epsilon-budget", dp.epsilon_budget,
                     "DP: stop before a round (a step) would spend more epsilon (0: no budget)");
  command.add_option("--dp-noise-seed", dp.noise_seed,
                     "DP: key of the noise, to reproduce a run (default: from the system's random source)");
}

void RegisterServe(CLI::App& app, CommandList& commands) {
  auto flags = std::make_shared<ServeFlags>();
  AggregatorOptions& o = flags->options;
  o.data_dir = "/usr/share/datasets/fashion-mnist";
  CLI::App* serve = app.add_subcommand("serve", "Run the star aggregator: devices join over TCP and train rounds");
  serve->add_option("--config", flags->config,
                    "JSON object of any of these options, keys without the dashes; the command line wins");
  serve->add_option("--host", o.host, "Address to listen on")->capture_default_str();
  serve->add_option("--port", o.port, "Port to listen on (0: any free one, printed); with --mpi rank r listens on port + r")
      ->capture_default_str();
  serve->add_flag("--mpi", flags->mpi,
                  "One rank of an aggregator tier started by `mpirun -np K fedrt serve --mpi`: each rank serves a "
                  "shard of the devices and redirects the others; rank 0 evaluates and checkpoints");
  serve->add_option("--key-file", o.key_file, "Every device's key, one '<id> <hex>' line each");
  serve->add_option("--data", o.data_dir,
                    "MNIST-style directory for the test set, evaluated after every round on a worker thread while "
                    "devices and --http are served (empty: no evaluation)")
      ->capture_default_str();
  serve->add_option("--model", o.model, "Model spec")->capture_default_str();
  serve->add_option("--codec", o.codec, "Codec devices send their updates with")->capture_default_str();
  serve->add_option("--rounds", o.rounds, "Rounds to train, resumed ones included")->capture_default_str();
  serve->add_option("--min-devices", o.min_devices, "Devices that must have joined before the first round")
      ->capture_default_str();
  serve->add_option("--fraction", flags->fraction, "Fraction of the joined devices sampled per round")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  serve->add_option("--sample-minimum", flags->sample_minimum, "Least devices sampled per round")
      ->capture_default_str();
  serve->add_option("--over-selection", flags->over_selection, "Extra devices sampled, as a fraction")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  serve->add_option("--quorum", o.quorum, "Fraction of the devices a round wants (before --over-selection) whose updates close it")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  serve->add_option("--deadline-ms", o.round_deadline_ms, "A round closes at this deadline with what arrived")
      ->capture_default_str();
  serve->add_option("--max-failed-rounds", o.max_failed_rounds,
                    "Stop (exit 1) after this many rounds in a row that applied nothing")
      ->capture_default_str()->check(CLI::Range(1u, 1000000u));
  serve->add_option("--epochs", o.local_epochs, "Local epochs per round")->capture_default_str();
  serve->add_option("--steps", o.local_steps, "Local steps per round (0: whole epochs)")->capture_default_str();
  serve->add_option("--lr", o.learning_rate, "Devices' local learning rate")->capture_default_str();
  serve->add_option("--server-optimizer", flags->optimizer, "fedavg, fedsgd, fedavgm or fedadam")
      ->capture_default_str();
  serve->add_option("--server-lr", o.server_optimizer.learning_rate, "Server learning rate")->capture_default_str();
  serve->add_option("--seed", o.session_seed, "Session seed (codec randomness, sampling)")->capture_default_str();
  serve->add_option("--anchor-fraction", o.anchor_fraction, "NDQSG: share of anchors")->capture_default_str();
  serve->add_option("--wrap-threshold", o.wrap_threshold,
                    "NDQSG: near-wraps per coordinate that raise a device's rho next round")
      ->capture_default_str();
  serve->add_option("--max-rho", o.max_rho, "NDQSG: largest nesting ratio a wrapping device is raised to")
      ->capture_default_str();
  serve->add_option("--anchor-levels", o.anchor_levels, "NDQSG: anchors' DQSG levels (0: the codec's s1)")
      ->capture_default_str();
  serve->add_option("--downlink-codec", o.downlink_codec,
                    "Send the model's delta compressed with this codec (empty or fp32: the full model; "
                    "for devices on slow links dqsg:s=4, what fedrt sim --link uses)");
  serve->add_option("--checkpoint", o.checkpoint,
                    "Checkpoint written (fsync'ed, on the evaluation's worker thread) every round and resumed from "
                    "(one `fedrt train --checkpoint` wrote too); the next round starts once it is on disk");
  serve->add_option("--init-model", flags->init_model,
                    "Start round 0 from this model (.npz or a checkpoint) instead of a random one; its spec unless --model is given");
  serve->add_option("--save-model", o.save_model, "Write the final global model to this .npz (numpy.load reads it)");
  serve->add_option("--metrics", flags->metrics, "Append one JSON object per round to this file");
  serve->add_option("--http", flags->http,
                    "Serve GET /metrics (Prometheus text) and /healthz on HOST:PORT (port 0: any free one, printed)");
  serve->add_option("--http-linger-ms", o.http_linger_ms,
                    "After the training ends (and the model and checkpoint are saved), keep answering /metrics and "
                    "/healthz this long, so a scraper sees the final state; SIGTERM ends it (0: exit at once)")
      ->capture_default_str()->check(CLI::Range(0, 86400000));
  serve->add_option("--idle-timeout-ms", o.idle_timeout_ms, "Close a connection silent for this long")
      ->capture_default_str();
  serve->add_option("--io-timeout-ms", o.io_timeout_ms, "A frame body or a write must complete within this")
      ->capture_default_str()->check(CLI::Range(100, 3600000));
  serve->add_option("--join-timeout-ms", o.join_timeout_ms, "Close a connection that has not joined by then")
      ->capture_default_str();
  serve->add_option("--max-unjoined-connections", o.max_unjoined_connections,
                    "Close new connections at once while this many have not joined")
      ->capture_default_str();
  serve->add_option("--max-unjoined-per-address", o.max_unjoined_per_address,
                    "The same, for the connections from one address")
      ->capture_default_str();
  serve->add_option("--max-update-norm", o.max_update_norm,
                    "Refuse an update whose decoded L2 norm is larger (0: no bound)")
      ->capture_default_str();
  serve->add_option("--target-accuracy", o.target_accuracy,
                    "Finish once a round's test accuracy reaches this fraction (0: run every round)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  serve->add_option("--max-waiting-updates", o.max_waiting_updates,
                    "Updates that may wait at once for their turn in the round's sum, each in a payload slot of the "
                    "aggregator's memory; one more is told to send again when a slot frees (0: 64)")
      ->capture_default_str()->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20));
  serve->add_option("--max-decoded-waiting", o.max_decoded_waiting,
                    "Of the updates waiting for their turn, how many wait decoded (d floats each in the aggregator's "
                    "memory) so they are decoded once; the others are decoded again at their turn (0: none)")
      ->capture_default_str()->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20));
  serve->add_option("--max-held-updates", o.max_held_updates,
                    "With an --aggregation other than mean: the decoded updates a round may hold for the rule (d "
                    "floats each in the aggregator's memory); a round that would sample more is refused and the "
                    "training stops (0: 64)")
      ->capture_default_str()->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20));
  serve->add_option("--max-devices", o.max_devices,
                    "Devices joined at once; a join beyond it is refused (capped by the key file's entries)")
      ->capture_default_str()->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24));
  serve->add_option("--max-update-samples", o.max_update_samples,
                    "Refuse an update that claims more samples (its FedAvg weight; 1 to 2^32)")
      ->capture_default_str();
  AddRobustFlags(*serve, flags->aggregation, o.clip_update_norm, o.dp);
  AddTlsServerFlags(*serve, o.tls);
  commands.push_back({serve, [flags, serve] { return RunServe(*flags, *serve); }});
}

void RegisterDevice(CLI::App& app, CommandList& commands) {
  auto flags = std::make_shared<DeviceFlags>();
  DeviceOptions& o = flags->options;
  o.data_dir = "/usr/share/datasets/fashion-mnist";
  CLI::App* device = app.add_subcommand("device", "Run one device: join an aggregator and train its rounds");
  device->add_option("--config", flags->config,
                     "JSON object of any of these options, keys without the dashes; the command line wins");
  device->add_option("--server", flags->server, "Aggregator HOST:PORT, or an aggregator tier's ranks HOST:PORT,HOST:PORT,... (tried in turn; a rank redirects the device to its shard)")->required();
  device->add_option("--id", o.device_id, "Device id (default: the key file's only entry)");
  device->add_option("--key-file", o.key_file, "This device's key file")->required();
  device->add_option("--data", o.data_dir, "MNIST-style directory")->capture_default_str();
  device->add_option("--model", o.model, "Model spec (must match the aggregator's)")->capture_default_str();
  // Accepted to say why not: users who give every command a model give it here too.
  device->add_option("--init-model", flags->init_model, "Not for devices: give it to fedrt serve")->group("");
  device->add_option("--partition", o.partition, "iid, dirichlet:<alpha> or shards:<k>")->capture_default_str();
  device->add_option("--devices", o.devices, "Shares the training set is cut into")->capture_default_str()
      ->check(CLI::Range(1, 100000));
  device->add_option("--index", o.index, "This device's share (default: the id's trailing number)");
  device->add_option("--partition-seed", o.partition_seed, "Seed of the partition")->capture_default_str();
  device->add_option("--batch", o.batch, "Local batch size")->capture_default_str()->check(CLI::Range(1, 65536));
  device->add_option("--state-file", o.state_file, "Keep the error-feedback residual here across restarts");
  device->add_option("--give-up-ms", o.give_up_ms, "Stop reconnecting after this long without the server")
      ->capture_default_str();
  device->add_option("--io-timeout-ms", o.io_timeout_ms, "A frame body or a write must complete within this")
      ->capture_default_str()->check(CLI::Range(100, 3600000));
  device->add_option("--link", flags->link,
                     "Shape the link to the aggregator in user space: RATE[,delay=MS][,loss=PCT][,down=RATE]");
  // For `fedrt sim --byzantine`: a misbehaving device (fedrt/runtime/byzantine.h).
  device->add_option("--byzantine", o.byzantine, "Misbehave: signflip[:k], scaled[:k], random[:s] or stale")
      ->group("");
  AddTlsClientFlags(*device, o.tls);
  commands.push_back({device, [flags] { return RunDeviceCommand(*flags); }});
}

}  // namespace fedrt::cli
