// The aggregator tier without MPI: K aggregator engines, one thread each (the
// Gloo habit), joined by an in-process AllGather, each serving its shard of
// eight device engines over memory pipes on its own manual clock. The global
// model after five rounds must equal one engine's with all eight devices to
// 1e-6 relative, for fp32 and for NDQSG (which gathers the updates), with
// ALQ (whose statistics are merged across the ranks) and under DP-FedAvg
// (rank 0 alone adds the noise); with the robust rules (rank 0 combines
// every rank's updates) and clipping it must be the same bits.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/runtime/aggregator_engine.h"
#include "fedrt/runtime/aggregator_tier.h"
#include "fedrt/runtime/device_client.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/robust_aggregation.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/stream.h"
#include "engine_fixtures.h"
#include "test_crypto.h"

namespace fedrt {
namespace {

using namespace transport;  // NOLINT
using testing::Blobs;
using testing::HexKey;

constexpr const char* kModel = "mlp:16-8-4";
constexpr int kDevices = 8;

std::string DeviceId(int i) { return "dev-" + std::to_string(i); }

using Bytes = std::vector<uint8_t>;

// The ranks' collectives over threads: every rank hands in its parts, the
// last to arrive publishes every rank's and wakes the others.
class Hub {
 public:
  explicit Hub(int ranks) : slots_(static_cast<std::size_t>(ranks)) {}
  std::vector<std::vector<Bytes>> Exchange(int rank, const std::vector<Bytes>& mine) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t generation = generation_;
    slots_[static_cast<std::size_t>(rank)] = mine;
    if (++arrived_ == slots_.size()) {
      published_ = slots_;
      arrived_ = 0;
      generation_++;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
    return published_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<Bytes>> slots_, published_;
  std::size_t arrived_ = 0;
  uint64_t generation_ = 0;
};

// A tier on a Hub with the three collectives of their own (as MPI has
// them), counting the bytes each hands this rank. `plain`: AllGather only,
// the others the base class's (built on it).
class ThreadTier : public AggregatorTier {
 public:
  ThreadTier(Hub& hub, int rank, int size, bool plain = false) : hub_(hub), rank_(rank), size_(size), plain_(plain) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status AllGather(const Bytes& mine, std::vector<Bytes>* all) override {
    all->clear();
    for (std::vector<Bytes>& parts : hub_.Exchange(rank_, {mine})) all->push_back(std::move(parts[0]));
    for (const Bytes& b : *all) received += b.size();
    return Status::Ok();
  }
  Status AllToAll(const std::vector<Bytes>& to, std::vector<Bytes>* from) override {
    if (plain_) return AggregatorTier::AllToAll(to, from);
    from->clear();
    for (std::vector<Bytes>& parts : hub_.Exchange(rank_, to)) {
      from->push_back(std::move(parts[static_cast<std::size_t>(rank_)]));
    }
    for (const Bytes& b : *from) received += b.size();
    return Status::Ok();
  }
  Status GatherToRank0(const Bytes& mine, std::vector<Bytes>* all) override {
    if (plain_) return AggregatorTier::GatherToRank0(mine, all);
    std::vector<std::vector<Bytes>> parts = hub_.Exchange(rank_, {mine});
    all->clear();
    if (rank_ != 0) return Status::Ok();
    for (std::vector<Bytes>& p : parts) all->push_back(std::move(p[0]));
    for (const Bytes& b : *all) received += b.size();
    return Status::Ok();
  }
  std::string AddressOf(int rank) const override { return "rank-" + std::to_string(rank) + ":1"; }
  std::size_t received = 0;  // bytes the collectives handed this rank

