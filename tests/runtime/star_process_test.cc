// The star topology's faults with real processes: `fedrt serve` and
// `fedrt device` run as child processes on 127.0.0.1 and are killed with
// SIGKILL; hand-driven clients (the test's own sockets) hold rounds open so
// that every step happens in a known round, and send the bad frames. Nothing
// here waits on a clock: every wait is for a line a process prints or a frame
// a socket receives, with generous limits. Data: the tiny IDX fixture.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/runtime/device.h"
#include "fedrt/runtime/model.h"
#include "fedrt/transport/join.h"
#include "star/aggregator_checkpoint.h"
#include "star_processes.h"
#include "temp_dir.h"
#include "tls_test_support.h"

namespace fedrt {
namespace {

using testing::BlockingStarClient;
using testing::ChildProcess;
using testing::ReceivedRound;

constexpr const char* kModel = "mlp:784-32-10";
constexpr int kDevices = 11;

// The `fedrt` command with `args` (under the emulator when cross-built).
std::vector<std::string> Cli(const std::vector<std::string>& args) {
  std::vector<std::string> command = {FEDRT_CLI_PATH};
  command.insert(command.end(), args.begin(), args.end());
  return testing::Emulated(FEDRT_CLI_EMULATOR, command);
}

std::string HexKey(int i) {
  const char* const hex = "0123456789abcdef";
  std::string key = "0123456789abcdef0123456789abcdef";
  key[0] = hex[(i >> 4) & 15];
  key[1] = hex[i & 15];
  key[31] = hex[(i * 7) & 15];
  return key;
}

// A private folder with the aggregator's key file and one key file per device.
struct Star {
  testing::TempDir dir;
  Star() {
    std::string all;
    for (int i = 0; i < kDevices; ++i) {
      const std::string line = Id(i) + " " + HexKey(i) + "\n";
      all += line;
      Write(KeyFile(i), line);
    }
    Write(dir.File("keys.txt"), all);
  }
  static std::string Id(int i) { return "dev-" + std::to_string(i); }
  std::string KeyFile(int i) const { return dir.File(Id(i) + ".key"); }
  static void Write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    ::chmod(path.c_str(), 0600);
  }

