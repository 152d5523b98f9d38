// make_seeds OUT_DIR: writes valid inputs for every fuzz target, made by the
// library's own encoders and writers, into OUT_DIR/<fuzzer>/ (one file per
// input, in the layout that fuzzer reads, fuzz_support.h):
//   codec_decode_fuzzer     a payload of every codec spec below, and a
//                           multi-tensor (FRTT) update of every codec that
//                           encodes per tensor
//   codec_roundtrip_fuzzer  a Gaussian vector for every codec
//   transport_frame_fuzzer  the body of a frame of every message kind
//   transport_join_fuzzer   both sides of a recorded join (with the right
//                           proofs for FixedCrypto's nonces) and refusals
//   checkpoint_fuzzer       training checkpoints, aggregator checkpoints of
//                           every version's fields, device state files
//   npy_fuzzer              .npy arrays of every item type, .npz archives
//                           (stored and deflated), a model .npz
// Exits non-zero when an input that should be made cannot be. Files are
// named after what they hold, so a rerun overwrites instead of adding.
// .ci/run and tests/fuzz/campaign.sh run it before fuzzing.
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/levels.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/codecs/tensor_set.h"
#include "fedrt/runtime/aggregator_engine.h"
#include "fedrt/runtime/checkpoint.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/model_file.h"
#include "fedrt/runtime/npy.h"
#include "fedrt/transport/join.h"
#include "fedrt/transport/messages.h"
#include "fuzz_support.h"
#include "star/aggregator_checkpoint.h"
#include "star/device_state.h"

namespace {

namespace fs = std::filesystem;
using namespace fedrt::transport;

int failures = 0;

void Fail(const std::string& what) {
  std::fprintf(stderr, "make_seeds: %s\n", what.c_str());
  failures++;
}

class Seeds {
 public:
  Seeds(fs::path root, const std::string& fuzzer) : dir_(std::move(root) / fuzzer) { fs::create_directories(dir_); }
  void Add(const std::string& name, uint8_t first, const std::vector<uint8_t>& bytes) {
    std::vector<uint8_t> all{first};
    all.insert(all.end(), bytes.begin(), bytes.end());
    Add(name, all);
  }
  void Add(std::string name, const std::vector<uint8_t>& bytes) {
    for (char& c : name) {
      if (c == ':' || c == ',' || c == '=' || c == '/') c = '_';
    }
    if (!names_.insert(name).second) return;  // the same spec listed twice
    std::ofstream out(dir_ / ("seed-" + name), std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) Fail("cannot write " + (dir_ / name).string());
    count_++;
  }
  int count() const { return count_; }

 private:
  fs::path dir_;
  std::set<std::string> names_;
  int count_ = 0;
};

std::vector<float> Gaussian(std::size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  const auto uniform = [&s] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (static_cast<double>(s >> 11) + 0.5) / 9007199254740992.0;
  };
  for (float& x : v) {
    x = static_cast<float>(std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()));
  }
  return v;
}

std::vector<uint8_t> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::vector<uint8_t> Wire(const fedrt::Result<OutFrame>& frame, const std::string& what) {
  std::vector<uint8_t> wire;
  if (!frame.ok()) {
    Fail(what + ": " + frame.status().ToString());
    return wire;
  }
  frame->AppendWireBytes(&wire);
  return wire;
}

std::vector<uint8_t> Body(const fedrt::Result<OutFrame>& frame, const std::string& what) {
  std::vector<uint8_t> wire = Wire(frame, what);
  if (wire.size() >= kFramePrefixBytes) wire.erase(wire.begin(), wire.begin() + kFramePrefixBytes);
  return wire;
}

Frame ToFrame(const std::vector<uint8_t>& wire, const FrameLimits& limits) {
  auto frame = ParseFrame(wire.data(), wire.size(), limits);
  if (!frame.ok()) {
    Fail("a recorded frame does not parse: " + frame.status().ToString());
    return Frame();
  }
  return std::move(*frame);
}

// ---- Codecs --------------------------------------------------------------------

const char* const kCodecSpecs[] = {
    "fp32", "fp16", "bf16", "qsgd", "qsgd:ec=pack", "qsgd:s=16", "terngrad", "sign", "sign:ef=on", "dqsg",
    "dqsg:ec=pack", "dqsg:ec=none", "dqsg:s=7,b=64", "ndqsg", "ndqsg:ec=pack", "alq", "alq:bits=2", "amq",
    "topk:k=0.05", "topk:k=0.05,v=fp16", "randk:k=0.05", "rtopk:k=0.05,r=0.2", "moniqua:theta=0.5",
    "moniqua:bits=4,theta=0.5", "iwp:k=0.05"};

void CodecSeeds(const fs::path& out) {
  Seeds decode(out, "codec_decode_fuzzer");
  Seeds roundtrip(out, "codec_roundtrip_fuzzer");
  std::vector<std::string> specs(std::begin(kCodecSpecs), std::end(kCodecSpecs));
  for (const std::string& name : fedrt::CodecNames()) specs.push_back(name);
  const std::vector<float> input = Gaussian(300, 1);
  fedrt::CodecContext context;
  context.session_seed = 1;
  context.round = 1;
  context.sender_id = 1;
  int made = 0;
  for (const std::string& spec : specs) {
    auto codec = fedrt::MakeCodec(spec);
    if (!codec.ok()) continue;  // a key this build's codec does not take, a codec left out of the build
    for (std::size_t d : {std::size_t{300}, std::size_t{5}}) {
      std::vector<uint8_t> payload((*codec)->MaxEncodedSize(d));
      auto size = (*codec)->Encode(input.data(), d, context, payload.data(), payload.size());
      if (!size.ok()) continue;
      payload.resize(*size);
      decode.Add(spec + "-d" + std::to_string(d), 0x80, payload);
      made++;
    }
    // A multi-tensor update, as a device sends a model's update.
    if (fedrt::EncodesPerTensor(**codec)) {
      auto inner = fedrt::MakeCodec(spec);
      auto set = fedrt::TensorSetCodec::Create(std::move(*inner), {200, 60, 40});
      if (!set.ok()) {
        Fail("tensor set of " + spec + ": " + set.status().ToString());
        continue;
      }
      std::vector<uint8_t> payload((*set)->MaxEncodedSize(300));
      auto size = (*set)->Encode(input.data(), 300, context, payload.data(), payload.size());
      if (!size.ok()) {
        Fail("tensor set of " + spec + ": " + size.status().ToString());
        continue;
      }
      payload.resize(*size);
      decode.Add("frtt-" + spec, 0x80, payload);
    }
  }
  if (made < 20) Fail("only " + std::to_string(made) + " codec payloads");
  const std::vector<std::string> names = fedrt::CodecNames();
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::vector<float> v = Gaussian(64, i + 2);
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    roundtrip.Add(names[i], static_cast<uint8_t>(i), bytes);
  }
  std::printf("make_seeds: %d codec payloads, %d round-trip vectors\n", decode.count(), roundtrip.count());
}

// ---- Frames --------------------------------------------------------------------