 private:
  Hub& hub_;
  int rank_, size_;
  bool plain_;
};

struct Member {
  std::string id;
  std::vector<uint32_t> share;
  std::unique_ptr<Model> model;
  std::unique_ptr<DeviceClient> client;
  std::shared_ptr<DeviceConnectionHandler> link;
  std::unique_ptr<MemoryPipe> pipe;
};

// One rank: an engine and the devices it serves.
struct Rank {
  ManualClock clock{1000000000};
  std::shared_ptr<Aggregator> aggregator;
  std::deque<Member> members;
  std::vector<RoundReport> reports;
  std::vector<std::vector<float>> means;  // on_aggregate's, per round
  std::size_t most_connected = 0, most_connected_all = 0;  // this rank's, every rank's (after a Tick)
  std::unique_ptr<AggregatorCheckpoint> checkpoint;        // rank 0's latest
  // With a close worker: the job handed over, the Ticks it has been out,
  // and the Ticks the other ranks were refused a round meanwhile.
  std::function<void()> close_job;
  int held_ticks = 0;
  std::size_t close_jobs = 0;

  Rank(const AggregatorConfig& config, const KeyStore& keys, const Blobs& train, const Blobs& test,
       AggregatorTier* tier, bool evaluate, bool close_worker = false) {
    AggregatorHooks hooks;
    hooks.on_round = [this](const RoundReport& r) { reports.push_back(r); };
    hooks.on_aggregate = [this](uint32_t, const std::vector<float>& mean) { means.push_back(mean); };
    hooks.tier = tier;
    if (evaluate) {
      hooks.on_checkpoint = [this](const AggregatorCheckpoint& c) { checkpoint = std::make_unique<AggregatorCheckpoint>(c); };
    }
    if (close_worker) {
      hooks.on_close_job = [this](std::function<void()> job) {
        close_job = std::move(job);
        close_jobs++;
      };
    }
    Result<std::shared_ptr<Aggregator>> created =
        Aggregator::Create(config, keys, TestCrypto(), clock, evaluate ? &test.view : nullptr, hooks);
    REQUIRE_MESSAGE(created.ok(), created.status().ToString());
    aggregator = std::move(*created);
    (void)train;
  }
  ~Rank() {
    aggregator->Abort(Status(StatusCode::kCancelled, "test over"));
    for (Member& m : members) m.pipe->Pump();
  }

  void AddDevice(int index, const Blobs& train) {
    members.emplace_back();
    Member& m = members.back();
    m.id = DeviceId(index);
    const std::size_t quarter = train.view.count / 4;
    for (std::size_t i = 0; i < quarter; ++i) m.share.push_back(static_cast<uint32_t>((index % 4) * quarter + i));
    m.model = std::make_unique<Model>(Model::Create(kModel, 1).value());
    DeviceClientConfig config;
    config.device_id = m.id;
    KeyStore own = KeyStore::Parse(m.id + " " + HexKey(index) + "\n").value();
    config.key = *own.Find(m.id);
    config.batch = 16;
    config.shuffle_seed = 7 + static_cast<uint64_t>(index);
    m.client = DeviceClient::Create(config, *m.model, train.view, &m.share, TestCrypto()).value();
    m.link = std::make_shared<DeviceConnectionHandler>(*m.client);
    m.pipe = MemoryPipe::Create(aggregator, m.link, aggregator->connection_options(), clock).value();
    REQUIRE(m.client->Start(m.pipe->b()).ok());
  }

