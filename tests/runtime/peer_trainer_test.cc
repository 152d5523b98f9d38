// The peer trainer over the in-process loopback context, one thread per rank,
// on a small synthetic data set (4 classes around 4 prototypes, 16 features):
// ring modes end with bit-identical models on every rank, the loss falls in
// every mode, a rank that drops out is repaired around, and options that do
// not apply are refused.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fedrt/runtime/model.h"
#include "fedrt/runtime/peer.h"
#include "fedrt/runtime/peer_trainer.h"
#include "peer_ring.h"

namespace fedrt {
namespace {

using testing::LoopbackRing;

constexpr std::size_t kFeatures = 16;
constexpr int kClasses = 4;
constexpr const char kSpec[] = "mlp:16-16-4";

struct Synthetic {
  std::vector<uint8_t> pixels;
  std::vector<float> features;
  std::vector<uint8_t> labels;
  std::size_t count = 0;

  // The uint8 pixels (read through a normalisation) or the float features.
  DataView View(bool bytes) const {
    DataView v;
    v.count = count;
    v.example_size = kFeatures;
    v.num_classes = kClasses;
    v.labels = labels.data();
    if (bytes) {
      v.pixels = pixels.data();
      v.normalization = {0.5f, 0.25f};
    } else {
      v.features = features.data();
    }
    return v;
  }
};

// Example i has class i % 4: its prototype (a fixed random pattern) plus noise.
Synthetic MakeData(std::size_t count) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 0.35f);
  std::vector<std::vector<float>> prototypes(kClasses, std::vector<float>(kFeatures));
  for (auto& p : prototypes) {
    for (auto& x : p) x = u(rng);
  }
  Synthetic d;
  d.count = count;
  for (std::size_t i = 0; i < count; ++i) {
    const int c = static_cast<int>(i % kClasses);
    d.labels.push_back(static_cast<uint8_t>(c));
    for (std::size_t k = 0; k < kFeatures; ++k) {
      const float x = prototypes[static_cast<std::size_t>(c)][k] + noise(rng);
      d.features.push_back(x);
      d.pixels.push_back(static_cast<uint8_t>(std::lround(std::fmin(255.0f, std::fmax(0.0f, 128.0f + 60.0f * x)))));
    }
  }
  return d;
}

// Rank r's share: every example i with i % ranks == r.
std::vector<uint32_t> Share(std::size_t count, int ranks, uint32_t r) {
  std::vector<uint32_t> share;
  for (uint32_t i = r; i < count; i += static_cast<uint32_t>(ranks)) share.push_back(i);
  return share;
}

struct RankResult {
  Status status;
  std::vector<float> parameters;
  std::vector<double> epoch_losses;
  std::vector<std::size_t> members;  // at each epoch's end
  std::vector<double> thetas;        // Moniqua's agreed theta at each epoch's end
  std::string gossip_codec;          // at the end
  uint64_t bytes_sent = 0;
  std::vector<double> epsilons;      // local DP at each epoch's end
  uint32_t steps = 0;                // at the end
  uint32_t mixing_time = 0;          // Moniqua's bound: t_mix of the mixing step
};

// Trains every rank of `ring` with `options`; `pixels` picks the uint8 view.
std::vector<RankResult> Train(LoopbackRing& ring, const Synthetic& data, const peer::PeerTrainerOptions& options,
                              bool pixels, int stop_rank = -1) {
  const int n = static_cast<int>(ring.groups.size());
  std::vector<RankResult> results(static_cast<std::size_t>(n));
  std::vector<std::vector<uint32_t>> shares;
  for (int r = 0; r < n; ++r) shares.push_back(Share(data.count, n, static_cast<uint32_t>(r)));
  ring.Each(ring.All(), [&](uint32_t r) -> Status {
    RankResult& out = results[r];
    auto model = Model::Create(kSpec, 3);
    if (!model.ok()) return out.status = model.status();
    peer::PeerData view;
    view.set = data.View(pixels);
    view.share = shares[r].data();
    view.share_size = shares[r].size();
    auto trainer = peer::PeerTrainer::Create(*model, view, ring.groups[r]->context(), options);
    if (!trainer.ok()) return out.status = trainer.status();
    out.status = (*trainer)->Run([&](const peer::PeerProgress& p) -> Status {
      if (!p.epoch_end) return Status::Ok();
      out.epoch_losses.push_back(p.epoch_loss);
      out.members.push_back(p.members);
      out.thetas.push_back(p.moniqua_theta);
      out.epsilons.push_back(p.dp_epsilon);
      out.steps = p.step;
      if (static_cast<int>(r) == stop_rank) return Status(StatusCode::kCancelled, "this rank stops here");
      return Status::Ok();
    });
    out.parameters.assign(model->parameters(), model->parameters() + model->parameter_count());
    out.bytes_sent = (*trainer)->total_bytes_sent();
    out.gossip_codec = (*trainer)->gossip_codec();
    out.mixing_time = (*trainer)->moniqua_mixing_time();
    if (static_cast<int>(r) == stop_rank) ring.groups[r].reset();  // its links close: the others lose it
    return out.status;
  });
  return results;
}

peer::PeerTrainerOptions Options(peer::PeerReduce reduce, const std::string& codec = "") {
  peer::PeerTrainerOptions o;
  o.reduce = reduce;
  o.codec = codec;
  o.sgd.schedule.base_lr = 0.1;
  o.sgd.momentum = 0.5f;
  o.epochs = 5;
  o.batch = 8;
  o.seed = 9;
  return o;
}

void CheckLossFalls(const std::vector<RankResult>& results) {
  for (std::size_t r = 0; r < results.size(); ++r) {
    INFO("rank ", r);
    REQUIRE(results[r].epoch_losses.size() >= 2);
    MESSAGE("rank " << r << ": loss " << results[r].epoch_losses.front() << " -> " << results[r].epoch_losses.back());
    CHECK(results[r].epoch_losses.back() < 0.5 * results[r].epoch_losses.front());
  }
}

TEST_CASE("the peer trainer with dense and fp16 all-reduce ends with identical models on every rank and the loss falls") {
  const Synthetic data = MakeData(480);
  for (int n : {2, 3, 4}) {
    for (const std::string codec : {"", "fp16"}) {
      INFO("ranks ", n, ", codec '", codec, "'");
      LoopbackRing ring(n);
      ring.FormAll();
      auto results = Train(ring, data, Options(codec.empty() ? peer::PeerReduce::kDense : peer::PeerReduce::kCodec, codec),
                           /*pixels=*/n != 3);
      for (auto& r : results) REQUIRE_MESSAGE(r.status.ok(), r.status.ToString());
      for (int r = 1; r < n; ++r) CHECK(results[static_cast<std::size_t>(r)].parameters == results[0].parameters);
      CheckLossFalls(results);
      CHECK(results[0].bytes_sent > 0);
    }
  }
}

TEST_CASE("the peer trainer with IWP keeps the models identical and the loss falls") {
  const Synthetic data = MakeData(480);
  LoopbackRing ring(3);
  ring.FormAll();
  auto options = Options(peer::PeerReduce::kIwp);
  options.iwp.density = 0.25f;
  options.iwp.dense_below = 20;
  auto results = Train(ring, data, options, /*pixels=*/true);
  for (auto& r : results) REQUIRE_MESSAGE(r.status.ok(), r.status.ToString());
  for (int r = 1; r < 3; ++r) CHECK(results[static_cast<std::size_t>(r)].parameters == results[0].parameters);
  CheckLossFalls(results);
}