void FrameSeeds(const fs::path& out) {
  Seeds seeds(out, "transport_frame_fuzzer");
  FrameLimits limits;
  limits.max_frame_bytes = kMinFrameBytes;
  const std::vector<float> model = Gaussian(100, 3);
  std::vector<uint8_t> payload(model.size() * 4);
  std::memcpy(payload.data(), model.data(), payload.size());
  const float levels[] = {0.0f, 0.25f, 0.5f, 1.0f};

  JoinMessage join;
  join.device_id = "dev-1";
  join.codecs = {"fp32", "dqsg", "ndqsg"};
  join.isa = "avx2";
  join.client_nonce.fill(7);
  join.resume_round = 3;
  join.model_round = 2;
  seeds.Add("join", Body(Encode(join, limits), "join"));
  ChallengeMessage challenge;
  challenge.server_nonce.fill(9);
  seeds.Add("challenge", Body(Encode(challenge, limits), "challenge"));
  AuthenticateMessage auth;
  auth.proof.fill(11);
  seeds.Add("authenticate", Body(Encode(auth, limits), "authenticate"));
  JoinResponseMessage accepted;
  accepted.accepted = true;
  accepted.server_proof.fill(13);
  accepted.current_round = 4;
  accepted.heartbeat_interval_ms = 1000;
  seeds.Add("join-response", Body(Encode(accepted, limits), "join response"));
  JoinResponseMessage refused;
  refused.reason = "unknown device";
  seeds.Add("join-response-refused", Body(Encode(refused, limits), "refused join response"));

  RoundInstructionsMessage instructions;
  instructions.round_id = 5;
  instructions.model_parameters = model.size();
  instructions.codec_spec = "dqsg:s=2,b=0,ef=off,ec=rans";
  instructions.session_seed = 1;
  instructions.learning_rate = 0.05f;
  instructions.anchor_role = AnchorRole::kNested;
  instructions.level_table_version = 1;
  instructions.level_table = levels;
  instructions.level_table_size = 4;
  instructions.deadline_ms = 60000;
  instructions.payload.total_size = payload.size();
  instructions.payload.data = payload.data();
  instructions.payload.size = payload.size();
  seeds.Add("round-instructions", Body(Encode(instructions, limits), "round instructions"));
  RoundInstructionsMessage delta = instructions;
  delta.model_encoding = ModelEncoding::kCompressedDelta;
  delta.anchor_role = AnchorRole::kAnchor;
  delta.level_table = nullptr;
  delta.level_table_size = 0;
  seeds.Add("round-instructions-delta", Body(Encode(delta, limits), "round instructions (delta)"));
  RoundInstructionsMessage whole = delta;  // the first broadcast: the whole model, compressed
  whole.model_encoding = ModelEncoding::kCompressedModel;
  seeds.Add("round-instructions-whole", Body(Encode(whole, limits), "round instructions (compressed model)"));
  RoundInstructionsMessage later;  // a later chunk: identifying fields and the payload
  later.round_id = 5;
  later.payload.index = 1;
  later.payload.count = 3;
  later.payload.total_size = 3 * 100;
  later.payload.offset = 100;
  later.payload.data = payload.data();
  later.payload.size = 100;
  seeds.Add("round-instructions-chunk1", Body(Encode(later, limits), "round instructions chunk 1"));

  UpdateMessage update;
  update.round_id = 5;
  update.num_samples = 7500;
  update.training_loss = 0.4f;
  update.codec_spec = "alq:bits=3";
  update.level_table_version = 1;
  update.stats.encoded_bytes = payload.size();
  update.stats.raw_bytes = payload.size();
  update.stats.residual_norm = 0.5f;
  update.stats.level_statistics.present = true;
  update.stats.level_statistics.count = 10;
  update.stats.level_statistics.sum = 4;
  update.stats.level_statistics.sum_sq = 2;
  update.stats.level_statistics.bucket_norms = {1.0f, 2.0f};
  update.stats.level_statistics.largest_buckets = {BucketMomentsMessage{2.0f, 5, 2, 1}};
  update.payload.total_size = payload.size();
  update.payload.data = payload.data();
  update.payload.size = payload.size();
  seeds.Add("update", Body(Encode(update, limits), "update"));
  UpdateMessage update_later;
  update_later.round_id = 5;
  update_later.payload = later.payload;
  seeds.Add("update-chunk1", Body(Encode(update_later, limits), "update chunk 1"));

  AckMessage ack;
  ack.round_id = 5;
  ack.acked = MessageKind::kRoundInstructions;
  seeds.Add("ack", Body(Encode(ack, limits), "ack"));
  LeaveMessage leave;
  leave.reason = "training finished";
  seeds.Add("leave", Body(Encode(leave, limits), "leave"));
  ErrorMessage error;
  error.code = fedrt::StatusCode::kUnauthenticated;
  error.message = "wrong proof";
  seeds.Add("error", Body(Encode(error, limits), "error"));
  HeartbeatMessage heartbeat;
  heartbeat.sequence = 3;
  heartbeat.sent_ns = 123456789;
  seeds.Add("heartbeat", Body(Encode(heartbeat, limits), "heartbeat"));

  RingChunkMessage ring;
  ring.collective_id = 2;
  ring.step = 1;
  ring.phase = RingPhase::kAllGather;
  ring.source_rank = 1;
  ring.segment = 2;
  ring.codec_spec = "fp16";
  ring.payload.total_size = payload.size();
  ring.payload.data = payload.data();
  ring.payload.size = payload.size();
  seeds.Add("ring-chunk", Body(Encode(ring, limits), "ring chunk"));
  RingChunkMessage ring_raw = ring;
  ring_raw.codec_spec = "";
  ring_raw.phase = RingPhase::kIndexBroadcast;
  seeds.Add("ring-chunk-raw", Body(Encode(ring_raw, limits), "raw ring chunk"));
  GossipModelMessage gossip;
  gossip.step = 4;
  gossip.source_rank = 2;
  gossip.codec_spec = "moniqua:theta=0.5";
  gossip.wrap_count = 1;
  gossip.payload.total_size = payload.size();
  gossip.payload.data = payload.data();
  gossip.payload.size = payload.size();
  seeds.Add("gossip-model", Body(Encode(gossip, limits), "gossip model"));
  if (seeds.count() != 18) Fail("expected 18 frame seeds, made " + std::to_string(seeds.count()));
  std::printf("make_seeds: %d frame bodies (all %d message kinds)\n", seeds.count(), kMaxMessageKind);
}