  std::vector<std::string> Serve(std::vector<std::string> extra) const {
    std::vector<std::string> args = {"serve", "--key-file", dir.File("keys.txt"), "--data",
                                     FEDRT_TINY_IDX_DIR, "--model", kModel, "--epochs", "1", "--lr", "0.1",
                                     "--idle-timeout-ms", "600000", "--join-timeout-ms", "60000"};
    if (std::find(extra.begin(), extra.end(), "--deadline-ms") == extra.end()) {
      args.insert(args.end(), {"--deadline-ms", "120000"});
    }
    args.insert(args.end(), extra.begin(), extra.end());
    return Cli(args);
  }
  std::vector<std::string> Device(int i, uint16_t port, std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = {"device", "--server", "127.0.0.1:" + std::to_string(port),
                                     "--id", Id(i), "--key-file", KeyFile(i), "--data", FEDRT_TINY_IDX_DIR,
                                     "--model", kModel, "--devices", "3", "--index", std::to_string(i % 3),
                                     "--batch", "16"};
    if (std::find(extra.begin(), extra.end(), "--give-up-ms") == extra.end()) {
      args.insert(args.end(), {"--give-up-ms", "180000"});
    }
    args.insert(args.end(), extra.begin(), extra.end());
    return Cli(args);
  }
};

// Starts `fedrt serve` with `flags`; the port it listens on (0: it did not).
uint16_t StartServe(const Star& star, const std::vector<std::string>& flags, std::unique_ptr<ChildProcess>* serve) {
  *serve = std::make_unique<ChildProcess>(star.Serve(flags));
  const uint16_t port = testing::ListeningPort(**serve);
  INFO((*serve)->output());
  CHECK(port != 0);
  return port;
}

std::size_t ParameterCount() { return Model::Create(kModel, 1)->parameter_count(); }

// A Star folder with `fedrt serve` running on it.
struct Served : Star {
  std::size_t d = ParameterCount();
  std::unique_ptr<ChildProcess> serve;
  uint16_t port = 0;
  explicit Served(const std::vector<std::string>& flags) {
    port = StartServe(*this, flags, &serve);
    REQUIRE(port != 0);
  }
};

// A valid payload of `values` for `round` with the instructed codec, as the
// device `id` would send it.
std::vector<uint8_t> EncodeFor(const ReceivedRound& round, const std::string& id, const std::vector<float>& values) {
  // Over the model's tensor table as devices encode (a vector of another
  // size: one plain payload).
  std::unique_ptr<Codec> codec = std::move(MakeCodec(round.codec_spec).value());
  if (values.size() == ParameterCount()) {
    codec = std::move(MakeUpdateCodec(std::move(codec), ModelTensorSizes(Model::Create(kModel, 1).value())).value());
  }
  CodecContext context;
  context.session_seed = round.session_seed;
  context.round = static_cast<uint32_t>(round.round);
  context.sender_id = DeviceSenderId(id);
  std::vector<uint8_t> payload(codec->MaxEncodedSize(values.size()));
  payload.resize(codec->Encode(values.data(), values.size(), context, payload.data(), payload.size()).value());
  return payload;
}

// A hand-driven device that answers each round with a zero update when the
// test says, so a round stays open until then.
struct Gatekeeper {
  BlockingStarClient client;
  std::string id;
  std::size_t d;
  ReceivedRound round;
  Gatekeeper(uint16_t port, int index, std::size_t parameters) : id(Star::Id(index)), d(parameters) {
    REQUIRE(client.Connect(port));
    const Status joined = client.Join(id, HexKey(index));
    REQUIRE_MESSAGE(joined.ok(), joined.ToString());
  }
  uint64_t Await() {
    Result<ReceivedRound> r = client.AwaitRound();
    REQUIRE_MESSAGE(r.ok(), r.status().ToString());
    round = std::move(*r);
    return round.round;
  }
  void Answer() {
    const Status sent = client.SendUpdate(round.round, round.codec_spec, EncodeFor(round, id, std::vector<float>(d)));
    REQUIRE_MESSAGE(sent.ok(), sent.ToString());
  }
};

TEST_CASE("a device process killed mid-round does not stall the round and rejoins with its residual from the state file") {
  Served star({"--codec", "dqsg:ef=on", "--rounds", "5", "--min-devices", "4"});
  const std::size_t d = star.d;
  const uint16_t port = star.port;
  ChildProcess& serve = *star.serve;
  Gatekeeper gate(port, 3, d);
  const std::string state = star.dir.File("dev-2.state");
  ChildProcess dev0(star.Device(0, port));
  ChildProcess dev1(star.Device(1, port));
  auto dev2 = std::make_unique<ChildProcess>(star.Device(2, port, {"--state-file", state}));

  // Round 0: dev-2 sends and is frozen before round 1 reaches it.
  REQUIRE(gate.Await() == 0);
  REQUIRE_MESSAGE(dev2->WaitFor("round 0 sent"), dev2->output());
  CHECK(dev2->Count("no state file at " + state + " yet") == 1);  // a fresh start, logged
  dev2->Signal(SIGSTOP);
  gate.Answer();
  // Round 1 is open, dev-2 is sampled in it and holds its instructions: kill it.
  REQUIRE(gate.Await() == 1);
  dev2->Signal(SIGKILL);
  CHECK(dev2->Wait() == 128 + SIGKILL);
  REQUIRE(dev0.WaitFor("round 1 sent"));
  REQUIRE(dev1.WaitFor("round 1 sent"));
  gate.Answer();
  CHECK_MESSAGE(serve.WaitFor("round 2/5  updates 3/4"), serve.output());

  // What the killed device left behind: its residual after round 0.
  const std::string saved = testing::ReadFileBytes(state);
  REQUIRE(saved.size() == 24 + 4 * d);  // magic, version, count, values, CRC-32C
  CHECK(saved.compare(0, 8, "FEDRTDST") == 0);

  // A damaged, foreign or unreadable state file stops the device with a
  // message naming the file, before it connects.
  const std::string truncated = star.dir.File("truncated.state");
  Star::Write(truncated, saved.substr(0, saved.size() - 100));
  const std::string foreign = star.dir.File("foreign.state");
  Star::Write(foreign, testing::ReadFileBytes(star.dir.File("keys.txt")));
  const std::string other_model = star.dir.File("other.state");
  std::string resized = saved;
  auto* resized_bytes = reinterpret_cast<uint8_t*>(&resized[0]);
  StoreLe64(resized_bytes + 12, d + 1);
  StoreLe32(resized_bytes + resized.size() - 4, Crc32c(resized_bytes, resized.size() - 4));
  Star::Write(other_model, resized);
  const std::string unreadable = star.dir.File("directory.state");
  REQUIRE(::mkdir(unreadable.c_str(), 0755) == 0);
  const std::pair<std::string, std::string> refusals[] = {
      {truncated, "checksum mismatch"}, {foreign, "not a fedrt device state file"},
      {other_model, "holds a residual of " + std::to_string(d + 1) + " values"},
      {unreadable, std::string("cannot read: ") + std::strerror(EISDIR)}};
  for (const auto& [file, reason] : refusals) {
    ChildProcess refused(star.Device(2, 1, {"--state-file", file, "--give-up-ms", "1"}));
    CHECK(refused.Wait() == 1);
    INFO(refused.output());
    CHECK(refused.Count("--state-file " + file + ": " + reason) == 1);
    CHECK(refused.Count("joined") == 0);
  }

  // Round 2 is held open while dev-2 comes back with the same id and state file.
  REQUIRE(gate.Await() == 2);
  ChildProcess again(star.Device(2, port, {"--state-file", state}));
  REQUIRE_MESSAGE(again.WaitFor("restored the error-feedback residual from " + state), again.output());
  CHECK(again.WaitForLine("joined at round ") == "2");
  gate.Answer();
  CHECK(serve.WaitFor("round 3/5  updates 3/3"));
  // From the next round on it trains again, its residual file moving on.
  REQUIRE(gate.Await() == 3);
  REQUIRE_MESSAGE(again.WaitFor("round 3 sent"), again.output());
  CHECK(testing::ReadFileBytes(state) != saved);
  gate.Answer();
  REQUIRE(gate.Await() == 4);
  gate.Answer();

  CHECK(serve.Wait() == 0);
  INFO(serve.output());
  CHECK(serve.Count("round 4/5  updates 4/4") == 1);
  CHECK(serve.Count("round 5/5  updates 4/4") == 1);
  CHECK(serve.Count("round 1/5  updates 4/4") == 1);
  CHECK(again.Wait() == 0);
  CHECK(dev0.Wait() == 0);
  CHECK(dev1.Wait() == 0);
}

// The reconnection waits a device printed after `from`, in milliseconds.
std::vector<int> ReconnectWaits(const std::string& output, std::size_t from) {
  std::vector<int> waits;
  const std::string mark = "reconnecting in ";
  for (std::size_t at = output.find(mark, from); at != std::string::npos; at = output.find(mark, at + 1)) {
    waits.push_back(std::atoi(output.c_str() + at + mark.size()));
  }
  return waits;
}

TEST_CASE("an aggregator process killed and restarted from its checkpoint is rejoined by the same device processes and loses nothing") {
  Star star;
  const std::size_t d = ParameterCount();
  const std::string checkpoint = star.dir.File("aggregator.ckpt");
  std::vector<std::string> flags = {"--codec", "dqsg", "--rounds", "5", "--min-devices", "4", "--checkpoint",
                                    checkpoint};
  std::unique_ptr<ChildProcess> serve;
  const uint16_t port = StartServe(star, flags, &serve);
  REQUIRE(port != 0);
  CHECK(serve->Count("no checkpoint at " + checkpoint + " yet") == 1);  // a fresh start, logged
  auto gate = std::make_unique<Gatekeeper>(port, 3, d);
  std::vector<std::unique_ptr<ChildProcess>> devices;
  for (int i = 0; i < 3; ++i) devices.push_back(std::make_unique<ChildProcess>(star.Device(i, port)));
  for (uint64_t r = 0; r < 2; ++r) {
    REQUIRE(gate->Await() == r);
    gate->Answer();
  }
  // Round 2 is open; the checkpoint of round 2 is on disk before its line prints.
  REQUIRE(gate->Await() == 2);
  REQUIRE(serve->WaitFor("round 2/5"));
  serve->Signal(SIGKILL);
  CHECK(serve->Wait() == 128 + SIGKILL);
  gate.reset();
  Result<AggregatorCheckpoint> saved = ReadAggregatorCheckpoint(checkpoint);
  REQUIRE_MESSAGE(saved.ok(), saved.status().ToString());
  CHECK(saved->round == 2);
  REQUIRE(saved->parameters.size() == d);

  // Every device retries with growing, jittered waits (100 ms doubling, each
  // wait drawn from the upper half of the current step).
  std::vector<std::size_t> lost_at;
  for (auto& device : devices) {
    REQUIRE_MESSAGE(device->WaitFor("link lost"), device->output());
    lost_at.push_back(device->output().find("link lost"));
    REQUIRE_MESSAGE(device->WaitFor("reconnecting in ", 4), device->output());
  }
  std::vector<std::vector<int>> waits;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    waits.push_back(ReconnectWaits(devices[i]->output(), lost_at[i]));
    REQUIRE(waits.back().size() >= 4);
    INFO("device ", i, ":\n", devices[i]->output());
    for (std::size_t k = 0; k < 4; ++k) {
      const int step = 100 << k;
      CHECK(waits.back()[k] >= step / 2);
      CHECK(waits.back()[k] <= step);
    }
  }
  CHECK((waits[0] != waits[1] || waits[1] != waits[2]));  // jitter: not in lockstep