TEST_CASE("the peer trainer with gossip, Moniqua gossip and the local baseline brings the loss down") {
  const Synthetic data = MakeData(480);
  for (const auto& mode : std::vector<std::pair<peer::PeerReduce, std::string>>{
           {peer::PeerReduce::kGossip, ""},
           {peer::PeerReduce::kGossip, "moniqua:bits=8"},
           {peer::PeerReduce::kGossip, "choco+sign:b=16"},
           {peer::PeerReduce::kLocal, ""}}) {
    INFO("codec '", mode.second, "'");
    LoopbackRing ring(3);
    ring.FormAll();
    auto results = Train(ring, data, Options(mode.first, mode.second), /*pixels=*/false);
    for (auto& r : results) REQUIRE_MESSAGE(r.status.ok(), r.status.ToString());
    CheckLossFalls(results);
    if (mode.first == peer::PeerReduce::kLocal) CHECK(results[0].bytes_sent == 0);
  }
}

TEST_CASE("moniqua gossip without theta agrees on theta from the bound on every rank and checks for wraps") {
  const Synthetic data = MakeData(480);
  LoopbackRing ring(4);
  ring.FormAll();
  peer::PeerTrainerOptions options = Options(peer::PeerReduce::kGossip, "moniqua:bits=2");
  options.epochs = 2;
  options.moniqua_refresh_steps = 4;
  auto results = Train(ring, data, options, /*pixels=*/false);
  for (auto& r : results) REQUIRE_MESSAGE(r.status.ok(), r.status.ToString());
  for (std::size_t epoch = 0; epoch < 2; ++epoch) {
    for (std::size_t r = 0; r < results.size(); ++r) {
      INFO("rank ", r, " epoch ", epoch);
      REQUIRE(results[r].thetas.size() == 2);
      CHECK(results[r].thetas[epoch] > 0);
      CHECK(results[r].thetas[epoch] == results[0].thetas[epoch]);  // agreed, bit for bit
    }
  }
  // theta = 2 lr G t_mix (times 2 per widening) with t_mix = 4 on a ring of
  // 4 (lambda 1/3) and G >= the mean |gradient coordinate| > 0: at least
  // a small multiple of lr, at most lr times a bound on G.
  CHECK(results[0].thetas[1] >= 2 * 0.1 * 4 * 1e-4);
  CHECK(results[0].gossip_codec.find("moniqua:bits=2,theta=") == 0);
  CHECK(results[0].gossip_codec.find(",check=32") != std::string::npos);
}

// At 1 bit the bound's theta is unusable (tens of times the neighbours'
// distance) and nearest rounding biased: a spec without theta dithers, takes
// theta = lr and the consensus step 1 - lambda capped at 0.4 / (1 -
// lambda_min), each unless named; the bound is not used (no mixing time).
// On a ring of 4 (W's eigenvalues 1, 1/3, 1/3, -1/3) 1 - lambda is 2/3, but
// the cap 0.4 / (4/3) = 0.3 takes over (the old rule gave 0.6667 and fails).
TEST_CASE("moniqua at 1 bit without theta dithers, takes theta = lr and gamma = 1 - lambda capped by lambda_min") {
  const Synthetic data = MakeData(480);
  for (const auto& [codec, expected] : std::vector<std::pair<std::string, std::string>>{
           {"moniqua:bits=1", "moniqua:bits=1,round=dither,gamma=0.3,theta=0.1"},
           {"moniqua", "moniqua:round=dither,gamma=0.3,theta=0.1"},
           {"moniqua:bits=1,round=nearest,gamma=0.5", "moniqua:bits=1,round=nearest,gamma=0.5,theta=0.1"}}) {
    INFO(codec);
    LoopbackRing ring(4);
    ring.FormAll();
    peer::PeerTrainerOptions options = Options(peer::PeerReduce::kGossip, codec);
    options.epochs = 3;
    auto results = Train(ring, data, options, /*pixels=*/false);
    for (auto& r : results) REQUIRE_MESSAGE(r.status.ok(), r.status.ToString());
    for (auto& r : results) {
      CHECK(r.gossip_codec == expected);
      CHECK(r.mixing_time == 0);
    }
    if (codec != "moniqua:bits=1,round=nearest,gamma=0.5") CheckLossFalls(results);
  }
}