// ---- The join ------------------------------------------------------------------

void JoinSeeds(const fs::path& out) {
  Seeds seeds(out, "transport_join_fuzzer");
  FrameLimits limits;
  limits.max_frame_bytes = kMinFrameBytes;
  fedrt::fuzz::FixedCrypto crypto;
  auto keys = KeyStore::Parse(std::string(fedrt::fuzz::kJoinDevice) + " " + fedrt::fuzz::kJoinKeyHex + "\n");
  if (!keys.ok()) return Fail("keys: " + keys.status().ToString());
  JoinServer server(*keys, crypto, limits);
  JoinClient client(fedrt::fuzz::kJoinDevice, *keys->Find(fedrt::fuzz::kJoinDevice), crypto, limits);
  JoinRequest request;
  request.codecs = {"fp32", "dqsg"};
  request.isa = "scalar";
  JoinResult offer;
  offer.current_round = 7;
  offer.heartbeat_interval_ms = 1000;
  const std::vector<uint8_t> join = Wire(client.Start(request), "join");
  const std::vector<uint8_t> challenge = Wire(server.OnFrame(ToFrame(join, limits), offer), "challenge");
  const std::vector<uint8_t> auth = Wire(client.OnFrame(ToFrame(challenge, limits)), "authenticate");
  const std::vector<uint8_t> response = Wire(server.OnFrame(ToFrame(auth, limits), offer), "join response");
  if (!server.done() || !client.OnFrame(ToFrame(response, limits)).ok() || !client.done()) {
    return Fail("the recorded join did not complete");
  }
  const auto cat = [](std::initializer_list<const std::vector<uint8_t>*> parts) {
    std::vector<uint8_t> all;
    for (const auto* p : parts) all.insert(all.end(), p->begin(), p->end());
    return all;
  };
  const std::vector<uint8_t> error = Wire(EncodeStatus(fedrt::Status(fedrt::StatusCode::kUnauthenticated,
                                                                     "wrong proof"), limits), "error");
  seeds.Add("server-join", fedrt::fuzz::kJoinServerSide, cat({&join, &auth}));
  seeds.Add("server-join-only", fedrt::fuzz::kJoinServerSide, join);
  seeds.Add("server-join-twice", fedrt::fuzz::kJoinServerSide, cat({&join, &join}));
  seeds.Add("server-authenticate-first", fedrt::fuzz::kJoinServerSide, cat({&auth, &join}));
  seeds.Add("client-join", fedrt::fuzz::kJoinClientSide, cat({&challenge, &response}));
  seeds.Add("client-challenge-only", fedrt::fuzz::kJoinClientSide, challenge);
  seeds.Add("client-error", fedrt::fuzz::kJoinClientSide, error);
  seeds.Add("client-response-first", fedrt::fuzz::kJoinClientSide, cat({&response, &challenge}));
  std::printf("make_seeds: %d join conversations\n", seeds.count());
}

