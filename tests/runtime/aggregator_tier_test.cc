// The aggregator tier without MPI: K aggregator engines, one thread each (the
// Gloo habit), joined by an in-process AllGather, each serving its shard of
// eight device engines over memory pipes on its own manual clock. The global
// model after five rounds must equal one engine's with all eight devices to
// 1e-6 relative, for fp32 and for NDQSG (which gathers the updates), and with
// ALQ (whose statistics are merged across the ranks).
#include <doctest/doctest.h>

#include <cmath>
#include <condition_variable>
#include <deque>
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

// AllGather over threads: the last rank to arrive publishes every rank's
// bytes and wakes the others.
class Hub {
 public:
  explicit Hub(int ranks) : slots_(static_cast<std::size_t>(ranks)) {}
  void AllGather(int rank, const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) {
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
    *all = published_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<uint8_t>> slots_, published_;
  std::size_t arrived_ = 0;
  uint64_t generation_ = 0;
};

class ThreadTier : public AggregatorTier {
 public:
  ThreadTier(Hub& hub, int rank, int size) : hub_(hub), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status AllGather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) override {
    hub_.AllGather(rank_, mine, all);
    return Status::Ok();
  }
  std::string AddressOf(int rank) const override { return "rank-" + std::to_string(rank) + ":1"; }

 private:
  Hub& hub_;
  int rank_, size_;
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

  Rank(const AggregatorConfig& config, const KeyStore& keys, const Blobs& train, const Blobs& test,
       AggregatorTier* tier, bool evaluate) {
    AggregatorHooks hooks;
    hooks.on_round = [this](const RoundReport& r) { reports.push_back(r); };
    hooks.tier = tier;
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
};

// K ranks (K = 0: one engine without a tier), every device on its shard.
Outcome Train(const AggregatorConfig& config, int ranks) {
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
                                             r == 0));
  }
  for (int i = 0; i < kDevices; ++i) engines[static_cast<std::size_t>(ShardOfDevice(DeviceId(i), k))]->AddDevice(i, train);
  std::vector<std::thread> threads;
  for (auto& engine : engines) threads.emplace_back([&engine] { engine->Run(); });
  for (std::thread& t : threads) t.join();
  Outcome outcome;
  for (auto& engine : engines) {
    const Model& m = engine->aggregator->model();
    outcome.models.emplace_back(m.parameters(), m.parameters() + m.parameter_count());
  }
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

TEST_CASE("aggregator tier: an engine refuses a tier with a rule or DP it cannot carry across ranks") {
  const KeyStore keys = KeyStore::Parse(DeviceId(0) + " " + HexKey(0) + "\n").value();
  Hub hub(1);
  ThreadTier tier(hub, 0, 1);
  ManualClock clock(1);
  AggregatorHooks hooks;
  hooks.tier = &tier;
  AggregatorConfig config = Config("fp32");
  config.aggregation.kind = AggregationKind::kMedian;
  CHECK(Aggregator::Create(config, keys, TestCrypto(), clock, nullptr, hooks).status().code() ==
        StatusCode::kInvalidArgument);
  config = Config("fp32");
  config.dp.noise_multiplier = 1;
  config.dp.clip = 1;
  CHECK(Aggregator::Create(config, keys, TestCrypto(), clock, nullptr, hooks).status().code() ==
        StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedrt
