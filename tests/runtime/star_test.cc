// The star topology end to end on 127.0.0.1: the aggregator and the devices
// run in threads of this process and talk over real TCP connections; faults
// are provoked with hand-made clients. Data: the tiny IDX fixture.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/codecs/tensor_set.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/runtime/aggregator.h"
#include "fedrt/runtime/device.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/chunking.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/tcp.h"
#include "tls_test_support.h"

namespace fedrt {
namespace {

using namespace transport;  // NOLINT

const char* const kKeys[] = {"00112233445566778899aabbccddeeff", "102132435465768798a9bacbdcedfe0f",
                             "2f3e4d5c6b7a8998a7b6c5d4e3f20110", "0123456789abcdef0123456789abcdef",
                             "fedcba9876543210fedcba9876543210"};
constexpr int kKeyCount = 5;
constexpr const char* kModel = "mlp:784-32-10";

// A private folder with the aggregator's key file and one per device.
struct Workspace {
  std::string dir;
  Workspace() {
    char name[] = "/tmp/fedrt-star-XXXXXX";
    dir = ::mkdtemp(name);
    std::string all;
    for (int i = 0; i < kKeyCount; ++i) {
      const std::string line = "dev-" + std::to_string(i) + " " + kKeys[i] + "\n";
      all += line;
      Write(DeviceKey(i), line);
    }
    Write(dir + "/keys.txt", all);
  }
  ~Workspace() { std::system(("rm -rf " + dir).c_str()); }
  std::string DeviceKey(int i) const { return dir + "/dev-" + std::to_string(i) + ".key"; }
  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
    ::chmod(path.c_str(), 0600);
  }
};

AggregatorOptions Options(const Workspace& ws, const std::string& codec, uint32_t rounds, std::size_t devices) {
  AggregatorOptions o;
  o.key_file = ws.dir + "/keys.txt";
  o.data_dir = FEDRT_TINY_IDX_DIR;
  o.model = kModel;
  o.codec = codec;
  o.rounds = rounds;
  o.min_devices = devices;
  o.round_deadline_ms = 20000;
  o.learning_rate = 0.1f;
  o.local_epochs = 2;
  o.idle_timeout_ms = 10000;
  o.join_timeout_ms = 2000;
  return o;
}

DeviceOptions DeviceFor(const Workspace& ws, int i, uint16_t port, int devices) {
  DeviceOptions o;
  o.port = port;
  o.device_id = "dev-" + std::to_string(i);
  o.key_file = ws.DeviceKey(i);
  o.data_dir = FEDRT_TINY_IDX_DIR;
  o.model = kModel;
  o.devices = devices;
  o.index = i;
  o.batch = 16;
  o.give_up_ms = 5000;
  return o;
}

// Runs RunAggregator on a thread; records its reports and aggregates.
struct AggregatorThread {
  std::atomic<uint16_t> port{0};
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};
  Status status;
  std::mutex mutex;
  std::vector<RoundReport> reports;
  std::map<uint32_t, std::vector<float>> aggregates;
  std::map<std::pair<uint32_t, std::string>, std::vector<uint8_t>> instructions;  // (round, device) -> frames
  std::function<void(const RoundReport&)> on_round;  // optional, set before the first round
  std::thread thread;

  explicit AggregatorThread(AggregatorOptions options, std::function<void(const RoundReport&)> round_hook = nullptr)
      : on_round(std::move(round_hook)) {
    thread = std::thread([this, options] {
      AggregatorHooks hooks;
      hooks.on_listening = [this](uint16_t p) { port = p; };
      hooks.on_round = [this](const RoundReport& r) {
        if (on_round) on_round(r);
        std::lock_guard<std::mutex> lock(mutex);
        reports.push_back(r);
      };
      hooks.on_instructions = [this](uint32_t round, const std::string& device, const std::vector<uint8_t>& bytes) {
        std::lock_guard<std::mutex> lock(mutex);
        instructions[{round, device}] = bytes;
      };
      hooks.on_aggregate = [this](uint32_t round, const std::vector<float>& mean) {
        std::lock_guard<std::mutex> lock(mutex);
        aggregates[round] = mean;
      };
      status = RunAggregator(options, hooks, &stop);
      done = true;
    });
    for (int i = 0; i < 2000 && port == 0 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~AggregatorThread() {
    stop = true;
    thread.join();
  }
  bool WaitDone(int ms) {
    for (int i = 0; i < ms / 10 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return done;
  }
  std::vector<RoundReport> Reports() {
    std::lock_guard<std::mutex> lock(mutex);
    return reports;
  }
};

struct SentUpdate {
  std::string device;
  std::string spec;
  std::vector<uint8_t> payload;
  uint64_t samples = 0;
};

// A client that joins with the transport's handshake and then does what the
// test says (sends bad updates, nothing at all).
struct RawDevice {
  EventLoopThread loop;
  std::shared_ptr<FrameQueue> queue = std::make_shared<FrameQueue>();
  std::shared_ptr<Connection> connection;
  FrameLimits limits;

  Status Join(uint16_t port, const std::string& id, const std::string& hex_key, int64_t model_round = -1) {
    Result<KeyStore> keys = KeyStore::Parse(id + " " + hex_key + "\n");
    if (!keys.ok()) return keys.status();
    Result<std::shared_ptr<Connection>> c =
        TcpConnectAndWait(loop.loop(), "127.0.0.1", port, ConnectionOptions(), queue, 2000);
    if (!c.ok()) return c.status();
    connection = *c;
    ClientHandshake handshake(id, *keys->Find(id), SystemCrypto());
    Result<JoinMessage> join = handshake.Start();
    join->model_round = model_round;
    FEDRT_RETURN_IF_ERROR(connection->Send(*Encode(*join, limits)));
    Result<Frame> frame = queue->Pop(5000);
    if (!frame.ok()) return frame.status();
    if (frame->kind() != MessageKind::kChallenge) return Status(StatusCode::kUnauthenticated, "no challenge");
    Result<AuthenticateMessage> proof = handshake.OnChallenge(*DecodeChallenge(*frame));
    FEDRT_RETURN_IF_ERROR(connection->Send(*Encode(*proof, limits)));
    frame = queue->Pop(5000);
    if (!frame.ok()) return frame.status();
    if (frame->kind() != MessageKind::kJoinResponse) return Status(StatusCode::kUnauthenticated, "refused");
    return handshake.OnJoinResponse(*DecodeJoinResponse(*frame));
  }

  // Waits for the next round's instructions (every chunk); returns the round.
  Result<uint64_t> AwaitRound() {
    for (;;) {
      Result<Frame> frame = queue->Pop(15000);
      if (!frame.ok()) return frame.status();
      if (frame->kind() != MessageKind::kRoundInstructions) continue;
      Result<RoundInstructionsMessage> m = DecodeRoundInstructions(*frame, limits);
      if (!m.ok()) return m.status();
      if (m->payload.index + 1 == m->payload.count) return m->round_id;
    }
  }

  Status SendUpdate(uint64_t round, const std::string& spec, const std::vector<uint8_t>& payload) {
    UpdateMessage update;
    update.round_id = round;
    update.num_samples = 64;
    update.codec_spec = spec;
    update.payload = ChunkView{0, 1, payload.size(), 0, payload.data(), payload.size()};
    Result<OutFrame> frame = Encode(update, limits);
    if (!frame.ok()) return frame.status();
    return connection->Send(*frame);
  }
};

std::string CanonicalSpec(const std::string& spec) { return (*MakeCodec(spec))->spec(); }

// `codec` over kModel's tensor table, as devices encode and the aggregator
// decodes updates (MakeUpdateCodec).
std::unique_ptr<TensorSetCodec> UpdateCodec(std::unique_ptr<Codec> codec) {
  return std::move(MakeUpdateCodec(std::move(codec), ModelTensorSizes(Model::Create(kModel, 1).value())).value());
}
std::unique_ptr<TensorSetCodec> UpdateCodec(AdaptiveCodec& codec) {
  return std::move(BorrowUpdateCodec(codec, ModelTensorSizes(Model::Create(kModel, 1).value())).value());
}

TEST_CASE("four devices over five rounds improve the global model and the aggregate is the mean of their decoded updates") {
  Workspace ws;
  AggregatorThread aggregator(Options(ws, "dqsg", 5, 4));
  REQUIRE(aggregator.port != 0);
  std::mutex mutex;
  std::map<uint32_t, std::vector<SentUpdate>> sent;
  std::vector<std::thread> devices;
  std::vector<Status> results(4);
  for (int i = 0; i < 4; ++i) {
    devices.emplace_back([&, i] {
      DeviceHooks hooks;
      const std::string id = "dev-" + std::to_string(i);
      hooks.on_update = [&, id](uint32_t round, const std::string& spec, const uint8_t* payload, std::size_t size,
                                uint64_t samples) {
        std::lock_guard<std::mutex> lock(mutex);
        // A device that lost its link sends the round again: the last one counts.
        std::vector<SentUpdate>& list = sent[round];
        list.erase(std::remove_if(list.begin(), list.end(), [&](const SentUpdate& u) { return u.device == id; }),
                   list.end());
        list.push_back({id, spec, std::vector<uint8_t>(payload, payload + size), samples});
      };
      results[i] = RunDevice(DeviceFor(ws, i, aggregator.port, 4), hooks);
    });
  }
  for (std::thread& t : devices) t.join();
  REQUIRE(aggregator.WaitDone(20000));
  CHECK(aggregator.status.ok());
  for (const Status& s : results) CHECK_MESSAGE(s.ok(), s.ToString());

  const std::vector<RoundReport> reports = aggregator.Reports();
  REQUIRE(reports.size() == 5);
  for (const RoundReport& r : reports) CHECK(r.updates == 4);
  CHECK(reports.back().test_accuracy > 0.5);
  CHECK(reports.back().test_accuracy > reports.front().test_accuracy - 1e-9);
  CHECK(reports.back().test_loss < reports.front().test_loss);
  CHECK(reports.front().bytes_up * 4 < reports.front().fp32_bytes_up);

  // The server's aggregate equals the sample-weighted mean of what each
  // device's payload decodes to with the codec.
  for (uint32_t round = 0; round < 5; ++round) {
    const std::vector<SentUpdate>& updates = sent[round];
    REQUIRE(updates.size() == 4);
    const std::vector<float>& server = aggregator.aggregates[round];
    std::vector<double> sum(server.size(), 0.0);
    double weight = 0;
    for (const SentUpdate& u : updates) {
      CHECK(u.spec == CanonicalSpec("dqsg"));
      std::unique_ptr<TensorSetCodec> codec = UpdateCodec(std::move(MakeCodec(u.spec).value()));
      CodecContext context;
      context.session_seed = 1;
      context.round = round;
      context.sender_id = DeviceSenderId(u.device);
      std::vector<float> decoded(server.size());
      REQUIRE(codec->Decode(u.payload.data(), u.payload.size(), context, decoded.data(), decoded.size()).ok());
      for (std::size_t i = 0; i < decoded.size(); ++i) sum[i] += static_cast<double>(u.samples) * decoded[i];
      weight += static_cast<double>(u.samples);
    }
    double worst = 0;
    for (std::size_t i = 0; i < server.size(); ++i) worst = std::max(worst, std::fabs(sum[i] / weight - server[i]));
    CHECK(worst < 1e-6);
  }
}

TEST_CASE("ndqsg rounds decode anchors first and nested updates against the running mean") {
  Workspace ws;
  AggregatorOptions options = Options(ws, "ndqsg", 3, 4);
  options.anchor_fraction = 0.25;
  AggregatorThread aggregator(options);
  REQUIRE(aggregator.port != 0);
  std::vector<std::thread> devices;
  for (int i = 0; i < 4; ++i) {
    devices.emplace_back([&, i] { (void)RunDevice(DeviceFor(ws, i, aggregator.port, 4), DeviceHooks()); });
  }
  for (std::thread& t : devices) t.join();
  REQUIRE(aggregator.WaitDone(20000));
  const std::vector<RoundReport> reports = aggregator.Reports();
  REQUIRE(reports.size() == 3);
  for (const RoundReport& r : reports) {
    CHECK(r.updates == 4);
    CHECK(r.anchors >= 1);
    CHECK(r.anchors < 4);
  }
  CHECK(reports.back().test_loss < reports.front().test_loss);
}

TEST_CASE("ndqsg devices that come near the wrap boundary get a larger rho and then plain dqsg") {
  Workspace ws;
  // rho = 2 with one fine level wraps often; a zero threshold reacts to any near-wrap.
  AggregatorOptions options = Options(ws, "ndqsg:s1=1,rho=2,ec=pack", 4, 4);
  options.anchor_fraction = 0.25;
  options.wrap_threshold = 0;
  options.max_rho = 3;
  AggregatorThread aggregator(options);
  REQUIRE(aggregator.port != 0);
  std::mutex mutex;
  std::map<std::pair<uint32_t, std::string>, std::string> specs;  // (round, device) -> spec it sent
  std::vector<std::thread> devices;
  for (int i = 0; i < 4; ++i) {
    devices.emplace_back([&, i] {
      DeviceHooks hooks;
      const std::string id = "dev-" + std::to_string(i);
      hooks.on_update = [&, id](uint32_t round, const std::string& spec, const uint8_t*, std::size_t, uint64_t) {
        std::lock_guard<std::mutex> lock(mutex);
        specs[{round, id}] = spec;
      };
      (void)RunDevice(DeviceFor(ws, i, aggregator.port, 4), hooks);
    });
  }
  for (std::thread& t : devices) t.join();
  REQUIRE(aggregator.WaitDone(20000));
  const std::vector<RoundReport> reports = aggregator.Reports();
  REQUIRE(reports.size() == 4);
  std::size_t raised = 0, switched = 0;
  for (std::size_t k = 0; k < reports.size(); ++k) {
    const RoundReport& r = reports[k];
    CHECK(r.updates == 4);
    raised += r.rho_raised;
    switched += r.switched_to_dqsg;
    uint64_t wraps = 0;
    for (const DeviceRoundReport& d : r.devices) {
      INFO("round " << r.round << " device " << d.device_id);
      wraps += d.near_wraps;
      const std::string sent = specs[{r.round - 1, d.device_id}];
      if (d.anchor) {
        CHECK(sent.rfind("dqsg:s=1,", 0) == 0);
        continue;
      }
      CHECK(sent == CanonicalSpec("ndqsg:s1=1,ec=pack,rho=" + std::to_string(d.rho)));
      if (d.near_wraps > 0) CHECK(d.next_rho == (d.rho == 2 ? 3 : 0));
      if (k + 1 == reports.size()) continue;
      // Next round: a device past max_rho is an anchor; a raised one uses its new rho unless drawn as an anchor.
      for (const DeviceRoundReport& next : reports[k + 1].devices) {
        if (next.device_id != d.device_id) continue;
        if (d.next_rho == 0) CHECK(next.anchor);
        if (!next.anchor) CHECK(next.rho == d.next_rho);
      }
    }
    CHECK(wraps == r.near_wraps);
  }
  // Raises are certain at rho = 2; whether a raised device wraps again at
  // rho = 3 depends on arrival order, so the switch is checked per device above.
  CHECK(raised > 0);
  CHECK(raised + switched > 0);
}

TEST_CASE("a compressed model broadcast keeps every device on the model the aggregator tracks") {
  Workspace ws;
  AggregatorOptions options = Options(ws, "dqsg", 4, 3);
  options.downlink_codec = "fp16";
  std::mutex mutex;
  std::map<uint32_t, std::vector<float>> tracked;
  std::map<uint32_t, std::vector<std::vector<float>>> held;
  std::vector<RoundReport> reports;
  std::atomic<uint16_t> port{0};
  std::atomic<bool> done{false};
  std::thread server([&] {
    AggregatorHooks hooks;
    hooks.on_listening = [&](uint16_t p) { port = p; };
    hooks.on_round = [&](const RoundReport& r) {
      std::lock_guard<std::mutex> lock(mutex);
      reports.push_back(r);
    };
    hooks.on_broadcast = [&](uint32_t round, const std::vector<float>& model) {
      std::lock_guard<std::mutex> lock(mutex);
      tracked[round] = model;
    };
    CHECK(RunAggregator(options, hooks).ok());
    done = true;
  });
  for (int i = 0; i < 2000 && port == 0 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(port != 0);
  std::vector<std::thread> devices;
  for (int i = 0; i < 3; ++i) {
    devices.emplace_back([&, i] {
      DeviceHooks hooks;
      hooks.on_model = [&](uint32_t round, const float* model, std::size_t d) {
        std::lock_guard<std::mutex> lock(mutex);
        held[round].emplace_back(model, model + d);
      };
      CHECK(RunDevice(DeviceFor(ws, i, port, 3), hooks).ok());
    });
  }
  for (std::thread& t : devices) t.join();
  server.join();
  REQUIRE(reports.size() == 4);
  // Round 0 sends the whole model compressed (a delta from zeros): no device
  // gets d floats, even the first time.
  const uint64_t fp32_down = 3 * static_cast<uint64_t>(tracked[0].size()) * sizeof(float);
  for (std::size_t k = 0; k < reports.size(); ++k) {
    CHECK(reports[k].full_models_down == 0);
    CHECK(reports[k].bytes_down < fp32_down * 6 / 10);  // fp16 deltas and their headers
  }
  for (uint32_t round = 0; round < 4; ++round) {
    INFO("round " << round);
    REQUIRE(held[round].size() == 3);
    for (const std::vector<float>& model : held[round]) {
      REQUIRE(model.size() == tracked[round].size());
      CHECK(std::memcmp(model.data(), tracked[round].data(), model.size() * sizeof(float)) == 0);
    }
  }
  CHECK(reports.back().test_loss < reports.front().test_loss);
}

TEST_CASE("a device with a wrong key is refused and does not retry") {
  Workspace ws;
  AggregatorThread aggregator(Options(ws, "fp32", 1, 2));
  REQUIRE(aggregator.port != 0);
  Workspace::Write(ws.dir + "/wrong.key", std::string("dev-0 ") + kKeys[1] + "\n");
  DeviceOptions device = DeviceFor(ws, 0, aggregator.port, 1);
  device.key_file = ws.dir + "/wrong.key";
  const auto start = std::chrono::steady_clock::now();
  const Status status = RunDevice(device, DeviceHooks());
  CHECK(status.code() == StatusCode::kUnauthenticated);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("a client that connects and sends nothing is timed out") {
  Workspace ws;
  AggregatorThread aggregator(Options(ws, "fp32", 1, 2));
  REQUIRE(aggregator.port != 0);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(aggregator.port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  timeval timeout{8, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  const auto start = std::chrono::steady_clock::now();
  uint8_t buffer[4096];
  ssize_t n = 1;
  while (n > 0) n = ::recv(fd, buffer, sizeof(buffer), 0);  // an Error frame, then the end of the stream
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK((n == 0 || (n < 0 && errno == ECONNRESET)));
  // Closed by the aggregator's join timeout (the end of the stream, not our
  // own 8 s receive timeout), and not at once.
  CHECK(seconds > 1.0);
  ::close(fd);
}

TEST_CASE("a malformed or NaN update closes only that connection while the others keep training") {
  Workspace ws;
  AggregatorThread aggregator(Options(ws, "fp32", 3, 4));
  REQUIRE(aggregator.port != 0);
  std::vector<std::thread> devices;
  for (int i = 0; i < 3; ++i) {
    devices.emplace_back([&, i] { (void)RunDevice(DeviceFor(ws, i, aggregator.port, 3), DeviceHooks()); });
  }
  const std::string spec = CanonicalSpec("fp32");
  const std::size_t d = 784 * 32 + 32 + 32 * 10 + 10;

  // dev-3 sends an fp32 update with a NaN in it (a valid payload otherwise).
  RawDevice bad;
  REQUIRE(bad.Join(aggregator.port, "dev-3", kKeys[3]).ok());
  Result<uint64_t> round = bad.AwaitRound();
  REQUIRE(round.ok());
  std::unique_ptr<Codec> fp32 = std::move(MakeCodec(spec).value());
  std::vector<float> zeros(d, 0.0f);
  std::vector<uint8_t> payload(fp32->MaxEncodedSize(d));
  CodecContext context;
  context.session_seed = 1;
  context.round = static_cast<uint32_t>(*round);
  context.sender_id = DeviceSenderId("dev-3");
  payload.resize(*fp32->Encode(zeros.data(), d, context, payload.data(), payload.size()));
  Result<PayloadView> view = ParsePayload(payload.data(), payload.size());
  REQUIRE(view.ok());
  const std::size_t body = payload.size() - view->body_size;
  StoreFloatLe(payload.data() + body + 40, std::nanf(""));
  FinishPayload(view->header, view->spec, payload.data());
  REQUIRE(bad.SendUpdate(*round, spec, payload).ok());
  // The aggregator answers with an Error and closes.
  bool got_error = false;
  for (;;) {
    Result<Frame> frame = bad.queue->Pop(10000);
    if (!frame.ok()) break;
    if (frame->kind() == MessageKind::kError) got_error = true;
  }
  CHECK(got_error);
  CHECK(bad.queue->WaitClosed(5000));

  // A second bad client sends bytes that are not a payload at all.
  RawDevice garbage;
  bool garbage_closed = false;
  if (garbage.Join(aggregator.port, "dev-4", kKeys[4]).ok()) {
    // It is not sampled until a round starts with it connected; either way it
    // must not disturb the others.
    Result<uint64_t> r = garbage.AwaitRound();
    if (r.ok()) {
      REQUIRE(garbage.SendUpdate(*r, spec, std::vector<uint8_t>(100, 0xAB)).ok());
      garbage_closed = garbage.queue->WaitClosed(10000);
    } else {
      garbage_closed = true;  // training finished before it was sampled
    }
  }
  CHECK(garbage_closed);

  for (std::thread& t : devices) t.join();
  REQUIRE(aggregator.WaitDone(20000));
  const std::vector<RoundReport> reports = aggregator.Reports();
  REQUIRE(reports.size() == 3);
  for (const RoundReport& r : reports) CHECK(r.updates == 3);
  CHECK(reports.front().rejected == 1);
}

TEST_CASE("a device stopped mid-round does not stall the round and rejoins later") {
  Workspace ws;
  AggregatorOptions options = Options(ws, "fp32", 6, 3);
  // A deadline no run reaches: the round with the dropped device can only
  // close because the drop was noticed, so the test needs no timed check
  // and a slow machine cannot make a live device miss its round.
  options.round_deadline_ms = 3600 * 1000;
  AggregatorThread aggregator(options);
  REQUIRE(aggregator.port != 0);
  std::vector<std::thread> devices;
  for (int i = 0; i < 2; ++i) {
    devices.emplace_back([&, i] { (void)RunDevice(DeviceFor(ws, i, aggregator.port, 3), DeviceHooks()); });
  }
  std::atomic<bool> killed{false};
  Status first_life;
  std::thread victim([&] {
    DeviceHooks hooks;
    hooks.on_trained = [&](uint32_t round) {
      if (round == 1) killed = true;  // dies after training, before sending
    };
    first_life = RunDevice(DeviceFor(ws, 2, aggregator.port, 3), hooks, &killed);
    // Comes back with the same identity once the round it left has closed.
    for (int i = 0; i < 2000 && aggregator.Reports().size() < 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    (void)RunDevice(DeviceFor(ws, 2, aggregator.port, 3), DeviceHooks());
  });
  for (std::thread& t : devices) t.join();
  victim.join();
  REQUIRE(aggregator.WaitDone(120000));
  CHECK(first_life.code() == StatusCode::kCancelled);
  const std::vector<RoundReport> reports = aggregator.Reports();
  REQUIRE(reports.size() == 6);
  CHECK(reports[0].updates == 3);
  CHECK(reports[1].updates == 2);
  CHECK(reports.back().updates == 3);
}

TEST_CASE("a restarted aggregator resumes from its checkpoint") {
  Workspace ws;
  AggregatorOptions options = Options(ws, "fp32", 2, 2);
  options.checkpoint = ws.dir + "/aggregator.ckpt";
  double accuracy_before = 0;
  {
    AggregatorThread aggregator(options);
    REQUIRE(aggregator.port != 0);
    std::thread a([&] { (void)RunDevice(DeviceFor(ws, 0, aggregator.port, 2), DeviceHooks()); });
    std::thread b([&] { (void)RunDevice(DeviceFor(ws, 1, aggregator.port, 2), DeviceHooks()); });
    a.join();
    b.join();
    REQUIRE(aggregator.WaitDone(20000));
    const std::vector<RoundReport> first = aggregator.Reports();
    REQUIRE(first.size() == 2);
    accuracy_before = first[1].test_accuracy;
  }
  options.rounds = 4;
  AggregatorThread aggregator(options);
  REQUIRE(aggregator.port != 0);
  std::thread a([&] { (void)RunDevice(DeviceFor(ws, 0, aggregator.port, 2), DeviceHooks()); });
  std::thread b([&] { (void)RunDevice(DeviceFor(ws, 1, aggregator.port, 2), DeviceHooks()); });
  a.join();
  b.join();
  REQUIRE(aggregator.WaitDone(20000));
  const std::vector<RoundReport> reports = aggregator.Reports();
  REQUIRE(reports.size() == 2);
  CHECK(reports.front().round == 3);
  CHECK(reports.back().round == 4);
  CHECK(reports.back().test_accuracy >= accuracy_before - 0.1);
}

// ---- ALQ / AMQ level tables and the codec state of the checkpoint ----------------

// The frames of `wire` (prefix + body, one after the other), parsed.
std::vector<Frame> ParseFrames(const std::vector<uint8_t>& wire) {
  std::vector<Frame> frames;
  FrameLimits limits;
  std::size_t at = 0;
  while (at + 4 <= wire.size()) {
    const std::size_t size = 4 + LoadLe32(wire.data() + at);
    Result<Frame> frame = ParseFrame(wire.data() + at, size, limits);
    REQUIRE(frame.ok());
    frames.push_back(std::move(*frame));
    at += size;
  }
  CHECK(at == wire.size());
  return frames;
}

// The first instruction frame of `wire`, decoded (views into `frames`).
RoundInstructionsMessage FirstInstructions(const std::vector<Frame>& frames) {
  REQUIRE(!frames.empty());
  Result<RoundInstructionsMessage> m = DecodeRoundInstructions(frames.front(), FrameLimits());
  REQUIRE(m.ok());
  return *m;
}

void CheckLevelRounds(const std::string& spec) {
  INFO("codec " << spec);
  Workspace ws;
  constexpr uint32_t kRounds = 3;
  AggregatorThread aggregator(Options(ws, spec, kRounds, 3));
  REQUIRE(aggregator.port != 0);
  std::mutex mutex;
  std::map<uint32_t, std::vector<SentUpdate>> sent;
  std::vector<std::thread> devices;
  for (int i = 0; i < 3; ++i) {
    devices.emplace_back([&, i] {
      DeviceHooks hooks;
      const std::string id = "dev-" + std::to_string(i);
      hooks.on_update = [&, id](uint32_t round, const std::string& s, const uint8_t* payload, std::size_t size,
                                uint64_t samples) {
        std::lock_guard<std::mutex> lock(mutex);
        std::vector<SentUpdate>& list = sent[round];
        list.erase(std::remove_if(list.begin(), list.end(), [&](const SentUpdate& u) { return u.device == id; }),
                   list.end());
        list.push_back({id, s, std::vector<uint8_t>(payload, payload + size), samples});
      };
      CHECK(RunDevice(DeviceFor(ws, i, aggregator.port, 3), hooks).ok());
    });
  }
  for (std::thread& t : devices) t.join();
  REQUIRE(aggregator.WaitDone(20000));
  const std::vector<RoundReport> reports = aggregator.Reports();
  REQUIRE(reports.size() == kRounds);

  std::unique_ptr<AdaptiveCodec> initial = std::move(MakeAdaptiveCodec(spec).value());
  std::vector<LevelTable> tables = {initial->level_table()};  // tables[r]: what round r used
  CHECK(tables[0].version == 0);
  for (uint32_t r = 0; r < kRounds; ++r) {
    INFO("round " << r);
    CHECK(reports[r].updates == 3);
    // Every round is refitted: the next round's table is version r + 1.
    CHECK(reports[r].level_table_version == r + 1);
    REQUIRE(reports[r].level_table.size() == initial->level_table().levels.size());
    CHECK(reports[r].level_table != initial->level_table().levels);  // fitted, not the initial table
    LevelTable next;
    next.version = reports[r].level_table_version;
    next.levels = reports[r].level_table;
    CHECK(ValidateLevels(next).ok());
    tables.push_back(next);
  }
  for (uint32_t r = 0; r < kRounds; ++r) {
    INFO("round " << r);
    // The instructions carry the table of the round.
    for (int i = 0; i < 3; ++i) {
      const std::vector<Frame> frames = ParseFrames(aggregator.instructions[{r, "dev-" + std::to_string(i)}]);
      const RoundInstructionsMessage m = FirstInstructions(frames);
      CHECK(m.level_table_version == tables[r].version);
      REQUIRE(m.level_table_size == tables[r].levels.size());
      CHECK(std::equal(tables[r].levels.begin(), tables[r].levels.end(), m.level_table));
    }
    // The devices encoded with it: their payloads decode with that table
    // (and not with another version), and the aggregate is the mean of those decodes.
    const std::vector<SentUpdate>& updates = sent[r];
    REQUIRE(updates.size() == 3);
    const std::vector<float>& server = aggregator.aggregates[r];
    std::vector<double> sum(server.size(), 0.0);
    double weight = 0;
    for (const SentUpdate& u : updates) {
      std::unique_ptr<AdaptiveCodec> adaptive = std::move(MakeAdaptiveCodec(u.spec).value());
      std::unique_ptr<TensorSetCodec> codec = UpdateCodec(*adaptive);
      REQUIRE(adaptive->SetLevelTable(tables[r]).ok());
      CodecContext context;
      context.session_seed = 1;
      context.round = r;
      context.sender_id = DeviceSenderId(u.device);
      std::vector<float> decoded(server.size());
      REQUIRE(codec->Decode(u.payload.data(), u.payload.size(), context, decoded.data(), decoded.size()).ok());
      for (std::size_t i = 0; i < decoded.size(); ++i) sum[i] += static_cast<double>(u.samples) * decoded[i];
      weight += static_cast<double>(u.samples);
      REQUIRE(adaptive->SetLevelTable(tables[r + 1]).ok());
      CHECK(codec->Decode(u.payload.data(), u.payload.size(), context, decoded.data(), decoded.size()).code() ==
            StatusCode::kFailedPrecondition);
    }
    double worst = 0;
    for (std::size_t i = 0; i < server.size(); ++i) worst = std::max(worst, std::fabs(sum[i] / weight - server[i]));
    CHECK(worst < 1e-6);
  }
  CHECK(reports.back().test_loss < reports.front().test_loss);
}

TEST_CASE("alq rounds ship a refitted level table each round and the aggregate is the mean of decodes with it") {
  CheckLevelRounds("alq:bits=3");
}

TEST_CASE("amq rounds ship a refitted level table each round and the aggregate is the mean of decodes with it") {
  CheckLevelRounds("amq:bits=3,ec=pack");
}

TEST_CASE("an alq update naming another table version or bad level statistics closes only that connection") {
  Workspace ws;
  const std::string spec = CanonicalSpec("alq:bits=3");
  AggregatorThread aggregator(Options(ws, spec, 2, 5));
  REQUIRE(aggregator.port != 0);
  std::vector<std::thread> devices;
  for (int i = 0; i < 2; ++i) {
    devices.emplace_back([&, i] { CHECK(RunDevice(DeviceFor(ws, i, aggregator.port, 2), DeviceHooks()).ok()); });
  }
  const std::size_t d = 784 * 32 + 32 + 32 * 10 + 10;
  struct Case {
    int device;
    const char* reason;  // in the Error the aggregator sends
  };
  const Case cases[] = {{2, "level table version 1 (unknown)"},
                        {3, "sum of r^2 <= sum of r <= count"},
                        {4, "without level statistics"}};
  std::vector<std::unique_ptr<RawDevice>> raws;
  for (const Case& c : cases) {
    raws.push_back(std::make_unique<RawDevice>());
    const std::string id = "dev-" + std::to_string(c.device);
    REQUIRE(raws.back()->Join(aggregator.port, id, kKeys[c.device]).ok());
  }
  for (std::size_t k = 0; k < raws.size(); ++k) {
    const Case& c = cases[k];
    RawDevice& raw = *raws[k];
    const std::string id = "dev-" + std::to_string(c.device);
    INFO(id);
    Result<uint64_t> round = raw.AwaitRound();
    REQUIRE(round.ok());
    std::unique_ptr<AdaptiveCodec> codec = std::move(MakeAdaptiveCodec(spec).value());
    std::vector<float> values(d);
    for (std::size_t i = 0; i < d; ++i) values[i] = std::sin(static_cast<float>(i)) * 1e-3f;
    std::unique_ptr<TensorSetCodec> tensors = UpdateCodec(*codec);
    std::vector<uint8_t> payload(tensors->MaxEncodedSize(d));
    CodecContext context;
    context.session_seed = 1;
    context.round = static_cast<uint32_t>(*round);
    context.sender_id = DeviceSenderId(id);
    payload.resize(*tensors->Encode(values.data(), d, context, payload.data(), payload.size()));
    const LevelStatistics measured = *codec->MeasureLevelStatistics(values.data(), d);
    UpdateMessage update;
    update.round_id = *round;
    update.num_samples = 64;
    update.codec_spec = spec;
    update.level_table_version = 0;
    LevelStatisticsMessage& ls = update.stats.level_statistics;
    ls.present = true;
    ls.count = measured.count;
    ls.sum = measured.sum;
    ls.sum_sq = measured.sum_sq;
    ls.bucket_norms = measured.bucket_norms;
    if (c.device == 2) update.level_table_version = 1;  // no such table yet
    if (c.device == 3) ls.sum = ls.count + 1;           // more than every r = 1
    if (c.device == 4) ls.present = false;
    update.payload = ChunkView{0, 1, payload.size(), 0, payload.data(), payload.size()};
    REQUIRE(raw.connection->Send(*Encode(update, raw.limits)).ok());
    std::string error;
    for (;;) {
      Result<Frame> frame = raw.queue->Pop(10000);
      if (!frame.ok()) break;
      if (frame->kind() == MessageKind::kError) error = ToStatus(*DecodeError(*frame)).message();
    }
    CHECK_MESSAGE(error.find(c.reason) != std::string::npos, error);
    CHECK(raw.queue->WaitClosed(5000));
  }
  for (std::thread& t : devices) t.join();
  REQUIRE(aggregator.WaitDone(20000));
  const std::vector<RoundReport> reports = aggregator.Reports();
  REQUIRE(reports.size() == 2);
  CHECK(reports[0].updates == 2);
  CHECK(reports[0].rejected == 3);
  CHECK(reports[1].updates == 2);
  CHECK(reports[1].level_table_version == 2);
}

// Runs `options` for three rounds with two devices, keeping the checkpoint
// written after round 2; then starts a second aggregator from that copy, and
// two clients that rejoin holding the model of round 1 (as devices that stay
// up while the aggregator restarts). Its round-2 instructions must be byte for
// byte the ones the first aggregator sent. Returns them (for more checks).
std::map<std::string, std::vector<uint8_t>> CheckRestartSendsTheSameInstructions(AggregatorOptions options,
                                                                                  const Workspace& ws) {
  options.checkpoint = ws.dir + "/aggregator.ckpt";
  options.rounds = 3;
  options.min_devices = 2;
  const std::string copy = ws.dir + "/after-round-2.ckpt";
  std::map<std::string, std::vector<uint8_t>> before;
  {
    AggregatorThread aggregator(options, [&](const RoundReport& r) {
      // The checkpoint of round r is written before the report.
      if (r.round == 2) std::system(("cp " + options.checkpoint + " " + copy).c_str());
    });
    REQUIRE(aggregator.port != 0);
    std::thread a([&] { CHECK(RunDevice(DeviceFor(ws, 0, aggregator.port, 2), DeviceHooks()).ok()); });
    std::thread b([&] { CHECK(RunDevice(DeviceFor(ws, 1, aggregator.port, 2), DeviceHooks()).ok()); });
    a.join();
    b.join();
    REQUIRE(aggregator.WaitDone(20000));
    REQUIRE(aggregator.Reports().size() == 3);
    for (int i = 0; i < 2; ++i) {
      const std::string id = "dev-" + std::to_string(i);
      before[id] = aggregator.instructions[{2, id}];
      REQUIRE(!before[id].empty());
    }
  }
  options.checkpoint = copy;
  AggregatorThread restarted(options);
  REQUIRE(restarted.port != 0);
  RawDevice raw[2];
  for (int i = 0; i < 2; ++i) REQUIRE(raw[i].Join(restarted.port, "dev-" + std::to_string(i), kKeys[i], 1).ok());
  std::map<std::string, std::vector<uint8_t>> after;
  for (int i = 0; i < 2; ++i) {
    const std::string id = "dev-" + std::to_string(i);
    Result<uint64_t> round = raw[i].AwaitRound();
    REQUIRE(round.ok());
    CHECK(*round == 2);
    std::lock_guard<std::mutex> lock(restarted.mutex);
    after[id] = restarted.instructions[{2, id}];
    CHECK(after[id] == before[id]);
  }
  return after;
}

TEST_CASE("a restarted aggregator keeps the level table and the downlink state and sends the same instructions") {
  Workspace ws;
  AggregatorOptions options = Options(ws, "alq:bits=3", 3, 2);
  options.downlink_codec = "fp16";
  const std::map<std::string, std::vector<uint8_t>> sent = CheckRestartSendsTheSameInstructions(options, ws);
  for (const auto& [device, bytes] : sent) {
    const std::vector<Frame> frames = ParseFrames(bytes);
    const RoundInstructionsMessage m = FirstInstructions(frames);
    CHECK(m.level_table_version == 2);                             // restored, not the initial table
    CHECK(m.model_encoding == ModelEncoding::kCompressedDelta);  // the device model was restored
  }
}

TEST_CASE("a restarted aggregator keeps every device's ndqsg rho and sends the same instructions") {
  Workspace ws;
  // As in the wrap test above: rho = 2 wraps, a zero threshold raises it.
  AggregatorOptions options = Options(ws, "ndqsg:s1=1,rho=2,ec=pack", 3, 2);
  options.anchor_fraction = 0.25;
  options.wrap_threshold = 0;
  options.max_rho = 5;
  const std::map<std::string, std::vector<uint8_t>> sent = CheckRestartSendsTheSameInstructions(options, ws);
  bool raised = false;
  for (const auto& [device, bytes] : sent) {
    const std::vector<Frame> frames = ParseFrames(bytes);
    const RoundInstructionsMessage m = FirstInstructions(frames);
    if (m.anchor_role == AnchorRole::kNested) raised |= std::string(m.codec_spec).find("rho=2") == std::string::npos;
  }
  CHECK(raised);
}

// Four device threads against one aggregator for `rounds` rounds of dqsg,
// over TLS when `tls` is given; the aggregator's reports and aggregates.
struct StarRun {
  std::vector<RoundReport> reports;
  std::map<uint32_t, std::vector<float>> aggregates;
};

StarRun RunFourDevices(const Workspace& ws, uint32_t rounds, const transport::testing::TlsCredentials* tls) {
  AggregatorOptions options = Options(ws, "dqsg", rounds, 4);
  if (tls != nullptr) options.tls = tls->ServerConfig();
  AggregatorThread aggregator(options);
  REQUIRE(aggregator.port != 0);
  std::vector<std::thread> devices;
  std::vector<Status> results(4);
  for (int i = 0; i < 4; ++i) {
    devices.emplace_back([&, i] {
      DeviceOptions device = DeviceFor(ws, i, aggregator.port, 4);
      if (tls != nullptr) device.tls = tls->ClientConfig();
      results[i] = RunDevice(device, DeviceHooks());
    });
  }
  for (std::thread& t : devices) t.join();
  REQUIRE(aggregator.WaitDone(20000));
  CHECK_MESSAGE(aggregator.status.ok(), aggregator.status.ToString());
  for (const Status& s : results) CHECK_MESSAGE(s.ok(), s.ToString());
  std::lock_guard<std::mutex> lock(aggregator.mutex);
  return StarRun{aggregator.reports, aggregator.aggregates};
}

TEST_CASE("four devices over tls improve the model and reach the aggregates of the same run over plain tcp") {
  if (!transport::TlsSupported()) return;  // built with FEDRT_WITH_TLS=OFF
  Workspace ws;
  transport::testing::TlsCredentials tls;
  REQUIRE_MESSAGE(tls.ok(), tls.status().ToString());
  const StarRun plain = RunFourDevices(ws, 2, nullptr);
  const StarRun secure = RunFourDevices(ws, 2, &tls);
  REQUIRE(secure.reports.size() == 2);
  REQUIRE(plain.reports.size() == 2);
  for (const RoundReport& r : secure.reports) CHECK(r.updates == 4);
  CHECK(secure.reports.back().test_loss < secure.reports.front().test_loss);
  for (uint32_t round = 0; round < 2; ++round) {
    const std::vector<float>& a = plain.aggregates.at(round);
    const std::vector<float>& b = secure.aggregates.at(round);
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double{a[i]} - double{b[i]}));
    // The same updates; only the order they are summed in may differ.
    CHECK(worst < 1e-5);
    CHECK(secure.reports[round].bytes_up == plain.reports[round].bytes_up);
  }
}

TEST_CASE("a device with the wrong ca refuses the tls aggregator and does not retry") {
  if (!transport::TlsSupported()) return;  // built with FEDRT_WITH_TLS=OFF
  Workspace ws;
  transport::testing::TlsCredentials tls;
  transport::testing::TlsCredentials strangers;
  REQUIRE(tls.ok());
  REQUIRE(strangers.ok());
  AggregatorOptions options = Options(ws, "fp32", 1, 1);
  options.tls = tls.ServerConfig();
  AggregatorThread aggregator(options);
  REQUIRE(aggregator.port != 0);
  DeviceOptions device = DeviceFor(ws, 0, aggregator.port, 1);
  device.tls = strangers.ClientConfig();
  const Status status = RunDevice(device, DeviceHooks());
  CHECK(status.code() == StatusCode::kUnauthenticated);
  CHECK(status.message().find("certificate verify failed") != std::string::npos);
  CHECK(aggregator.Reports().empty());
}

}  // namespace
}  // namespace fedrt

namespace fedrt {
namespace {

// Waits for a round's instructions (every chunk); returns the round and the
// codec spec the device is told to send.
Result<std::pair<uint64_t, std::string>> AwaitInstructedSpec(RawDevice& device) {
  std::string spec;
  for (;;) {
    Result<Frame> frame = device.queue->Pop(15000);
    if (!frame.ok()) return frame.status();
    if (frame->kind() != MessageKind::kRoundInstructions) continue;
    Result<RoundInstructionsMessage> m = DecodeRoundInstructions(*frame, device.limits);
    if (!m.ok()) return m.status();
    if (m->payload.index == 0) spec = std::string(m->codec_spec);
    if (m->payload.index + 1 == m->payload.count) return std::make_pair(m->round_id, spec);
  }
}

struct OrderedRound {
  std::vector<float> aggregate;
  uint64_t near_wraps = 0;
  std::size_t updates = 0;
};

// One round of hand-made devices dev-0 .. dev-(n-1): device i sends
// values[i], encoded with the codec it is instructed to use; they send in
// `order`, each only after the aggregator acknowledged the one before, so
// the updates arrive in exactly that order.
OrderedRound RunOneRoundInOrder(const std::string& codec, const std::vector<std::vector<float>>& values,
                                const std::vector<int>& order) {
  Workspace ws;
  const std::size_t n = values.size();
  AggregatorOptions options = Options(ws, codec, 1, n);
  options.round_deadline_ms = 3600 * 1000;  // only the last update closes the round
  options.anchor_fraction = 0.25;
  AggregatorThread aggregator(options);
  REQUIRE(aggregator.port != 0);
  std::vector<std::unique_ptr<RawDevice>> devices;
  for (std::size_t i = 0; i < n; ++i) {
    devices.push_back(std::make_unique<RawDevice>());
    REQUIRE(devices.back()->Join(aggregator.port, "dev-" + std::to_string(i), kKeys[i]).ok());
  }
  std::vector<std::string> specs(n);
  uint64_t round = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Result<std::pair<uint64_t, std::string>> instructed = AwaitInstructedSpec(*devices[i]);
    REQUIRE(instructed.ok());
    round = instructed->first;
    specs[i] = instructed->second;
  }
  for (int i : order) {
    std::unique_ptr<TensorSetCodec> encoder = UpdateCodec(std::move(MakeCodec(specs[i]).value()));
    const std::vector<float>& v = values[i];
    CodecContext context;
    context.session_seed = 1;
    context.round = static_cast<uint32_t>(round);
    context.sender_id = DeviceSenderId("dev-" + std::to_string(i));
    std::vector<uint8_t> payload(encoder->MaxEncodedSize(v.size()));
    Result<std::size_t> size = encoder->Encode(v.data(), v.size(), context, payload.data(), payload.size());
    REQUIRE(size.ok());
    payload.resize(*size);
    REQUIRE(devices[i]->SendUpdate(round, specs[i], payload).ok());
    bool acked = false;
    while (!acked) {
      Result<Frame> frame = devices[i]->queue->Pop(15000);
      REQUIRE(frame.ok());
      acked = frame->kind() == MessageKind::kAck;
    }
  }
  REQUIRE(aggregator.WaitDone(20000));
  const std::vector<RoundReport> reports = aggregator.Reports();
  REQUIRE(reports.size() == 1);
  OrderedRound result;
  result.aggregate = aggregator.aggregates[0];
  result.near_wraps = reports[0].near_wraps;
  result.updates = reports[0].updates;
  return result;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

constexpr std::size_t kModelFloats = 784 * 32 + 32 + 32 * 10 + 10;

TEST_CASE("the aggregate of a round is the same bits whatever order the updates arrive in") {
  // 1 + tiny + tiny rounds to 1 in float; tiny + tiny + 1 does not: summing
  // in arrival order would give different bits for the two orders.
  const float tiny = 0.75f * 0x1p-24f;
  REQUIRE((1.0f + tiny) + tiny != (tiny + tiny) + 1.0f);
  const std::vector<std::vector<float>> values = {std::vector<float>(kModelFloats, 1.0f),
                                                  std::vector<float>(kModelFloats, tiny),
                                                  std::vector<float>(kModelFloats, tiny)};
  const OrderedRound forward = RunOneRoundInOrder("fp32", values, {0, 1, 2});
  const OrderedRound backward = RunOneRoundInOrder("fp32", values, {2, 1, 0});
  const OrderedRound middle = RunOneRoundInOrder("fp32", values, {1, 0, 2});
  CHECK(forward.updates == 3);
  CHECK(backward.updates == 3);
  CHECK(SameBits(forward.aggregate, backward.aggregate));
  CHECK(SameBits(forward.aggregate, middle.aggregate));
}

TEST_CASE("ndqsg nested decodes and wrap counts do not depend on the arrival order") {
  // Four devices far apart (one is the anchor): a nested update decoded
  // against a running mean that holds different devices wraps differently.
  std::vector<std::vector<float>> values(4, std::vector<float>(kModelFloats));
  uint32_t state = 12345;
  for (std::size_t k = 0; k < values.size(); ++k) {
    for (float& x : values[k]) {
      state = state * 1664525u + 1013904223u;
      const float noise = static_cast<float>(state >> 8) * 0x1p-24f - 0.5f;
      x = 0.01f * (noise + static_cast<float>(k) * 0.7f - 1.0f);
    }
  }
  const OrderedRound forward = RunOneRoundInOrder("ndqsg:s1=1,rho=2,ec=pack", values, {0, 1, 2, 3});
  const OrderedRound backward = RunOneRoundInOrder("ndqsg:s1=1,rho=2,ec=pack", values, {3, 2, 1, 0});
  CHECK(forward.updates == 4);
  CHECK(backward.updates == 4);
  CHECK(forward.near_wraps > 0);
  CHECK(forward.near_wraps == backward.near_wraps);
  CHECK(SameBits(forward.aggregate, backward.aggregate));
}

}  // namespace
}  // namespace fedrt
