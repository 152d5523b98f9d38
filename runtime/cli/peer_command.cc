// `fedrt peer`: one peer of a ring that trains without an aggregator, and
// `fedrt bench allreduce`: N local processes timing the ring all-reduce.
//
// fedrt peer --config peers.json --keys peer-keys.txt --rank R
//   trains on its partition of the data (as a device does; --partition iid,
//   dirichlet:A or shards:K); every step all-reduces the gradients (dense
//   fp32, fp16 hops, or IWP-sparse) and applies their mean, so every peer
//   holds the same model; or gossips models (D-PSGD); or, as a baseline,
//   trains alone (--reduce local: plain SGD, nothing sent). With --repair a
//   failed step drops the failed peer, re-forms the ring and repeats the step
//   (gossip: the survivors first agree on the step to resume at).
//   --metrics FILE writes one JSON object per evaluation (`fedrt sim
//   --topology ring|gossip` reads them to draw its plot).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/peer_launch.h"
#include "cli/tls_flags.h"
#include "fedrt/codecs/iwp.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/optimizer.h"
#include "fedrt/runtime/partition.h"
#include "fedrt/runtime/peer.h"
#include "fedrt/runtime/trainer.h"
#include "fedrt/transport/auth.h"

namespace fedrt::cli {
namespace {

struct PeerFlags {
  std::string config;
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
  // Gossip with a moniqua codec that names no theta: theta = this * lr.
  double moniqua_theta_per_lr = 0.02;
  float density = 1.0f / 64;
  // IWP training integration (codec specification, section 4; defaults in runtime/README.md).
  bool iwp_momentum_correction = true;  // momentum lives in the accumulator (DGC), the step is plain SGD
  // update: the accumulator holds lr * (velocity or gradient) and the reduced
  // mean is applied at rate 1; gradient: it holds raw gradients, applied at
  // the learning rate of the step that sends them.
  std::string iwp_accumulate = "update";
  bool iwp_per_tensor = true;           // one threshold per tensor
  float iwp_eps = 1e-8f;                // importance = |a| / (|w| + eps)
  uint64_t iwp_dense_below = 2000;      // tensors smaller than this are sent whole
  int iwp_warmup_steps = -1;            // -1: one epoch
  float iwp_warmup_density = 0;         // 0: 4 x --density (at most 1)
  std::string iwp_warmup_shape = "exponential";  // constant | exponential (density falls geometrically)
  float iwp_clip = 0;
  int max_steps = 0;  // 0: whole epochs
  bool repair = false;
  uint64_t seed = 1;
  std::string graph = "ring";  // gossip graph: ring | torus
  std::string metrics;      // JSON lines, one per evaluation
  int evals_per_epoch = 1;  // test-set evaluations per epoch (the last at the epoch's end)
  transport::TlsConfig tls;  // empty: plain TCP links
};

int Fail(const char* who, const Status& status) {
  std::fprintf(stderr, "fedrt %s: %s\n", who, status.ToString().c_str());
  return 1;
}

Result<std::unique_ptr<peer::PeerGroup>> Join(const std::string& config, const std::string& keys_path,
                                              int rank, transport::KeyStore* keys,
                                              peer::GossipGraph graph = peer::GossipGraph::kRing,
                                              uint32_t chunk_floats = 0,
                                              const transport::TlsConfig& tls = transport::TlsConfig()) {
  peer::PeerOptions options;
  options.graph = graph;
  options.tls = tls;
  auto peers = ReadPeerConfig(config, &options);
  if (!peers.ok()) return peers.status();
  if (chunk_floats != 0) options.chunk_floats = chunk_floats;
  if (rank < 0 || static_cast<std::size_t>(rank) >= peers->size()) {
    return InvalidArgument("--rank " + std::to_string(rank) + " is not in the peer list of " +
                           std::to_string(peers->size()));
  }
  auto loaded = transport::KeyStore::LoadFile(keys_path);
  if (!loaded.ok()) return loaded.status();
  *keys = std::move(*loaded);
  auto group = peer::PeerGroup::Create(*peers, static_cast<uint32_t>(rank), *keys, options);
  if (!group.ok()) return group.status();
  Status formed = (*group)->Form({});
  if (!formed.ok()) return formed;
  return group;
}

// Drops the failed peer and re-forms the group (ring or graph) over the rest.
Status Reform(peer::PeerGroup& group) {
  std::vector<uint32_t> survivors;
  for (uint32_t r : group.members()) {
    if (static_cast<int>(r) != group.FailedRank()) survivors.push_back(r);
  }
  std::fprintf(stderr, "fedrt peer: re-forming without peer rank %d (%zu peers)\n", group.FailedRank(),
               survivors.size());
  FEDRT_RETURN_IF_ERROR(group.Form(survivors));
  std::printf("ring re-formed with %zu peers\n", survivors.size());
  std::fflush(stdout);
  return Status::Ok();
}

// After a re-formation the survivors agree where to resume: a peer may have
// finished the step the others failed (the lost peer's last data reached it
// before it died). Every survivor learns every survivor's step; the first
// peer at the furthest step sends its model and momentum (an all-reduce to
// which the others add zeros, so the values arrive exactly) and everyone
// resumes at that step. *behind: this peer's failed step is done already.
Status Resync(peer::PeerGroup& group, std::size_t peer_count, uint32_t* step, Model& model, Sgd& sgd,
              bool* behind) {
  std::vector<float> steps(peer_count, 0.0f);
  steps[group.rank()] = static_cast<float>(*step) + 1.0f;  // 0: not a member
  FEDRT_RETURN_IF_ERROR(group.AllReduce(steps.data(), steps.size()));
  uint32_t resume = 0, root = group.rank();
  for (uint32_t r : group.members()) resume = std::max(resume, static_cast<uint32_t>(steps[r]) - 1);
  for (uint32_t r : group.members()) {
    if (static_cast<uint32_t>(steps[r]) - 1 == resume) {
      root = r;
      break;
    }
  }
  const std::size_t d = model.parameter_count(), v = sgd.velocity_size();
  std::vector<float> state(d + v, 0.0f);
  if (group.rank() == root) {
    std::copy(model.parameters(), model.parameters() + d, state.begin());
    std::copy(sgd.velocity(), sgd.velocity() + v, state.begin() + static_cast<std::ptrdiff_t>(d));
  }
  FEDRT_RETURN_IF_ERROR(group.AllReduce(state.data(), state.size()));
  std::copy(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(d), model.parameters());
  std::copy(state.begin() + static_cast<std::ptrdiff_t>(d), state.end(), sgd.velocity());
  *behind = *step < resume;
  *step = resume;
  sgd.set_step(resume);
  return Status::Ok();
}

int RunPeer(const PeerFlags& flags) {
  if (const int tls_status = CheckTlsFlags("peer", flags.tls); tls_status != 0) return tls_status;
  transport::KeyStore keys;
  auto joined = Join(flags.config, flags.keys, flags.rank, &keys,
                     flags.reduce == "gossip" && flags.graph == "torus" ? peer::GossipGraph::kTorus
                                                                         : peer::GossipGraph::kRing,
                     0, flags.tls);
  if (!joined.ok()) return Fail("peer", joined.status());
  peer::PeerGroup& group = **joined;
  const int n = static_cast<int>(group.members().size());

  auto data = LoadMnistStyleDirectory(flags.data);
  if (!data.ok()) return Fail("peer", data.status());
  const Normalization norm = ComputeNormalization(data->train);
  Normalize(data->train, norm);
  Normalize(data->test, norm);
  auto partition = PartitionBySpec(flags.partition, data->train.labels, data->train.num_classes, n, flags.seed);
  if (!partition.ok()) return Fail("peer", partition.status());
  const std::vector<uint32_t>& mine = (*partition)[static_cast<std::size_t>(flags.rank)];
  if (mine.empty()) return Fail("peer", Status(StatusCode::kFailedPrecondition, "partition " + flags.partition + " gave this peer no examples"));
  // Every peer takes the same number of steps per epoch: an "epoch" is
  // count / n examples per peer (a peer with a smaller non-IID share passes
  // over its examples more than once, in a fresh order each time).
  const std::size_t steps_per_epoch = (data->train.count / static_cast<std::size_t>(n)) / static_cast<std::size_t>(flags.batch);

  auto model = Model::Create(flags.model, flags.seed);  // same seed: same start on every peer
  if (!model.ok()) return Fail("peer", model.status());
  const bool iwp = flags.reduce == "iwp";
  const bool corrected = iwp && flags.iwp_momentum_correction;
  SgdOptions sgd_options;
  sgd_options.schedule.base_lr = flags.lr;
  if (flags.schedule == "cosine") {
    sgd_options.schedule.kind = LrScheduleKind::kCosine;
    sgd_options.schedule.total_steps = steps_per_epoch * static_cast<std::size_t>(flags.epochs);
  }
  // IWP accumulating updates: the schedule scales what goes into the
  // accumulator, and the optimizer applies the reduced mean at rate 1.
  const bool iwp_updates = iwp && flags.iwp_accumulate == "update";
  const LrSchedule schedule = sgd_options.schedule;
  if (iwp_updates) {
    sgd_options.schedule = LrSchedule();
    sgd_options.schedule.base_lr = 1.0;
  }
  sgd_options.momentum = corrected ? 0.0f : flags.momentum;  // corrected: the accumulator holds the momentum
  auto sgd = Sgd::Create(sgd_options, model->parameter_count());
  if (!sgd.ok()) return Fail("peer", sgd.status());
  const std::size_t d = model->parameter_count();
  IwpOptions iwp_options;
  iwp_options.target_fraction = flags.density;
  iwp_options.momentum = corrected ? flags.momentum : 0.0f;
  iwp_options.dense_below = static_cast<std::size_t>(flags.iwp_dense_below);
  iwp_options.warmup_steps =
      flags.iwp_warmup_steps < 0 ? static_cast<uint32_t>(steps_per_epoch) : static_cast<uint32_t>(flags.iwp_warmup_steps);
  iwp_options.warmup_fraction = flags.iwp_warmup_density > 0 ? flags.iwp_warmup_density : std::min(1.0f, 4 * flags.density);
  iwp_options.warmup_exponential = flags.iwp_warmup_shape == "exponential";
  iwp_options.clip_norm = flags.iwp_clip;
  iwp_options.eps = flags.iwp_eps;
  Status iwp_ok = IwpAccumulator::Check(d, iwp_options);
  if (iwp && !iwp_ok.ok()) return Fail("peer", iwp_ok);
  IwpAccumulator accumulator(d, iwp_options);
  if (iwp && flags.iwp_per_tensor) {
    std::vector<std::size_t> sizes;
    for (const TensorInfo& t : model->tensors()) sizes.push_back(t.size);
    Status s = accumulator.SetTensors(sizes);
    if (!s.ok()) return Fail("peer", s);
  }
  std::vector<float> features(static_cast<std::size_t>(flags.batch) * data->train.example_size());
  std::vector<uint8_t> labels(static_cast<std::size_t>(flags.batch));
  std::vector<float> saved(d);
  std::vector<uint32_t> indices;
  std::vector<float> sums;
  std::printf("peer rank %d of %d: %s, %zu parameters, %zu examples (%s), %zu steps/epoch, reduce %s\n",
              flags.rank, n, flags.model.c_str(), d, mine.size(), flags.partition.c_str(), steps_per_epoch,
              flags.reduce.c_str());
  std::fflush(stdout);
  // Moniqua's theta bounds the neighbours' distance, which scales with the
  // learning rate (codec specification, section 5): a codec spec without
  // theta gets theta = --moniqua-theta-per-lr * lr.
  // With a decaying schedule theta follows the step's learning rate (every
  // peer computes the same schedule, so all use the same theta in a step).
  const bool derived_theta = flags.codec.rfind("moniqua", 0) == 0 && flags.codec.find("theta=") == std::string::npos;
  auto codec_for = [&](double lr) {
    if (!derived_theta) return flags.codec;
    char theta[40];
    std::snprintf(theta, sizeof theta, "theta=%.6g", flags.moniqua_theta_per_lr * lr);
    return flags.codec + (flags.codec.find(':') == std::string::npos ? ":" : ",") + theta;
  };
  std::string gossip_codec = codec_for(flags.lr);
  if (!gossip_codec.empty()) {
    std::printf("gossip codec %s%s\n", gossip_codec.c_str(),
                derived_theta && flags.schedule != "constant" ? " (theta follows the learning rate)" : "");
  }
  std::ofstream metrics;
  if (!flags.metrics.empty()) {
    metrics.open(flags.metrics, std::ios::trunc);
    if (!metrics) return Fail("peer", IoError(flags.metrics + ": cannot open for writing"));
  }
  // What a dense fp32 exchange of the same steps would have sent (the
  // "vs fp32" ratio): the ring's 2 (p - 1) / p of the model per all-reduce,
  // gossip's model once per neighbour.
  double fp32_bytes = 0;
  auto count_fp32_step = [&] {
    const double p = static_cast<double>(group.members().size());
    const double model_bytes = static_cast<double>(d) * sizeof(float);
    if (flags.reduce == "gossip" || flags.reduce == "local") {
      const auto& m = group.members();
      const std::size_t position = static_cast<std::size_t>(std::find(m.begin(), m.end(), group.rank()) - m.begin());
      const auto neighbours = peer::GraphNeighbours(
          flags.graph == "torus" ? peer::GossipGraph::kTorus : peer::GossipGraph::kRing, static_cast<uint32_t>(m.size()));
      fp32_bytes += model_bytes * static_cast<double>(neighbours[position].size());
    } else {
      fp32_bytes += model_bytes * 2.0 * (p - 1.0) / p;
    }
  };
  const auto run_start = std::chrono::steady_clock::now();
  double interval_loss = 0;
  std::size_t interval_steps = 0;
  uint64_t interval_wraps = 0;
  std::vector<uint64_t> interval_step_wraps;  // gossip: the wrap count of every step since the last evaluation
  // Evaluates on the test set and writes one metrics line.
  auto record = [&](int epoch, std::size_t steps_done, uint32_t step_count) -> Result<Evaluation> {
    auto eval = EvaluateModel(*model, data->test, 256);
    if (!eval.ok()) return eval.status();
    if (metrics.is_open()) {
      const double epochs_done = epoch + static_cast<double>(steps_done) / static_cast<double>(std::max<std::size_t>(1, steps_per_epoch));
      nlohmann::json line = {
          {"rank", flags.rank},
          {"epoch", epochs_done},
          {"step", step_count},
          {"peers", group.members().size()},
          {"test_accuracy", eval->accuracy},
          {"test_loss", eval->loss},
          {"train_loss", interval_steps ? interval_loss / static_cast<double>(interval_steps) : 0.0},
          {"total_bytes_sent", group.total_bytes_sent()},
          {"fp32_bytes", static_cast<uint64_t>(fp32_bytes)},
          {"near_wraps", interval_wraps},
          {"near_wraps_per_step", interval_step_wraps},
          {"elapsed_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count()}};
      metrics << line.dump() << "\n" << std::flush;
    }
    interval_loss = 0;
    interval_steps = 0;
    interval_wraps = 0;
    interval_step_wraps.clear();
    return eval;
  };
  const std::size_t evals = static_cast<std::size_t>(flags.evals_per_epoch);
  uint32_t step = 0;
  uint32_t skip_steps = 0;  // gossip: batches the survivors took while this peer failed (step counts them)
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    std::vector<uint32_t> order;
    const std::size_t needed = steps_per_epoch * static_cast<std::size_t>(flags.batch);
    for (uint64_t pass = 0; order.size() < needed; ++pass) {
      // Pass 0 of every epoch is the order an equal share always had.
      const std::vector<uint32_t> more = ShuffledIndices(mine.size(), flags.seed + static_cast<uint64_t>(flags.rank),
                                                         static_cast<uint64_t>(epoch) + (pass << 32));
      order.insert(order.end(), more.begin(), more.end());
    }
    double loss_sum = 0;
    uint64_t wraps = 0;
    std::size_t steps_done = 0;
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t s = 0; s < steps_per_epoch; ++s) {
      if (flags.max_steps > 0 && step >= static_cast<uint32_t>(flags.max_steps)) break;
      if (skip_steps > 0) {
        --skip_steps;
        continue;
      }
      // Evaluations inside the epoch (the epoch's end is evaluated below).
      if (s > 0 && (s * evals) / steps_per_epoch != ((s - 1) * evals) / steps_per_epoch) {
        auto eval = record(epoch, s, step);
        if (!eval.ok()) return Fail("peer", eval.status());
      }
      std::vector<uint32_t> batch_indices(static_cast<std::size_t>(flags.batch));
      for (int b = 0; b < flags.batch; ++b) batch_indices[static_cast<std::size_t>(b)] = mine[order[s * static_cast<std::size_t>(flags.batch) + static_cast<std::size_t>(b)]];
      GatherBatch(data->train, batch_indices.data(), batch_indices.size(), features.data(), labels.data());
      auto loss = model->ComputeGradients(features.data(), labels.data(), flags.batch);
      if (!loss.ok()) return Fail("peer", loss.status());
      loss_sum += loss->loss;
      interval_loss += loss->loss;
      ++interval_steps;
      ++steps_done;
      float* g = model->gradients();
      if (flags.reduce == "local") {
        // The no-communication baseline: gossip's plain SGD step without mixing.
        const float lr = static_cast<float>(sgd->current_lr());
        float* x = model->parameters();
        for (std::size_t i = 0; i < d; ++i) x[i] = x[i] - lr * g[i];
        sgd->set_step(sgd->step() + 1);
        ++step;
        continue;
      }
      if (flags.reduce == "gossip") {
        // D-PSGD: the mixing step applies the plain SGD step itself.
        peer::GossipStats gossip;
        const float lr = static_cast<float>(sgd->current_lr());
        if (derived_theta && flags.schedule != "constant") gossip_codec = codec_for(sgd->current_lr());
        Status mixed = group.GossipStep(model->parameters(), g, d, lr, gossip_codec, step, &gossip);
        bool done_elsewhere = false;
        while (!mixed.ok()) {
          // A failed step leaves the model as it was: re-form, agree with the
          // survivors on the step to resume at, and repeat this one or (the
          // others finished it before the failure) take its plain SGD step
          // alone and join them.
          std::fprintf(stderr, "fedrt peer: step %u: %s\n", step, mixed.ToString().c_str());
          if (!flags.repair || group.FailedRank() < 0) return 1;
          Status formed = Reform(group);
          if (!formed.ok()) return Fail("peer", formed);
          auto agreed = group.AgreeStep(step);
          if (!agreed.ok()) {
            mixed = agreed.status();
            continue;
          }
          std::printf("resuming at step %llu\n", static_cast<unsigned long long>(*agreed));
          std::fflush(stdout);
          if (*agreed > step) {
            float* x = model->parameters();
            for (std::size_t i = 0; i < d; ++i) x[i] = x[i] - lr * g[i];
            skip_steps = static_cast<uint32_t>(*agreed) - step - 1;
            step = static_cast<uint32_t>(*agreed);
            sgd->set_step(step);
            done_elsewhere = true;
            break;
          }
          mixed = group.GossipStep(model->parameters(), g, d, lr, gossip_codec, step, &gossip);
        }
        if (done_elsewhere) continue;
        count_fp32_step();
        wraps += gossip.wrap_count;
        interval_wraps += gossip.wrap_count;
        interval_step_wraps.push_back(gossip.wrap_count);
        if (flags.print_wraps) std::printf("step %u wraps %llu\n", step, static_cast<unsigned long long>(gossip.wrap_count));
        sgd->set_step(sgd->step() + 1);
        ++step;
        continue;
      }
      bool accumulated = false;  // IWP: this step's gradient is in the accumulator
      bool done_elsewhere = false;
      for (;;) {
        Status reduced;
        const float members = static_cast<float>(group.members().size());
        if (flags.reduce == "iwp") {
          if (!accumulated) {
            reduced = accumulator.Accumulate(g, iwp_updates ? static_cast<float>(schedule.LearningRate(sgd->step())) : 1.0f);
          }
          accumulated = true;
          if (reduced.ok()) reduced = group.IwpAllReduce(accumulator, model->parameters(), flags.seed, step, &indices, &sums);
          if (reduced.ok()) {
            std::fill(g, g + d, 0.0f);
            for (std::size_t j = 0; j < indices.size(); ++j) g[indices[j]] = sums[j] / members;
          }
        } else {
          std::copy(g, g + d, saved.begin());
          reduced = group.AllReduce(g, d, flags.reduce == "fp16" ? "fp16" : "");
          if (reduced.ok()) {
            for (std::size_t i = 0; i < d; ++i) g[i] /= members;
          } else {
            std::copy(saved.begin(), saved.end(), g);
          }
        }
        if (reduced.ok()) break;
        std::fprintf(stderr, "fedrt peer: step %u: %s\n", step, reduced.ToString().c_str());
        if (!flags.repair || group.FailedRank() < 0) return 1;
        Status formed = Reform(group);
        if (!formed.ok()) return Fail("peer", formed);
        bool behind = false;
        Status synced = Resync(group, static_cast<std::size_t>(n), &step, *model, *sgd, &behind);
        if (!synced.ok()) return Fail("peer", synced);
        if (flags.reduce == "iwp" && !behind && !sums.empty()) {
          // The sum never completed anywhere: what this peer gathered goes
          // back into its accumulator (those slots are zero since).
          Status kept = accumulator.Restore(indices.data(), sums.size(), sums.data());
          if (!kept.ok()) return Fail("peer", kept);
        }
        if (behind) {
          // Another peer finished this step; its model (sent above) has it.
          std::printf("resuming at step %u\n", step);
          done_elsewhere = true;
          break;
        }
      }
      if (done_elsewhere) continue;
      count_fp32_step();
      sgd->Step(model->parameters(), g);
      ++step;
    }
    auto eval = record(epoch, steps_done, step);
    if (!eval.ok()) return Fail("peer", eval.status());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("peer rank %d epoch %d/%d  loss %.4f  test acc %.2f%%  sent %.1f MB  wraps %llu  %.1f s\n", flags.rank,
                epoch + 1, flags.epochs, loss_sum / static_cast<double>(std::max<std::size_t>(1, steps_done)),
                100.0 * eval->accuracy, static_cast<double>(group.total_bytes_sent()) / 1e6,
                static_cast<unsigned long long>(wraps), seconds);
    std::fflush(stdout);
  }
  (void)group.Close();  // the neighbours still need this peer's last chunks
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
  peer::PeerGroup& group = **joined;
  const std::size_t n = static_cast<std::size_t>(flags.size / sizeof(float));
  std::vector<float> data(n, 1.0f);
  std::vector<double> times;
  double cpu = 0;  // this process, every thread, over the timed calls
  const int warmup = 3;
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
                                  "--config", files->config, "--keys", files->keys};
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
  p->add_option("--config", flags->config, "Peer list (JSON: peers [{id, host, port}], step_timeout_ms)")->required();
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
                "Gradient all-reduce (dense fp32, fp16 hops, IWP-sparse), gossip D-PSGD, or local (no communication)")
      ->capture_default_str()->check(CLI::IsMember({"dense", "fp16", "iwp", "gossip", "local"}));
  p->add_option("--codec", flags->codec, "Gossip: codec of the models sent (empty: fp32), e.g. moniqua:bits=1,theta=0.5, or replica gossip "
                 "choco[:gamma=G]+CODEC, e.g. choco:gamma=0.75+sign:b=512");
  p->add_option("--moniqua-theta-per-lr", flags->moniqua_theta_per_lr,
                 "Gossip: theta of a moniqua codec that names none, as a multiple of --lr")
      ->capture_default_str()->check(CLI::PositiveNumber);
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
  p->add_option("--iwp-dense-below", flags->iwp_dense_below, "IWP: tensors with fewer coordinates are sent whole")
      ->capture_default_str();
  p->add_option("--iwp-warmup-steps", flags->iwp_warmup_steps, "IWP: first steps use --iwp-warmup-density (-1: one epoch, 0: none)")
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
  p->add_option("--iwp-clip", flags->iwp_clip, "IWP: local gradient clipping to this L2 norm (0: off)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  p->add_option("--max-steps", flags->max_steps, "Stop after this many steps (0: whole epochs)")->check(CLI::NonNegativeNumber);
  p->add_flag("--repair", flags->repair, "When a peer fails, re-form the ring without it and continue");
  p->add_option("--seed", flags->seed, "Seed of the model, the partition and IWP")->capture_default_str();
  p->add_option("--partition", flags->partition, "This peer's share of the training set: iid, dirichlet:<alpha> or shards:<k>")
      ->capture_default_str();
  p->add_option("--graph", flags->graph, "Gossip graph: ring, or torus (2-D, Metropolis weights)")
      ->capture_default_str()->check(CLI::IsMember({"ring", "torus"}));
  p->add_option("--metrics", flags->metrics, "Write one JSON object per evaluation to this file");
  p->add_option("--evals-per-epoch", flags->evals_per_epoch, "Test-set evaluations per epoch")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  AddTlsPeerFlags(*p, flags->tls);
  commands.push_back({p, [flags] { return RunPeer(*flags); }});

  CLI::App* bench = app.get_subcommand("bench");
  auto bf = std::make_shared<BenchFlags>();
  CLI::App* ar = bench->add_subcommand("allreduce", "Ring all-reduce time with N local peer processes (p50, p99, bus bandwidth)");
  ar->add_option("--peers", bf->peers, "Processes to start on 127.0.0.1")->capture_default_str()->check(CLI::Range(2, 64));
  ar->add_option("--size", bf->size, "Bytes of float32 to reduce")->capture_default_str()->check(CLI::Range(uint64_t{0}, uint64_t{1} << 31));
  ar->add_option("--iterations", bf->iterations, "Timed all-reduces (after 3 warm-up ones)")->capture_default_str()->check(CLI::Range(1, 100000));
  ar->add_option("--codec", bf->codec, "Codec of every hop (e.g. fp16); empty: raw fp32");
  ar->add_option("--chunk-bytes", bf->chunk_bytes, "Pipelining granularity (default: the peer default, chunk_floats in the peer config)")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{64} << 20));
  ar->add_option("--worker-rank", bf->worker_rank)->group("");
  ar->add_option("--config", bf->config)->group("");
  ar->add_option("--keys", bf->keys)->group("");
  commands.push_back({ar, [bf] { return RunBenchAllreduce(*bf); }});
}

}  // namespace fedrt::cli