  // The aggregator comes back on the same port from its checkpoint.
  flags.insert(flags.end(), {"--port", std::to_string(port)});
  REQUIRE(StartServe(star, flags, &serve) == port);
  CHECK(serve->Count("resumed from " + checkpoint + " at round 2") == 1);
  gate = std::make_unique<Gatekeeper>(port, 3, d);
  // The round it runs is the checkpointed one, with the checkpointed model.
  REQUIRE(gate->Await() == 2);
  REQUIRE(gate->round.model.size() == d * sizeof(float));
  CHECK(std::memcmp(gate->round.model.data(), saved->parameters.data(), d * sizeof(float)) == 0);
  for (auto& device : devices) {
    CHECK_MESSAGE(device->WaitFor("joined at round 2"), device->output());
    CHECK(::kill(device->pid(), 0) == 0);  // the same process, never restarted
  }
  gate->Answer();
  for (uint64_t r = 3; r < 5; ++r) {
    REQUIRE(gate->Await() == r);
    gate->Answer();
  }
  CHECK(serve->Wait() == 0);
  INFO(serve->output());
  CHECK(serve->Count("round 3/5  updates 4/4") == 1);
  CHECK(serve->Count("round 5/5  updates 4/4") == 1);
  CHECK(serve->Count("round 1/5") == 0);
  for (auto& device : devices) CHECK(device->Wait() == 0);
  Result<AggregatorCheckpoint> last = ReadAggregatorCheckpoint(checkpoint);
  REQUIRE(last.ok());
  CHECK(last->round == 5);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TEST_CASE("an aggregator process with every file descriptor taken by connections still saves each round's checkpoint") {
  // The limit would bind the emulator of a cross build too.
  if (!std::string(FEDRT_CLI_EMULATOR).empty()) return;
  Star star;
  const std::size_t d = ParameterCount();
  const std::string checkpoint = star.dir.File("aggregator.ckpt");
  // RLIMIT_NOFILE lowered for the child only: the shell lowers it, then execs fedrt.
  std::vector<std::string> command = {"/bin/sh", "-c", "ulimit -n 32 && exec \"$@\"", "sh"};
  for (const std::string& arg :
       star.Serve({"--codec", "fp32", "--rounds", "3", "--min-devices", "1", "--checkpoint", checkpoint})) {
    command.push_back(arg);
  }
  ChildProcess serve(command);
  const uint16_t port = testing::ListeningPort(serve);
  REQUIRE_MESSAGE(port != 0, serve.output());
  Gatekeeper gate(port, 0, d);
  REQUIRE(gate.Await() == 0);
  // Connections that never join, until the process has no descriptor left
  // and its listener backs off.
  std::vector<std::unique_ptr<BlockingStarClient>> hogs;
  for (int i = 0; i < 48; ++i) {
    hogs.push_back(std::make_unique<BlockingStarClient>());
    REQUIRE(hogs.back()->Connect(port));
  }
  REQUIRE_MESSAGE(serve.WaitFor(std::string(std::strerror(EMFILE)) + "; backing off"), serve.output());
  for (uint64_t r = 0; r < 3; ++r) {
    if (r > 0) REQUIRE(gate.Await() == r);
    gate.Answer();
    REQUIRE(serve.WaitFor("round " + std::to_string(r + 1) + "/3"));
  }
  CHECK(serve.Wait() == 0);
  INFO(serve.output());
  CHECK(serve.Count("not saved") == 0);
  Result<AggregatorCheckpoint> last = ReadAggregatorCheckpoint(checkpoint);
  REQUIRE_MESSAGE(last.ok(), last.status().ToString());
  CHECK(last->round == 3);
  CHECK_FALSE(Exists(checkpoint + ".tmp"));
}

TEST_CASE("an aggregator process whose checkpoint directory becomes a file logs the reason, retries, and exits non-zero when the final state is not saved") {
  Star star;
  const std::size_t d = ParameterCount();
  const std::string state = star.dir.File("state");
  const std::string moved = star.dir.File("state.moved");
  REQUIRE(::mkdir(state.c_str(), 0755) == 0);
  const std::string checkpoint = state + "/aggregator.ckpt";
  std::unique_ptr<ChildProcess> serve;
  const uint16_t port =
      StartServe(star, {"--codec", "fp32", "--rounds", "3", "--min-devices", "1", "--checkpoint", checkpoint}, &serve);
  REQUIRE(port != 0);
  // The directory is moved away and a regular file takes its name (this
  // fails for root too), or it is put back.
  const auto break_directory = [&] {
    REQUIRE(::rename(state.c_str(), moved.c_str()) == 0);
    Star::Write(state, "not a directory");
  };
  const auto restore_directory = [&] {
    REQUIRE(::unlink(state.c_str()) == 0);
    REQUIRE(::rename(moved.c_str(), state.c_str()) == 0);
  };
  const std::string reason = checkpoint + ".tmp: cannot create: " + std::strerror(ENOTDIR);
  Gatekeeper gate(port, 0, d);
  REQUIRE(gate.Await() == 0);
  gate.Answer();
  REQUIRE(gate.Await() == 1);
  REQUIRE(serve->WaitFor("round 1/3"));
  CHECK(ReadAggregatorCheckpoint(checkpoint).value().round == 1);

  break_directory();
  gate.Answer();
  REQUIRE(gate.Await() == 2);
  CHECK_MESSAGE(serve->WaitFor("checkpoint of round 2 not saved: io_error: " + reason + "; retrying"), serve->output());
  restore_directory();  // the next retry saves it
  CHECK_MESSAGE(serve->WaitFor("checkpoint of round 2 saved after "), serve->output());
  CHECK(ReadAggregatorCheckpoint(checkpoint).value().round == 2);

  break_directory();
  gate.Answer();
  CHECK(serve->Wait() == 1);
  INFO(serve->output());
  CHECK(serve->Count("round 3/3  updates 1/1") == 1);  // the training went on
  CHECK(serve->Count("checkpoint of round 3 not saved: io_error: " + reason) == 1);
  CHECK(serve->output().find("fedrt serve: io_error: the state of round 3 could not be saved to " + checkpoint) !=
        std::string::npos);
  CHECK(serve->output().find("attempts): " + reason) != std::string::npos);
  // Round 2's file is whole, and no partial file was left behind.
  CHECK(ReadAggregatorCheckpoint(moved + "/aggregator.ckpt").value().round == 2);
  CHECK_FALSE(Exists(moved + "/aggregator.ckpt.tmp"));
}

// Joins as device `index`, sends `bytes` raw after the join and reads until
// the aggregator closes the connection.
void SendRawAndExpectClose(uint16_t port, int index, const std::string& bytes, bool half_close = false) {
  BlockingStarClient client;
  REQUIRE(client.Connect(port));
  REQUIRE(client.Join(Star::Id(index), HexKey(index)).ok());
  REQUIRE(client.SendBytes(bytes.data(), bytes.size()).ok());
  if (half_close) client.ShutdownWrite();
  CHECK(client.ReadUntilClosed(nullptr));
}

std::string Prefix(uint32_t size) {
  uint8_t prefix[transport::kFramePrefixBytes];
  transport::WriteFramePrefix(size, prefix);
  return std::string(reinterpret_cast<const char*>(prefix), sizeof(prefix));
}

TEST_CASE("bad frames and bad updates close only their own connection with the reason logged while the others train") {
  Served star({"--codec", "fp32", "--rounds", "3", "--min-devices", "8"});
  const std::size_t d = star.d;
  const uint16_t port = star.port;
  ChildProcess& serve = *star.serve;
  // Five hand-driven devices are sampled in round 0, each sends one bad
  // update; a well-behaved one holds the rounds open for the frame tests.
  std::vector<std::unique_ptr<Gatekeeper>> bad;
  for (int i = 2; i < 7; ++i) bad.push_back(std::make_unique<Gatekeeper>(port, i, d));
  Gatekeeper gate(port, 10, d);
  ChildProcess dev0(star.Device(0, port));
  ChildProcess dev1(star.Device(1, port));
  REQUIRE(gate.Await() == 0);
  for (auto& b : bad) REQUIRE(b->Await() == 0);
  const ReceivedRound& round = bad[0]->round;
  REQUIRE(round.codec_spec == (*MakeCodec("fp32"))->spec());

  std::vector<std::string> reasons(bad.size());
  // An unknown codec named in the update message.
  REQUIRE(bad[0]->client.SendUpdate(0, "nosuchcodec:x=1", std::vector<uint8_t>(64, 1)).ok());
  // A payload whose header names a codec id no build knows.
  std::vector<uint8_t> payload = EncodeFor(round, bad[1]->id, std::vector<float>(d, 0.5f));
  Result<PayloadView> view = ParsePayload(payload.data(), payload.size());
  REQUIRE(view.ok());
  PayloadHeader header = view->header;
  header.codec = static_cast<CodecId>(250);
  FinishPayload(header, view->spec, payload.data());
  REQUIRE(bad[1]->client.SendUpdate(0, round.codec_spec, payload).ok());
  // A valid payload for a model of the wrong size.
  REQUIRE(bad[2]->client.SendUpdate(0, round.codec_spec, EncodeFor(round, bad[2]->id, std::vector<float>(d / 2))).ok());
  // An update announcing more bytes than the codec can produce for this model.
  const uint64_t too_large = (*MakeCodec(round.codec_spec))->MaxEncodedSize(d) + 1;
  REQUIRE(bad[3]->client.SendUpdate(0, round.codec_spec, std::vector<uint8_t>(64), too_large).ok());
  // A payload with an Inf in it.
  payload = EncodeFor(round, bad[4]->id, std::vector<float>(d, 0.25f));
  view = ParsePayload(payload.data(), payload.size());
  REQUIRE(view.ok());
  StoreFloatLe(payload.data() + payload.size() - view->body_size + 4 * (d - 3), std::numeric_limits<float>::infinity());
  FinishPayload(view->header, view->spec, payload.data());
  REQUIRE(bad[4]->client.SendUpdate(0, round.codec_spec, payload).ok());
  for (std::size_t i = 0; i < bad.size(); ++i) {
    CHECK(bad[i]->client.ReadUntilClosed(&reasons[i]));
  }
  INFO(serve.output());
  CHECK(reasons[0].find("codec 'nosuchcodec:x=1' is not the instructed") != std::string::npos);
  CHECK(reasons[1].find("unknown codec id 250") != std::string::npos);
  CHECK(reasons[2].find("payload has " + std::to_string(d / 2) + " coordinates, expected " + std::to_string(d)) !=
        std::string::npos);
  CHECK(reasons[3].find("an update of " + std::to_string(too_large) + " bytes is larger than the codec allows") !=
        std::string::npos);
  CHECK(reasons[4].find("Inf at coordinate " + std::to_string(d - 3)) != std::string::npos);
  for (const std::string& reason : reasons) {
    CHECK_MESSAGE(serve.WaitFor(reason), reason);  // the aggregator logged what it told the device
  }

  gate.Answer();
  REQUIRE(gate.Await() == 1);

  // Frames that never become a message: too large, cut short, unverifiable.
  SendRawAndExpectClose(port, 7, Prefix(64u << 20) + std::string(16, 'x'));
  transport::LeaveMessage leave;
  leave.reason = "a reason long enough to cut this frame in half";
  Result<transport::OutFrame> frame = transport::Encode(leave, transport::FrameLimits());
  REQUIRE(frame.ok());
  std::string body(reinterpret_cast<const char*>(frame->body()), frame->body_size());
  SendRawAndExpectClose(port, 8, Prefix(static_cast<uint32_t>(body.size())) + body.substr(0, body.size() / 2),
                        /*half_close=*/true);
  body[0] = static_cast<char>(0xF0);  // the root table's offset now points far outside the frame
  body[1] = static_cast<char>(0xFF);
  SendRawAndExpectClose(port, 9, Prefix(static_cast<uint32_t>(body.size())) + body);
  CHECK(serve.WaitFor("exceeds the limit of 4194304"));
  CHECK(serve.WaitFor("closed in the middle of a frame"));
  CHECK(serve.WaitFor("failed FlatBuffers verification"));

  gate.Answer();
  REQUIRE(gate.Await() == 2);
  gate.Answer();

  // The real devices trained every round.
  CHECK(serve.Wait() == 0);
  CHECK(serve.Count("round 1/3  updates 3/8") == 1);
  CHECK(serve.Count("round 2/3  updates 3/3") == 1);
  CHECK(serve.Count("round 3/3  updates 3/3") == 1);
  CHECK(dev0.Wait() == 0);
  CHECK(dev1.Wait() == 0);
}

// Resident memory of a process in KiB (VmRSS), 0 when unknown.
long ResidentKib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

TEST_CASE("one aggregator process holds 500 authenticated idle devices and keeps accepting") {
  constexpr int kIdle = 500;
  testing::TempDir dir;
  std::string keys;
  for (int i = 0; i <= kIdle; ++i) keys += "idle-" + std::to_string(i) + " " + HexKey(i % 97) + "\n";
  Star::Write(dir.File("keys.txt"), keys);
  ChildProcess serve(Cli({"serve", "--key-file", dir.File("keys.txt"), "--data", "", "--model",
                          "mlp:784-300-100-10", "--codec", "dqsg", "--min-devices", std::to_string(kIdle + 1),
                          "--idle-timeout-ms", "600000", "--join-timeout-ms", "60000"}));
  const uint16_t port = testing::ListeningPort(serve);
  REQUIRE_MESSAGE(port != 0, serve.output());
  const long before = ResidentKib(serve.pid());
  std::vector<std::unique_ptr<BlockingStarClient>> clients;
  for (int i = 0; i < kIdle; ++i) {
    clients.push_back(std::make_unique<BlockingStarClient>());
    REQUIRE(clients.back()->Connect(port));
    const Status joined = clients.back()->Join("idle-" + std::to_string(i), HexKey(i % 97));
    REQUIRE_MESSAGE(joined.ok(), "device ", i, ": ", joined.ToString());
    // Reading its log as it goes keeps the aggregator from blocking on a full pipe.
    if ((i + 1) % 100 == 0) REQUIRE(serve.WaitFor("(" + std::to_string(i + 1) + " connected)"));
  }
  const long after = ResidentKib(serve.pid());
  MESSAGE("aggregator RSS with 0 devices: ", before, " KiB, with ", kIdle, ": ", after, " KiB (",
          (after - before) * 1024 / kIdle, " bytes per device)");
  CHECK(before > 0);
  CHECK(after > before);
  // Another one still joins; a second connection of a connected device is
  // refused while the first is alive; a client that leaves is forgotten.
  BlockingStarClient extra;
  REQUIRE(extra.Connect(port));
  CHECK(extra.Join("idle-" + std::to_string(kIdle), HexKey(kIdle % 97)).ok());
  CHECK(serve.WaitFor("(" + std::to_string(kIdle + 1) + " connected)"));
  BlockingStarClient twin;
  REQUIRE(twin.Connect(port));
  CHECK_FALSE(twin.Join("idle-0", HexKey(0)).ok());  // an Error instead of the join response
  CHECK(serve.WaitFor("device idle-0 is already connected from 127.0.0.1:"));
  clients.front()->Close();
  serve.Signal(SIGTERM);
  CHECK(serve.Wait() == 128 + SIGTERM);  // a clean stop on SIGTERM
}

TEST_CASE("unjoined connections announcing full-size frames cost the aggregator process no frame memory and the caps close the rest at once") {
  Served star({"--codec", "fp32", "--rounds", "1", "--min-devices", "8", "--max-unjoined-per-address", "32"});
  ChildProcess& serve = *star.serve;
  const uint16_t port = star.port;
  const long before = ResidentKib(serve.pid());
  // 300 strangers each announce a 4 MiB frame (the frame limit) and send a
  // MiB of its body. Before the join only small frames are allowed: each is
  // closed at its prefix (or at once, past the cap), so none of those
  // megabytes is held; without the limit this is 300 MiB.
  constexpr int kStrangers = 300;
  const std::string body(1u << 20, 'x');
  std::vector<std::unique_ptr<BlockingStarClient>> strangers;
  for (int i = 0; i < kStrangers; ++i) {
    strangers.push_back(std::make_unique<BlockingStarClient>());
    REQUIRE(strangers.back()->Connect(port));
    const std::string announced = Prefix(transport::kDefaultMaxFrameBytes) + body;
    (void)strangers.back()->SendBytes(announced.data(), announced.size());  // fails once the server has closed
  }
  const long after = ResidentKib(serve.pid());
  MESSAGE("aggregator RSS before the strangers: ", before, " KiB, with ", kStrangers, " of them: ", after, " KiB");
  CHECK(before > 0);
  CHECK(after - before < 16 * 1024);
  for (auto& stranger : strangers) CHECK(stranger->ReadUntilClosed(nullptr));
  strangers.clear();
  CHECK(serve.WaitFor("exceeds the limit of " + std::to_string(transport::kMaxJoinFrameBytes)));

  // Silent strangers: 32 from one address wait for their join, the next ones
  // are closed at once and told why.
  std::vector<std::unique_ptr<BlockingStarClient>> silent;
  for (int i = 0; i < 40; ++i) {
    silent.push_back(std::make_unique<BlockingStarClient>());
    REQUIRE(silent.back()->Connect(port));
  }
  for (int i = 32; i < 40; ++i) {
    std::string reason;
    CHECK(silent[static_cast<std::size_t>(i)]->ReadUntilClosed(&reason));
    CHECK(reason.find("too many connections waiting to join: 32 connections from 127.0.0.1 have not joined yet") !=
          std::string::npos);
  }
  CHECK(serve.WaitFor("have not joined yet (max_unjoined_per_address)"));
  // The ones let in are open: the first joins, and its place frees one.
  CHECK(silent[0]->Join(Star::Id(0), HexKey(0)).ok());
  BlockingStarClient another;
  REQUIRE(another.Connect(port));
  CHECK(another.Join(Star::Id(1), HexKey(1)).ok());
  serve.Signal(SIGTERM);
  CHECK(serve.Wait() == 128 + SIGTERM);  // a clean stop on SIGTERM
}

TEST_CASE("fedrt serve and fedrt device processes train over tls and unusable tls files stop them with status 2") {
  if (!transport::TlsSupported()) return;  // built with FEDRT_WITH_TLS=OFF
  transport::testing::TlsCredentials tls;
  REQUIRE_MESSAGE(tls.ok(), tls.status().ToString());
  const transport::TlsTestFiles& files = tls.files();
  Star star;

  ChildProcess mismatched(star.Serve({"--tls-cert", files.server_cert, "--tls-key", files.client_key}));
  CHECK(mismatched.Wait() == 2);
  CHECK_MESSAGE(mismatched.output().find(files.client_key) != std::string::npos, mismatched.output());
  const std::string missing = tls.File("no-such-ca.pem");
  ChildProcess no_ca(star.Device(0, 1, {"--tls-ca", missing}));
  CHECK(no_ca.Wait() == 2);
  CHECK_MESSAGE(no_ca.output().find(missing) != std::string::npos, no_ca.output());

  std::unique_ptr<ChildProcess> serve;
  const uint16_t port = StartServe(star, {"--codec", "fp32", "--rounds", "2", "--min-devices", "2",
                                          "--tls-cert", files.server_cert, "--tls-key", files.server_key},
                                   &serve);
  REQUIRE(port != 0);
  ChildProcess dev0(star.Device(0, port, {"--tls-ca", files.ca_cert}));
  ChildProcess dev1(star.Device(1, port, {"--tls-ca", files.ca_cert, "--tls-server-name", "localhost"}));
  CHECK_MESSAGE(serve->WaitFor("round 2/2  updates 2/2"), serve->output());
  CHECK_MESSAGE(dev0.Wait() == 0, dev0.output());
  CHECK_MESSAGE(dev1.Wait() == 0, dev1.output());
  CHECK(serve->Wait() == 0);
}


// ---- Monitoring: fedrt serve --http ------------------------------------------

// Sends `request` to 127.0.0.1:port and reads the answer until the server
// closes; empty when the connection failed.
std::string HttpExchange(uint16_t port, const std::string& request) {
  BlockingStarClient client;  // a plain blocking socket with a read timeout
  if (!client.Connect(port, 60)) return std::string();
  if (!request.empty() && !client.SendBytes(request.data(), request.size()).ok()) return std::string();
  client.ShutdownWrite();
  std::string answer;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::recv(client.fd(), buffer, sizeof buffer, 0);
    if (n <= 0) break;
    answer.append(buffer, static_cast<std::size_t>(n));
  }
  return answer;
}