// ---- Checkpoints ---------------------------------------------------------------

void CheckpointSeeds(const fs::path& out, const fs::path& scratch) {
  Seeds seeds(out, "checkpoint_fuzzer");
  const auto model_bit = static_cast<uint8_t>(fedrt::fuzz::CheckpointReader::kModel);
  const auto aggregator_bit = static_cast<uint8_t>(fedrt::fuzz::CheckpointReader::kAggregator);
  const auto state_bit = static_cast<uint8_t>(fedrt::fuzz::CheckpointReader::kDeviceState);
  for (const char* spec : {fedrt::fuzz::kNpyModelSpec, "cnn:6x6x1-c2k3-p2-d4-3"}) {
    auto model = fedrt::Model::Create(spec, 1);
    if (!model.ok()) {
      Fail(std::string(spec) + ": " + model.status().ToString());
      continue;
    }
    fedrt::Checkpoint checkpoint;
    checkpoint.spec = spec;
    checkpoint.step = 12;
    checkpoint.epoch = 2;
    checkpoint.parameters.assign(model->parameters(), model->parameters() + model->parameter_count());
    seeds.Add(std::string("model-") + spec, fedrt::fuzz::kFixCrcBit | model_bit, fedrt::EncodeCheckpoint(checkpoint));
    checkpoint.velocity = Gaussian(model->parameter_count(), 4);
    seeds.Add(std::string("model-momentum-") + spec, fedrt::fuzz::kFixCrcBit | model_bit,
              fedrt::EncodeCheckpoint(checkpoint));
  }

  auto model = fedrt::Model::Create(fedrt::fuzz::kNpyModelSpec, 1);
  if (!model.ok()) return Fail("model: " + model.status().ToString());
  const std::size_t p = model->parameter_count();
  fedrt::AggregatorCheckpoint plain;
  plain.model = fedrt::fuzz::kNpyModelSpec;
  plain.round = 3;
  plain.parameters.assign(model->parameters(), model->parameters() + p);
  fedrt::AggregatorCheckpoint nested = plain;
  nested.codec = "ndqsg";
  nested.first_moment = Gaussian(p, 5);
  nested.second_moment.assign(p, 0.01f);
  nested.rho = {{"dev-1", 3}, {"dev-2", 5}};
  nested.forced_anchors = {"dev-3"};
  nested.downlink_codec = "fp16";
  nested.device_model_round = 2;
  nested.device_model = Gaussian(p, 6);
  nested.synced = {{"dev-1", 2}, {"dev-2", 1}};
  nested.dp_rdp.assign(255, 0.5);
  fedrt::AggregatorCheckpoint levels = plain;
  levels.codec = "alq";
  levels.level_table_version = 2;
  levels.level_table = fedrt::UniformLevels(7).levels;
  const fs::path file = scratch / "aggregator.ckpt";
  for (const auto& [name, checkpoint, bits] :
       {std::tuple{"aggregator-plain", &plain, 0}, std::tuple{"aggregator-ndqsg", &nested, 0},
        std::tuple{"aggregator-alq", &levels, 4}}) {
    const fedrt::Status written = fedrt::WriteAggregatorCheckpoint(file.string(), *checkpoint);
    if (!written.ok()) {
      Fail(std::string(name) + ": " + written.ToString());
      continue;
    }
    seeds.Add(name, static_cast<uint8_t>(fedrt::fuzz::kFixCrcBit | aggregator_bit | bits), ReadFile(file));
  }

  const std::vector<float> residual = Gaussian(fedrt::fuzz::kDeviceStateValues, 7);
  const fs::path state = scratch / "device.state";
  if (fedrt::star::SaveResidual(state.string(), residual.data(), residual.size()).ok()) {
    seeds.Add("device-state", fedrt::fuzz::kFixCrcBit | state_bit, ReadFile(state));
  } else {
    Fail("device state: cannot write");
  }
  // The earlier unframed format: magic, u64 d, the values.
  std::vector<uint8_t> unframed = {'F', 'E', 'D', 'R', 'T', 'E', 'F', '1', 0, 0, 0, 0, 0, 0, 0, 0};
  fedrt::StoreLe64(unframed.data() + 8, residual.size());
  unframed.resize(16 + residual.size() * 4);
  std::memcpy(unframed.data() + 16, residual.data(), residual.size() * 4);
  seeds.Add("device-state-unframed", state_bit, unframed);
  std::printf("make_seeds: %d checkpoint and state files\n", seeds.count());
}

