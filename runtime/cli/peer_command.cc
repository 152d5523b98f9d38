// `fedrt peer`: one peer of a ring that trains without an aggregator, and
// `fedrt bench allreduce`: N local processes timing the ring all-reduce.
//
// fedrt peer --peers peers.json --keys peer-keys.txt --rank R
//   trains on its partition of the data (as a device does; --partition iid,
//   dirichlet:A or shards:K); every step all-reduces the gradients (dense
//   fp32, fp16 hops, compressed by --codec, or IWP-sparse) and applies their mean, so every peer
//   holds the same model; or gossips models (D-PSGD); or, as a baseline,
//   trains alone (--reduce local: plain SGD, nothing sent). With --repair a
//   failed step drops the failed peer, re-forms the ring and repeats the step
//   (gossip: the survivors first agree on the step to resume at).
//   --metrics FILE writes one JSON object per evaluation (`fedrt sim
//   --topology ring|gossip` reads them to draw its plot).
// The training loop is the runtime's PeerTrainer (peer_trainer.h) over a TCP
// context (peer.h): this file parses flags, loads and partitions the data,
// builds the context, runs the trainer and prints what it reports.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/console.h"
#include "cli/flag_scope.h"
#include "cli/model_files.h"
#include "cli/peer_launch.h"
#include "cli/star_report.h"
#include "cli/tls_flags.h"
#include "fedrt/runtime/byzantine.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/model_file.h"
#include "fedrt/runtime/optimizer.h"
#include "fedrt/runtime/partition.h"
#include "fedrt/runtime/peer.h"
#include "fedrt/runtime/peer_trainer.h"
#include "fedrt/runtime/trainer.h"
#include "fedrt/transport/auth.h"

namespace fedrt::cli {
namespace {

struct PeerFlags {
  std::string options_file;  // --config: expanded into flags before parsing (json_config.h)
  std::string config;        // --peers: the peer list
  std::string keys;
  int rank = 0;
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string model = "mlp:784-300-100-10";
  int epochs = 1;
  int batch = 32;
  double lr = 0.05;
  std::string schedule = "constant";  // constant | cosine (to 0 over all epochs)
  float momentum = 0.9f;
  std::string reduce = "dense";  // dense | fp16 | iwp | gossip | local
  std::string partition = "iid";  // iid | dirichlet:<alpha> | shards:<k>
  std::string codec;             // gossip: empty (fp32) or e.g. moniqua:bits=1,theta=0.5
  bool print_wraps = false;
  // Gossip with a moniqua codec that names no theta: theta = this * lr
  // instead of Moniqua's bound (0).
  double moniqua_theta_per_lr = 0;
  float density = 1.0f / 64;
  // IWP training integration (codecs/README.md; defaults in runtime/README.md).
  bool iwp_momentum_correction = true;  // momentum lives in the accumulator (DGC), the step is plain SGD
  // update: the accumulator holds lr * (velocity or gradient) and the reduced
  // mean is applied at rate 1; gradient: it holds raw gradients, applied at
  // the learning rate of the step that sends them.
  std::string iwp_accumulate = "update";
  bool iwp_per_tensor = true;           // one threshold per tensor
  std::string iwp_threshold = "dispersion";  // dispersion (the paper's layer-wise rule) | quantile
  bool iwp_probabilistic = true;        // low-importance coordinates sent with probability I / tau
  float iwp_eps = 1e-8f;                // importance = |a| / (|w| + eps)
  // The paper's method by default: its warm-up and local clipping on, small
  // tensors whole an opt-in extra (docs/design/peer.md).
  uint64_t iwp_dense_below = 0;         // tensors smaller than this are sent whole (0: none)
  int iwp_warmup_steps = -1;            // -1: one epoch
  float iwp_warmup_density = 0;         // 0: 4 x --density (at most 1)
  std::string iwp_warmup_shape = "exponential";  // constant | exponential (density falls geometrically)
  float iwp_clip = 5;                   // local gradient clipping to this L2 norm (0: off)
  int max_steps = 0;  // 0: whole epochs
  bool repair = false;
  uint64_t seed = 1;
  std::string graph = "ring";  // gossip graph: ring | torus
  std::string gossip_algorithm = "dpsgd";  // gossip: dpsgd | d2
  double d2_gain = 0;                      // D2: 0 = the default (PeerTrainerOptions::d2_gain)
  double d2_leak = -1;                     // D2: negative = the default
  std::string metrics;      // JSON lines, one per evaluation
  std::string init_model;   // every peer starts from this file (.npz or checkpoint)
  std::string save_model;   // this peer's final model as .npz
  int evals_per_epoch = 1;  // test-set evaluations per epoch (the last at the epoch's end)
  transport::TlsConfig tls;  // empty: plain TCP links
  std::string link;          // --link: parsed into PeerOptions::link
  // Robust gossip and local DP (peer_trainer.h; runtime/README.md).
  std::string aggregation = "mean";
  double clip_update_norm = 0;
  DpOptions dp;
  std::string byzantine;  // hidden: this peer sends a transformed model (byzantine.h), to test the defense
};

int Fail(const char* who, const Status& status) {
  std::fprintf(stderr, "fedrt %s: %s\n", who, status.ToString().c_str());
  return 1;
}

// A formed TCP context (every peer of the config) and the options it was made with.
struct Joined {
  std::unique_ptr<peer::TcpPeerContext> context;
  peer::PeerOptions options;
};

Result<Joined> Join(const std::string& config, const std::string& keys_path, int rank, transport::KeyStore* keys,
                    peer::GossipGraph graph = peer::GossipGraph::kRing, uint32_t chunk_floats = 0,
                    const transport::TlsConfig& tls = transport::TlsConfig(),
                    const transport::LinkProfile& link = transport::LinkProfile()) {
  Joined joined;
  joined.options.graph = graph;
  joined.options.tls = tls;
  joined.options.link = link;
  auto peers = ReadPeerConfig(config, &joined.options);
  if (!peers.ok()) return peers.status();
  if (chunk_floats != 0) joined.options.chunk_floats = chunk_floats;
  if (rank < 0 || static_cast<std::size_t>(rank) >= peers->size()) {
    return InvalidArgument("--rank " + std::to_string(rank) + " is not in the peer list of " +
                           std::to_string(peers->size()));
  }
  auto loaded = transport::KeyStore::LoadFile(keys_path);
  if (!loaded.ok()) return loaded.status();
  *keys = std::move(*loaded);
  auto context = peer::TcpPeerContext::Create(*peers, static_cast<uint32_t>(rank), *keys, joined.options);
  if (!context.ok()) return context.status();
  joined.context = std::move(*context);
  FEDRT_RETURN_IF_ERROR(joined.context->Form({}));
  return joined;
}

// What `fedrt peer` prints while the trainer runs: failures and re-formations
// (stderr and stdout, as the tests and `fedrt sim` read them), one metrics
// line per evaluation, one progress line per epoch.
class PeerPrinter : public peer::PeerTrainerObserver {
 public:
  PeerPrinter(const PeerFlags& flags, Model& model, const Dataset& test, std::ofstream* metrics)
      : flags_(flags), model_(model), test_(test), metrics_(metrics), start_(std::chrono::steady_clock::now()) {}