  // Moves bytes, trains, ticks (a collective with a tier), until the
  // training is over; every rank's loop runs the same number of Ticks.
  void Run() {
    for (int guard = 0; guard < 100000 && !aggregator->finished(); ++guard) {
      for (Member& m : members) {
        m.pipe->Pump();
        while (m.client->has_work() && !m.pipe->b().closed()) REQUIRE(m.client->Work(m.pipe->b(), 0).ok());
        m.pipe->Pump();
      }
      aggregator->Tick();
      // A close job stays out for four Ticks (every rank keeps ticking: the
      // others must not start the next round meanwhile), then runs on a
      // thread of its own.
      if (close_job && ++held_ticks > 4) {
        std::thread worker(std::move(close_job));
        close_job = nullptr;
        worker.join();
        held_ticks = 0;
        aggregator->CloseJobDone();
      }
      most_connected = std::max(most_connected, aggregator->connected_devices());
      most_connected_all = std::max(most_connected_all, aggregator->all_connected_devices());
    }
    REQUIRE(aggregator->finished());
    for (Member& m : members) m.pipe->Pump();
  }
};

AggregatorConfig Config(const std::string& codec) {
  AggregatorConfig c;
  c.model = kModel;
  c.codec = codec;
  c.rounds = 5;
  c.min_devices = kDevices;
  c.local_epochs = 1;
  c.learning_rate = 0.1f;
  c.sampling.fraction = 0.75;  // 6 of 8 a round: who is sampled must not depend on the shards
  return c;
}

struct Outcome {
  std::vector<std::vector<float>> models;  // per rank
  std::vector<RoundReport> reports;        // rank 0's
  std::vector<std::vector<std::vector<float>>> means;  // per rank, per round: the combined update
  std::vector<std::size_t> most_connected, most_connected_all;  // per rank
  std::unique_ptr<AggregatorCheckpoint> checkpoint;             // rank 0's last
  std::size_t close_jobs = 0;                                    // rank 0's
};

// K ranks (K = 0: one engine without a tier), every device on its shard;
// with `close_worker`, rank 0 hands its close jobs out and holds them.
Outcome Train(const AggregatorConfig& config, int ranks, bool close_worker = false) {
  std::string text;
  for (int i = 0; i < kDevices; ++i) text += DeviceId(i) + " " + HexKey(i) + "\n";
  const KeyStore keys = KeyStore::Parse(text).value();
  const Blobs train(480, 1), test(240, 2);
  const int k = ranks == 0 ? 1 : ranks;
  Hub hub(k);
  std::vector<std::unique_ptr<ThreadTier>> tiers;
  std::vector<std::unique_ptr<Rank>> engines;
  for (int r = 0; r < k; ++r) {
    tiers.push_back(std::make_unique<ThreadTier>(hub, r, k));
    engines.push_back(std::make_unique<Rank>(config, keys, train, test, ranks == 0 ? nullptr : tiers.back().get(),
                                             r == 0, close_worker && r == 0));
  }
  for (int i = 0; i < kDevices; ++i) engines[static_cast<std::size_t>(ShardOfDevice(DeviceId(i), k))]->AddDevice(i, train);
  std::vector<std::thread> threads;
  for (auto& engine : engines) threads.emplace_back([&engine] { engine->Run(); });
  for (std::thread& t : threads) t.join();
  Outcome outcome;
  for (auto& engine : engines) {
    const Model& m = engine->aggregator->model();
    outcome.models.emplace_back(m.parameters(), m.parameters() + m.parameter_count());
    outcome.means.push_back(engine->means);
    outcome.most_connected.push_back(engine->most_connected);
    outcome.most_connected_all.push_back(engine->most_connected_all);
  }
  outcome.checkpoint = std::move(engines[0]->checkpoint);
  outcome.close_jobs = engines[0]->close_jobs;
  outcome.reports = engines[0]->reports;
  return outcome;
}

double RelativeDistance(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

TEST_CASE("aggregator tier: the shards of eight devices spread over the ranks, each device on one") {
  for (int k : {1, 2, 3, 4}) {
    std::vector<int> count(static_cast<std::size_t>(k), 0);
    for (int i = 0; i < 1000; ++i) count[static_cast<std::size_t>(ShardOfDevice(DeviceId(i), k))]++;
    for (int c : count) CHECK(c > 1000 / k / 2);
  }
  // Consistent: going from 3 ranks to 4 moves only devices to the new rank.
  for (int i = 0; i < 1000; ++i) {
    const int before = ShardOfDevice(DeviceId(i), 3), after = ShardOfDevice(DeviceId(i), 4);
    CHECK((after == before || after == 3));
  }
}

TEST_CASE("aggregator tier: round partials round-trip, merge in rank order and refuse bad bytes") {
  RoundPartial a, b;
  a.sum = {1.0, 2.0};
  a.weight = 3;
  a.count = 1;
  a.updates = 1;
  a.levels.count = 2;
  a.levels.bucket_norms = {2.0f};
  b.sum = {0.5, -1.0};
  b.weight = 1;
  b.count = 1;
  b.updates = 1;
  ShardUpdate u;
  u.device_id = "dev-1";
  u.payload = {1, 2, 3};
  u.wire_bytes = 3;
  b.received.push_back(u);
  Result<RoundPartial> back = DecodeRoundPartial(EncodeRoundPartial(b));
  REQUIRE(back.ok());
  CHECK(back->sum == b.sum);
  REQUIRE(back->received.size() == 1);
  CHECK(back->received[0].payload == u.payload);
  CHECK(back->received[0].wire_bytes == 3);
  REQUIRE(MergeRoundPartial(&a, *back).ok());
  CHECK(a.sum == std::vector<double>{1.5, 1.0});
  CHECK(a.weight == 4);
  CHECK(a.count == 2);
  CHECK(a.levels.count == 2);
  CHECK(a.received.size() == 1);
  RoundPartial other;
  other.sum = {1.0};
  CHECK(MergeRoundPartial(&a, other).code() == StatusCode::kInvalidArgument);
  std::vector<uint8_t> bytes = EncodeRoundPartial(b);
  for (std::size_t cut : {std::size_t{0}, std::size_t{3}, bytes.size() / 2, bytes.size() - 1}) {
    CHECK(DecodeRoundPartial(std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(cut))).status().code() ==
          StatusCode::kCorrupt);
  }
}

TEST_CASE("aggregator tier: while rank 0's close job is out no rank starts a round; the ranks train what one engine "
          "does") {
  for (const char* codec : {"fp32", "ndqsg"}) {
    CAPTURE(codec);
    AggregatorConfig config = Config(codec);
    const Outcome one = Train(config, 0);
    const Outcome tier = Train(config, 3, /*close_worker=*/true);
    CHECK(tier.close_jobs == 5);
    REQUIRE(tier.reports.size() == one.reports.size());
    for (std::size_t r = 0; r < one.reports.size(); ++r) {
      CHECK(tier.reports[r].applied);
      CHECK(tier.reports[r].updates == one.reports[r].updates);
      CHECK(tier.reports[r].test_accuracy == doctest::Approx(one.reports[r].test_accuracy));
    }
    for (const std::vector<float>& model : tier.models) {
      CHECK(model == tier.models[0]);
      CHECK(RelativeDistance(model, one.models[0]) < 1e-6);
    }
    REQUIRE(tier.checkpoint);
    CHECK(tier.checkpoint->round == 5);
  }
}

TEST_CASE("aggregator tier: two or three ranks train the model one engine trains, to 1e-6 relative") {
  for (const char* codec : {"fp32", "ndqsg", "alq:bits=3"}) {
    CAPTURE(codec);
    const Outcome one = Train(Config(codec), 0);
    REQUIRE(one.reports.size() == 5);
    for (int k : {2, 3}) {
      CAPTURE(k);
      const Outcome tier = Train(Config(codec), k);
      REQUIRE(tier.reports.size() == 5);
      for (std::size_t r = 0; r < 5; ++r) {
        CHECK(tier.reports[r].applied);
        CHECK(tier.reports[r].sampled == one.reports[r].sampled);
        CHECK(tier.reports[r].updates == one.reports[r].updates);
        CHECK(tier.reports[r].bytes_up == one.reports[r].bytes_up);
        CHECK(tier.reports[r].level_table_version == one.reports[r].level_table_version);
      }
      // Every rank holds the same global model, and it is the one engine's.
      for (const std::vector<float>& model : tier.models) {
        CHECK(model == tier.models[0]);
        CHECK(RelativeDistance(model, one.models[0]) < 1e-6);
      }
    }
  }
}

AggregatorConfig DpConfig(uint64_t noise_seed) {
  AggregatorConfig c = Config("fp32");
  c.dp.noise_multiplier = 1.0;
  c.dp.clip = 0.5;
  c.dp.noise_seed = noise_seed;
  return c;
}

TEST_CASE("aggregator tier: under DP the ranks train one engine's model, the noise added once by rank 0") {
  const Outcome one = Train(DpConfig(11), 0);
  REQUIRE(one.reports.size() == 5);
  for (int k : {2, 3}) {
    CAPTURE(k);
    const Outcome tier = Train(DpConfig(11), k);
    REQUIRE(tier.reports.size() == 5);
    for (std::size_t r = 0; r < 5; ++r) {
      CHECK(tier.reports[r].updates == one.reports[r].updates);
      CHECK(tier.reports[r].dp_sampling_rate == one.reports[r].dp_sampling_rate);
      CHECK(tier.reports[r].dp_epsilon == doctest::Approx(one.reports[r].dp_epsilon));
    }
    // The same noise (rank 0's key, the single engine's) and the same clipped
    // sum: noise drawn per rank, or by every rank, would not give this.
    for (const std::vector<float>& model : tier.models) {
      CHECK(model == tier.models[0]);
      CHECK(RelativeDistance(model, one.models[0]) < 1e-6);
    }
  }
  // The noise's scale: round 1 starts from the same model with either key,
  // so two keys' means differ by the noise alone, N(0, 2 (z C / n)^2) per
  // coordinate with n = 6 sampled devices. Noise drawn on both of two ranks
  // would be sqrt(2) times that.
  const Outcome a = Train(DpConfig(11), 2), b = Train(DpConfig(12), 2);
  REQUIRE(!a.means[0].empty());
  REQUIRE(!b.means[0].empty());
  const std::vector<float>& ma = a.means[0][0];
  const std::vector<float>& mb = b.means[0][0];
  REQUIRE(ma.size() == mb.size());
  double sum_sq = 0;
  for (std::size_t i = 0; i < ma.size(); ++i) sum_sq += (static_cast<double>(ma[i]) - mb[i]) * (static_cast<double>(ma[i]) - mb[i]);
  const double measured = std::sqrt(sum_sq / static_cast<double>(ma.size()));
  const double expected = std::sqrt(2.0) * 1.0 * 0.5 / 6.0;
  CHECK(measured == doctest::Approx(expected).epsilon(0.15));
  CHECK(a.means[1][0] == ma);  // rank 1 applied rank 0's noised mean
}

TEST_CASE("aggregator tier: rank 0 counts every rank's devices and checkpoints every shard's download state") {
  AggregatorConfig config = Config("fp32");
  config.downlink_codec = "dqsg";
  const Outcome one = Train(config, 0);
  REQUIRE(one.checkpoint);
  CHECK(one.most_connected_all[0] == kDevices);
  const Outcome tier = Train(config, 2);
  REQUIRE(tier.checkpoint);
  // Each rank serves a part; every rank sees the whole (what /metrics shows).
  CHECK(tier.most_connected[0] < kDevices);
  CHECK(tier.most_connected[0] + tier.most_connected[1] == kDevices);
  CHECK(tier.most_connected_all[0] == kDevices);
  CHECK(tier.most_connected_all[1] == kDevices);
  // The devices' acknowledged rounds, of both shards, as one engine has them.
  CHECK(tier.checkpoint->synced.size() > one.checkpoint->synced.size() / 2);
  CHECK(tier.checkpoint->synced == one.checkpoint->synced);
  CHECK(tier.checkpoint->device_model_round == one.checkpoint->device_model_round);
}

TEST_CASE("aggregator tier: a device that joins another rank is told where its shard is") {
  std::string text;
  for (int i = 0; i < kDevices; ++i) text += DeviceId(i) + " " + HexKey(i) + "\n";
  const KeyStore keys = KeyStore::Parse(text).value();
  const Blobs train(480, 1), test(240, 2);
  Hub hub(2);
  ThreadTier tier(hub, 0, 2);
  Rank rank(Config("fp32"), keys, train, test, &tier, true);
  int wrong = 0;
  while (ShardOfDevice(DeviceId(wrong), 2) == 0) wrong++;
  rank.AddDevice(wrong, train);
  Member& m = rank.members.back();
  for (int i = 0; i < 10; ++i) {
    m.pipe->Pump();
    while (m.client->has_work()) (void)m.client->Work(m.pipe->b(), 0);
  }
  CHECK(m.pipe->b().closed());
  CHECK(rank.aggregator->connected_devices() == 0);
  CHECK(m.client->redirect() == "rank-1:1");
}

AggregatorConfig RobustConfig(const std::string& codec, const std::string& rule, double clip) {
  AggregatorConfig c = Config(codec);
  c.aggregation = ParseAggregationRule(rule).value();
  c.clip_update_norm = clip;
  c.sampling.fraction = 1.0;  // multi-krum:2 needs 7 updates a round
  return c;
}

TEST_CASE("aggregator tier: robust rules and clipping across two or three ranks give one engine's model bits") {
  struct Case {
    const char* codec;
    const char* rule;
    double clip;
  };
  // The clip is below most updates' norm (the reports' clipped counts say so).
  const Case cases[] = {{"fp32", "median", 0},         {"fp32", "trimmed-mean:0.25", 0},
                        {"fp32", "multi-krum:2", 0},   {"fp32", "krum:1", 0},
                        {"fp32", "median", 0.05},      {"fp32", "multi-krum:2", 0.05},
                        {"alq:bits=3", "trimmed-mean:0.25", 0.05}, {"ndqsg", "median", 0.05}};
  for (const Case& c : cases) {
    CAPTURE(c.codec);
    CAPTURE(c.rule);
    CAPTURE(c.clip);
    const AggregatorConfig config = RobustConfig(c.codec, c.rule, c.clip);
    const Outcome one = Train(config, 0);
    REQUIRE(one.reports.size() == 5);
    std::size_t clipped = 0;
    for (const RoundReport& r : one.reports) clipped += r.clipped;
    if (c.clip > 0) CHECK(clipped > 0);
    for (int k : {2, 3}) {
      CAPTURE(k);
      const Outcome tier = Train(config, k);
      REQUIRE(tier.reports.size() == 5);
      for (std::size_t r = 0; r < 5; ++r) {
        CHECK(tier.reports[r].applied);
        CHECK(tier.reports[r].updates == one.reports[r].updates);
        CHECK(tier.reports[r].clipped == one.reports[r].clipped);
        CHECK(tier.reports[r].selected == one.reports[r].selected);
        // Krum's choice, as device ids: rank 0 knows every rank's devices.
        if (std::string(c.rule).find("krum") != std::string::npos) CHECK(!one.reports[r].selected.empty());
      }
      // The same updates, clipped where they were decoded, in the same order
      // at rank 0: the same bits, on every rank.
      for (const std::vector<float>& model : tier.models) CHECK(model == one.models[0]);
    }
  }
}

TEST_CASE("aggregator tier: with mean, updates are clipped on their rank before the sum") {
  const AggregatorConfig config = RobustConfig("fp32", "mean", 0.05);
  const Outcome one = Train(config, 0);
  const Outcome tier = Train(config, 3);
  REQUIRE(tier.reports.size() == one.reports.size());
  for (std::size_t r = 0; r < one.reports.size(); ++r) {
    CHECK(one.reports[r].clipped > 0);
    CHECK(tier.reports[r].clipped == one.reports[r].clipped);
  }
  for (const std::vector<float>& model : tier.models) {
    CHECK(model == tier.models[0]);
    CHECK(RelativeDistance(model, one.models[0]) < 1e-6);
  }
  // Without the clip the model differs: the clip did something.
  CHECK(RelativeDistance(Train(RobustConfig("fp32", "mean", 0), 0).models[0], one.models[0]) > 1e-3);
}

// Runs `body(tier)` on `ranks` threads, one ThreadTier each.
void OnRanks(int ranks, bool plain, const std::function<void(ThreadTier&)>& body) {
  Hub hub(ranks);
  std::vector<std::unique_ptr<ThreadTier>> tiers;
  for (int r = 0; r < ranks; ++r) tiers.push_back(std::make_unique<ThreadTier>(hub, r, ranks, plain));
  std::vector<std::thread> threads;
  for (auto& tier : tiers) threads.emplace_back([&body, &tier] { body(*tier); });
  for (std::thread& t : threads) t.join();
}

TEST_CASE("aggregator tier: the round sums add as a reduce-scatter and an all-gather, O(d) bytes a rank, with the "
          "bits of the rank-order merge") {
  constexpr int kRanks = 4;
  constexpr std::size_t kD = 10007;  // not a multiple of the ranks
  std::vector<RoundPartial> partials(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    RoundPartial& p = partials[static_cast<std::size_t>(r)];
    p.sum.resize(kD);
    // Values whose sum depends on the order of addition.
    for (std::size_t i = 0; i < kD; ++i) {
      const double mantissa = (1.0 + 0.1 * static_cast<double>(i % 7)) * (r % 2 != 0 ? -1.0 : 1.0);
      p.sum[i] = std::ldexp(mantissa, (r * 17 + static_cast<int>(i % 60)) % 60 - 30);
    }
    p.weight = r + 1;
    p.count = 1;
    p.updates = 1;
  }
  RoundPartial expected;
  for (const RoundPartial& p : partials) REQUIRE(MergeRoundPartial(&expected, p).ok());
  for (bool plain : {false, true}) {
    CAPTURE(plain);
    std::vector<RoundPartial> combined(kRanks);
    std::vector<std::size_t> received(kRanks);
    OnRanks(kRanks, plain, [&](ThreadTier& tier) {
      const auto r = static_cast<std::size_t>(tier.rank());
      Result<RoundPartial> all = CombineRoundPartials(tier, partials[r]);
      REQUIRE(all.ok());
      combined[r] = std::move(*all);
      received[r] = tier.received;
    });
    for (int r = 0; r < kRanks; ++r) {
      const RoundPartial& c = combined[static_cast<std::size_t>(r)];
      CHECK(c.sum == expected.sum);  // bit for bit
      CHECK(c.weight == expected.weight);
      CHECK(c.count == kRanks);
      // Each rank receives its slice from every rank and every added slice:
      // about 2 d doubles, where gathering every rank's sum is K d.
      if (!plain) CHECK(received[static_cast<std::size_t>(r)] < 2 * kD * 8 + 4096);
    }
  }
  // Sums of different lengths are refused on every rank (none waits).
  OnRanks(2, false, [&](ThreadTier& tier) {
    RoundPartial p;
    p.sum.assign(tier.rank() == 0 ? 4 : 5, 1.0);
    CHECK(CombineRoundPartials(tier, p).status().code() == StatusCode::kInvalidArgument);
  });
}

TEST_CASE("aggregator tier: AllToAll and GatherToRank0 built on AllGather deliver what the native ones do") {
  constexpr int kRanks = 3;
  for (bool plain : {false, true}) {
    CAPTURE(plain);
    OnRanks(kRanks, plain, [&](ThreadTier& tier) {
      const auto me = static_cast<uint8_t>(tier.rank());
      std::vector<Bytes> to;
      for (uint8_t j = 0; j < kRanks; ++j) {
        to.push_back(Bytes(static_cast<std::size_t>(me + j), static_cast<uint8_t>(10 * me + j)));
      }
      std::vector<Bytes> from;
      REQUIRE(tier.AllToAll(to, &from).ok());
      REQUIRE(from.size() == kRanks);
      for (uint8_t i = 0; i < kRanks; ++i) {
        CHECK(from[i] == Bytes(static_cast<std::size_t>(i + me), static_cast<uint8_t>(10 * i + me)));
      }
      std::vector<Bytes> all{Bytes{1}};
      REQUIRE(tier.GatherToRank0(Bytes(me, me), &all).ok());
      if (me == 0) {
        REQUIRE(all.size() == kRanks);
        for (uint8_t i = 0; i < kRanks; ++i) CHECK(all[i] == Bytes(i, i));
      } else {
        CHECK(all.empty());
      }
    });
  }
}

}  // namespace
}  // namespace fedrt