// The step mixes with I + gamma (W - I): on a ring of 4 (W's eigenvalues
// 1, 1/3, -1/3, 1/3) gamma 1/2 moves lambda from 1/3 to 2/3, so t_mix =
// ceil(ln 8 / (1 - lambda)) goes from 4 to 7 and theta grows with it.
TEST_CASE("moniqua's bound takes the mixing time of the consensus step the spec names") {
  const Synthetic data = MakeData(240);
  for (const auto& [codec, t_mix] : std::vector<std::pair<std::string, uint32_t>>{
           {"moniqua:bits=2", 4}, {"moniqua:bits=2,round=dither,gamma=0.5", 7}}) {
    INFO(codec);
    LoopbackRing ring(4);
    ring.FormAll();
    peer::PeerTrainerOptions options = Options(peer::PeerReduce::kGossip, codec);
    options.max_steps = 2;
    auto results = Train(ring, data, options, /*pixels=*/false);
    for (auto& r : results) REQUIRE_MESSAGE(r.status.ok(), r.status.ToString());
    for (auto& r : results) CHECK(r.mixing_time == t_mix);
  }
}

// Rank 2 stops after its first epoch and its context goes: the others'
// next all-reduce fails naming it, they re-form with 3, agree on the step
// and the model, and finish with identical models.
TEST_CASE("the peer trainer with repair re-forms without a rank that drops out and the survivors end identical") {
  const Synthetic data = MakeData(480);
  for (const auto reduce : {peer::PeerReduce::kDense, peer::PeerReduce::kIwp, peer::PeerReduce::kGossip}) {
    INFO("reduce ", static_cast<int>(reduce));
    peer::ContextOptions context_options;
    context_options.step_timeout_ms = 5000;
    LoopbackRing ring(4, context_options);
    ring.FormAll();
    auto options = Options(reduce);
    options.repair = true;
    options.iwp.density = 0.25f;
    auto results = Train(ring, data, options, /*pixels=*/true, /*stop_rank=*/2);
    CHECK(results[2].status.code() == StatusCode::kCancelled);
    for (uint32_t r : {0u, 1u, 3u}) {
      INFO("rank ", r);
      REQUIRE_MESSAGE(results[r].status.ok(), results[r].status.ToString());
      // (A survivor may lose rank 2 in the last step of the first epoch
      // already: a closed link is noticed while it waits on the other side.)
      CHECK(results[r].members.back() == 3);
      CHECK(results[r].epoch_losses.size() == 5);
    }
    if (reduce != peer::PeerReduce::kGossip) {
      CHECK(results[1].parameters == results[0].parameters);
      CHECK(results[3].parameters == results[0].parameters);
    }
  }
}

TEST_CASE("the peer trainer with local DP reports a growing epsilon and stops every rank at the same step within its budget") {
  const Synthetic data = MakeData(480);
  auto options = Options(peer::PeerReduce::kGossip);
  options.epochs = 4;
  options.dp.noise_multiplier = 4;
  options.dp.clip = 5;
  options.dp.noise_seed = 77;
  {
    LoopbackRing ring(3);
    ring.FormAll();
    auto results = Train(ring, data, options, /*pixels=*/false);
    for (auto& r : results) {
      REQUIRE_MESSAGE(r.status.ok(), r.status.ToString());
      for (double loss : r.epoch_losses) CHECK(std::isfinite(loss));
    }
    // 20 steps per epoch at q = 1 and sigma = z / 2 = 2 (sensitivity 2 C).
    RdpAccountant expected;
    REQUIRE(results[0].epsilons.size() == 4);
    for (std::size_t e = 0; e < results[0].epsilons.size(); ++e) {
      expected.Compose(1.0, 2.0, 20);
      CHECK(results[0].epsilons[e] == doctest::Approx(expected.Epsilon(1e-5)));
      if (e > 0) CHECK(results[0].epsilons[e] > results[0].epsilons[e - 1]);
    }
  }
  // A budget just above two epochs' spend: every rank stops after step 40.
  RdpAccountant two_epochs;
  two_epochs.Compose(1.0, 2.0, 40);
  options.dp.epsilon_budget = two_epochs.Epsilon(1e-5) + 0.01;
  LoopbackRing ring(3);
  ring.FormAll();
  auto results = Train(ring, data, options, /*pixels=*/false);
  for (auto& r : results) {
    REQUIRE_MESSAGE(r.status.ok(), r.status.ToString());
    CHECK(r.steps == 40);
    CHECK(r.epsilons.back() <= options.dp.epsilon_budget);
  }
}