// ---- NumPy ---------------------------------------------------------------------

// A ZIP archive of deflated members, as numpy.savez_compressed writes them
// (fedrt writes stored members only).
std::vector<uint8_t> DeflatedNpz(const std::vector<fedrt::NpzMember>& members) {
  std::vector<uint8_t> zip, dir;
  const auto u16 = [](std::vector<uint8_t>& b, uint32_t v) {
    b.push_back(static_cast<uint8_t>(v));
    b.push_back(static_cast<uint8_t>(v >> 8));
  };
  const auto u32 = [&u16](std::vector<uint8_t>& b, uint32_t v) {
    u16(b, v & 0xFFFF);
    u16(b, v >> 16);
  };
  for (const fedrt::NpzMember& m : members) {
    const std::vector<uint8_t> npy = fedrt::SerializeNpy(m.array);
    const std::string name = m.name + ".npy";
    std::vector<uint8_t> packed(compressBound(static_cast<uLong>(npy.size())) + 64);
    z_stream zs{};
    deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    zs.next_in = const_cast<Bytef*>(npy.data());
    zs.avail_in = static_cast<uInt>(npy.size());
    zs.next_out = packed.data();
    zs.avail_out = static_cast<uInt>(packed.size());
    deflate(&zs, Z_FINISH);
    packed.resize(zs.total_out);
    deflateEnd(&zs);
    const uint32_t crc = static_cast<uint32_t>(crc32(0, npy.data(), static_cast<uInt>(npy.size())));
    const uint32_t at = static_cast<uint32_t>(zip.size());
    for (std::vector<uint8_t>* b : {&zip, &dir}) {
      const bool central = b == &dir;
      u32(*b, central ? 0x02014b50 : 0x04034b50);
      if (central) u16(*b, 20);
      u16(*b, 20);
      u16(*b, 0);
      u16(*b, 8);  // deflated
      u16(*b, 0);
      u16(*b, 0x21);
      u32(*b, crc);
      u32(*b, static_cast<uint32_t>(packed.size()));
      u32(*b, static_cast<uint32_t>(npy.size()));
      u16(*b, static_cast<uint32_t>(name.size()));
      u16(*b, 0);
      if (central) {
        u16(*b, 0);
        u16(*b, 0);
        u16(*b, 0);
        u32(*b, 0);
        u32(*b, at);
      }
      b->insert(b->end(), name.begin(), name.end());
      if (!central) b->insert(b->end(), packed.begin(), packed.end());
    }
  }
  const uint32_t dir_at = static_cast<uint32_t>(zip.size());
  zip.insert(zip.end(), dir.begin(), dir.end());
  u32(zip, 0x06054b50);
  u16(zip, 0);
  u16(zip, 0);
  u16(zip, static_cast<uint32_t>(members.size()));
  u16(zip, static_cast<uint32_t>(members.size()));
  u32(zip, static_cast<uint32_t>(dir.size()));
  u32(zip, dir_at);
  u16(zip, 0);
  return zip;
}

void NpySeeds(const fs::path& out, const fs::path& scratch) {
  Seeds seeds(out, "npy_fuzzer");
  const auto npy_bit = static_cast<uint8_t>(fedrt::fuzz::NpyReader::kNpy);
  const auto npz_bit = static_cast<uint8_t>(fedrt::fuzz::NpyReader::kNpz);
  const auto model_bit = static_cast<uint8_t>(fedrt::fuzz::NpyReader::kModelNpz);
  const std::vector<float> values = Gaussian(12, 8);
  std::vector<fedrt::NpzMember> members;
  members.push_back({"weights", fedrt::Float32Array(values.data(), {3, 4})});
  members.push_back({"spec", fedrt::BytesScalar("mlp:4-3")});
  const struct {
    fedrt::NpyType type;
    std::size_t item_size;
    const char* name;
  } kTypes[] = {{fedrt::NpyType::kFloat64, 8, "f8"}, {fedrt::NpyType::kInt8, 1, "i1"},
                {fedrt::NpyType::kUint8, 1, "u1"},   {fedrt::NpyType::kInt16, 2, "i2"},
                {fedrt::NpyType::kUint16, 2, "u2"},  {fedrt::NpyType::kInt32, 4, "i4"},
                {fedrt::NpyType::kUint32, 4, "u4"},  {fedrt::NpyType::kInt64, 8, "i8"},
                {fedrt::NpyType::kUint64, 8, "u8"}};
  for (const auto& t : kTypes) {
    fedrt::NpyArray array;
    array.type = t.type;
    array.item_size = t.item_size;
    array.shape = {2, 3};
    array.data.resize(6 * t.item_size);
    for (std::size_t i = 0; i < array.data.size(); ++i) array.data[i] = static_cast<uint8_t>(i * 37);
    members.push_back({t.name, array});
  }
  fedrt::NpyArray scalar = fedrt::Float32Array(values.data(), {});
  members.push_back({"scalar", scalar});
  for (const fedrt::NpzMember& m : members) seeds.Add("npy-" + m.name, npy_bit, fedrt::SerializeNpy(m.array));
  auto npz = fedrt::SerializeNpz(members);
  if (npz.ok()) {
    seeds.Add("npz-stored", npz_bit, *npz);
  } else {
    Fail("npz: " + npz.status().ToString());
  }
  seeds.Add("npz-deflated", npz_bit, DeflatedNpz({members[0], members[1], members[2]}));
  const std::vector<uint8_t> deflated = DeflatedNpz(members);
  auto parsed = fedrt::ParseNpz(deflated.data(), deflated.size(), "deflated.npz");
  if (!parsed.ok() || parsed->size() != members.size()) Fail("the deflated .npz does not read back");

  auto model = fedrt::Model::Create(fedrt::fuzz::kNpyModelSpec, 1);
  if (!model.ok()) return Fail("model: " + model.status().ToString());
  const fs::path file = scratch / "model.npz";
  if (fedrt::WriteModelNpz(file.string(), *model).ok()) {
    seeds.Add("model-npz", model_bit, ReadFile(file));
    seeds.Add("model-npz-as-npz", npz_bit, ReadFile(file));
  } else {
    Fail("model .npz: cannot write");
  }
  std::printf("make_seeds: %d NumPy files\n", seeds.count());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path scratch = out / ".scratch";
  fs::create_directories(scratch);
  CodecSeeds(out);
  FrameSeeds(out);
  JoinSeeds(out);
  CheckpointSeeds(out, scratch);
  NpySeeds(out, scratch);
  fs::remove_all(scratch);
  if (failures > 0) {
    std::fprintf(stderr, "make_seeds: %d inputs could not be made\n", failures);
    return 1;
  }
  return 0;
}