  Status OnProgress(const peer::PeerProgress& p) override {
    const auto eval_start = std::chrono::steady_clock::now();
    auto eval = EvaluateModel(model_, test_, 256);
    if (!eval.ok()) return eval.status();
    if (metrics_->is_open()) {
      const double epochs_done =
          p.epoch + static_cast<double>(p.steps_done) / static_cast<double>(std::max<std::size_t>(1, p.steps_per_epoch));
      nlohmann::json line = {
          {"rank", flags_.rank},
          {"epoch", epochs_done},
          {"step", p.step},
          {"peers", p.members},
          {"test_accuracy", eval->accuracy},
          {"test_loss", eval->loss},
          {"train_loss", p.train_loss},
          {"total_bytes_sent", p.total_bytes_sent},
          {"fp32_bytes", p.fp32_bytes},
          {"near_wraps", p.wraps},
          {"near_wraps_per_step", p.step_wraps},
          {"moniqua_theta", p.moniqua_theta},
          {"dp_epsilon", p.dp_epsilon},
          {"elapsed_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count()}};
      *metrics_ << line.dump() << "\n" << std::flush;
    }
    if (p.epoch_end) {
      progress_.reset();
      // The epoch's time includes its closing evaluation, as it always did.
      const double seconds =
          p.epoch_seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - eval_start).count();
      char theta[48] = "";
      if (p.moniqua_theta > 0) std::snprintf(theta, sizeof theta, "  theta %.4g", p.moniqua_theta);
      char epsilon[48] = "";
      if (p.dp_epsilon >= 0) std::snprintf(epsilon, sizeof epsilon, "  DP epsilon %.4g", p.dp_epsilon);
      std::printf("peer rank %d epoch %d/%d  loss %.4f  test acc %.2f%%  sent %.1f MB  wraps %llu%s%s  %.1f s\n",
                  flags_.rank, p.epoch + 1, flags_.epochs, p.epoch_loss, 100.0 * eval->accuracy,
                  static_cast<double>(p.total_bytes_sent) / 1e6, static_cast<unsigned long long>(p.epoch_wraps),
                  theta, epsilon, seconds);
      std::fflush(stdout);
    }
    return Status::Ok();
  }
  void OnStep(int epoch, std::size_t steps_done, std::size_t steps_per_epoch) override {
    if (!progress_ || epoch != progress_epoch_) {
      progress_ = std::make_unique<Progress>("peer rank " + std::to_string(flags_.rank) + " epoch " +
                                             std::to_string(epoch + 1) + "/" + std::to_string(flags_.epochs));
      progress_epoch_ = epoch;
    }
    progress_->Update(static_cast<double>(steps_done) / static_cast<double>(std::max<std::size_t>(1, steps_per_epoch)),
                      std::to_string(steps_done) + "/" + std::to_string(steps_per_epoch) + " steps");
  }
  void OnStepFailed(uint64_t step, const Status& status) override {
    progress_.reset();
    std::fprintf(stderr, "fedrt peer: step %llu: %s\n", static_cast<unsigned long long>(step),
                 status.ToString().c_str());
    last_failure_ = status;
  }
  void OnReforming(int failed_rank, std::size_t survivors) override {
    progress_.reset();
    std::fprintf(stderr, "fedrt peer: re-forming without peer rank %d (%zu peers)\n", failed_rank, survivors);
  }
  void OnReformed(std::size_t members) override {
    progress_.reset();
    std::printf("ring re-formed with %zu peers\n", members);
    std::fflush(stdout);
  }
  void OnResumed(uint64_t step) override {
    progress_.reset();
    std::printf("resuming at step %llu\n", static_cast<unsigned long long>(step));
    std::fflush(stdout);
  }
  void OnGossipStep(uint64_t step, uint64_t wraps) override {
    if (flags_.print_wraps) {
      progress_.reset();
      std::printf("step %llu wraps %llu\n", static_cast<unsigned long long>(step), static_cast<unsigned long long>(wraps));
    }
  }
  // The step failure printed last (Run returns it when it is not repaired).
  const Status& last_failure() const { return last_failure_; }

 private:
  const PeerFlags& flags_;
  Model& model_;
  const Dataset& test_;
  std::ofstream* metrics_;
  const std::chrono::steady_clock::time_point start_;
  Status last_failure_;
  std::unique_ptr<Progress> progress_;  // of the running epoch (a terminal only)
  int progress_epoch_ = -1;
};

Result<peer::PeerReduce> ReduceOf(const std::string& reduce) {
  if (reduce == "dense") return peer::PeerReduce::kDense;
  if (reduce == "fp16") return peer::PeerReduce::kCodec;
  if (reduce == "compressed") return peer::PeerReduce::kCompressed;
  if (reduce == "iwp") return peer::PeerReduce::kIwp;
  if (reduce == "gossip") return peer::PeerReduce::kGossip;
  if (reduce == "local") return peer::PeerReduce::kLocal;
  return InvalidArgument("unknown --reduce '" + reduce + "'");
}

// Every option that configures one mode only is refused in the others.
Status CheckPeerFlags(const PeerFlags& flags, const CLI::App& app) {
  const bool gossip = flags.reduce == "gossip";
  const bool iwp = flags.reduce == "iwp";
  const bool compressed = flags.reduce == "compressed";
  const bool moniqua = gossip && flags.codec.rfind("moniqua", 0) == 0;
  std::vector<FlagScope> scopes = {
      {"--codec", gossip || compressed, "--reduce gossip and compressed"},
      {"--moniqua-theta-per-lr", moniqua && flags.codec.find("theta=") == std::string::npos,
       "--reduce gossip with a moniqua --codec that names no theta"},
      {"--print-wraps", moniqua, "--reduce gossip with a moniqua --codec"},
      {"--graph", gossip || flags.reduce == "local", "--reduce gossip and local"},
      {"--gossip-algorithm", gossip, "--reduce gossip (the other reduces mix no models)"},
      {"--d2-gain", gossip && flags.gossip_algorithm == "d2", "--reduce gossip --gossip-algorithm d2"},
      {"--d2-leak", gossip && flags.gossip_algorithm == "d2", "--reduce gossip --gossip-algorithm d2"},
      // Gossip and local take plain SGD steps (the mixing step applies the gradient).
      {"--momentum", !gossip && flags.reduce != "local", "--reduce dense, fp16, compressed and iwp"},
      {"--repair", flags.reduce != "local", "peers that communicate (not --reduce local)"},
  };
  // The ring all-reduces sum: no peer sees another's gradient, so a robust
  // rule or a clip has nothing to judge there.
  for (const char* option : {"--aggregation", "--clip-update-norm", "--byzantine"}) {
    scopes.push_back({option, gossip, "--reduce gossip (the ring all-reduces sum: no rule applies to a sum)"});
  }
  for (const char* option : {"--dp-noise-multiplier", "--dp-clip", "--dp-delta", "--dp-epsilon-budget",
                             "--dp-noise-seed"}) {
    scopes.push_back({option, flags.reduce != "local", "peers that communicate (not --reduce local)"});
  }
  for (const char* option : {"--density", "--iwp-momentum-correction", "--iwp-accumulate", "--iwp-per-tensor",
                             "--iwp-threshold", "--iwp-probabilistic",
                             "--iwp-dense-below", "--iwp-warmup-steps", "--iwp-warmup-density", "--iwp-warmup-shape",
                             "--iwp-eps", "--iwp-clip"}) {
    scopes.push_back({option, iwp, "--reduce iwp"});
  }
  FEDRT_RETURN_IF_ERROR(CheckFlagScopes(app, scopes, "--reduce " + flags.reduce));
  if (flags.gossip_algorithm == "d2" && peer::IsChocoSpec(flags.codec)) {
    return InvalidArgument("--gossip-algorithm d2 mixes models: '" + flags.codec + "' sends replica differences");
  }
  return Status::Ok();
}

int RunPeer(const PeerFlags& flags, const CLI::App& app) {
  if (const int tls_status = CheckTlsFlags("peer", flags.tls); tls_status != 0) return tls_status;
  auto reduce = ReduceOf(flags.reduce);
  if (!reduce.ok()) return Fail("peer", reduce.status());
  if (*reduce == peer::PeerReduce::kCompressed) {
    // The codec is checked before anything is read or dialled.
    Status usable = flags.codec.empty()
                        ? InvalidArgument("--reduce compressed needs --codec SPEC (e.g. dqsg:s=2, alq:bits=3, topk:k=0.01)")
                        : Status::Ok();
    if (usable.ok()) usable = peer::CheckCompressedRingCodec(flags.codec, flags.momentum);
    if (!usable.ok()) {
      Fail("peer", usable);
      return 2;
    }
  } else if (*reduce == peer::PeerReduce::kGossip) {
    // The same: a gossip codec the trainer would refuse is refused before
    // anything is read or dialled, not after the ring has formed.
    const Status usable = peer::CheckGossipCodec(flags.codec);
    if (!usable.ok()) {
      Fail("peer", usable);
      return 2;
    }
  }
  const Status scoped = CheckPeerFlags(flags, app);
  if (!scoped.ok()) {
    Fail("peer", scoped);
    return 2;  // a usage error
  }
  // The graph of gossip, and of the no-communication baseline (whose "vs
  // fp32" figure counts the graph's neighbours).
  const bool graph_applies = *reduce == peer::PeerReduce::kGossip || *reduce == peer::PeerReduce::kLocal;
  // The start every peer shares, the same file or the same seed, read
  // before anything is dialled.
  std::string model_spec = flags.model;
  LoadedModel init;
  if (!flags.init_model.empty()) {
    Result<LoadedModel> loaded = LoadAnyModel(flags.init_model, FlagGiven(app, "--model") ? flags.model : "");
    if (!loaded.ok()) return Fail("peer", loaded.status());
    init = std::move(*loaded);
    model_spec = init.spec;
  }
  transport::LinkProfile link;
  if (!flags.link.empty()) {
    Result<transport::LinkProfile> parsed = transport::ParseLinkProfile(flags.link);
    if (!parsed.ok()) {
      Fail("peer", InvalidArgument("--link: " + parsed.status().message()));
      return 2;  // a usage error
    }
    link = *parsed;
  }
  transport::KeyStore keys;
  auto joined = Join(flags.config, flags.keys, flags.rank, &keys,
                     graph_applies && flags.graph == "torus" ? peer::GossipGraph::kTorus : peer::GossipGraph::kRing,
                     0, flags.tls, link);
  if (!joined.ok()) return Fail("peer", joined.status());
  if (link.shaped()) std::printf("links shaped in user space: %s\n", transport::FormatLinkProfile(link).c_str());
  peer::CollectiveContext& context = *joined->context;
  const int n = static_cast<int>(context.members().size());

  auto data = LoadDataSet(flags.data);
  if (!data.ok()) return Fail("peer", data.status());
  NormalizeWithTrainingSet(*data);
  auto partition = PartitionBySpec(flags.partition, data->train.labels, data->train.num_classes, n, flags.seed);
  if (!partition.ok()) return Fail("peer", partition.status());
  const std::vector<uint32_t>& mine = (*partition)[static_cast<std::size_t>(flags.rank)];
  if (mine.empty()) return Fail("peer", Status(StatusCode::kFailedPrecondition, "partition " + flags.partition + " gave this peer no examples"));

  auto model = Model::Create(model_spec, flags.seed);
  if (!model.ok()) return Fail("peer", model.status());
  if (!flags.init_model.empty()) {
    std::copy(init.parameters.begin(), init.parameters.end(), model->parameters());
    std::printf("starting from %s (%s, model %s)\n", flags.init_model.c_str(), init.kind.c_str(), model_spec.c_str());
  }
  peer::PeerData view;
  view.set = data->train;
  view.share = mine.data();
  view.share_size = mine.size();
  peer::PeerTrainerOptions options;
  options.reduce = *reduce;
  options.codec = *reduce == peer::PeerReduce::kCodec ? "fp16" : flags.codec;
  options.moniqua_theta_per_lr = flags.moniqua_theta_per_lr;
  options.sgd.schedule.base_lr = flags.lr;
  if (flags.schedule == "cosine") options.sgd.schedule.kind = LrScheduleKind::kCosine;
  options.sgd.momentum = flags.momentum;
  options.epochs = flags.epochs;
  options.batch = flags.batch;
  options.seed = flags.seed;
  options.max_steps = static_cast<uint32_t>(flags.max_steps);
  options.repair = flags.repair;
  options.evals_per_epoch = flags.evals_per_epoch;
  options.chunk_floats = joined->options.chunk_floats;
  options.iwp.density = flags.density;
  options.iwp.momentum_correction = flags.iwp_momentum_correction;
  options.iwp.accumulate_updates = flags.iwp_accumulate == "update";
  options.iwp.per_tensor = flags.iwp_per_tensor;
  options.iwp.threshold = flags.iwp_threshold == "quantile" ? IwpThreshold::kQuantile : IwpThreshold::kDispersion;
  options.iwp.probabilistic = flags.iwp_probabilistic;
  options.iwp.eps = flags.iwp_eps;
  options.iwp.dense_below = flags.iwp_dense_below;
  options.iwp.warmup_steps = flags.iwp_warmup_steps;
  options.iwp.warmup_density = flags.iwp_warmup_density;
  options.iwp.warmup_exponential = flags.iwp_warmup_shape == "exponential";
  options.iwp.clip = flags.iwp_clip;
  Result<AggregationRule> rule = ParseAggregationRule(flags.aggregation);
  if (!rule.ok()) return Fail("peer", rule.status());
  options.gossip_defense.rule = *rule;
  options.gossip_defense.clip = flags.clip_update_norm;
  Result<peer::GossipAlgorithm> algorithm = peer::ParseGossipAlgorithm(flags.gossip_algorithm);
  if (!algorithm.ok()) return Fail("peer", algorithm.status());
  options.gossip_algorithm = *algorithm;
  options.d2_gain = flags.d2_gain;
  options.d2_leak = flags.d2_leak;
  if (!flags.byzantine.empty()) {
    Result<ByzantineBehaviour> behaviour = ParseByzantine(flags.byzantine);
    if (!behaviour.ok()) return Fail("peer", behaviour.status());
    auto byzantine = std::make_shared<ByzantineUpdate>(*behaviour, flags.seed + static_cast<uint64_t>(flags.rank));
    options.gossip_send_transform = [byzantine](uint64_t step, float* values, std::size_t d) {
      byzantine->Apply(static_cast<uint32_t>(step), values, d);
    };
    std::printf("byzantine: every model sent is %s\n", flags.byzantine.c_str());
  }
  options.dp = flags.dp;
  if (options.dp.noise_multiplier > 0 && options.dp.noise_seed == 0) {
    // Drawn, not derived from --seed: the other peers know that.
    std::random_device random;
    while (options.dp.noise_seed == 0) options.dp.noise_seed = uint64_t{random()} << 32 | random();
  }
  auto trainer = peer::PeerTrainer::Create(*model, view, context, options);
  if (!trainer.ok()) return Fail("peer", trainer.status());
  std::printf("peer rank %d of %d: %s, %zu parameters, %zu examples (%s), %zu steps/epoch, reduce %s",
              flags.rank, n, model_spec.c_str(), model->parameter_count(), mine.size(), flags.partition.c_str(),
              (*trainer)->steps_per_epoch(), flags.reduce.c_str());
  if (*reduce == peer::PeerReduce::kGossip) std::printf(", aggregation %s", AggregationRuleName(*rule).c_str());
  if (flags.clip_update_norm > 0) std::printf(", neighbours clipped to %g", flags.clip_update_norm);
  if (*reduce == peer::PeerReduce::kIwp && flags.iwp_dense_below > 0) {
    // An extra beyond the paper (docs/design/peer.md, IWP): named.
    std::printf(", tensors under %llu coordinates sent whole (not the paper's; --iwp-dense-below 0: its rule alone)",
                static_cast<unsigned long long>(flags.iwp_dense_below));
  }
  if (flags.dp.noise_multiplier > 0) {
    std::printf(", local DP z=%g C=%g delta=%g", flags.dp.noise_multiplier, flags.dp.clip, flags.dp.delta);
  }
  std::printf("\n");
  std::fflush(stdout);
  const std::string& gossip_codec = (*trainer)->gossip_codec();
  if (const uint32_t t_mix = (*trainer)->moniqua_mixing_time(); t_mix != 0) {
    std::printf("gossip codec %s, theta from Moniqua's bound: 2 * lr * max|g| * t_mix, t_mix %u, agreed every %u steps, "
                "%u coordinates checked for wraps per payload\n",
                flags.codec.c_str(), t_mix, options.moniqua_refresh_steps, options.moniqua_check);
  } else if (!gossip_codec.empty()) {
    const bool derived = gossip_codec != flags.codec;
    std::printf("gossip codec %s%s%s\n", gossip_codec.c_str(),
                (*trainer)->moniqua_one_bit_rule()
                    ? " (Moniqua at 1 bit: dithered, theta = --lr, gamma = 1 - lambda of the gossip matrix, at most 0.4 / (1 - "
                      "lambda_min), unless named)"
                    : "",
                derived && flags.schedule != "constant" && !(*trainer)->moniqua_one_bit_rule()
                    ? " (theta follows the learning rate)"
                    : "");
  }
  if (options.gossip_algorithm == peer::GossipAlgorithm::kD2) {
    std::printf("gossip algorithm D2 (the half step 2 x_k - x_(k-1) - lr (g_k - g_(k-1)) is sent and mixed), "
                "correction gain %g, leak %g%s\n",
                static_cast<double>((*trainer)->d2_gain()), static_cast<double>((*trainer)->d2_leak()),
                (*trainer)->moniqua_one_bit_rule() && flags.d2_gain == 0 && flags.d2_leak < 0
                    ? " (Moniqua's 1-bit rule; the paper's D2: gain 1, leak 0)"
                    : "");
  }
  std::ofstream metrics;
  if (!flags.metrics.empty()) {
    metrics.open(flags.metrics, std::ios::trunc);
    if (!metrics) return Fail("peer", IoError(flags.metrics + ": cannot open for writing"));
  }
  PeerPrinter printer(flags, *model, data->test, &metrics);
  Status trained = (*trainer)->Run(printer);
  if (!trained.ok()) {
    // A step failure that was not repaired is printed already.
    if (trained.code() == printer.last_failure().code() && trained.message() == printer.last_failure().message()) {
      return 1;
    }
    return Fail("peer", trained);
  }
  (void)context.Close();  // the neighbours still need this peer's last chunks
  if (!flags.save_model.empty()) {
    // Ring peers hold the same model; gossip peers each their own.
    const Status saved = WriteModelNpz(flags.save_model, *model);
    if (!saved.ok()) return Fail("peer", saved);
    std::printf("saved the model to %s\n", flags.save_model.c_str());
  }
  return 0;
}

struct BenchFlags {
  int peers = 2;
  uint64_t size = 16u << 20;
  int iterations = 20;
  std::string codec;
  uint64_t chunk_bytes = 0;  // 0: PeerOptions' default
  // Hidden: a worker process started by the launcher.
  int worker_rank = -1;
  std::string config;
  std::string keys;
};

// CPU time (user + system, every thread) of this process.
double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::string CpuFile(const std::string& config, int rank) { return config + ".cpu-" + std::to_string(rank); }

int RunBenchWorker(const BenchFlags& flags) {
  transport::KeyStore keys;
  auto joined = Join(flags.config, flags.keys, flags.worker_rank, &keys, peer::GossipGraph::kRing,
                     static_cast<uint32_t>(flags.chunk_bytes / sizeof(float)));
  if (!joined.ok()) return Fail("bench allreduce", joined.status());
  peer::PeerGroup group(std::move(joined->context), joined->options.chunk_floats);
  const std::size_t n = static_cast<std::size_t>(flags.size / sizeof(float));
  std::vector<float> data(n, 1.0f);
  std::vector<double> times;
  double cpu = 0;  // this process, every thread, over the timed calls
  // Untimed calls first, a tenth of the timed ones (at least 3): the first
  // hundreds of a small all-reduce are slower (socket buffers, caches, the
  // event loops' busy polling not yet in its stride); mpi_allreduce_bench
  // does the same.
  const int warmup = std::max(3, flags.iterations / 10);
  for (int i = 0; i < warmup + flags.iterations; ++i) {
    std::fill(data.begin(), data.end(), 1.0f);
    const double cpu_start = ProcessCpuSeconds();
    const auto start = std::chrono::steady_clock::now();
    Status s = group.AllReduce(data.data(), n, flags.codec);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!s.ok()) return Fail("bench allreduce", s);
    if (i >= warmup) {
      times.push_back(t);
      cpu += ProcessCpuSeconds() - cpu_start;
    }
  }
  // The launcher adds up every worker's CPU time.
  if (std::FILE* f = std::fopen(CpuFile(flags.config, flags.worker_rank).c_str(), "w")) {
    std::fprintf(f, "%.9f\n", cpu);
    std::fclose(f);
  }
  if (n > 0 && data[n - 1] != static_cast<float>(group.members().size())) {
    return Fail("bench allreduce", Internal("wrong sum"));
  }
  (void)group.Close();
  if (flags.worker_rank == 0) {
    std::sort(times.begin(), times.end());
    auto pct = [&](double q) {
      return times[std::min(times.size() - 1, static_cast<std::size_t>(q * static_cast<double>(times.size())))];
    };
    const double p = static_cast<double>(group.members().size());
    const double p50 = pct(0.5), p99 = pct(0.99);
    // Bus bandwidth as the NCCL tests define it: bytes * 2 (p - 1) / p / time.
    const double bus = static_cast<double>(flags.size) * 2.0 * (p - 1.0) / p / p50 / 1e9;
    std::printf("allreduce %s  peers %d  size %llu bytes  iterations %d  p50 %.3f ms  p99 %.3f ms  bus bandwidth %.3f GB/s",
                flags.codec.empty() ? "fp32" : flags.codec.c_str(), flags.peers,
                static_cast<unsigned long long>(flags.size), flags.iterations, p50 * 1e3, p99 * 1e3, bus);
    std::fflush(stdout);  // the launcher appends the CPU time to this line
  }
  return 0;
}

int RunBenchAllreduce(const BenchFlags& flags) {
  if (flags.worker_rank >= 0) return RunBenchWorker(flags);
  char dir_template[] = "/tmp/fedrt-bench-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return Fail("bench allreduce", IoError("cannot create a temporary directory"));
  const std::string dir = dir_template;
  auto files = WriteLocalPeerFiles(dir, flags.peers, 30000);
  if (!files.ok()) return Fail("bench allreduce", files.status());
  std::vector<std::vector<std::string>> commands;
  for (int r = 0; r < flags.peers; ++r) {
    std::vector<std::string> c = {"/proc/self/exe", "bench", "allreduce", "--peers", std::to_string(flags.peers),
                                  "--size", std::to_string(flags.size), "--iterations",
                                  std::to_string(flags.iterations), "--worker-rank", std::to_string(r),
                                  "--peer-list", files->config, "--keys", files->keys};
    if (!flags.codec.empty()) {
      c.push_back("--codec");
      c.push_back(flags.codec);
    }
    if (flags.chunk_bytes != 0) {
      c.push_back("--chunk-bytes");
      c.push_back(std::to_string(flags.chunk_bytes));
    }
    commands.push_back(c);
  }
  const int failed = SpawnAndWait(commands, 600);
  double cpu = 0;
  for (int r = 0; r < flags.peers; ++r) {
    const std::string path = CpuFile(files->config, r);
    if (std::FILE* f = std::fopen(path.c_str(), "r")) {
      double seconds = 0;
      if (std::fscanf(f, "%lf", &seconds) == 1) cpu += seconds;
      std::fclose(f);
    }
    std::remove(path.c_str());
  }
  if (failed == 0) {
    std::printf("  cpu %.3f ms per all-reduce (all processes)\n", cpu / flags.iterations * 1e3);
    std::fflush(stdout);
  }
  std::remove(files->config.c_str());
  std::remove(files->keys.c_str());
  rmdir(dir.c_str());
  if (failed > 0) {
    std::fprintf(stderr, "fedrt bench allreduce: %d of %d processes failed\n", failed, flags.peers);
    return 1;
  }
  return 0;
}

}  // namespace

void RegisterPeer(CLI::App& app, CommandList& commands) {
  auto flags = std::make_shared<PeerFlags>();
  CLI::App* p = app.add_subcommand("peer", "Run one peer of a ring that trains without an aggregator");
  p->add_option("--config", flags->options_file,
                "JSON object of any of these options, keys without the dashes; the command line wins");
  p->add_option("--peers", flags->config, "Peer list (JSON: peers [{id, host, port}], step_timeout_ms)")->required();
  p->add_option("--keys", flags->keys, "Key file with this peer's key and its neighbours' (transport/README.md)")->required();
  p->add_option("--rank", flags->rank, "This peer's position in the list")->required()->check(CLI::NonNegativeNumber);
  p->add_option("--data", flags->data, "MNIST-style data directory")->capture_default_str();
  p->add_option("--model", flags->model, "Model spec")->capture_default_str();
  p->add_option("--epochs", flags->epochs, "Epochs")->capture_default_str()->check(CLI::Range(1, 10000));
  p->add_option("--batch", flags->batch, "Batch size per peer")->capture_default_str()->check(CLI::Range(1, 65536));
  p->add_option("--lr", flags->lr, "Learning rate")->capture_default_str()->check(CLI::PositiveNumber);
  p->add_option("--schedule", flags->schedule, "Learning rate schedule: constant, or cosine to 0 over all epochs")
      ->capture_default_str()->check(CLI::IsMember({"constant", "cosine"}));
  p->add_option("--momentum", flags->momentum, "SGD momentum")->capture_default_str()->check(CLI::Range(0.0, 0.999));
  p->add_option("--reduce", flags->reduce,
                "Gradient all-reduce (dense fp32, fp16 hops, compressed by --codec, IWP-sparse), gossip D-PSGD, or local (no communication)")
      ->capture_default_str()->check(CLI::IsMember({"dense", "fp16", "compressed", "iwp", "gossip", "local"}));
  p->add_option("--codec", flags->codec, "Compressed: the gradients' codec, e.g. dqsg:s=2, alq:bits=3, topk:k=0.01 (error feedback by "
                 "its ef key). Gossip: codec of the models sent (empty: fp32), e.g. moniqua:bits=1,theta=0.5, or replica gossip "
                 "choco[:gamma=G]+CODEC, e.g. choco:gamma=0.75+sign:b=512");
  p->add_option("--moniqua-theta-per-lr", flags->moniqua_theta_per_lr,
                 "Gossip: theta of a moniqua codec that names none, as a multiple of --lr (default: from Moniqua's "
                 "bound, 2 * lr * max|gradient| * the gossip matrix's mixing time, widened on detected wraps; at 1 bit: 1)")
      ->check(CLI::PositiveNumber);
  p->add_flag("--print-wraps", flags->print_wraps, "Gossip: print the Moniqua wrap count of every step");
  p->add_option("--density", flags->density, "IWP share of coordinates per step")->capture_default_str()->check(CLI::Range(1e-6, 1.0));
  p->add_option("--iwp-momentum-correction", flags->iwp_momentum_correction,
                 "IWP: keep the momentum in each peer's accumulator and mask it where sent (else momentum SGD on the mean)")
      ->capture_default_str();
  p->add_option("--iwp-accumulate", flags->iwp_accumulate,
                 "IWP: accumulate updates (lr times velocity or gradient, applied at rate 1) or raw gradients "
                 "(applied at the learning rate of the step that sends them)")
      ->capture_default_str()->check(CLI::IsMember({"update", "gradient"}));
  p->add_option("--iwp-per-tensor", flags->iwp_per_tensor, "IWP: one threshold per tensor (else one for the model)")
      ->capture_default_str();
  p->add_option("--iwp-threshold", flags->iwp_threshold,
                 "IWP: each tensor's threshold from the index of dispersion of its importances (the paper's layer-wise rule), "
                 "or the quantile that keeps --density of every tensor")
      ->capture_default_str()->check(CLI::IsMember({"dispersion", "quantile"}));
  p->add_option("--iwp-probabilistic", flags->iwp_probabilistic,
                 "IWP: also send a coordinate below the threshold with probability importance / threshold (the paper's "
                 "probabilistic update)")
      ->capture_default_str();
  p->add_option("--iwp-dense-below", flags->iwp_dense_below,
                 "IWP: tensors with fewer coordinates are sent whole (0: none, the paper's rule; an extra beyond the paper)")
      ->capture_default_str();
  p->add_option("--iwp-warmup-steps", flags->iwp_warmup_steps, "IWP: first steps use --iwp-warmup-density (-1: one epoch, the paper's warm-up; 0: none)")
      ->capture_default_str()->check(CLI::Range(-1, 1 << 30));
  p->add_option("--iwp-warmup-density", flags->iwp_warmup_density,
                 "IWP: share of coordinates at the start of the warm-up (0: 4 x --density, at most 1)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  p->add_option("--iwp-warmup-shape", flags->iwp_warmup_shape,
                 "IWP: warm-up density constant, or exponential (from --iwp-warmup-density down to --density)")
      ->capture_default_str()->check(CLI::IsMember({"constant", "exponential"}));
  p->add_option("--iwp-eps", flags->iwp_eps,
                 "IWP: importance |a| / (|w| + eps); a large eps ranks by |a| alone (top-k within each tensor)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  p->add_option("--iwp-clip", flags->iwp_clip, "IWP: local gradient clipping to this L2 norm, the paper's (0: off)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  p->add_option("--max-steps", flags->max_steps, "Stop after this many steps (0: whole epochs)")->check(CLI::NonNegativeNumber);
  p->add_flag("--repair", flags->repair, "When a peer fails, re-form the ring without it and continue");
  p->add_option("--seed", flags->seed, "Seed of the model, the partition and IWP")->capture_default_str();
  p->add_option("--partition", flags->partition, "This peer's share of the training set: iid, dirichlet:<alpha> or shards:<k>")
      ->capture_default_str();
  p->add_option("--graph", flags->graph, "Gossip graph: ring, or torus (2-D, Metropolis weights)")
      ->capture_default_str()->check(CLI::IsMember({"ring", "torus"}));
  p->add_option("--gossip-algorithm", flags->gossip_algorithm,
                "Gossip: dpsgd, or d2 (D2: mixes the half step 2 x_k - x_(k-1) - lr (g_k - g_(k-1)); removes the "
                "drift of label-skewed peers)")
      ->capture_default_str()->check(CLI::IsMember({"dpsgd", "d2"}));
  p->add_option("--d2-gain", flags->d2_gain,
                "D2: gain of the sum of mixing corrections, in (0, 1] (default 1, the paper's; 0.05 under Moniqua's "
                "1-bit rule)")
      ->check(CLI::Range(1e-6, 1.0));
  p->add_option("--d2-leak", flags->d2_leak,
                "D2: share of the sum of corrections forgotten per step, in [0, 1) (default 0; 0.005 under Moniqua's "
                "1-bit rule)")
      ->check(CLI::Range(0.0, 0.999999));
  p->add_option("--metrics", flags->metrics, "Write one JSON object per evaluation to this file");
  p->add_option("--init-model", flags->init_model,
                "Start from this model (.npz or checkpoint; give every peer the same file), with its model spec");
  p->add_option("--save-model", flags->save_model, "Write this peer's final model to this .npz (numpy.load reads it)");
  AddRobustFlags(*p, flags->aggregation, flags->clip_update_norm, flags->dp);
  p->add_option("--byzantine", flags->byzantine,
                "Gossip, to test a defense: send a transformed model (signflip[:k], scaled[:k], random[:s], stale)")
      ->group("");
  p->add_option("--evals-per-epoch", flags->evals_per_epoch, "Test-set evaluations per epoch")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  AddTlsPeerFlags(*p, flags->tls);
  p->add_option("--link", flags->link,
                "Shape this peer's links in user space: RATE[,delay=MS][,loss=PCT][,down=RATE] (its uplink is all it "
                "sends, its downlink all it receives)");
  commands.push_back({p, [flags, p] { return RunPeer(*flags, *p); }});

  CLI::App* bench = app.get_subcommand("bench");
  auto bf = std::make_shared<BenchFlags>();
  CLI::App* ar = bench->add_subcommand("allreduce", "Ring all-reduce time with N local peer processes (p50, p99, bus bandwidth)");
  ar->add_option("--peers", bf->peers, "Processes to start on 127.0.0.1")->capture_default_str()->check(CLI::Range(2, 64));
  ar->add_option("--size", bf->size, "Bytes of float32 to reduce")->capture_default_str()->check(CLI::Range(uint64_t{0}, uint64_t{1} << 31));
  ar->add_option("--iterations", bf->iterations, "Timed all-reduces (after a tenth as many, at least 3, untimed)")->capture_default_str()->check(CLI::Range(1, 100000));
  ar->add_option("--codec", bf->codec, "Codec of every hop (e.g. fp16); empty: raw fp32");
  ar->add_option("--chunk-bytes", bf->chunk_bytes, "Pipelining granularity (default: the peer default, chunk_floats in the peer config)")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{64} << 20));
  ar->add_option("--worker-rank", bf->worker_rank)->group("");
  ar->add_option("--peer-list", bf->config)->group("");
  ar->add_option("--keys", bf->keys)->group("");
  commands.push_back({ar, [bf] { return RunBenchAllreduce(*bf); }});
}

}  // namespace fedrt::cli
