// The aggregator engine without sockets: an Aggregator and DeviceClient
// engines joined by MemoryPipes, driven step by step on one thread with a
// ManualClock, on Gaussian blobs made here (16 features, 4 classes, a tiny
// mlp). Nothing waits for real time: deadlines pass when the test moves the
// clock.
#include <doctest/doctest.h>

#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fedrt/platform/config.h"
#if FEDRT_HAVE_THREADS
#include <future>
#include <thread>
#endif

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/codecs/tensor_set.h"
#include "fedrt/platform/clock.h"
#include "fedrt/platform/log.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/runtime/aggregator_engine.h"
#include "fedrt/runtime/device_client.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/privacy.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/chunking.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/join.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/stream.h"
#include "allocation_counter.h"
#include "engine_fixtures.h"
#include "star/aggregator_checkpoint.h"
#include "temp_dir.h"
#include "test_crypto.h"

namespace fedrt {
namespace {

using namespace transport;  // NOLINT
using testing::Blobs;
using testing::HexKey;

constexpr const char* kModel = "mlp:16-8-4";
constexpr uint32_t kDeadlineMs = 5000;

std::string DeviceId(int i) { return "dev-" + std::to_string(i); }


// Collects what the library logs while it lives (the aggregator logs why it
// closed a connection).
struct LogCapture {
  std::vector<std::string> lines;
  LogCapture() { SetLogHook(&LogCapture::Hook, this); }
  ~LogCapture() { SetLogHook(nullptr, nullptr); }
  static void Hook(LogLevel, const char* message, void* self) {
    static_cast<LogCapture*>(self)->lines.push_back(message);
  }
  std::size_t Count(const std::string& text) const {
    std::size_t n = 0;
    for (const std::string& line : lines) n += line.find(text) != std::string::npos ? 1 : 0;
    return n;
  }
};

// A connection that never joins: it only records its close.
struct SilentLink : ConnectionHandler {
  bool closed = false;
  Status close_reason;
  void OnFrame(Connection&, Frame) override {}
  void OnClose(Connection&, const Status& reason) override {
    closed = true;
    close_reason = reason;
  }
};

struct Member {
  std::string id;
  std::vector<uint32_t> share;
  std::unique_ptr<Model> model;
  std::unique_ptr<DeviceClient> client;
  std::shared_ptr<DeviceConnectionHandler> link;
  std::unique_ptr<MemoryPipe> pipe;  // a: the aggregator's side, b: the device's
  std::map<uint32_t, std::vector<float>> held;  // the global model it held for each round
  bool silent = false;               // receives, never trains or answers
  bool cut = false;                  // its pipe moves nothing (a link slower than the rounds)
};

// An aggregator and `devices` device engines over memory pipes.
struct Federation {
  ManualClock clock{1000000000};
  KeyStore keys;
  Blobs train{480, 1};
  Blobs test{240, 2};
  std::shared_ptr<Aggregator> aggregator;
  std::deque<Member> members;  // references stay valid as devices are added
  std::vector<RoundReport> reports;
  std::vector<std::vector<float>> aggregates;  // the combined update of every round, before the optimizer
  std::vector<AggregatorCheckpoint> checkpoints;
  uint32_t restored_rounds = 0;  // rounds of a checkpoint the test restored
  std::map<std::pair<uint32_t, std::string>, int> instructions_sent;  // (round, device) -> times
  std::map<std::pair<uint32_t, std::string>, std::vector<uint8_t>> instructions;  // the last frames sent
  std::map<uint32_t, std::vector<float>> broadcasts;  // with a downlink codec: the devices' model per round

  bool devices_measure = false;  // devices report their compute time (on `clock`)
  std::size_t settle_until_reports = SIZE_MAX;  // Settle() returns once this many rounds closed
  // With a close worker (on_close_job): the job handed over and not run
  // yet, how many were, and whether Settle() leaves it out (the test runs it).
  std::function<void()> close_job;
  std::size_t close_jobs = 0;
  bool hold_close_job = false;
  std::function<void()> checkpoint_wait;  // called first in on_checkpoint (on the job's thread)

  Federation(AggregatorConfig config, int devices, bool measure = false, bool close_worker = false)
      : devices_measure(measure) {
    std::string text;
    for (int i = 0; i < 8; ++i) text += DeviceId(i) + " " + HexKey(i) + "\n";
    keys = KeyStore::Parse(text).value();
    AggregatorHooks hooks;
    hooks.on_round = [this](const RoundReport& r) { reports.push_back(r); };
    hooks.on_aggregate = [this](uint32_t, const std::vector<float>& mean) { aggregates.push_back(mean); };
    hooks.on_checkpoint = [this](const AggregatorCheckpoint& c) {
      if (checkpoint_wait) checkpoint_wait();
      std::size_t applied = 0;
    for (const RoundReport& r : reports) applied += r.applied ? 1 : 0;
    CHECK(c.round == restored_rounds + applied + 1);  // before the round's report
      checkpoints.push_back(c);
    };
    hooks.on_instructions = [this](uint32_t round, const std::string& device, const std::vector<uint8_t>& bytes) {
      instructions_sent[{round, device}]++;
      instructions[{round, device}] = bytes;
    };
    hooks.on_broadcast = [this](uint32_t round, const std::vector<float>& model) { broadcasts[round] = model; };
    if (close_worker) {
      hooks.on_close_job = [this](std::function<void()> job) {
        CHECK_FALSE(close_job);  // one at a time
        close_job = std::move(job);
        close_jobs++;
      };
    }
    Result<std::shared_ptr<Aggregator>> created =
        Aggregator::Create(config, keys, TestCrypto(), clock, &test.view, hooks);
    REQUIRE_MESSAGE(created.ok(), created.status().ToString());
    aggregator = std::move(*created);
    for (int i = 0; i < devices; ++i) AddDevice(i, HexKey(i));
  }
  ~Federation() {
    if (close_job) RunCloseJob();
    aggregator->Abort(Status(StatusCode::kCancelled, "test over"));
    for (Member& m : members) {
      if (m.pipe) m.pipe->Pump();
    }
  }

  Member& AddDevice(int index, const std::string& hex_key, const std::string& id = "") {
    members.emplace_back();  // first: the client keeps pointers to the share and the model
    Member& m = members.back();
    m.id = id.empty() ? DeviceId(index) : id;
    // A quarter of the examples, every class in it (labels cycle).
    const std::size_t quarter = train.view.count / 4;
    for (std::size_t i = 0; i < quarter; ++i) m.share.push_back(static_cast<uint32_t>((index % 4) * quarter + i));
    m.model = std::make_unique<Model>(Model::Create(kModel, 1).value());
    DeviceClientConfig config;
    config.device_id = m.id;
    Result<KeyStore> own = KeyStore::Parse(m.id + " " + hex_key + "\n");
    REQUIRE(own.ok());
    config.key = *own->Find(m.id);
    config.batch = 16;
    config.shuffle_seed = 7 + static_cast<uint64_t>(index);
    if (devices_measure) config.clock = &clock;
    DeviceHooks hooks;
    hooks.on_model = [&m](uint32_t round, const float* model, std::size_t d) {
      m.held[round].assign(model, model + d);
    };
    Result<std::unique_ptr<DeviceClient>> client =
        DeviceClient::Create(config, *m.model, train.view, &m.share, TestCrypto(), std::move(hooks));
    REQUIRE_MESSAGE(client.ok(), client.status().ToString());
    m.client = std::move(*client);
    Connect(m);
    return m;
  }

  // A fresh pipe to the aggregator and the device's Join on it.
  void Connect(Member& m) {
    m.link = std::make_shared<DeviceConnectionHandler>(*m.client);
    Result<std::unique_ptr<MemoryPipe>> pipe =
        MemoryPipe::Create(aggregator, m.link, aggregator->connection_options(), clock);
    REQUIRE(pipe.ok());
    m.pipe = std::move(*pipe);
    REQUIRE(m.client->Start(m.pipe->b()).ok());
  }

  Member& Find(const std::string& id) {
    for (Member& m : members) {
      if (m.id == id) return m;
    }
    FAIL("no member " << id);
    return members.front();
  }

  // A member that receives but never trains or answers (until told otherwise).
  Member& Silence(const std::string& id) {
    Member& m = Find(id);
    m.silent = true;
    return m;
  }

  // The close job on a thread of its own, as a host's worker runs it (where
  // there are threads), then CloseJobDone() on this (the driving) thread.
  void RunCloseJob() {
    REQUIRE(aggregator->closing());
    std::function<void()> job = std::move(close_job);
    close_job = nullptr;
#if FEDRT_HAVE_THREADS
    std::thread worker(std::move(job));
    worker.join();
#else
    job();
#endif
    aggregator->CloseJobDone();
    CHECK_FALSE(aggregator->closing());
  }

  // Moves bytes only (no training, no Tick).
  void Pump(bool reverse = false) {
    for (std::size_t k = 0; k < members.size(); ++k) {
      Member& m = members[reverse ? members.size() - 1 - k : k];
      if (m.pipe) m.pipe->Pump();
    }
  }

  // Moves bytes, trains and ticks until nothing changes (the time stands still).
  void Settle(bool reverse = false) {
    for (int guard = 0; guard < 100000; ++guard) {
      bool moved = false;
      for (std::size_t k = 0; k < members.size(); ++k) {
        Member& m = members[reverse ? members.size() - 1 - k : k];
        if (m.cut) continue;
        if (m.pipe && m.pipe->Pump()) moved = true;
        if (!m.silent && m.pipe && m.client->has_work() && !m.pipe->b().closed()) {
          const Status worked = m.client->Work(m.pipe->b(), 0);
          REQUIRE_MESSAGE(worked.ok(), worked.ToString());
          moved = true;
        }
      }
      if (aggregator->Tick() == 0) moved = true;
      if (close_job && !hold_close_job) {
        RunCloseJob();
        moved = true;
      }
      if (reports.size() >= settle_until_reports) return;
      for (Member& m : members) {
        if (!m.cut && m.pipe && m.pipe->Pump()) moved = true;  // what Tick sent (a round's instructions)
      }
      if (!moved) return;
    }
    FAIL("the federation never settled");
  }
};

// Two models with the same parameters, bit for bit.
bool SameBits(const Model& a, const Model& b) {
  return a.parameter_count() == b.parameter_count() &&
         std::memcmp(a.parameters(), b.parameters(), a.parameter_count() * sizeof(float)) == 0;
}

AggregatorConfig Config(const std::string& codec, uint32_t rounds, std::size_t min_devices) {
  AggregatorConfig c;
  c.model = kModel;
  c.codec = codec;
  c.rounds = rounds;
  c.min_devices = min_devices;
  c.round_deadline_ms = kDeadlineMs;
  c.local_epochs = 2;
  c.learning_rate = 0.1f;
  c.join_timeout_ms = 2000;
  return c;
}

TEST_CASE("aggregator engine: rounds over memory pipes complete and report the test accuracy and loss") {
  Federation f(Config("dqsg", 4, 3), 3);
  f.Settle();
  REQUIRE(f.aggregator->finished());
  REQUIRE(f.reports.size() == 4);
  for (std::size_t r = 0; r < f.reports.size(); ++r) {
    CHECK(f.reports[r].round == r + 1);
    CHECK(f.reports[r].sampled == 3);
    CHECK(f.reports[r].updates == 3);
    CHECK(f.reports[r].rejected == 0);
    CHECK(f.reports[r].test_loss > 0);
    CHECK(f.reports[r].train_loss > 0);
    CHECK(f.reports[r].bytes_up > 0);
    CHECK(f.reports[r].bytes_up < f.reports[r].fp32_bytes_up);  // dqsg compresses
  }
  // Chance is 25%; the blobs are learnable.
  CHECK(f.reports.back().test_accuracy > 0.9);
  CHECK(f.reports.back().test_loss < f.reports.front().test_loss);
  CHECK(f.aggregator->round() == 4);
  // The devices were told to leave, and every connection is closed.
  for (const Member& m : f.members) CHECK(m.client->finished());
  CHECK(f.aggregator->open_connections() == 0);
  // One checkpoint per round, the last holding the final model.
  REQUIRE(f.checkpoints.size() == 4);
  const Model& model = f.aggregator->model();
  CHECK(f.checkpoints.back().parameters ==
        std::vector<float>(model.parameters(), model.parameters() + model.parameter_count()));
}

TEST_CASE("aggregator engine: the training finishes after the first round that reaches the target accuracy") {
  AggregatorConfig config = Config("dqsg", 30, 3);
  config.target_accuracy = 0.9;
  Federation f(config, 3);
  f.Settle();
  REQUIRE(f.aggregator->finished());
  REQUIRE(!f.reports.empty());
  CHECK(f.reports.size() < 30);
  CHECK(f.reports.back().test_accuracy >= 0.9);
  for (std::size_t r = 0; r + 1 < f.reports.size(); ++r) CHECK(f.reports[r].test_accuracy < 0.9);
  for (const Member& m : f.members) CHECK(m.client->finished());  // told to leave, as after the last round
}

// The round reports and checkpoints of a federation, to compare two runs
// (the clock stands still in both: their times match too).
void CheckSameRuns(const Federation& inline_run, const Federation& worker_run) {
  REQUIRE(worker_run.reports.size() == inline_run.reports.size());
  for (std::size_t r = 0; r < inline_run.reports.size(); ++r) {
    INFO("round ", r + 1);
    const RoundReport& a = inline_run.reports[r];
    const RoundReport& b = worker_run.reports[r];
    CHECK(b.round == a.round);
    CHECK(b.applied == a.applied);
    CHECK(b.updates == a.updates);
    CHECK(b.test_accuracy == a.test_accuracy);
    CHECK(b.test_loss == a.test_loss);
    CHECK(b.train_loss == a.train_loss);
    CHECK(b.bytes_up == a.bytes_up);
    CHECK(b.bytes_down == a.bytes_down);
    CHECK(b.near_wraps == a.near_wraps);
    CHECK(b.anchors == a.anchors);
    CHECK(b.level_table_version == a.level_table_version);
    CHECK(b.level_table == a.level_table);
    CHECK(b.seconds == a.seconds);
  }
  REQUIRE(worker_run.checkpoints.size() == inline_run.checkpoints.size());
  for (std::size_t r = 0; r < inline_run.checkpoints.size(); ++r) {
    CHECK(EncodeAggregatorCheckpoint(worker_run.checkpoints[r]) == EncodeAggregatorCheckpoint(inline_run.checkpoints[r]));
  }
  CHECK(SameBits(worker_run.aggregator->model(), inline_run.aggregator->model()));
  CHECK(worker_run.aggregator->round() == inline_run.aggregator->round());
  CHECK(worker_run.aggregator->finished() == inline_run.aggregator->finished());
  const AggregatorCounters& a = inline_run.aggregator->counters();
  const AggregatorCounters& b = worker_run.aggregator->counters();
  CHECK(b.rounds_completed == a.rounds_completed);
  CHECK(b.last_test_accuracy == a.last_test_accuracy);
  CHECK(b.best_test_accuracy == a.best_test_accuracy);
}

TEST_CASE("aggregator engine: a close job run on another thread gives the same models, reports and checkpoints") {
  struct Run {
    const char* codec;
    uint32_t rounds;
    bool fedadam;
    double target;
  };
  for (const Run& run : {Run{"dqsg", 4, false, 0}, Run{"ndqsg", 4, false, 0}, Run{"alq:bits=3,refit=2", 4, true, 0},
                         Run{"dqsg", 30, false, 0.9}}) {
    CAPTURE(run.codec);
    CAPTURE(run.target);
    AggregatorConfig config = Config(run.codec, run.rounds, 3);
    if (run.fedadam) {
      config.server_optimizer.kind = ServerOptimizerKind::kFedAdam;
      config.server_optimizer.learning_rate = 0.05f;
    }
    config.target_accuracy = run.target;
    Federation inline_run(config, 3);
    inline_run.Settle();
    Federation worker_run(config, 3, /*measure=*/false, /*close_worker=*/true);
    worker_run.Settle();
    REQUIRE(inline_run.aggregator->finished());
    CHECK(inline_run.close_jobs == 0);
    // Every applied round's evaluation and checkpoint went out as a job.
    CHECK(worker_run.close_jobs == worker_run.checkpoints.size());
    CHECK(worker_run.close_jobs == worker_run.reports.size());
    if (run.target > 0) CHECK(inline_run.reports.size() < run.rounds);  // the target stopped it
    CheckSameRuns(inline_run, worker_run);
  }
}

TEST_CASE("aggregator engine: while a close job is out devices join but no round starts, whatever the clock; then it "
          "goes on") {
  Federation f(Config("dqsg", 3, 2), 2, /*measure=*/false, /*close_worker=*/true);
  f.hold_close_job = true;
  f.Settle();
  REQUIRE(f.aggregator->closing());  // round 1 closed; its job is out
  REQUIRE(f.close_job);
  CHECK(f.aggregator->round() == 1);
  std::function<void()> job = std::move(f.close_job);
  f.close_job = nullptr;
#if FEDRT_HAVE_THREADS
  // The job runs on its own thread and blocks in on_checkpoint until the
  // test lets it go: nothing here depends on how long anything takes.
  std::promise<void> entered, release;
  std::future<void> in_checkpoint = entered.get_future();
  std::shared_future<void> released = release.get_future().share();
  f.checkpoint_wait = [&] {
    entered.set_value();
    released.wait();
  };
  std::thread worker(std::move(job));
  in_checkpoint.wait();
#endif
  // (Without threads the job is simply not run yet.) A new device joins and
  // the clock passes two round deadlines: the devices are served, no round
  // starts and the training does not end.
  f.AddDevice(2, HexKey(2));
  const std::size_t instructed = f.instructions_sent.size();
  for (int deadline = 0; deadline < 2; ++deadline) {
    f.clock.AdvanceMs(kDeadlineMs + 1);
    f.Settle();
    CHECK(f.aggregator->Tick() == std::numeric_limits<uint32_t>::max());  // nothing to wait for but the job
  }
  CHECK(f.aggregator->connected_devices() == 3);
  CHECK(f.aggregator->closing());
  CHECK_FALSE(f.aggregator->round_progress().open);
  CHECK_FALSE(f.aggregator->finished());
  CHECK(f.instructions_sent.size() == instructed);
  CHECK(f.reports.empty());
#if FEDRT_HAVE_THREADS
  release.set_value();
  worker.join();
#else
  job();
#endif
  CHECK(f.checkpoints.size() == 1);
  CHECK(f.reports.empty());  // reported on the driving thread, by CloseJobDone
  f.aggregator->CloseJobDone();
  CHECK_FALSE(f.aggregator->closing());
  REQUIRE(f.reports.size() == 1);
  CHECK(f.reports[0].round == 1);
  CHECK(f.reports[0].test_accuracy >= 0);
  f.checkpoint_wait = nullptr;
  f.hold_close_job = false;
  f.Settle();
  REQUIRE(f.aggregator->finished());
  REQUIRE(f.reports.size() == 3);
  CHECK(f.reports[1].sampled == 3);  // the device that joined meanwhile is in round 2
  CHECK(f.checkpoints.size() == 3);
}

TEST_CASE("aggregator engine: a round's time is split into download, compute and upload along the last update") {
  Federation f(Config("fp32", 1, 1), 1, /*measure=*/true);
  Member& m = f.members.front();
  // Join, then the round starts and its instructions wait in the pipe.
  for (int guard = 0; guard < 100 && f.instructions_sent.empty(); ++guard) {
    f.Pump();
    f.aggregator->Tick();
  }
  REQUIRE(!f.instructions_sent.empty());
  f.clock.AdvanceMs(300);  // the instructions travel: the device acknowledges them 300 ms later
  f.Pump();
  REQUIRE(m.client->has_work());
  f.clock.AdvanceMs(500);  // training and encoding
  while (m.client->has_work()) REQUIRE(m.client->Work(m.pipe->b(), 0).ok());
  f.clock.AdvanceMs(200);  // the update travels
  f.Settle();
  REQUIRE(f.reports.size() == 1);
  CHECK(f.reports[0].download_seconds == doctest::Approx(0.3));
  CHECK(f.reports[0].compute_seconds == doctest::Approx(0.5));
  CHECK(f.reports[0].upload_seconds == doctest::Approx(0.2));
  CHECK(f.reports[0].seconds == doctest::Approx(1.0));
}

TEST_CASE("aggregator engine: the global model is the same bits whatever order the devices are served in") {
  Federation forward(Config("dqsg", 3, 3), 3);
  Federation backward(Config("dqsg", 3, 3), 3);
  forward.Settle();
  backward.Settle(/*reverse=*/true);
  REQUIRE(forward.reports.size() == 3);
  REQUIRE(backward.reports.size() == 3);
  CHECK(SameBits(forward.aggregator->model(), backward.aggregator->model()));
}

TEST_CASE("aggregator engine: the round deadline closes a round without its silent device") {
  Federation f(Config("fp32", 2, 3), 3);
  Member& quiet = f.Find("dev-2");
  quiet.silent = true;
  f.Settle();
  // Round 0 is open: two updates in, the third device connected and silent.
  REQUIRE(f.reports.empty());
  CHECK(f.instructions_sent.count({0, "dev-2"}) == 1);
  CHECK(quiet.client->has_work());
  // The round started at the clock's start; its deadline is kDeadlineMs later.
  f.clock.AdvanceMs(kDeadlineMs - 1);
  CHECK(f.aggregator->Tick() == 1);
  f.Settle();
  CHECK(f.reports.empty());
  f.clock.AdvanceMs(1);
  f.Settle();
  REQUIRE(f.reports.size() == 1);
  CHECK(f.reports[0].sampled == 3);
  CHECK(f.reports[0].updates == 2);
  // Round 1 instructs the silent device again; once it answers, the round
  // closes at its quorum without waiting for the deadline.
  CHECK(f.instructions_sent.count({1, "dev-2"}) == 1);
  quiet.silent = false;
  f.Settle();
  REQUIRE(f.reports.size() == 2);
  CHECK(f.reports[1].updates == 3);
  CHECK(f.aggregator->finished());
}

TEST_CASE("aggregator engine: over-selected devices are spares: the round closes once the devices it wants answered") {
  AggregatorConfig config = Config("fp32", 1, 4);
  config.sampling.fraction = 0.5;        // wants 2 of 4
  config.sampling.over_selection = 0.5;  // samples 1 more
  Federation f(config, 4);
  for (Member& m : f.members) m.silent = true;
  f.Settle();
  std::vector<std::string> sampled;
  for (const auto& [sent, times] : f.instructions_sent) {
    if (sent.first == 0) sampled.push_back(sent.second);
  }
  REQUIRE(sampled.size() == 3);
  // Two of the three answer, the third stays silent: no deadline is needed.
  f.Find(sampled[0]).silent = false;
  f.Find(sampled[1]).silent = false;
  f.Settle();
  REQUIRE(f.reports.size() == 1);
  CHECK(f.reports[0].sampled == 3);
  CHECK(f.reports[0].updates == 2);
  CHECK(f.reports[0].seconds < kDeadlineMs / 1000.0);
}

TEST_CASE("aggregator engine: a straggler whose acknowledgement is still on its way gets model deltas, not full models") {
  AggregatorConfig config = Config("dqsg", 4, 3);
  config.downlink_codec = "dqsg:s=16";
  config.quorum = 0.6;  // 2 of 3 close a round
  LogCapture log;
  Federation f(config, 3);
  Member& slow = f.Find("dev-2");
  // Round 0 closes without dev-2's update (it holds round 0's model), then
  // dev-2's link carries nothing: its acknowledgement of round 1 is not in
  // when round 2 starts.
  slow.silent = true;  // holds round 0's model, never answers it
  f.settle_until_reports = 1;
  f.Settle();
  REQUIRE(f.reports.size() == 1);
  slow.silent = false;
  slow.cut = true;
  f.settle_until_reports = 3;
  f.Settle();
  REQUIRE(f.reports.size() == 3);
  f.settle_until_reports = SIZE_MAX;
  CHECK(f.reports[1].updates == 2);
  CHECK(f.reports[2].updates == 2);
  CHECK(f.instructions_sent.count({2, "dev-2"}) == 1);
  // Its link comes back: the queued deltas of rounds 1 and 2 (and 3) apply
  // in order and it trains again; nobody ever got a full model.
  slow.cut = false;
  f.Settle();
  REQUIRE(f.reports.size() == 4);
  CHECK(f.aggregator->finished());
  for (const RoundReport& r : f.reports) CHECK(r.full_models_down == 0);
  CHECK(log.Count("without the model of the round before") == 0);  // every delta fitted
}

// The model payload of the instruction frames in `wire`, its chunks joined.
std::vector<uint8_t> ModelPayload(const std::vector<uint8_t>& wire, ModelEncoding* encoding) {
  std::vector<uint8_t> payload;
  std::size_t at = 0;
  while (at + kFramePrefixBytes <= wire.size()) {
    const std::size_t size = kFramePrefixBytes + LoadLe32(wire.data() + at);
    Result<Frame> frame = ParseFrame(wire.data() + at, size, FrameLimits());
    REQUIRE(frame.ok());
    Result<RoundInstructionsMessage> m = DecodeRoundInstructions(*frame, FrameLimits());
    REQUIRE(m.ok());
    if (payload.empty()) *encoding = m->model_encoding;
    REQUIRE(m->payload.offset == payload.size());
    payload.insert(payload.end(), m->payload.data, m->payload.data + m->payload.size);
    at += size;
  }
  REQUIRE(at == wire.size());
  return payload;
}

TEST_CASE("aggregator engine: a quantizer's model delta goes down tensor by tensor, each part that tensor encoded "
          "alone, and the devices hold the model the aggregator tracks") {
  AggregatorConfig config = Config("dqsg", 3, 3);
  config.downlink_codec = "dqsg:s=4";  // b=0: one scale per tensor
  Federation f(config, 3);
  f.Settle();
  REQUIRE(f.reports.size() == 3);
  REQUIRE(f.checkpoints.size() == 3);
  const Model initial = Model::Create(kModel, config.model_seed).value();
  const std::vector<std::size_t> tensors = ModelTensorSizes(initial);
  REQUIRE(tensors.size() == 4);
  const std::size_t d = initial.parameter_count();
  std::unique_ptr<Codec> alone = std::move(MakeCodec("dqsg:s=4").value());
  std::vector<float> held(d, 0.0f);  // the devices' model starts at zeros: round 0 sends the whole model
  for (uint32_t r = 0; r < 3; ++r) {
    INFO("round " << r);
    // The global model of round r: the initial one, then what round r - 1 made.
    const float* model = r == 0 ? initial.parameters() : f.checkpoints[r - 1].parameters.data();
    ModelEncoding encoding = ModelEncoding::kFullModelFp32;
    const std::vector<uint8_t> payload = ModelPayload(f.instructions[{r, "dev-0"}], &encoding);
    CHECK(encoding == (r == 0 ? ModelEncoding::kCompressedModel : ModelEncoding::kCompressedDelta));
    REQUIRE(payload.size() > kTensorSetHeaderSize);
    REQUIRE(LoadLe32(payload.data()) == kTensorSetMagic);
    REQUIRE(LoadLe32(payload.data() + 8) == tensors.size());
    std::size_t at = kTensorSetHeaderSize + kTensorSetEntrySize * tensors.size();
    std::size_t offset = 0;
    std::vector<float> next = held;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      INFO("tensor " << t);
      const std::size_t n = tensors[t];
      std::vector<float> delta(n);
      for (std::size_t i = 0; i < n; ++i) delta[i] = model[offset + i] - held[offset + i];
      CodecContext context;
      context.session_seed = config.session_seed;
      context.round = r;
      context.tensor_id = static_cast<uint32_t>(t);
      context.sender_id = 0xFFFFFFu;  // the broadcast
      std::vector<uint8_t> encoded(alone->MaxEncodedSize(n));
      encoded.resize(alone->Encode(delta.data(), n, context, encoded.data(), encoded.size()).value());
      const std::size_t part = LoadLe32(payload.data() + kTensorSetHeaderSize + kTensorSetEntrySize * t + 8);
      REQUIRE(part == encoded.size());
      REQUIRE(at + part <= payload.size());
      CHECK(std::memcmp(payload.data() + at, encoded.data(), part) == 0);
      std::vector<float> decoded(n);
      REQUIRE(alone->Decode(encoded.data(), encoded.size(), context, decoded.data(), n).ok());
      for (std::size_t i = 0; i < n; ++i) next[offset + i] = held[offset + i] + decoded[i];
      at += part;
      offset += n;
    }
    CHECK(at == payload.size());
    REQUIRE(f.broadcasts[r].size() == d);
    CHECK(std::memcmp(f.broadcasts[r].data(), next.data(), d * sizeof(float)) == 0);
    for (Member& m : f.members) {
      INFO(m.id);
      REQUIRE(m.held[r].size() == d);
      CHECK(std::memcmp(m.held[r].data(), next.data(), d * sizeof(float)) == 0);
    }
    held = next;
  }
}

TEST_CASE("aggregator engine: a connection that does not join in time is closed") {
  LogCapture log;
  Federation f(Config("fp32", 1, 2), 2);
  auto silent = std::make_shared<SilentLink>();
  Result<std::unique_ptr<MemoryPipe>> pipe =
      MemoryPipe::Create(f.aggregator, silent, f.aggregator->connection_options(), f.clock);
  REQUIRE(pipe.ok());
  f.Pump();
  CHECK(f.aggregator->open_connections() == 3);
  // The two devices joined and round 0 is open; only the join deadline is nearer.
  CHECK(f.aggregator->Tick() == 2001);
  f.clock.AdvanceMs(2001);
  f.aggregator->Tick();
  (*pipe)->Pump();
  CHECK((*pipe)->a().closed());
  CHECK(silent->closed);
  CHECK(silent->close_reason.code() == StatusCode::kUnavailable);
  CHECK(f.aggregator->open_connections() == 2);
  // One log line for the dropped connection, with the reason.
  CHECK(log.Count("no join within 2000 ms") == 1);
  CHECK(log.Count("aggregator: connection memory:a closed: deadline_exceeded: no join within 2000 ms") == 1);
}

TEST_CASE("aggregator engine: unjoined connections are capped in total and per address and may send only small frames") {
  AggregatorConfig config = Config("fp32", 1, 2);
  config.max_unjoined_connections = 3;
  config.max_unjoined_per_address = 2;
  LogCapture log;
  Federation f(config, 1);
  f.Settle();
  REQUIRE(f.aggregator->connected_devices() == 1);  // joined: it no longer counts
  // Strangers that never join, each a stream connection from an address.
  struct Stranger {
    std::shared_ptr<SilentLink> link = std::make_shared<SilentLink>();
    std::shared_ptr<StreamConnection> connection;  // the aggregator's side
    std::vector<uint8_t> written;                  // what the aggregator sent it
  };
  std::deque<Stranger> strangers;
  const auto open = [&](const std::string& peer) -> Stranger& {
    Stranger& s = strangers.emplace_back();
    s.connection = StreamConnection::Create(
                       peer,
                       [&s](const uint8_t* data, std::size_t size) {
                         s.written.insert(s.written.end(), data, data + size);
                         return Status::Ok();
                       },
                       f.aggregator, f.aggregator->connection_options(), f.clock)
                       .value();
    s.connection->Open();
    return s;
  };
  Stranger& a1 = open("10.0.0.1:1001");
  Stranger& a2 = open("10.0.0.1:1002");
  Stranger& a3 = open("10.0.0.1:1003");  // a third from 10.0.0.1
  CHECK_FALSE(a1.connection->closed());
  CHECK_FALSE(a2.connection->closed());
  CHECK(a3.connection->closed());
  Stranger& b1 = open("10.0.0.2:2001");
  Stranger& c1 = open("10.0.0.3:3001");  // a fourth in all
  CHECK_FALSE(b1.connection->closed());
  CHECK(c1.connection->closed());
  CHECK(f.aggregator->open_connections() == 4);  // the device and three strangers
  // The refused ones were told why, and the log has one line for the first refusal only.
  Result<Frame> told = ParseFrame(c1.written.data(), c1.written.size(), FrameLimits());
  REQUIRE(told.ok());
  CHECK(ToStatus(DecodeError(*told).value()).code() == StatusCode::kResourceExhausted);
  CHECK(log.Count("aggregator: refused 1 connection so far (the last from 10.0.0.1:1003): 2 connections from "
                  "10.0.0.1 have not joined yet (max_unjoined_per_address)") == 1);
  CHECK(log.Count("aggregator: refused 2 connections") == 0);
  // Before it joins, a connection may not announce a frame larger than the join needs.
  uint8_t prefix[kFramePrefixBytes];
  WriteFramePrefix(kMaxJoinFrameBytes + 1, prefix);
  CHECK(a1.connection->Receive(prefix, sizeof(prefix)).code() == StatusCode::kResourceExhausted);
  CHECK(a1.connection->closed());
  CHECK(log.Count("exceeds the limit of " + std::to_string(kMaxJoinFrameBytes)) == 1);
  // Its place is free again: another stranger from 10.0.0.1 is let in.
  Stranger& a4 = open("10.0.0.1:1004");
  CHECK_FALSE(a4.connection->closed());
  CHECK(f.aggregator->open_connections() == 4);
  for (Stranger& s : strangers) s.connection->Abort(Status(StatusCode::kCancelled, "test over"));
}

TEST_CASE("aggregator engine: a device with a wrong key or an unknown id is refused and the others go on") {
  Federation f(Config("fp32", 2, 2), 2);
  Member& wrong = f.AddDevice(2, HexKey(5));
  Member& stranger = f.AddDevice(3, HexKey(3), "dev-99");
  f.Settle();
  CHECK(wrong.link->error().code() == StatusCode::kUnauthenticated);
  CHECK(stranger.link->error().code() == StatusCode::kUnauthenticated);
  CHECK(wrong.pipe->a().closed());
  CHECK(stranger.pipe->a().closed());
  CHECK_FALSE(wrong.client->joined());
  REQUIRE(f.reports.size() == 2);
  for (const RoundReport& r : f.reports) {
    CHECK(r.sampled == 2);
    CHECK(r.updates == 2);
  }
  CHECK(f.aggregator->finished());
}

TEST_CASE("aggregator engine: a malformed frame or a bad update closes only that connection") {
  Federation f(Config("fp32", 2, 4), 4);
  Member& garbled = f.Silence("dev-1");
  Member& liar = f.Silence("dev-2");
  f.Settle();
  REQUIRE(f.reports.empty());
  CHECK(f.aggregator->connected_devices() == 4);
  // Bytes that are no frame, on dev-1's connection, as the aggregator reads them.
  const uint8_t garbage[12] = {8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(garbled.pipe->a().Receive(garbage, sizeof(garbage)).code() == StatusCode::kCorrupt);
  // A well-formed update from dev-2 whose payload is not a payload.
  const std::vector<uint8_t> junk(64, 0x5a);
  UpdateMessage update;
  update.round_id = 0;
  update.num_samples = 10;
  update.codec_spec = f.aggregator->codec();
  Result<std::vector<OutFrame>> frames = EncodeChunked(update, junk.data(), junk.size(), FrameLimits());
  REQUIRE(frames.ok());
  for (OutFrame& frame : *frames) REQUIRE(liar.pipe->b().Send(std::move(frame)).ok());
  f.Settle();
  CHECK(garbled.pipe->a().closed());
  CHECK(liar.pipe->a().closed());
  CHECK(garbled.link->closed());
  CHECK(liar.link->closed());
  CHECK(liar.link->close_reason().code() != StatusCode::kOk);
  REQUIRE(f.reports.size() == 2);
  CHECK(f.reports[0].sampled == 4);
  CHECK(f.reports[0].updates == 2);
  CHECK(f.reports[0].rejected == 1);
  CHECK(f.reports[1].sampled == 2);
  CHECK(f.reports[1].updates == 2);
  CHECK(f.aggregator->finished());
}

// Sends a single-chunk update of `values` for `round` from a member's side of
// its pipe, encoded with `codec` as a device would, claiming `samples`.
void SendUpdate(Member& m, const std::string& codec, uint32_t round, const std::vector<float>& values,
                uint64_t samples) {
  std::unique_ptr<Codec> encoder = std::move(MakeCodec(codec).value());
  CodecContext context;
  context.session_seed = 1;
  context.round = round;
  context.sender_id = DeviceSenderId(m.id);
  std::vector<uint8_t> payload(encoder->MaxEncodedSize(values.size()));
  payload.resize(encoder->Encode(values.data(), values.size(), context, payload.data(), payload.size()).value());
  UpdateMessage update;
  update.round_id = round;
  update.num_samples = samples;
  update.codec_spec = encoder->spec();
  Result<std::vector<OutFrame>> frames = EncodeChunked(update, payload.data(), payload.size(), FrameLimits());
  REQUIRE(frames.ok());
  for (OutFrame& frame : *frames) REQUIRE(m.pipe->b().Send(std::move(frame)).ok());
}

std::size_t Parameters() { return Model::Create(kModel, 1).value().parameter_count(); }

TEST_CASE("aggregator engine: a huge coordinate or a claim of 2^32 samples is refused and the honest updates are applied") {
  // The reference: the two honest devices alone.
  Federation honest(Config("fp32", 1, 2), 2);
  honest.Settle();
  REQUIRE(honest.reports.size() == 1);

  LogCapture log;
  Federation f(Config("fp32", 1, 4), 4);
  Member& huge = f.Silence("dev-2");
  Member& heavy = f.Silence("dev-3");
  f.Settle();
  REQUIRE(f.reports.empty());
  // A finite coordinate that overflows a float sum once weighted, and a
  // plain update that claims to stand for 2^32 samples.
  std::vector<float> values(Parameters(), 0.001f);
  values[7] = 3e38f;
  SendUpdate(huge, f.aggregator->codec(), 0, values, 100);
  SendUpdate(heavy, f.aggregator->codec(), 0, std::vector<float>(Parameters(), 0.001f), uint64_t{1} << 32);
  f.Settle();
  CHECK(huge.link->closed());
  CHECK(heavy.link->closed());
  CHECK(log.Count("aggregator: connection memory:a of dev-2 closed: invalid_argument: update norm 3e+38 exceeds "
                  "the limit of 10000") == 1);
  CHECK(log.Count("aggregator: connection memory:a of dev-3 closed: invalid_argument: an update claims 4294967296 "
                  "samples; allowed are 1 to 1048576 (max update samples)") == 1);
  REQUIRE(f.reports.size() == 1);
  CHECK(f.reports[0].applied);
  CHECK(f.reports[0].sampled == 4);
  CHECK(f.reports[0].updates == 2);
  CHECK(f.reports[0].rejected == 2);
  CHECK(f.aggregator->round() == 1);
  // Exactly the model the honest devices make on their own.
  CHECK(SameBits(f.aggregator->model(), honest.aggregator->model()));
}

TEST_CASE("aggregator engine: a round whose every update is refused is reported as not applied and runs again") {
  Federation f(Config("fp32", 1, 2), 2);
  for (Member& m : f.members) m.silent = true;
  f.Settle();
  REQUIRE(f.reports.empty());
  const std::vector<float> model_before(f.aggregator->model().parameters(),
                                        f.aggregator->model().parameters() + Parameters());
  std::vector<float> absurd = {1e9f};  // then zeros
  absurd.resize(Parameters(), 0.0f);
  for (Member& m : f.members) SendUpdate(m, f.aggregator->codec(), 0, absurd, 10);
  f.Settle();
  for (Member& m : f.members) CHECK(m.link->closed());
  CHECK(f.reports.empty());  // the round waits for its deadline: the devices may come back
  f.clock.AdvanceMs(kDeadlineMs);
  f.Settle();
  REQUIRE(f.reports.size() == 1);
  CHECK_FALSE(f.reports[0].applied);
  CHECK(f.reports[0].round == 1);
  CHECK(f.reports[0].updates == 0);
  CHECK(f.reports[0].rejected == 2);
  CHECK(f.reports[0].failure == "every update was rejected (2)");
  CHECK(f.checkpoints.empty());
  CHECK(f.aggregator->round() == 0);
  CHECK(std::memcmp(f.aggregator->model().parameters(), model_before.data(), model_before.size() * sizeof(float)) ==
        0);
  // The devices come back and behave: round 0 runs again and is applied.
  for (Member& m : f.members) {
    m.silent = false;
    f.Connect(m);
  }
  f.Settle();
  REQUIRE(f.reports.size() == 2);
  CHECK(f.reports[1].applied);
  CHECK(f.reports[1].round == 1);
  CHECK(f.reports[1].updates == 2);
  CHECK(f.checkpoints.size() == 1);
  CHECK(f.aggregator->finished());
}

TEST_CASE("aggregator engine: rounds whose every update is refused stop the training after max_failed_rounds in a row") {
  // Every device sends what the norm bound refuses (the collapsed run of a
  // mean under attack): before, the round ran again forever.
  AggregatorConfig config = Config("fp32", 10, 2);
  config.max_failed_rounds = 3;
  Federation f(config, 2);
  for (Member& m : f.members) m.silent = true;
  f.Settle();
  std::vector<float> absurd = {1e9f};  // then zeros
  absurd.resize(Parameters(), 0.0f);
  for (std::size_t attempt = 1; attempt <= 3; ++attempt) {
    INFO("attempt " << attempt);
    REQUIRE_FALSE(f.aggregator->finished());
    if (attempt > 1) {
      for (Member& m : f.members) f.Connect(m);  // refused devices come back and misbehave again
      f.Settle();
    }
    for (Member& m : f.members) SendUpdate(m, f.aggregator->codec(), 0, absurd, 10);
    f.Settle();
    f.clock.AdvanceMs(kDeadlineMs);
    f.Settle();
    REQUIRE(f.reports.size() == attempt);
    const RoundReport& r = f.reports.back();
    CHECK_FALSE(r.applied);
    CHECK(r.round == 1);
    CHECK(r.rejected == 2);
    CHECK(r.failure == "every update was rejected (2)");
    CHECK(r.failed_in_a_row == attempt);
    CHECK(r.stopped == (attempt == 3));
    CHECK(f.aggregator->status().ok() == (attempt < 3));
  }
  CHECK(f.aggregator->finished());
  CHECK(f.aggregator->status().code() == StatusCode::kFailedPrecondition);
  CHECK(f.aggregator->status().message() ==
        "training stopped at round 1: 3 rounds in a row applied nothing (max failed rounds 3); the last: every "
        "update was rejected (2)");
  CHECK(f.aggregator->round() == 0);
  CHECK(f.checkpoints.empty());
  // Nothing runs after the stop, however long the host keeps ticking.
  f.clock.AdvanceMs(10 * kDeadlineMs);
  f.Settle();
  CHECK(f.reports.size() == 3);
}

TEST_CASE("aggregator engine: an applied round resets the count of failed rounds, and devices are told why the training stopped") {
  AggregatorConfig config = Config("fp32", 10, 2);
  config.max_failed_rounds = 2;
  Federation f(config, 2);
  for (Member& m : f.members) m.silent = true;  // connected, never answering
  f.Settle();
  f.clock.AdvanceMs(kDeadlineMs);
  f.Settle();
  REQUIRE(f.reports.size() == 1);
  CHECK(f.reports[0].failure == "no update arrived");
  CHECK(f.reports[0].failed_in_a_row == 1);
  CHECK_FALSE(f.reports[0].stopped);
  // Round 1 runs again and both answer it: applied, the count starts over.
  for (Member& m : f.members) SendUpdate(m, f.aggregator->codec(), 0, std::vector<float>(Parameters(), 0.001f), 10);
  f.Settle();
  REQUIRE(f.reports.size() == 2);
  CHECK(f.reports[1].applied);
  CHECK(f.reports[1].failed_in_a_row == 0);
  // Round 2 gets nothing, twice: the training stops there.
  for (std::size_t k = 0; k < 2; ++k) {
    f.clock.AdvanceMs(kDeadlineMs);
    f.Settle();
  }
  REQUIRE(f.reports.size() == 4);
  CHECK(f.reports[2].round == 2);
  CHECK(f.reports[2].failed_in_a_row == 1);
  CHECK_FALSE(f.reports[2].stopped);
  CHECK(f.reports[3].round == 2);
  CHECK(f.reports[3].failed_in_a_row == 2);
  CHECK(f.reports[3].stopped);
  CHECK(f.aggregator->finished());
  CHECK(f.aggregator->round() == 1);
  CHECK(f.aggregator->status().message().find("training stopped at round 2: 2 rounds in a row applied nothing") == 0);
  for (const Member& m : f.members) CHECK(m.client->finished());  // a Leave with the reason, not a dropped line
}

TEST_CASE("aggregator engine: max_failed_rounds of 0 is refused") {
  AggregatorConfig config = Config("fp32", 1, 1);
  config.max_failed_rounds = 0;
  KeyStore keys;
  auto created = Aggregator::Create(config, keys, TestCrypto(), SystemClock(), nullptr);
  CHECK(created.status().code() == StatusCode::kInvalidArgument);
  CHECK(created.status().message().find("max failed rounds") != std::string::npos);
}

TEST_CASE("aggregator engine: a device that rejoins mid-round gets the round's instructions again") {
  Federation f(Config("dqsg", 2, 3), 3);
  Member& roamer = f.Find("dev-0");
  roamer.silent = true;
  f.Settle();
  REQUIRE(f.reports.empty());
  REQUIRE(roamer.client->has_work());
  CHECK(f.instructions_sent[{0, "dev-0"}] == 1);
  // The link drops; the device reconnects before the aggregator's next Tick
  // (which would close the round: the two others have answered).
  roamer.pipe->b().Abort(Status(StatusCode::kUnavailable, "radio off"));
  f.Pump();
  CHECK(roamer.link->closed());
  CHECK_FALSE(roamer.client->has_work());
  CHECK(f.aggregator->connected_devices() == 2);
  f.Connect(roamer);
  f.Pump();
  CHECK(roamer.client->joined());
  CHECK(f.instructions_sent[{0, "dev-0"}] == 2);
  CHECK(roamer.client->has_work());
  CHECK(roamer.client->round() == 0);
  roamer.silent = false;
  f.Settle();
  REQUIRE(f.reports.size() == 2);
  CHECK(f.reports[0].updates == 3);
  CHECK(f.reports[1].updates == 3);
}

TEST_CASE("aggregator engine: of two live devices with one id the established one is kept until it goes quiet") {
  AggregatorConfig config = Config("fp32", 1, 3);  // two distinct devices: no round starts
  config.idle_timeout_ms = 4000;                    // heartbeats every 1000 ms, stale after 2000 ms
  LogCapture log;
  Federation f(config, 2);
  f.Settle();
  Member& first = f.Find("dev-0");
  Member& twin = f.AddDevice(0, HexKey(0));  // a second device configured as dev-0
  // Every 250 ms: the connections heartbeat and check their deadlines, and
  // the twin dials again whenever it was refused (a device's reconnect loop,
  // faster than a real one).
  bool first_beats = true;
  const auto run_for = [&](int steps) {
    for (int step = 0; step < steps; ++step) {
      f.clock.AdvanceMs(250);
      for (Member& m : f.members) {
        if (!m.pipe) continue;
        m.pipe->a().Poll();
        if (&m != &first || first_beats) m.pipe->b().Poll();
      }
      f.Settle();
      if (twin.link->closed()) f.Connect(twin);
    }
  };
  run_for(40);  // 10 s
  CHECK(log.Count("aggregator: device dev-0 joined") == 1);
  CHECK_FALSE(first.link->closed());
  CHECK_FALSE(twin.client->joined());
  CHECK(log.Count("device dev-0 is already connected from memory:a; another connection is refused while that "
                  "one is alive") >= 30);
  // The established one goes quiet (its link died without a close): a join
  // 2000 ms after it was last heard replaces it, before its idle timeout.
  first_beats = false;
  run_for(10);
  CHECK(first.link->closed());
  CHECK(twin.client->joined());
  CHECK(log.Count("aggregator: device dev-0 joined") == 2);
  CHECK(log.Count("replaced by a new join: nothing arrived on it for 2000 ms") == 1);
  CHECK(log.Count("nothing received for 4000 ms") == 0);
}

TEST_CASE("aggregator engine: an update for a round that did not ask for it is refused at its first chunk") {
  LogCapture log;
  Federation f(Config("fp32", 1, 3), 3);
  Member& stray = f.Silence("dev-2");
  f.Settle();
  REQUIRE(f.reports.empty());  // round 0 waits for dev-2
  SendUpdate(stray, f.aggregator->codec(), 5, std::vector<float>(Parameters(), 0.0f), 10);
  f.Settle();
  // Refused at once; the round closes with the others, without its deadline.
  CHECK(stray.link->closed());
  CHECK(log.Count("an update for round 5, which has not started (round 0 is open)") >= 1);
  REQUIRE(f.reports.size() == 1);
  CHECK(f.reports[0].applied);
  CHECK(f.reports[0].updates == 2);
}

TEST_CASE("aggregator engine: alq with refit=N fits a new level table every N rounds") {
  Federation f(Config("alq:bits=3,refit=2", 5, 2), 2);
  f.Settle();
  REQUIRE(f.reports.size() == 5);
  // Versions after rounds 1..5: a fit after rounds 2 and 4, from both rounds' statistics.
  const uint32_t expect[] = {0, 1, 1, 2, 2};
  for (std::size_t r = 0; r < 5; ++r) {
    INFO("round ", r);
    CHECK(f.reports[r].applied);
    CHECK(f.reports[r].level_table_version == expect[r]);
  }
  CHECK(f.reports[1].level_table != f.reports[0].level_table);
  CHECK(f.reports[3].level_table != f.reports[1].level_table);
}

// refit=2 fits after rounds 2 and 4, the second fit from rounds 3 and 4:
// stopped after round 3 and restarted from its checkpoint file, the
// aggregator still holds round 3's statistics and fits the same table after
// round 4, and the model ends the same bits. (Without them in the checkpoint
// the restarted one fits nothing after round 4: version 1, not 2.)
TEST_CASE("aggregator engine: alq refit=N restarted mid-interval from its checkpoint file fits the same levels") {
  Federation straight(Config("alq:bits=3,refit=2", 4, 2), 2);
  straight.Settle();
  REQUIRE(straight.reports.size() == 4);
  REQUIRE(straight.reports[3].level_table_version == 2);

  Federation first(Config("alq:bits=3,refit=2", 3, 2), 2);
  first.Settle();
  REQUIRE(first.checkpoints.size() == 3);
  CHECK(first.checkpoints.back().rounds_since_refit == 1);
  CHECK(first.checkpoints.back().pending_levels.count > 0);
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("agg.ckpt");
  REQUIRE(WriteAggregatorCheckpoint(path, first.checkpoints.back()).ok());
  Result<AggregatorCheckpoint> saved = ReadAggregatorCheckpoint(path);
  REQUIRE_MESSAGE(saved.ok(), saved.status().ToString());
  CHECK(saved->rounds_since_refit == 1);
  CHECK(saved->pending_levels.count == first.checkpoints.back().pending_levels.count);
  CHECK(saved->pending_levels.largest_buckets.size() == first.checkpoints.back().pending_levels.largest_buckets.size());

  Federation again(Config("alq:bits=3,refit=2", 4, 2), 0);
  REQUIRE(again.aggregator->Restore(*saved).ok());
  again.restored_rounds = 3;
  for (int i = 0; i < 2; ++i) again.AddDevice(i, HexKey(i));
  again.Settle();
  REQUIRE(again.reports.size() == 1);
  CHECK(again.reports[0].level_table_version == straight.reports[3].level_table_version);
  CHECK(again.reports[0].level_table == straight.reports[3].level_table);
  REQUIRE(again.checkpoints.size() == 1);
  CHECK(again.checkpoints.back().parameters == straight.checkpoints.back().parameters);
}

TEST_CASE("aggregator engine: a restored aggregator carries on from the checkpoint state") {
  Federation first(Config("alq:bits=3", 2, 2), 2);
  first.Settle();
  REQUIRE(first.checkpoints.size() == 2);
  const AggregatorCheckpoint saved = first.checkpoints.back();
  CHECK(saved.round == 2);
  CHECK(saved.level_table_version == 2);  // refitted every round

  AggregatorConfig config = Config("alq:bits=3", 4, 2);
  KeyStore keys = KeyStore::Parse(DeviceId(0) + " " + HexKey(0) + "\n").value();
  ManualClock clock;
  Result<std::shared_ptr<Aggregator>> again = Aggregator::Create(config, keys, TestCrypto(), clock, nullptr);
  REQUIRE(again.ok());
  REQUIRE((*again)->Restore(saved).ok());
  CHECK((*again)->round() == 2);
  CHECK(std::memcmp((*again)->model().parameters(), saved.parameters.data(),
                    saved.parameters.size() * sizeof(float)) == 0);

  AggregatorCheckpoint other = saved;
  other.model = "mlp:16-4";
  Result<std::shared_ptr<Aggregator>> fresh = Aggregator::Create(config, keys, TestCrypto(), clock, nullptr);
  REQUIRE(fresh.ok());
  const Status refused = (*fresh)->Restore(other);
  CHECK(refused.code() == StatusCode::kFailedPrecondition);
  CHECK(refused.message().find("holds model 'mlp:16-4'") != std::string::npos);
  // Once a connection has opened it is too late.
  auto link = std::make_shared<SilentLink>();
  Result<std::unique_ptr<MemoryPipe>> pipe = MemoryPipe::Create(*fresh, link, (*fresh)->connection_options(), clock);
  REQUIRE(pipe.ok());
  CHECK((*fresh)->Restore(saved).code() == StatusCode::kFailedPrecondition);
  (*fresh)->Abort(Status(StatusCode::kCancelled, "test over"));
}

// Seven devices whose updates the test writes: five honest ones (0.01 to
// 0.05 in every coordinate) and dev-0, dev-1 sending -1 (a sign-flipped,
// scaled update), 10 samples each. Returns the round's combined update.
std::vector<float> CombineCrafted(const std::string& rule, RoundReport* report = nullptr) {
  AggregatorConfig config = Config("fp32", 1, 7);
  config.aggregation = ParseAggregationRule(rule).value();
  Federation f(config, 7);
  for (Member& m : f.members) m.silent = true;
  f.Settle();
  for (int i = 0; i < 7; ++i) {
    const float value = i < 2 ? -1.0f : 0.01f * static_cast<float>(i - 1);
    SendUpdate(f.members[static_cast<std::size_t>(i)], f.aggregator->codec(), 0,
               std::vector<float>(Parameters(), value), 10);
  }
  f.Settle();
  REQUIRE(f.reports.size() == 1);
  REQUIRE(f.reports[0].applied);
  CHECK(f.reports[0].updates == 7);
  if (report != nullptr) *report = f.reports[0];
  REQUIRE(f.aggregates.size() == 1);
  return f.aggregates[0];
}

TEST_CASE("aggregator engine: median, trimmed mean and multi-krum leave out the updates that drag the mean") {
  // mean: (0.01 + ... + 0.05 - 2) / 7.
  CHECK(CombineCrafted("mean")[0] == doctest::Approx((0.15 - 2.0) / 7).epsilon(1e-6));
  // median of -1, -1, 0.01, 0.02, 0.03, 0.04, 0.05.
  for (float v : CombineCrafted("median")) CHECK(v == 0.02f);
  // floor(0.3 * 7) = 2 trimmed per side: 0.01, 0.02, 0.03 kept.
  for (float v : CombineCrafted("trimmed-mean:0.3")) CHECK(v == doctest::Approx(0.02).epsilon(1e-6));
  // multi-krum:2: the n - f = 5 updates closest to their neighbours, the honest ones.
  RoundReport report;
  for (float v : CombineCrafted("multi-krum:2", &report)) CHECK(v == doctest::Approx(0.03).epsilon(1e-6));
  CHECK(report.selected == std::vector<std::string>{"dev-2", "dev-3", "dev-4", "dev-5", "dev-6"});
  // krum:2: one of the middle honest ones (0.02, 0.03 and 0.04 score alike
  // but for rounding), sent as it is.
  const std::vector<float> krum = CombineCrafted("krum:2", &report);
  REQUIRE(report.selected.size() == 1);
  const int chosen = report.selected[0].back() - '0';
  CHECK(chosen >= 3);
  CHECK(chosen <= 5);
  for (float v : krum) CHECK(v == 0.01f * static_cast<float>(chosen - 1));
}

TEST_CASE("aggregator engine: krum refuses a config that samples too few devices and fails a round with too few") {
  KeyStore keys = KeyStore::Parse(DeviceId(0) + " " + HexKey(0) + "\n").value();
  ManualClock clock;
  AggregatorConfig config = Config("fp32", 1, 4);
  config.aggregation = ParseAggregationRule("krum:1").value();
  const Status refused = Aggregator::Create(config, keys, TestCrypto(), clock, nullptr).status();
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK(refused.message() == "aggregation krum:1 needs at least 5 updates per round (2F + 3); the first round "
                             "samples 4 of 4 devices (raise min devices or the sampling)");
  config.min_devices = 5;
  config.sampling.fraction = 0.5;  // 3 of 5
  CHECK(Aggregator::Create(config, keys, TestCrypto(), clock, nullptr).status().code() ==
        StatusCode::kInvalidArgument);

  // Five sampled, one never answers: the round closes at its deadline with
  // four updates, which krum:1 cannot combine; it is not applied.
  config.sampling.fraction = 1.0;
  Federation f(config, 5);
  f.Silence("dev-4");
  f.Settle();
  f.clock.AdvanceMs(kDeadlineMs);
  f.Settle();
  REQUIRE(!f.reports.empty());
  CHECK_FALSE(f.reports[0].applied);
  CHECK(f.reports[0].failure == "krum:1 needs at least 5 updates (2F + 3), got 4");
  CHECK(f.aggregator->round() == 0);
}

TEST_CASE("aggregator engine: robust rules combine NDQSG and DQSG rounds, with FedAdam too") {
  for (const char* codec : {"ndqsg", "dqsg"}) {
    CAPTURE(codec);
    AggregatorConfig config = Config(codec, 4, 3);
    config.aggregation = ParseAggregationRule("median").value();
    if (std::string(codec) == "dqsg") {
      config.aggregation = ParseAggregationRule("trimmed-mean:0.34").value();
      config.server_optimizer.kind = ServerOptimizerKind::kFedAdam;
      config.server_optimizer.learning_rate = 0.05f;
    }
    Federation f(config, 3);
    f.Settle();
    REQUIRE(f.reports.size() == 4);
    for (const RoundReport& r : f.reports) {
      CHECK(r.applied);
      CHECK(r.updates == 3);
    }
    CHECK(f.reports.back().test_loss < f.reports.front().test_loss);
    CHECK(f.reports.back().test_accuracy > 0.8);  // chance is 0.25
  }
}

TEST_CASE("aggregator engine: clipping scales the updates down before they are combined") {
  AggregatorConfig config = Config("fp32", 1, 2);
  config.clip_update_norm = 1.0;
  Federation f(config, 2);
  for (Member& m : f.members) m.silent = true;
  f.Settle();
  const double norm = std::sqrt(static_cast<double>(Parameters()));  // of an all-ones update
  SendUpdate(f.members[0], f.aggregator->codec(), 0, std::vector<float>(Parameters(), 1.0f), 10);
  SendUpdate(f.members[1], f.aggregator->codec(), 0, std::vector<float>(Parameters(), 0.001f), 30);
  f.Settle();
  REQUIRE(f.reports.size() == 1);
  CHECK(f.reports[0].clipped == 1);
  REQUIRE(f.aggregates.size() == 1);
  CHECK(f.aggregates[0][0] == doctest::Approx((10 / norm + 30 * 0.001) / 40).epsilon(1e-5));
}

TEST_CASE("aggregator engine: DP rounds clip, add noise of z * C to the sum, divide by the devices sampled") {
  AggregatorConfig config = Config("fp32", 1, 4);
  config.dp.noise_multiplier = 0.5;
  config.dp.clip = 1.0;
  config.dp.delta = 1e-5;
  config.dp.noise_seed = 99;
  Federation f(config, 4);
  for (Member& m : f.members) m.silent = true;
  f.Settle();
  // Three of the four sampled devices answer, with different sample counts
  // (DP weighs every update 1); two are clipped.
  const std::size_t d = Parameters();
  SendUpdate(f.members[0], f.aggregator->codec(), 0, std::vector<float>(d, 1.0f), 10);
  SendUpdate(f.members[1], f.aggregator->codec(), 0, std::vector<float>(d, -2.0f), 1000);
  SendUpdate(f.members[2], f.aggregator->codec(), 0, std::vector<float>(d, 0.01f), 5);
  f.Settle();
  f.clock.AdvanceMs(kDeadlineMs);
  f.Settle();
  REQUIRE(f.reports.size() == 1);
  const RoundReport& r = f.reports[0];
  CHECK(r.applied);
  CHECK(r.updates == 3);
  CHECK(r.clipped == 2);
  CHECK(r.dp_sampling_rate == 1.0);
  RdpAccountant accountant;
  accountant.Compose(1.0, 0.5);
  CHECK(r.dp_epsilon == doctest::Approx(accountant.Epsilon(1e-5)));
  // The expected estimate: (sum of clipped updates + N(0, (0.5 * 1)^2)) / 4.
  const double unit = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> sum(d, unit - unit + 0.01);  // the clipped +1 and -2 updates cancel
  AddGaussianNoise(99, 0, 0.5, sum.data(), d);
  REQUIRE(f.aggregates.size() == 1);
  for (std::size_t i = 0; i < d; ++i) CHECK(f.aggregates[0][i] == doctest::Approx(sum[i] / 4).epsilon(1e-5));
}

TEST_CASE("aggregator engine: DP stops before a round would pass the epsilon budget") {
  AggregatorConfig config = Config("fp32", 10, 3);
  config.dp.noise_multiplier = 1.0;
  config.dp.clip = 1.0;
  config.dp.delta = 1e-5;
  RdpAccountant accountant;
  accountant.Compose(1.0, 1.0, 2);
  const double two = accountant.Epsilon(1e-5);
  accountant.Compose(1.0, 1.0);
  config.dp.epsilon_budget = (two + accountant.Epsilon(1e-5)) / 2;  // two rounds fit, three do not
  Federation f(config, 3);
  f.Settle();
  REQUIRE(f.reports.size() == 2);
  CHECK(f.reports[0].dp_epsilon < f.reports[1].dp_epsilon);
  CHECK(f.reports[1].dp_epsilon == doctest::Approx(two));
  CHECK(f.aggregator->finished());
  CHECK(f.aggregator->round() == 2);
  for (const Member& m : f.members) CHECK(m.client->finished());
}

TEST_CASE("aggregator engine: DP rounds run with NDQSG and with FedAdam and report epsilon every round") {
  for (const char* codec : {"ndqsg", "dqsg"}) {
    CAPTURE(codec);
    AggregatorConfig config = Config(codec, 3, 3);
    config.dp.noise_multiplier = 0.01;
    config.dp.clip = 10;
    if (std::string(codec) == "dqsg") {
      config.server_optimizer.kind = ServerOptimizerKind::kFedAdam;
      config.server_optimizer.learning_rate = 0.05f;
    }
    Federation f(config, 3);
    f.Settle();
    REQUIRE(f.reports.size() == 3);
    RdpAccountant accountant;
    for (const RoundReport& r : f.reports) {
      CHECK(r.applied);
      CHECK(r.updates == 3);
      accountant.Compose(1.0, 0.01);
      CHECK(r.dp_epsilon == doctest::Approx(accountant.Epsilon(1e-5)));
    }
    CHECK(f.reports.back().test_loss < f.reports.front().test_loss);
    CHECK(f.reports.back().test_accuracy > 0.8);
  }
}

TEST_CASE("aggregator engine: a restored DP aggregator resumes its accountant from the checkpoint") {
  AggregatorConfig config = Config("fp32", 2, 2);
  config.dp.noise_multiplier = 1.0;
  config.dp.clip = 1.0;
  config.sampling.fraction = 0.5;  // q = 1/2
  Federation first(config, 2);
  first.Settle();
  REQUIRE(first.reports.size() == 2);
  CHECK(first.reports[1].dp_sampling_rate == 0.5);
  const AggregatorCheckpoint saved = first.checkpoints.back();
  REQUIRE(saved.dp_rdp.size() == RdpAccountant().rdp().size());

  // Resumed for one more round, the third.
  config.rounds = 3;
  const auto resumed_epsilon = [&](const AggregatorCheckpoint& checkpoint) {
    Federation again(config, 0);
    REQUIRE(again.aggregator->Restore(checkpoint).ok());
    again.restored_rounds = 2;
    for (int i = 0; i < 2; ++i) again.AddDevice(i, HexKey(i));
    again.Settle();
    REQUIRE(again.reports.size() == 1);
    return again.reports[0].dp_epsilon;
  };
  // The epsilon goes on from the saved RDP.
  RdpAccountant expected;
  expected.Compose(0.5, 1.0, 3);
  CHECK(resumed_epsilon(saved) == doctest::Approx(expected.Epsilon(1e-5)));
  // Without the privacy state the restored rounds are charged at q = 1.
  AggregatorCheckpoint bare = saved;
  bare.dp_rdp.clear();
  RdpAccountant upper;
  upper.Compose(1.0, 1.0, 2);
  upper.Compose(0.5, 1.0);
  CHECK(resumed_epsilon(bare) == doctest::Approx(upper.Epsilon(1e-5)));
  // A privacy state of another size is refused.
  bare.dp_rdp = {1.0};
  Federation refused(config, 0);
  CHECK(refused.aggregator->Restore(bare).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("aggregator engine: DP and robust options that do not apply are refused") {
  KeyStore keys = KeyStore::Parse(DeviceId(0) + " " + HexKey(0) + "\n").value();
  ManualClock clock;
  const auto create = [&](const AggregatorConfig& config) {
    return Aggregator::Create(config, keys, TestCrypto(), clock, nullptr).status();
  };
  AggregatorConfig dp = Config("fp32", 1, 1);
  dp.dp.noise_multiplier = 1;
  dp.dp.clip = 1;
  CHECK(create(dp).ok());
  AggregatorConfig c = dp;
  c.aggregation = ParseAggregationRule("median").value();
  CHECK(create(c).message().find("needs aggregation mean, not median") != std::string::npos);
  c = dp;
  c.clip_update_norm = 2;
  CHECK(create(c).code() == StatusCode::kInvalidArgument);
  c = dp;
  c.dp.clip = 0;
  CHECK(create(c).code() == StatusCode::kInvalidArgument);
  c = Config("fp32", 1, 1);
  c.dp.clip = 1;  // without a noise multiplier
  CHECK(create(c).message() == "the DP clip, budget and noise seed apply only with a DP noise multiplier above 0");
  c = Config("fp32", 1, 1);
  c.clip_update_norm = -1;
  CHECK(create(c).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("aggregator engine: bad configs and test sets are refused") {
  KeyStore keys = KeyStore::Parse(DeviceId(0) + " " + HexKey(0) + "\n").value();
  ManualClock clock;
  const auto create = [&](const AggregatorConfig& config, const DataView* test) {
    return Aggregator::Create(config, keys, TestCrypto(), clock, test).status();
  };
  AggregatorConfig config = Config("fp32", 1, 1);
  CHECK(create(config, nullptr).ok());
  config.codec = "nosuchcodec";
  CHECK_FALSE(create(config, nullptr).ok());
  config = Config("ndqsg:rho=5", 1, 1);
  config.max_rho = 3;
  CHECK(create(config, nullptr).code() == StatusCode::kInvalidArgument);
  config = Config("fp32", 1, 1);
  config.downlink_codec = "ndqsg";
  CHECK(create(config, nullptr).code() == StatusCode::kInvalidArgument);
  config = Config("fp32", 1, 1);
  config.max_update_norm = -1;
  CHECK(create(config, nullptr).code() == StatusCode::kInvalidArgument);
  config.max_update_norm = std::numeric_limits<double>::infinity();
  CHECK(create(config, nullptr).code() == StatusCode::kInvalidArgument);
  config.max_update_norm = 0;  // no bound
  CHECK(create(config, nullptr).ok());
  config.max_update_samples = 0;
  CHECK(create(config, nullptr).code() == StatusCode::kInvalidArgument);
  config.max_update_samples = (uint64_t{1} << 32) + 1;
  CHECK(create(config, nullptr).code() == StatusCode::kInvalidArgument);
  Blobs blobs(8, 3);
  config = Config("fp32", 1, 1);
  config.model = "mlp:10-8-4";
  const Status misfit = create(config, &blobs.view);
  CHECK(misfit.code() == StatusCode::kInvalidArgument);
  CHECK(misfit.message().find("takes 10 features, the test set has 16") != std::string::npos);
}

}  // namespace
}  // namespace fedrt

namespace fedrt {
namespace {

// What a device's round path still allocates, measured Work() slice by slice
// over several rounds (the aggregator and the pipes are not counted). The
// codecs live in the client's storage and the optimizer state is sized at
// Create, so a training slice inside an epoch allocates nothing; what is left
// is an epoch's start (the shuffled order and the batch buffers of
// TrainingPass) and the encode-and-send slice (the update's frames).
TEST_CASE("aggregator engine: a device's training slices allocate nothing between epoch starts") {
  Federation f(Config("ndqsg", 4, 1), 1);
  Member& m = f.members.front();
  m.silent = true;  // trained here, one step per Work()
  long mid_epoch_slices = 0, allocating_slices = 0, rounds = 0;
  for (int guard = 0; guard < 100000 && !f.aggregator->finished(); ++guard) {
    bool moved = m.pipe->Pump();
    if (m.client->has_work() && !m.pipe->b().closed()) {
      const uint64_t round = m.client->round();
      while (m.client->has_work() && m.client->round() == round) {
        Status worked;
        const long allocations = testing::AllocationsDuring([&] { worked = m.client->Work(m.pipe->b(), 1); });
        REQUIRE_MESSAGE(worked.ok(), worked.ToString());
        if (allocations > 0) ++allocating_slices;
        if (round >= 2 && allocations == 0) ++mid_epoch_slices;
      }
      ++rounds;
      moved = true;
    }
    if (f.aggregator->Tick() == 0) moved = true;
    if (m.pipe->Pump()) moved = true;
    if (!moved) break;
  }
  REQUIRE(f.aggregator->finished());
  CHECK(rounds == 4);
  // Per round: 2 epochs (Config) start a TrainingPass each, and one slice encodes and sends.
  CHECK(allocating_slices <= rounds * 3);
  // 120 examples in batches of 16, two epochs: most slices of rounds 2..4 are free.
  CHECK(mid_epoch_slices >= 3 * 6);
  MESSAGE("allocating slices: " << allocating_slices << " of " << rounds << " rounds");
}

}  // namespace
}  // namespace fedrt