// One formed rank with a small data set, for Create's refusals.
struct OneRank {
  const Synthetic data = MakeData(40);
  LoopbackRing ring{1};
  Model model = Model::Create(kSpec, 3).value();
  const std::vector<uint32_t> share = Share(data.count, 1, 0);
  peer::PeerData view;
  OneRank() {
    ring.FormAll();
    view.set = data.View(/*bytes=*/false);
    view.share = share.data();
    view.share_size = share.size();
  }
  Status Create(const peer::PeerData& v, const peer::PeerTrainerOptions& o) {
    return peer::PeerTrainer::Create(model, v, ring.groups[0]->context(), o).status();
  }
};

TEST_CASE("the peer trainer refuses a robust rule, a clip or D2 outside gossip, and DP settings that do not fit") {
  OneRank one;
  auto create = [&](const peer::PeerTrainerOptions& o) { return one.Create(one.view, o); };
  for (peer::PeerReduce reduce : {peer::PeerReduce::kDense, peer::PeerReduce::kIwp, peer::PeerReduce::kLocal}) {
    peer::PeerTrainerOptions median = Options(reduce);
    median.gossip_defense.rule = ParseAggregationRule("median").value();
    const Status refused = create(median);
    CHECK(refused.code() == StatusCode::kInvalidArgument);
    CHECK(refused.message().find("apply to gossip only: the ring all-reduces sum") != std::string::npos);
    peer::PeerTrainerOptions clipped = Options(reduce);
    clipped.gossip_defense.clip = 1;
    CHECK(create(clipped).code() == StatusCode::kInvalidArgument);
  }
  // D2 mixes gossip's models: no other reduce has any, replicas are not
  // models, and a rule's dropped values would stay in D2's sum of corrections.
  for (peer::PeerReduce reduce : {peer::PeerReduce::kDense, peer::PeerReduce::kIwp, peer::PeerReduce::kLocal}) {
    peer::PeerTrainerOptions d2 = Options(reduce);
    d2.gossip_algorithm = peer::GossipAlgorithm::kD2;
    const Status refused = create(d2);
    CHECK(refused.code() == StatusCode::kInvalidArgument);
    CHECK(refused.message().find("D2 gossip algorithm applies to gossip only") != std::string::npos);
  }
  peer::PeerTrainerOptions d2 = Options(peer::PeerReduce::kGossip);
  d2.gossip_algorithm = peer::GossipAlgorithm::kD2;
  CHECK(create(d2).ok());
  d2.codec = "choco+sign:b=32";
  CHECK(create(d2).code() == StatusCode::kInvalidArgument);
  d2.codec.clear();
  d2.gossip_defense.clip = 1;
  CHECK(create(d2).code() == StatusCode::kInvalidArgument);
  peer::PeerTrainerOptions dp = Options(peer::PeerReduce::kDense);
  dp.dp.noise_multiplier = 1;
  dp.dp.clip = 1;
  CHECK(create(dp).code() == StatusCode::kInvalidArgument);  // no noise seed
  dp.dp.noise_seed = 5;
  CHECK(create(dp).ok());
  peer::PeerTrainerOptions alone = dp;
  alone.reduce = peer::PeerReduce::kLocal;
  CHECK(create(alone).code() == StatusCode::kInvalidArgument);  // sends nothing to protect
  peer::PeerTrainerOptions no_clip = dp;
  no_clip.dp.clip = 0;
  CHECK(create(no_clip).code() == StatusCode::kInvalidArgument);
  peer::PeerTrainerOptions clip_only = Options(peer::PeerReduce::kDense);
  clip_only.dp.clip = 1;
  CHECK(create(clip_only).code() == StatusCode::kInvalidArgument);
}

// D2 needs the mixing matrix's smallest eigenvalue at -1/3 or above: the
// 2 x 4 torus's Metropolis matrix has -0.5 (fp32 D2 diverged there), a
// moniqua spec's gamma 0.5 lifts it to 0.25, the 1-bit rule's gamma to 0.6.
TEST_CASE("the peer trainer refuses D2 on a graph whose mixing matrix has an eigenvalue below -1/3") {
  const Synthetic data = MakeData(40);
  peer::ContextOptions torus;
  torus.graph = peer::GossipGraph::kTorus;
  LoopbackRing ring(8, torus);
  ring.FormAll();
  Model model = Model::Create(kSpec, 3).value();
  const std::vector<uint32_t> share = Share(data.count, 8, 0);
  peer::PeerData view;
  view.set = data.View(/*bytes=*/false);
  view.share = share.data();
  view.share_size = share.size();
  auto create = [&](const std::string& codec) {
    peer::PeerTrainerOptions o = Options(peer::PeerReduce::kGossip, codec);
    o.gossip_algorithm = peer::GossipAlgorithm::kD2;
    return peer::PeerTrainer::Create(model, view, ring.groups[0]->context(), o).status();
  };
  const Status fp32 = create("");
  CHECK(fp32.code() == StatusCode::kInvalidArgument);
  CHECK(fp32.message().find("smallest eigenvalue at -1/3 or above; this graph's is -0.5") != std::string::npos);
  CHECK(create("moniqua:bits=1,theta=0.05,gamma=1").code() == StatusCode::kInvalidArgument);
  CHECK(create("moniqua:bits=8,theta=0.3,gamma=0.5").ok());
  CHECK(create("moniqua:bits=1").ok());
}

TEST_CASE("the peer trainer refuses options and data that do not fit") {
  OneRank one;
  const Synthetic& data = one.data;
  const peer::PeerData& view = one.view;
  auto create = [&](const peer::PeerData& v, const peer::PeerTrainerOptions& o) { return one.Create(v, o); };
  CHECK(create(view, Options(peer::PeerReduce::kDense)).ok());
  CHECK(create(view, Options(peer::PeerReduce::kDense, "fp16")).code() == StatusCode::kInvalidArgument);
  CHECK(create(view, Options(peer::PeerReduce::kCodec)).code() == StatusCode::kInvalidArgument);
  peer::PeerData both = view;
  both.set.pixels = data.pixels.data();
  CHECK(create(both, Options(peer::PeerReduce::kDense)).code() == StatusCode::kInvalidArgument);
  peer::PeerData wide = view;
  wide.set.example_size = kFeatures + 1;
  CHECK(create(wide, Options(peer::PeerReduce::kDense)).code() == StatusCode::kInvalidArgument);
  peer::PeerData classes = view;
  classes.set.num_classes = kClasses + 1;  // more classes than the model's outputs
  CHECK(create(classes, Options(peer::PeerReduce::kDense)).code() == StatusCode::kInvalidArgument);
  const std::vector<uint32_t> outside = {0, 40};
  peer::PeerData bad_share = view;
  bad_share.share = outside.data();
  bad_share.share_size = outside.size();
  CHECK(create(bad_share, Options(peer::PeerReduce::kDense)).code() == StatusCode::kInvalidArgument);
  peer::PeerData empty = view;
  empty.share_size = 0;
  CHECK(create(empty, Options(peer::PeerReduce::kDense)).code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedrt
