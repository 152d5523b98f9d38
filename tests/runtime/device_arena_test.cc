// The device client in one caller block (DeviceClient::RequiredBytes, then
// CreateIn): after creation its round path allocates nothing. A real
// Aggregator engine and two device clients in caller memory, joined by
// MemoryPipes on one thread with a ManualClock, run several rounds with
// every codec of the build the star aggregator takes (ALQ / AMQ with their
// level tables refitted every round; moniqua, which needs side information
// the star aggregator does not have, through a scripted aggregator); the
// allocation counter (tests/support/allocation_counter.h) is running
// whenever a device engine handles a frame or works.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "allocation_counter.h"
#include "engine_fixtures.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/platform/clock.h"
#include "fedrt/runtime/aggregator_engine.h"
#include "fedrt/runtime/device_client.h"
#include "fedrt/runtime/model.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/chunking.h"
#include "fedrt/transport/join.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/stream.h"
#include "test_crypto.h"

namespace fedrt {
namespace {

using namespace transport;  // NOLINT
using testing::Blobs;
using testing::HexKey;
using testing::AllocationsDuring;

constexpr const char* kModel = "mlp:16-8-4";



// Counts what the device engine allocates while it handles a frame, once
// `counting` is on (the frame itself is the connection's, made before).
struct CountingHandler : ConnectionHandler {
  explicit CountingHandler(DeviceClient& device) : inner(device) {}
  void OnFrame(Connection& connection, Frame frame) override {
    if (!counting) return inner.OnFrame(connection, std::move(frame));
    allocations += AllocationsDuring([&] { inner.OnFrame(connection, std::move(frame)); });
  }
  void OnClose(Connection& connection, const Status& reason) override { inner.OnClose(connection, reason); }
  DeviceConnectionHandler inner;
  bool counting = false;
  long allocations = 0;
};

// A device engine in a caller block.
struct ArenaDevice {
  std::unique_ptr<Model> model;
  std::vector<uint32_t> share;
  std::vector<unsigned char> memory;
  DeviceClient* client = nullptr;
  std::shared_ptr<CountingHandler> handler;
  std::unique_ptr<MemoryPipe> pipe;
  long work_allocations = 0;
  ~ArenaDevice() { DeviceClient::Destroy(client); }
};

void MakeDevice(ArenaDevice& d, int index, const Blobs& train, const std::vector<std::string>& codecs,
                const std::function<float*(std::size_t)>& residual_memory = {}) {
  d.model = std::make_unique<Model>(Model::Create(kModel, 1).value());
  for (std::size_t i = 0; i < train.view.count / 2; ++i) d.share.push_back(static_cast<uint32_t>(index + 2 * i));
  DeviceClientConfig config;
  config.device_id = "dev-" + std::to_string(index);
  config.key = *KeyStore::Parse(config.device_id + " " + HexKey(index) + "\n")->Find(config.device_id);
  config.batch = 16;
  config.codecs = codecs;
  config.residual_memory = residual_memory;
  Result<std::size_t> bytes = DeviceClient::RequiredBytes(config, *d.model, d.share.size());
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().ToString());
  d.memory.resize(*bytes + 1);
  // At an odd address: the client aligns inside.
  Result<DeviceClient*> client =
      DeviceClient::CreateIn(d.memory.data() + 1, *bytes, config, *d.model, train.view, &d.share, TestCrypto());
  REQUIRE_MESSAGE(client.ok(), client.status().ToString());
  d.client = *client;
}

struct RunResult {
  std::size_t rounds = 0;         // reports applied
  long allocations = 0;           // by the devices after their first round
  std::size_t rejected = 0;
  bool finished = false;
  std::string device_error;       // the first device engine error (empty: none)
  std::vector<double> losses;     // each applied round's training loss
  uint64_t bytes_up = 0;
};

// Runs `rounds` rounds of `codec` (with `downlink` deltas when set) with two
// devices in caller memory; counts the devices' allocations from round 2 on
// (round 1 holds the join, and grows the pipes' buffers, which are the
// test's transport).
RunResult RunRounds(const std::string& codec, const std::string& downlink, uint32_t rounds,
                    const std::vector<std::string>& device_codecs = {},
                    const std::function<float*(std::size_t)>& residual_memory = {}) {
  ManualClock clock{1000000000};
  Blobs train(160, 3);
  std::string keys_text;
  for (int i = 0; i < 2; ++i) keys_text += "dev-" + std::to_string(i) + " " + HexKey(i) + "\n";
  KeyStore keys = KeyStore::Parse(keys_text).value();
  AggregatorConfig config;
  config.model = kModel;
  config.codec = codec;
  config.downlink_codec = downlink;
  config.rounds = rounds;
  config.min_devices = 2;
  config.local_epochs = 2;
  config.learning_rate = 0.1f;
  config.round_deadline_ms = 5000;
  RunResult result;
  AggregatorHooks hooks;
  hooks.on_round = [&](const RoundReport& r) {
    result.rounds += r.applied ? 1 : 0;
    result.rejected += r.rejected;
    if (r.applied) result.losses.push_back(r.train_loss);
    result.bytes_up += r.bytes_up;
  };
  Result<std::shared_ptr<Aggregator>> aggregator = Aggregator::Create(config, keys, TestCrypto(), clock, nullptr, hooks);
  REQUIRE_MESSAGE(aggregator.ok(), aggregator.status().ToString());
  ArenaDevice devices[2];
  for (int i = 0; i < 2; ++i) {
    MakeDevice(devices[i], i, train, device_codecs, residual_memory);
    devices[i].handler = std::make_shared<CountingHandler>(*devices[i].client);
    Result<std::unique_ptr<MemoryPipe>> pipe =
        MemoryPipe::Create(*aggregator, devices[i].handler, (*aggregator)->connection_options(), clock);
    REQUIRE(pipe.ok());
    devices[i].pipe = std::move(*pipe);
    devices[i].pipe->Reserve(1u << 20);  // the test's transport: not counted
    REQUIRE(devices[i].client->Start(devices[i].pipe->b()).ok());
  }
  for (int guard = 0; guard < 100000 && !(*aggregator)->finished(); ++guard) {
    bool moved = false;
    for (ArenaDevice& d : devices) {
      if (d.pipe->Pump()) moved = true;
      if (d.client->has_work() && !d.pipe->b().closed()) {
        Status worked;
        const bool counting = d.client->round() >= 2;
        d.handler->counting = counting;
        const long allocations = AllocationsDuring([&] { worked = d.client->Work(d.pipe->b(), 3); });
        if (counting) d.work_allocations += allocations;
        if (!worked.ok() && result.device_error.empty()) result.device_error = worked.ToString();
        if (!worked.ok()) d.pipe->b().Abort(worked, true);
        moved = true;
      }
    }
    if ((*aggregator)->Tick() == 0) moved = true;
    for (ArenaDevice& d : devices) {
      if (d.pipe->Pump()) moved = true;
    }
    if (!moved) break;
  }
  result.finished = (*aggregator)->finished();
  for (ArenaDevice& d : devices) {
    if (!d.handler->inner.error().ok() && result.device_error.empty()) {
      result.device_error = d.handler->inner.error().ToString();
    }
    result.allocations += d.work_allocations + d.handler->allocations;
  }
  (*aggregator)->Abort(Status(StatusCode::kCancelled, "test over"));
  for (ArenaDevice& d : devices) d.pipe->Pump();
  return result;
}

// Records where the device's frames were read: instructions frames, their
// sizes, and whether each body sat in the device's gradient buffer.
struct LendingProbe : ConnectionHandler {
  LendingProbe(DeviceClient& device, Model& device_model) : inner(device), model(device_model) {}
  void OnFrame(Connection& connection, Frame frame) override {
    if (frame.kind() == MessageKind::kRoundInstructions) {
      ++instructions;
      largest = std::max(largest, frame.size());
      if (frame.data() == reinterpret_cast<const uint8_t*>(model.gradients())) ++lent;
    }
    inner.OnFrame(connection, std::move(frame));
  }
  void OnClose(Connection& connection, const Status& reason) override { inner.OnClose(connection, reason); }
  uint8_t* LendFrameStorage(Connection& connection, std::size_t size) override {
    return inner.LendFrameStorage(connection, size);
  }
  DeviceConnectionHandler inner;
  Model& model;
  std::size_t instructions = 0, lent = 0, largest = 0;
};

struct LendingRun {
  std::size_t rounds = 0, instructions = 0, lent = 0, largest = 0;
  std::string device_error;
};

// One device with a model of 50,416 parameter bytes and `max_frame_bytes`,
// 3 rounds of dqsg against a real aggregator over a MemoryPipe.
LendingRun RunLending(uint32_t max_frame_bytes) {
  constexpr const char* kWideModel = "mlp:16-600-4";
  ManualClock clock{1000000000};
  Blobs train(64, 3);
  KeyStore keys = KeyStore::Parse("dev-0 " + HexKey(0) + "\n").value();
  AggregatorConfig config;
  config.model = kWideModel;
  config.codec = "dqsg";
  config.rounds = 3;
  config.min_devices = 1;
  config.round_deadline_ms = 5000;
  LendingRun result;
  AggregatorHooks hooks;
  hooks.on_round = [&](const RoundReport& r) { result.rounds += r.applied ? 1 : 0; };
  Result<std::shared_ptr<Aggregator>> aggregator = Aggregator::Create(config, keys, TestCrypto(), clock, nullptr, hooks);
  REQUIRE_MESSAGE(aggregator.ok(), aggregator.status().ToString());
  std::unique_ptr<Model> model = std::make_unique<Model>(Model::Create(kWideModel, 1).value());
  DeviceClientConfig device_config;
  device_config.device_id = "dev-0";
  device_config.key = *keys.Find("dev-0");
  device_config.batch = 16;
  device_config.codecs = {"dqsg"};
  device_config.max_frame_bytes = max_frame_bytes;
  Result<std::unique_ptr<DeviceClient>> device =
      DeviceClient::Create(device_config, *model, train.view, nullptr, TestCrypto());
  REQUIRE_MESSAGE(device.ok(), device.status().ToString());
  auto probe = std::make_shared<LendingProbe>(**device, *model);
  Result<std::unique_ptr<MemoryPipe>> pipe =
      MemoryPipe::Create(*aggregator, probe, (*aggregator)->connection_options(), clock);
  REQUIRE(pipe.ok());
  REQUIRE((*device)->Start((*pipe)->b()).ok());
  for (int guard = 0; guard < 100000 && !(*aggregator)->finished(); ++guard) {
    bool moved = (*pipe)->Pump();
    if ((*device)->has_work() && !(*pipe)->b().closed()) {
      const Status worked = (*device)->Work((*pipe)->b(), 0);
      if (!worked.ok() && result.device_error.empty()) result.device_error = worked.ToString();
      moved = true;
    }
    if ((*aggregator)->Tick() == 0) moved = true;
    if ((*pipe)->Pump()) moved = true;
    if (!moved) break;
  }
  if (!probe->inner.error().ok() && result.device_error.empty()) result.device_error = probe->inner.error().ToString();
  result.instructions = probe->instructions;
  result.lent = probe->lent;
  result.largest = probe->largest;
  (*aggregator)->Abort(Status(StatusCode::kCancelled, "test over"));
  (*pipe)->Pump();
  return result;
}

TEST_CASE("device arena: a device announcing 64 KiB frames gets the model in 32 KiB chunks read into its gradients") {
  const LendingRun small = RunLending(kMinFrameBytes);
  CHECK_MESSAGE(small.device_error.empty(), small.device_error);
  CHECK(small.rounds == 3);
  // 50,416 model bytes in chunks of 32 KiB: two instructions frames a round,
  // each within the announced limit and each read into the idle gradients.
  CHECK(small.instructions == 6);
  CHECK(small.largest <= kMinFrameBytes);
  CHECK(small.lent == small.instructions);
  // The default limit: one frame a round, larger than the gradient buffer,
  // so the connection allocates it as before.
  const LendingRun large = RunLending(kDefaultMaxFrameBytes);
  CHECK_MESSAGE(large.device_error.empty(), large.device_error);
  CHECK(large.rounds == 3);
  CHECK(large.instructions == 3);
  CHECK(large.lent == 0);
}

TEST_CASE("device arena: the size query covers the block, and a smaller block is refused") {
  Blobs train(40, 3);
  std::unique_ptr<Model> model = std::make_unique<Model>(Model::Create(kModel, 1).value());
  DeviceClientConfig config;
  config.device_id = "dev-0";
  config.key = std::vector<uint8_t>(32, 7);
  config.batch = 8;
  Result<std::size_t> all = DeviceClient::RequiredBytes(config, *model, train.view.count);
  REQUIRE(all.ok());
  config.codecs = {"ndqsg"};
  Result<std::size_t> one = DeviceClient::RequiredBytes(config, *model, train.view.count);
  REQUIRE(one.ok());
  // fp32's payload and sign's residual (error feedback) are not needed for ndqsg alone.
  CHECK(*one + model->parameter_count() * sizeof(float) < *all);
  std::vector<unsigned char> memory(*one);
  Result<DeviceClient*> small =
      DeviceClient::CreateIn(memory.data(), *one - 1, config, *model, train.view, nullptr, TestCrypto());
  CHECK(small.status().code() == StatusCode::kOutOfRange);
  Result<DeviceClient*> made =
      DeviceClient::CreateIn(memory.data(), memory.size(), config, *model, train.view, nullptr, TestCrypto());
  REQUIRE(made.ok());
  CHECK((*made)->parameter_count() == model->parameter_count());
  CHECK((*made)->RestoreResidual(std::vector<float>(model->parameter_count()).data(), model->parameter_count())
            .code() == StatusCode::kFailedPrecondition);  // no codec with error feedback: no residual
  DeviceClient::Destroy(*made);
  config.codecs = {"nosuchcodec"};
  CHECK(DeviceClient::RequiredBytes(config, *model, 40).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("device arena: rounds allocate nothing after creation, for every codec the star aggregator takes") {
  if (!testing::CountsMalloc()) MESSAGE("operator new only (the malloc family is the sanitizer's here)");
  std::size_t tried = 0;
  for (const std::string& name : CodecNames()) {
    if (name == "moniqua") continue;  // side information: the scripted case below
    INFO("codec " << name);
    const RunResult r = RunRounds(name, "", 5);
    CHECK_MESSAGE(r.device_error.empty(), r.device_error);
    CHECK(r.finished);
    CHECK(r.rounds == 5);
    CHECK(r.rejected == 0);
    CHECK(r.allocations == 0);
    ++tried;
  }
  CHECK(tried >= 4);
}

TEST_CASE("device arena: compressed downlink deltas and a device sized for its codecs allocate nothing") {
  for (const char* downlink : {"fp16", "dqsg:s=7"}) {
    INFO("downlink " << downlink);
    const RunResult r = RunRounds("dqsg", downlink, 4, {"dqsg", downlink});
    CHECK_MESSAGE(r.device_error.empty(), r.device_error);
    CHECK(r.rounds == 4);
    CHECK(r.allocations == 0);
  }
}

TEST_CASE("device arena: an instructed codec the block was not sized for is refused with the sizes") {
  // Sized for 1% of the coordinates, told to send half of them.
  const RunResult r = RunRounds("topk:k=0.5", "", 1, {"topk:k=0.01"});
  CHECK(r.rounds == 0);
  CHECK(r.device_error.find("resource_exhausted") != std::string::npos);
  CHECK(r.device_error.find("DeviceClientConfig::codecs") != std::string::npos);
}

TEST_CASE("device arena: with residual_memory the block holds no residual, asked for once an error-feedback codec is instructed") {
  Blobs train(40, 3);
  std::unique_ptr<Model> model = std::make_unique<Model>(Model::Create(kModel, 1).value());
  const std::size_t d = model->parameter_count();
  std::vector<std::vector<float>> given;
  const auto give = [&](std::size_t n) -> float* {
    given.emplace_back(n, 1.0f);  // not zero: the client zeroes it
    return given.back().data();
  };
  DeviceClientConfig config;
  config.device_id = "dev-0";
  config.key = std::vector<uint8_t>(32, 7);
  config.batch = 8;
  Result<std::size_t> in_block = DeviceClient::RequiredBytes(config, *model, train.view.count);
  config.residual_memory = give;
  Result<std::size_t> outside = DeviceClient::RequiredBytes(config, *model, train.view.count);
  REQUIRE(in_block.ok());
  REQUIRE(outside.ok());
  // The build's codecs include topk and randk, whose ef=on asks for it.
  CHECK(*outside + d * sizeof(float) <= *in_block);

  // Rounds without error feedback never ask; with it each device asks once,
  // and trains and sends the same bits as with the residual in its block.
  const RunResult plain = RunRounds("dqsg", "", 3, {}, give);
  CHECK_MESSAGE(plain.device_error.empty(), plain.device_error);
  CHECK(plain.rounds == 3);
  CHECK(given.empty());
  const RunResult block = RunRounds("topk", "", 4);
  const RunResult asked = RunRounds("topk", "", 4, {}, give);
  CHECK_MESSAGE(asked.device_error.empty(), asked.device_error);
  CHECK(asked.rounds == 4);
  CHECK(asked.allocations == 0);
  CHECK(given.size() == 2);
  CHECK(asked.losses == block.losses);
  CHECK(asked.bytes_up == block.bytes_up);
  // A host that has none to give: refused like a codec the block outgrew.
  const RunResult refused = RunRounds("topk", "", 1, {}, [](std::size_t) -> float* { return nullptr; });
  CHECK(refused.rounds == 0);
  CHECK(refused.device_error.find("holds no residual") != std::string::npos);
}

// A star aggregator cannot run Moniqua (its decoding needs the receiver's
// model as side information), so a scripted one plays the aggregator's part:
// the join (JoinServer), full fp32 models down, the device's updates decoded
// against the global model, a Leave after the last round.
struct ScriptedAggregator : ConnectionHandler {
  ScriptedAggregator(const KeyStore& k, std::string codec_spec, std::size_t parameters, uint32_t round_count)
      : keys(k), join(keys, TestCrypto(), FrameLimits()), spec(std::move(codec_spec)), model(parameters, 0.01f),
        rounds(round_count) {}

  void OnFrame(Connection& c, Frame frame) override {
    if (!join.done()) {
      Result<OutFrame> reply = join.OnFrame(frame, JoinResult());
      if (!reply.ok()) return Fail(reply.status());
      if (!reply->empty()) (void)c.Send(*reply);
      if (join.done()) SendRound(c);
      return;
    }
    if (frame.kind() != MessageKind::kUpdate) return;
    Result<UpdateMessage> u = DecodeUpdate(frame, FrameLimits());
    if (!u.ok()) return Fail(u.status());
    if (u->payload.index == 0) payload.clear();
    payload.insert(payload.end(), u->payload.data, u->payload.data + u->payload.size);
    if (u->payload.index + 1 < u->payload.count) return;
    Result<std::unique_ptr<Codec>> codec = MakeCodec(spec);
    if (!codec.ok()) return Fail(codec.status());
    CodecContext context;
    context.session_seed = 1;
    context.round = static_cast<uint32_t>(round);
    context.sender_id = DeviceSenderId("dev-0");
    std::vector<float> decoded(model.size());
    const Status status =
        (*codec)->Decode(payload.data(), payload.size(), context, decoded.data(), decoded.size(), model.data());
    if (!status.ok()) return Fail(status);
    ++updates;
    if (++round < rounds) return SendRound(c);
    LeaveMessage leave;
    leave.reason = "training finished";
    (void)c.Send(Encode(leave, FrameLimits()).value());
  }
  void OnClose(Connection&, const Status&) override {}

  void SendRound(Connection& c) {
    RoundInstructionsMessage m;
    m.round_id = round;
    m.model_parameters = model.size();
    m.codec_spec = spec;
    m.session_seed = 1;
    m.local_epochs = 1;
    m.learning_rate = 0.1f;
    Result<std::vector<OutFrame>> frames = EncodeChunked(m, reinterpret_cast<const uint8_t*>(model.data()),
                                                         model.size() * sizeof(float), FrameLimits());
    if (!frames.ok()) return Fail(frames.status());
    for (OutFrame& f : *frames) (void)c.Send(f);
  }
  void Fail(const Status& status) {
    if (error.empty()) error = status.ToString();
  }

  const KeyStore& keys;
  JoinServer join;
  std::string spec;
  std::vector<float> model;
  uint32_t rounds;
  uint64_t round = 0;
  std::size_t updates = 0;
  std::vector<uint8_t> payload;
  std::string error;
};

TEST_CASE("device arena: moniqua rounds allocate nothing after creation either (scripted aggregator)") {
  ManualClock clock{1000000000};
  Blobs train(160, 3);
  KeyStore keys = KeyStore::Parse("dev-0 " + HexKey(0) + "\n").value();
  const std::string spec = "moniqua:theta=1";
  ArenaDevice d;
  MakeDevice(d, 0, train, {spec});
  auto aggregator = std::make_shared<ScriptedAggregator>(keys, spec, d.model->parameter_count(), 4);
  d.handler = std::make_shared<CountingHandler>(*d.client);
  Result<std::unique_ptr<MemoryPipe>> pipe = MemoryPipe::Create(aggregator, d.handler, ConnectionOptions(), clock);
  REQUIRE(pipe.ok());
  d.pipe = std::move(*pipe);
  d.pipe->Reserve(1u << 20);
  REQUIRE(d.client->Start(d.pipe->b()).ok());
  for (int guard = 0; guard < 10000 && !d.client->finished(); ++guard) {
    bool moved = d.pipe->Pump();
    if (d.client->has_work()) {
      const bool counting = d.client->round() >= 1;  // round 0 holds the join
      d.handler->counting = counting;
      Status worked;
      const long allocations = AllocationsDuring([&] { worked = d.client->Work(d.pipe->b(), 3); });
      if (counting) d.work_allocations += allocations;
      REQUIRE_MESSAGE(worked.ok(), worked.ToString());
      moved = true;
    }
    if (!moved) break;
  }
  CHECK_MESSAGE(aggregator->error.empty(), aggregator->error);
  CHECK(d.client->finished());
  CHECK(aggregator->updates == 4);
  CHECK(d.work_allocations + d.handler->allocations == 0);
}

}  // namespace
}  // namespace fedrt