std::string HttpGet(uint16_t port, const std::string& path) {
  return HttpExchange(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: test\r\n\r\n");
}

// The status code of a response ("HTTP/1.1 200 OK..."), or 0.
int HttpStatus(const std::string& response) {
  if (response.compare(0, 9, "HTTP/1.1 ") != 0) return 0;
  return std::atoi(response.c_str() + 9);
}

std::string HttpBody(const std::string& response) {
  const std::size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? std::string() : response.substr(at + 4);
}

// The value of the sample named exactly `name` (labels included), or -1.
double Sample(const std::string& body, const std::string& name) {
  const std::string line = "\n" + name + " ";
  const std::size_t at = ("\n" + body).find(line);
  if (at == std::string::npos) return -1;
  return std::strtod(body.c_str() + at + line.size() - 1, nullptr);
}

// Debian's promtool (package prometheus) on the exposition text: its parser
// and its lint rules. The empty string when it accepts the text.
std::string PromtoolProblems(const std::string& body, const std::string& dir) {
  if (std::string(FEDRT_PROMTOOL).empty()) return std::string();
  const std::string in = dir + "/metrics.txt";
  const std::string out = dir + "/promtool.txt";
  std::ofstream(in, std::ios::binary | std::ios::trunc) << body;
  const int status = std::system((std::string(FEDRT_PROMTOOL) + " check metrics < " + in + " > " + out + " 2>&1").c_str());
  if (status == 0) return std::string();
  return "promtool exit " + std::to_string(status) + ": " + testing::ReadFileBytes(out);
}

TEST_CASE("fedrt serve --http serves /metrics that promtool accepts with counters that move every round, and bad requests do not disturb it") {
  if (std::string(FEDRT_PROMTOOL).empty()) MESSAGE("promtool not found (Debian: prometheus): the format check is skipped");
  Star star;
  std::unique_ptr<ChildProcess> serve_process;
  const std::string checkpoint = star.dir.File("aggregator.ckpt");
  const uint16_t port = StartServe(star, {"--codec", "fp32", "--rounds", "3", "--min-devices", "3", "--http",
                                          "127.0.0.1:0", "--checkpoint", checkpoint},
                                   &serve_process);
  REQUIRE(port != 0);
  ChildProcess& serve = *serve_process;
  const uint16_t http = static_cast<uint16_t>(std::atoi(serve.WaitForLine("metrics on port ").c_str()));
  REQUIRE_MESSAGE(http != 0, serve.output());
  const std::size_t d = ParameterCount();
  Gatekeeper gate(port, 0, d);
  Gatekeeper wrong(port, 2, d);
  ChildProcess dev1(star.Device(1, port));
  REQUIRE(gate.Await() == 0);
  REQUIRE(wrong.Await() == 0);

  // Round 0 is open: three devices joined, nothing completed.
  std::string response = HttpGet(http, "/metrics");
  REQUIRE_MESSAGE(HttpStatus(response) == 200, response);
  CHECK(response.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  std::string body = HttpBody(response);
  CHECK_MESSAGE(PromtoolProblems(body, star.dir.path()) == "", body);
  CHECK(Sample(body, "fedrt_rounds_completed_total") == 0);
  CHECK(Sample(body, "fedrt_rounds_target") == 3);
  CHECK(Sample(body, "fedrt_device_joins_total") == 3);
  CHECK(Sample(body, "fedrt_devices_connected") == 3);
  CHECK(Sample(body, "fedrt_updates_accepted_total") == 0);
  CHECK(Sample(body, "fedrt_updates_rejected_total{reason=\"wrong_codec\"}") == 0);
  CHECK(Sample(body, "fedrt_round_duration_seconds_count") == 0);
  CHECK(Sample(body, "fedrt_test_accuracy_ratio") == -1);  // no round applied yet
  CHECK(Sample(body, "fedrt_dp_epsilon") == -1);           // DP is off

  // One device answers with another codec than instructed: refused, counted.
  REQUIRE(wrong.client.SendUpdate(0, "fp16", std::vector<uint8_t>(64, 1)).ok());
  std::string reason;
  CHECK(wrong.client.ReadUntilClosed(&reason));
  CHECK(reason.find("is not the instructed") != std::string::npos);

  // Malformed and unwanted requests get their status and a close; serving goes on.
  const std::string oversize = "GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::pair<std::string, int> bad_requests[] = {
      {"garbage\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\n\r\n", 400},                      // no Host
      {"GET metrics HTTP/1.1\r\nHost: x\r\n\r\n", 400},            // not a path
      {"GET /metrics HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n", 400},
      {std::string("GET /met\x01rics HTTP/1.1\r\nHost: x\r\n\r\n"), 400},
      {"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 405},
      {"GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n", 505},
      {oversize, 431},
      {"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404},
      {"GET /healthz HTTP/1.0\r\n\r\n", 200},
  };
  // A client that connects and says nothing stays open meanwhile.
  BlockingStarClient silent;
  REQUIRE(silent.Connect(http));
  for (const auto& [request, status] : bad_requests) {
    const std::string answer = HttpExchange(http, request);
    INFO(request.substr(0, 60));
    CHECK_MESSAGE(HttpStatus(answer) == status, answer);
  }
  CHECK(HttpExchange(http, "GET /metr").empty());  // half a head, then the client's close: no answer
  response = HttpGet(http, "/healthz");
  CHECK(HttpStatus(response) == 200);
  CHECK(HttpBody(response).rfind("ok: round 0 of 3", 0) == 0);
  if (HttpStatus(HttpGet(http, "/metrics?x=1")) != 200) FAIL("a query string is ignored");

  // Round 0 closes with two updates; round 1 opens.
  gate.Answer();
  REQUIRE(gate.Await() == 1);
  REQUIRE_MESSAGE(serve.WaitFor("round 1/3"), serve.output());
  response = HttpGet(http, "/metrics");
  REQUIRE(HttpStatus(response) == 200);
  body = HttpBody(response);
  CHECK_MESSAGE(PromtoolProblems(body, star.dir.path()) == "", body);
  CHECK(Sample(body, "fedrt_rounds_completed_total") == 1);
  CHECK(Sample(body, "fedrt_updates_accepted_total") == 2);
  CHECK(Sample(body, "fedrt_updates_rejected_total{reason=\"wrong_codec\"}") == 1);
  CHECK(Sample(body, "fedrt_updates_rejected_total{reason=\"bad_values\"}") == 0);
  CHECK(Sample(body, "fedrt_devices_connected") == 2);
  CHECK(Sample(body, "fedrt_uplink_payload_bytes_total") > 2.0 * 4 * static_cast<double>(d));
  CHECK(Sample(body, "fedrt_downlink_payload_bytes_total") >= 3.0 * 4 * static_cast<double>(d));
  CHECK(Sample(body, "fedrt_round_duration_seconds_count") == 1);
  CHECK(Sample(body, "fedrt_round_duration_seconds_sum") >= 0);
  CHECK(Sample(body, "fedrt_test_accuracy_ratio") > 0);
  CHECK(Sample(body, "fedrt_best_test_accuracy_ratio") >= Sample(body, "fedrt_test_accuracy_ratio"));
  CHECK(Sample(body, "fedrt_checkpoint_age_seconds") >= 0);
  CHECK(Sample(body, "fedrt_checkpoint_pending") == 0);
  const double uplink_after_one = Sample(body, "fedrt_uplink_payload_bytes_total");

  gate.Answer();
  REQUIRE(gate.Await() == 2);
  REQUIRE(serve.WaitFor("round 2/3"));
  body = HttpBody(HttpGet(http, "/metrics"));
  CHECK(Sample(body, "fedrt_rounds_completed_total") == 2);
  CHECK(Sample(body, "fedrt_updates_accepted_total") == 4);
  CHECK(Sample(body, "fedrt_uplink_payload_bytes_total") > uplink_after_one);
  CHECK(Sample(body, "fedrt_round_duration_seconds_count") == 2);
  gate.Answer();
  CHECK(serve.Wait() == 0);
  CHECK(dev1.Wait() == 0);
}

// An update whose norm the aggregator refuses (--max-update-norm, 1e4 by
// default): the connection closes with the reason, and a round whose every
// update was refused applies nothing and closes at its deadline.
void SendRefusedUpdate(Gatekeeper& gate) {
  const std::vector<float> huge(gate.d, 1000.0f);  // norm 1000 sqrt(d), far above 1e4
  REQUIRE(gate.client.SendUpdate(gate.round.round, gate.round.codec_spec, EncodeFor(gate.round, gate.id, huge)).ok());
  std::string reason;
  CHECK(gate.client.ReadUntilClosed(&reason));
  CHECK_MESSAGE(reason.find("exceeds the limit of 10000") != std::string::npos, reason);
}

TEST_CASE("fedrt serve exits 1 with the reason after --max-failed-rounds rounds in a row applied nothing, and /healthz says 503 while rounds fail") {
  // A short deadline closes the rounds whose only update was refused (the
  // refused device could have come back with a good one until then).
  Served star({"--codec", "fp32", "--rounds", "3", "--min-devices", "1", "--max-failed-rounds", "2",
               "--deadline-ms", "1000", "--http", "127.0.0.1:0"});
  ChildProcess& serve = *star.serve;
  const uint16_t http = static_cast<uint16_t>(std::atoi(serve.WaitForLine("metrics on port ").c_str()));
  REQUIRE_MESSAGE(http != 0, serve.output());
  // Waiting for the first device is healthy.
  std::string response = HttpGet(http, "/healthz");
  CHECK_MESSAGE(HttpStatus(response) == 200, response);
  CHECK(HttpBody(response) == "ok: round 0 of 3 done, 0 devices connected\n");

  // Round 1: the only update is refused; the round applies nothing and waits
  // for a device to run again.
  auto gate = std::make_unique<Gatekeeper>(star.port, 0, star.d);
  REQUIRE(gate->Await() == 0);
  SendRefusedUpdate(*gate);
  REQUIRE_MESSAGE(serve.WaitFor("round 1 not applied: every update was rejected (1); running it again (1 of 2 in a row)"),
                  serve.output());
  response = HttpGet(http, "/healthz");
  CHECK(HttpStatus(response) == 503);
  CHECK(HttpBody(response) ==
        "failing: round 1 applied nothing 1 times in a row (stops at 2): every update was rejected (1)\n");
  CHECK(Sample(HttpBody(HttpGet(http, "/metrics")), "fedrt_rounds_not_applied_total") == 1);

  // The device comes back with a good update: round 1 applies, healthy again.
  gate = std::make_unique<Gatekeeper>(star.port, 0, star.d);
  REQUIRE(gate->Await() == 0);
  gate->Answer();
  REQUIRE(gate->Await() == 1);
  response = HttpGet(http, "/healthz");
  CHECK_MESSAGE(HttpStatus(response) == 200, response);
  CHECK(HttpBody(response).rfind("ok: round 1 of 3 done", 0) == 0);

  // Round 2 applies nothing twice in a row: the run stops with the reason.
  SendRefusedUpdate(*gate);
  REQUIRE_MESSAGE(serve.WaitFor("round 2 not applied"), serve.output());
  gate = std::make_unique<Gatekeeper>(star.port, 0, star.d);
  REQUIRE(gate->Await() == 1);
  SendRefusedUpdate(*gate);
  CHECK(serve.Wait() == 1);
  INFO(serve.output());
  CHECK(serve.Count("fedrt serve: failed_precondition: training stopped at round 2: 2 rounds in a row applied nothing "
                    "(max failed rounds 2); the last: every update was rejected (1)") == 1);
}

TEST_CASE("fedrt serve --http-linger-ms keeps /healthz up after the training stopped, says why, and still exits 1 on SIGTERM") {
  Served star({"--codec", "fp32", "--rounds", "3", "--min-devices", "1", "--max-failed-rounds", "1",
               "--deadline-ms", "1000", "--http", "127.0.0.1:0", "--http-linger-ms", "600000"});
  ChildProcess& serve = *star.serve;
  const uint16_t http = static_cast<uint16_t>(std::atoi(serve.WaitForLine("metrics on port ").c_str()));
  REQUIRE_MESSAGE(http != 0, serve.output());
  Gatekeeper gate(star.port, 0, star.d);
  REQUIRE(gate.Await() == 0);
  SendRefusedUpdate(gate);
  // The run stops at its first failed round; the endpoint stays for the linger.
  REQUIRE_MESSAGE(serve.WaitFor("training ended; /metrics and /healthz answer for 600000 ms more"), serve.output());
  std::string response = HttpGet(http, "/healthz");
  CHECK(HttpStatus(response) == 503);
  CHECK_MESSAGE(HttpBody(response) ==
                    "stopped: training stopped at round 1: 1 rounds in a row applied nothing (max failed rounds 1); "
                    "the last: every update was rejected (1)\n",
                response);
  const std::string body = HttpBody(HttpGet(http, "/metrics"));
  CHECK_MESSAGE(PromtoolProblems(body, star.dir.path()) == "", body);
  CHECK(Sample(body, "fedrt_rounds_not_applied_total") == 1);
  CHECK(Sample(body, "fedrt_rounds_completed_total") == 0);
  // The device port is closed by then: nothing can join a run that ended.
  BlockingStarClient late;
  CHECK_FALSE(late.Connect(star.port));
  // SIGTERM ends the linger; the exit still reports the stop, not the signal.
  serve.Signal(SIGTERM);
  CHECK(serve.Wait() == 1);
  INFO(serve.output());
  CHECK(serve.Count("fedrt serve: failed_precondition: training stopped at round 1") == 1);
}

TEST_CASE("fedrt serve --http-linger-ms after a finished run: /healthz says finished, SIGTERM ends it with 143, and it needs --http") {
  Served star({"--codec", "fp32", "--rounds", "1", "--min-devices", "1", "--http", "127.0.0.1:0", "--http-linger-ms",
               "600000"});
  ChildProcess& serve = *star.serve;
  const uint16_t http = static_cast<uint16_t>(std::atoi(serve.WaitForLine("metrics on port ").c_str()));
  REQUIRE_MESSAGE(http != 0, serve.output());
  {
    Gatekeeper gate(star.port, 0, star.d);
    REQUIRE(gate.Await() == 0);
    gate.Answer();
  }  // the device leaves: the run ends without the 3 s grace for connected devices
  REQUIRE_MESSAGE(serve.WaitFor("answer for 600000 ms more"), serve.output());
  const std::string response = HttpGet(http, "/healthz");
  CHECK(HttpStatus(response) == 503);
  CHECK_MESSAGE(HttpBody(response) == "finished: 1 rounds done\n", response);
  CHECK(Sample(HttpBody(HttpGet(http, "/metrics")), "fedrt_rounds_completed_total") == 1);
  serve.Signal(SIGTERM);
  CHECK(serve.Wait() == 128 + SIGTERM);  // a signal never reads as success

  ChildProcess alone(star.Serve({"--http-linger-ms", "1000"}));
  CHECK(alone.Wait() == 2);
  CHECK(alone.Count("--http-linger-ms needs --http") == 1);
}

TEST_CASE("fedrt serve --http with DP-FedAvg reports the epsilon spent in /metrics, growing every round") {
  Served star({"--codec", "fp32", "--rounds", "3", "--min-devices", "1", "--dp-noise-multiplier", "1", "--dp-clip",
               "1", "--http", "127.0.0.1:0"});
  ChildProcess& serve = *star.serve;
  const uint16_t http = static_cast<uint16_t>(std::atoi(serve.WaitForLine("metrics on port ").c_str()));
  REQUIRE_MESSAGE(http != 0, serve.output());
  Gatekeeper gate(star.port, 0, star.d);
  REQUIRE(gate.Await() == 0);
  CHECK(Sample(HttpBody(HttpGet(http, "/metrics")), "fedrt_dp_epsilon") == -1);  // nothing released yet
  // One device of one sampled each round (q = 1), z = 1, delta 1e-5: the
  // sampled Gaussian's epsilon is 4.75 after one round, 7.09 after two.
  gate.Answer();
  REQUIRE(gate.Await() == 1);
  std::string body = HttpBody(HttpGet(http, "/metrics"));
  CHECK_MESSAGE(PromtoolProblems(body, star.dir.path()) == "", body);
  const double first = Sample(body, "fedrt_dp_epsilon");
  CHECK(first == doctest::Approx(4.75).epsilon(0.01));
  gate.Answer();
  REQUIRE(gate.Await() == 2);
  const double second = Sample(HttpBody(HttpGet(http, "/metrics")), "fedrt_dp_epsilon");
  CHECK(second > first);
  CHECK(second == doctest::Approx(7.09).epsilon(0.01));
  gate.Answer();
  CHECK(serve.Wait() == 0);
}

TEST_CASE("fedrt serve refuses a malformed --http address and a port in use, and other commands have no --http") {
  Star star;
  ChildProcess malformed(star.Serve({"--http", "127.0.0.1"}));
  CHECK(malformed.Wait() == 2);
  CHECK(malformed.Count("--http must be HOST:PORT") == 1);
  // The aggregator's own port is taken: the monitoring endpoint cannot have it.
  std::unique_ptr<ChildProcess> first;
  const uint16_t port = StartServe(star, {"--rounds", "1", "--min-devices", "2"}, &first);
  REQUIRE(port != 0);
  ChildProcess taken(star.Serve({"--http", "127.0.0.1:" + std::to_string(port)}));
  CHECK(taken.Wait() == 1);
  INFO(taken.output());
  CHECK(taken.Count("--http: cannot listen on 127.0.0.1:" + std::to_string(port)) == 1);
  ChildProcess device(star.Device(0, port, {"--http", "127.0.0.1:0"}));
  CHECK(device.Wait() == 2);
  first->Signal(SIGTERM);
  CHECK(first->Wait() == 128 + SIGTERM);
}

}  // namespace
}  // namespace fedrt
