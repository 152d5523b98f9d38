#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "fedrt/transport/frame.h"
#include "fedrt/transport/messages.h"
#include "wire.h"

namespace fedrt {
namespace transport {
namespace {

// Sends an encoded frame through the wire format and back, as a connection does.
Frame Reparse(const OutFrame& out, const FrameLimits& limits = FrameLimits()) {
  std::vector<uint8_t> bytes(out.prefix(), out.prefix() + kFramePrefixBytes);
  bytes.insert(bytes.end(), out.body(), out.body() + out.body_size());
  Result<Frame> frame = ParseFrame(bytes.data(), bytes.size(), limits);
  REQUIRE(frame.ok());
  CHECK(frame->kind() == out.kind());
  return std::move(*frame);
}

Frame ReparseBody(flatbuffers::FlatBufferBuilder& b) {
  Result<FrameBytes> body = FrameBytes::Allocate(b.GetSize());
  REQUIRE(body.ok());
  std::memcpy(body->data(), b.GetBufferPointer(), b.GetSize());
  Result<Frame> frame = VerifyFrame(std::move(*body), FrameLimits());
  REQUIRE(frame.ok());
  return std::move(*frame);
}

Nonce Filled(uint8_t v) {
  Nonce n;
  n.fill(v);
  return n;
}

TEST_CASE("join, challenge, authenticate and join response survive a round trip") {
  JoinMessage join;
  join.device_id = "board-7.lab_A";
  join.codecs = {"fp32", "dqsg", "ndqsg"};
  join.isa = "neon";
  join.max_frame_bytes = 1u << 20;
  join.client_nonce = Filled(0xAB);
  join.resume_round = 42;
  Result<OutFrame> out = Encode(join, FrameLimits());
  REQUIRE(out.ok());
  Frame frame = Reparse(*out);
  Result<JoinMessage> got = DecodeJoin(frame);
  REQUIRE(got.ok());
  CHECK(got->protocol_version == kProtocolVersion);
  CHECK(got->device_id == "board-7.lab_A");
  REQUIRE(got->codecs.size() == 3);
  CHECK(got->codecs[2] == "ndqsg");
  CHECK(got->isa == "neon");
  CHECK(got->max_frame_bytes == (1u << 20));
  CHECK(got->client_nonce == Filled(0xAB));
  CHECK(got->resume_round == 42);

  Result<OutFrame> challenge = Encode(ChallengeMessage{Filled(3)}, FrameLimits());
  REQUIRE(challenge.ok());
  Frame challenge_frame = Reparse(*challenge);
  CHECK(DecodeChallenge(challenge_frame)->server_nonce == Filled(3));

  AuthenticateMessage auth;
  auth.proof = Filled(9);
  Result<OutFrame> auth_out = Encode(auth, FrameLimits());
  REQUIRE(auth_out.ok());
  Frame auth_frame = Reparse(*auth_out);
  CHECK(DecodeAuthenticate(auth_frame)->proof == Filled(9));

  JoinResponseMessage response;
  response.accepted = true;
  response.server_proof = Filled(5);
  response.current_round = 17;
  response.heartbeat_interval_ms = 2000;
  Result<OutFrame> response_out = Encode(response, FrameLimits());
  REQUIRE(response_out.ok());
  Frame response_frame = Reparse(*response_out);
  Result<JoinResponseMessage> r = DecodeJoinResponse(response_frame);
  REQUIRE(r.ok());
  CHECK(r->accepted);
  CHECK(r->server_proof == Filled(5));
  CHECK(r->current_round == 17);
  CHECK(r->heartbeat_interval_ms == 2000);
}

TEST_CASE("round instructions carry every field in chunk 0 and only the payload afterwards") {
  const std::vector<float> levels = {-1.0f, -0.25f, 0.0f, 0.25f, 1.0f};
  std::vector<uint8_t> model(1000);
  std::iota(model.begin(), model.end(), 0);
  RoundInstructionsMessage m;
  m.round_id = 12;
  m.model_encoding = ModelEncoding::kCompressedDelta;
  m.model_parameters = 250;
  m.codec_spec = "ndqsg:bits=2,ratio=4";
  m.session_seed = 0xDEADBEEFCAFEull;
  m.local_epochs = 2;
  m.local_steps = 50;
  m.learning_rate = 0.05f;
  m.anchor_role = AnchorRole::kNested;
  m.level_table_version = 3;
  m.level_table = levels.data();
  m.level_table_size = levels.size();
  m.deadline_ms = 30000;
  m.payload = {0, 2, model.size(), 0, model.data(), 600};
  Result<OutFrame> first = Encode(m, FrameLimits());
  REQUIRE(first.ok());
  Frame f0 = Reparse(*first);
  Result<RoundInstructionsMessage> got = DecodeRoundInstructions(f0, FrameLimits());
  REQUIRE(got.ok());
  CHECK(got->round_id == 12);
  CHECK(got->model_encoding == ModelEncoding::kCompressedDelta);
  CHECK(got->model_parameters == 250);
  CHECK(got->codec_spec == "ndqsg:bits=2,ratio=4");
  CHECK(got->session_seed == 0xDEADBEEFCAFEull);
  CHECK(got->local_epochs == 2);
  CHECK(got->local_steps == 50);
  CHECK(got->learning_rate == 0.05f);
  CHECK(got->anchor_role == AnchorRole::kNested);
  CHECK(got->level_table_version == 3);
  REQUIRE(got->level_table_size == levels.size());
  CHECK(got->level_table[1] == -0.25f);
  CHECK(got->deadline_ms == 30000);
  REQUIRE(got->payload.size == 600);
  CHECK(std::memcmp(got->payload.data, model.data(), 600) == 0);

  RoundInstructionsMessage next;
  next.round_id = 12;
  next.payload = {1, 2, model.size(), 600, model.data() + 600, 400};
  Result<OutFrame> second = Encode(next, FrameLimits());
  REQUIRE(second.ok());
  CHECK(second->body_size() < first->body_size());
  Frame f1 = Reparse(*second);
  Result<RoundInstructionsMessage> got1 = DecodeRoundInstructions(f1, FrameLimits());
  REQUIRE(got1.ok());
  CHECK(got1->payload.index == 1);
  CHECK(got1->payload.offset == 600);
  CHECK(got1->codec_spec.empty());
  CHECK(std::memcmp(got1->payload.data, model.data() + 600, 400) == 0);
}

TEST_CASE("an update payload is written in place by the fill function and arrives aligned") {
  constexpr std::size_t kFloats = 1001;
  UpdateMessage m;
  m.round_id = 3;
  m.num_samples = 600;
  m.training_loss = 0.75f;
  m.codec_spec = "fp32";
  m.stats.encoded_bytes = kFloats * 4;
  m.stats.raw_bytes = kFloats * 4;
  m.stats.wrap_count = 2;
  m.stats.residual_norm = 0.5f;
  m.payload.total_size = kFloats * 4;
  m.payload.size = kFloats * 4;
  int calls = 0;
  Result<OutFrame> out = Encode(m, FrameLimits(), [&](uint8_t* destination, std::size_t size) {
    ++calls;
    CHECK(size == kFloats * 4);
    for (std::size_t i = 0; i < kFloats; ++i) {
      const float v = static_cast<float>(i) * 0.5f;
      std::memcpy(destination + 4 * i, &v, 4);
    }
  });
  REQUIRE(out.ok());
  CHECK(calls == 1);
  Frame frame = Reparse(*out);
  Result<UpdateMessage> got = DecodeUpdate(frame, FrameLimits());
  REQUIRE(got.ok());
  CHECK(got->num_samples == 600);
  CHECK(got->training_loss == 0.75f);
  CHECK(got->codec_spec == "fp32");
  CHECK(got->stats.wrap_count == 2);
  CHECK(got->stats.residual_norm == 0.5f);
  REQUIRE(got->payload.size == kFloats * 4);
  CHECK(reinterpret_cast<std::uintptr_t>(got->payload.data) % 16 == 0);
  const float* floats = static_cast<const float*>(static_cast<const void*>(got->payload.data));
  CHECK(floats[0] == 0.0f);
  CHECK(floats[1000] == 500.0f);
}

TEST_CASE("ack, leave, error, heartbeat and peer messages survive a round trip") {
  Result<OutFrame> ack = Encode(AckMessage{9, MessageKind::kUpdate}, FrameLimits());
  REQUIRE(ack.ok());
  Frame ack_frame = Reparse(*ack);
  CHECK(DecodeAck(ack_frame)->acked == MessageKind::kUpdate);
  CHECK(DecodeAck(ack_frame)->round_id == 9);

  Result<OutFrame> leave = Encode(LeaveMessage{"shutting down"}, FrameLimits());
  REQUIRE(leave.ok());
  Frame leave_frame = Reparse(*leave);
  CHECK(DecodeLeave(leave_frame)->reason == "shutting down");

  Result<OutFrame> error = EncodeStatus(Corrupt("update has 3 floats, model has 4"), FrameLimits());
  REQUIRE(error.ok());
  Frame error_frame = Reparse(*error);
  Result<ErrorMessage> e = DecodeError(error_frame);
  REQUIRE(e.ok());
  CHECK(ToStatus(*e).code() == StatusCode::kCorrupt);
  CHECK(ToStatus(*e).message() == "update has 3 floats, model has 4");
  CHECK_FALSE(Encode(ErrorMessage{StatusCode::kOk, "fine"}, FrameLimits()).ok());

  const std::vector<uint8_t> bytes(64, 0x11);
  RingChunkMessage ring;
  ring.collective_id = 77;
  ring.step = 2;
  ring.phase = RingPhase::kAllGather;
  ring.source_rank = 3;
  ring.segment = 1;
  ring.payload = {0, 1, bytes.size(), 0, bytes.data(), bytes.size()};
  Result<OutFrame> ring_out = Encode(ring, FrameLimits());
  REQUIRE(ring_out.ok());
  Frame ring_frame = Reparse(*ring_out);
  Result<RingChunkMessage> r = DecodeRingChunk(ring_frame, FrameLimits());
  REQUIRE(r.ok());
  CHECK(r->collective_id == 77);
  CHECK(r->phase == RingPhase::kAllGather);
  CHECK(r->source_rank == 3);
  CHECK(r->codec_spec.empty());
  CHECK(r->payload.size == 64);

  GossipModelMessage gossip;
  gossip.step = 5;
  gossip.source_rank = 1;
  gossip.codec_spec = "moniqua:bits=1";
  gossip.wrap_count = 4;
  gossip.payload = {0, 1, bytes.size(), 0, bytes.data(), bytes.size()};
  Result<OutFrame> gossip_out = Encode(gossip, FrameLimits());
  REQUIRE(gossip_out.ok());
  Frame gossip_frame = Reparse(*gossip_out);
  Result<GossipModelMessage> g = DecodeGossipModel(gossip_frame, FrameLimits());
  REQUIRE(g.ok());
  CHECK(g->wrap_count == 4);
  CHECK(g->codec_spec == "moniqua:bits=1");
}

TEST_CASE("decoding a frame as the wrong message kind is refused") {
  Result<OutFrame> out = Encode(HeartbeatMessage{1, 2}, FrameLimits());
  REQUIRE(out.ok());
  Frame frame = Reparse(*out);
  CHECK(DecodeUpdate(frame, FrameLimits()).status().code() == StatusCode::kFailedPrecondition);
  CHECK(DecodeJoin(frame).status().code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("encoders refuse what decoders would reject") {
  UpdateMessage update;
  update.codec_spec = "fp32";
  update.training_loss = std::numeric_limits<float>::quiet_NaN();
  CHECK(Encode(update, FrameLimits()).status().code() == StatusCode::kInvalidArgument);
  update.training_loss = 1.0f;
  update.codec_spec = "";
  CHECK_FALSE(Encode(update, FrameLimits()).ok());
  update.codec_spec = "fp32";
  update.payload = {2, 2, 10, 0, nullptr, 0};
  CHECK_FALSE(Encode(update, FrameLimits()).ok());

  JoinMessage join;
  join.device_id = "bad id with spaces";
  CHECK_FALSE(Encode(join, FrameLimits()).ok());

  const float unsorted[] = {1.0f, 0.0f};
  RoundInstructionsMessage instructions;
  instructions.codec_spec = "alq";
  instructions.learning_rate = 0.1f;
  instructions.level_table = unsorted;
  instructions.level_table_size = 2;
  CHECK_FALSE(Encode(instructions, FrameLimits()).ok());
}

TEST_CASE("encoding refuses a chunk larger than a frame can carry") {
  FrameLimits limits;
  limits.max_frame_bytes = kMinFrameBytes;
  std::vector<uint8_t> payload(limits.MaxChunkBytes() + 1);
  UpdateMessage m;
  m.codec_spec = "fp32";
  m.payload = {0, 1, payload.size(), 0, payload.data(), payload.size()};
  CHECK(Encode(m, limits).status().code() == StatusCode::kResourceExhausted);
  m.payload.size = limits.MaxChunkBytes();
  m.payload.count = 2;
  Result<OutFrame> fits = Encode(m, limits);
  REQUIRE(fits.ok());
  CHECK(fits->body_size() <= limits.max_frame_bytes);
}

TEST_CASE("decoding rejects an update whose training loss is not finite") {
  for (float loss : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    flatbuffers::FlatBufferBuilder b;
    const uint8_t bytes[4] = {1, 2, 3, 4};
    auto data = b.CreateVector(bytes, 4);
    auto chunk = wire::CreateChunk(b, 0, 1, 4, 0, data);
    auto update = wire::CreateUpdate(b, 1, 10, loss, b.CreateString("fp32"), 0, 0, chunk);
    wire::FinishEnvelopeBuffer(
        b, wire::CreateEnvelope(b, wire::ProtocolVersion::Current, wire::Message::Update, update.Union()));
    Frame frame = ReparseBody(b);
    Result<UpdateMessage> m = DecodeUpdate(frame, FrameLimits());
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().code() == StatusCode::kCorrupt);
  }
}

TEST_CASE("decoding rejects a nonce of the wrong size and a join without a device id") {
  flatbuffers::FlatBufferBuilder b;
  const uint8_t short_nonce[16] = {};
  auto join = wire::CreateJoin(b, wire::ProtocolVersion::Current, b.CreateString("dev1"), 0,
                               b.CreateVector(short_nonce, 16), 0);
  wire::FinishEnvelopeBuffer(
      b, wire::CreateEnvelope(b, wire::ProtocolVersion::Current, wire::Message::Join, join.Union()));
  Frame frame = ReparseBody(b);
  CHECK(DecodeJoin(frame).status().code() == StatusCode::kCorrupt);

  flatbuffers::FlatBufferBuilder b2;
  const uint8_t nonce[kNonceBytes] = {};
  auto anonymous = wire::CreateJoin(b2, wire::ProtocolVersion::Current, 0, 0, b2.CreateVector(nonce, kNonceBytes), 0);
  wire::FinishEnvelopeBuffer(
      b2, wire::CreateEnvelope(b2, wire::ProtocolVersion::Current, wire::Message::Join, anonymous.Union()));
  Frame frame2 = ReparseBody(b2);
  CHECK(DecodeJoin(frame2).status().code() == StatusCode::kCorrupt);
}

TEST_CASE("decoding rejects chunk fields that contradict each other") {
  struct Case {
    uint32_t index, count;
    uint64_t total, offset;
    std::size_t size;
  };
  const Case cases[] = {
      {0, 0, 4, 0, 4},            // no chunks
      {2, 2, 8, 0, 4},            // index not below count
      {0, 1, 4, 2, 4},            // ends past the total
      {0, 2, 8, 0, 0},            // empty chunk in a non-empty payload
      {0, 3, 0, 0, 0},            // empty payload in several chunks
      {0, 1, uint64_t{1} << 40, 0, 4},  // above the payload limit
  };
  for (const Case& c : cases) {
    flatbuffers::FlatBufferBuilder b;
    std::vector<uint8_t> bytes(c.size, 7);
    auto data = b.CreateVector(bytes);
    auto chunk = wire::CreateChunk(b, c.index, c.count, c.total, c.offset, data);
    auto update = wire::CreateUpdate(b, 1, 10, 0.5f, b.CreateString("fp32"), 0, 0, chunk);
    wire::FinishEnvelopeBuffer(
        b, wire::CreateEnvelope(b, wire::ProtocolVersion::Current, wire::Message::Update, update.Union()));
    Frame frame = ReparseBody(b);
    Result<UpdateMessage> m = DecodeUpdate(frame, FrameLimits());
    CHECK_FALSE(m.ok());
  }
}

TEST_CASE("decoding rejects enum values outside the schema") {
  flatbuffers::FlatBufferBuilder b;
  auto ack = wire::CreateAck(b, 1, static_cast<wire::MessageKind>(99));
  wire::FinishEnvelopeBuffer(
      b, wire::CreateEnvelope(b, wire::ProtocolVersion::Current, wire::Message::Ack, ack.Union()));
  Frame frame = ReparseBody(b);
  CHECK(DecodeAck(frame).status().code() == StatusCode::kCorrupt);
}

TEST_CASE("device ids are 1 to 64 characters of letters, digits, dot, underscore and dash") {
  CHECK(IsValidDeviceId("a"));
  CHECK(IsValidDeviceId("board-01.site_3"));
  CHECK(IsValidDeviceId(std::string(64, 'x')));
  CHECK_FALSE(IsValidDeviceId(""));
  CHECK_FALSE(IsValidDeviceId(std::string(65, 'x')));
  CHECK_FALSE(IsValidDeviceId("a b"));
  CHECK_FALSE(IsValidDeviceId("a/b"));
  CHECK_FALSE(IsValidDeviceId(std::string_view("a\0b", 3)));
}

TEST_CASE("a ring chunk encoded in a slot has the bytes of the plain encoding, borrowed or copied") {
  std::vector<uint8_t> payload(4099 * 4);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7);
  RingChunkMessage m;
  m.collective_id = 9;
  m.step = 2;
  m.phase = RingPhase::kAllGather;
  m.source_rank = 3;
  m.segment = 1;
  m.payload = {1, 4, payload.size() * 4, payload.size(), payload.data(), payload.size()};
  Result<OutFrame> plain = Encode(m, FrameLimits());
  REQUIRE(plain.ok());
  std::vector<uint8_t> expected;
  plain->AppendWireBytes(&expected);
  for (PayloadMode mode : {PayloadMode::kBorrow, PayloadMode::kCopy}) {
    FrameSlot slot;
    Result<OutFrame> out = Encode(m, FrameLimits(), slot, mode);
    REQUIRE(out.ok());
    CHECK(out->contiguous() == (mode == PayloadMode::kCopy));
    if (mode == PayloadMode::kBorrow) {
      REQUIRE(out->piece_count() == 3);
      CHECK(out->piece(1).data == payload.data());  // the frame reads the caller's bytes
    }
    std::vector<uint8_t> wire;
    out->AppendWireBytes(&wire);
    CHECK(wire == expected);
    CHECK(out->wire_size() == expected.size());
    Result<Frame> frame = ParseFrame(wire.data(), wire.size(), FrameLimits());
    REQUIRE(frame.ok());
    Result<RingChunkMessage> back = DecodeRingChunk(*frame, FrameLimits());
    REQUIRE(back.ok());
    CHECK(std::memcmp(back->payload.data, payload.data(), payload.size()) == 0);
  }
}

TEST_CASE("round instructions encoded in a slot are the bytes of the plain encoder, first chunk and later ones") {
  std::vector<uint8_t> model(4096 * 3);
  for (std::size_t i = 0; i < model.size(); ++i) model[i] = static_cast<uint8_t>(i * 13);
  const float table[4] = {-1.0f, -0.25f, 0.25f, 1.0f};
  RoundInstructionsMessage m;
  m.round_id = 7;
  m.model_encoding = ModelEncoding::kCompressedDelta;
  m.model_parameters = 3072;
  m.codec_spec = "alq:bits=2";
  m.session_seed = 99;
  m.local_epochs = 2;
  m.local_steps = 5;
  m.learning_rate = 0.05f;
  m.anchor_role = AnchorRole::kNested;
  m.level_table_version = 3;
  m.level_table = table;
  m.level_table_size = 4;
  m.deadline_ms = 1234;
  for (uint32_t index : {0u, 2u}) {
    m.payload = {index, 3, model.size(), index * 4096, model.data() + index * 4096, 4096};
    Result<OutFrame> plain = Encode(m, FrameLimits());
    REQUIRE(plain.ok());
    std::vector<uint8_t> expected;
    plain->AppendWireBytes(&expected);
    for (PayloadMode mode : {PayloadMode::kBorrow, PayloadMode::kCopy}) {
      FrameSlot slot;
      Result<OutFrame> out = Encode(m, FrameLimits(), slot, mode);
      REQUIRE(out.ok());
      std::vector<uint8_t> wire;
      out->AppendWireBytes(&wire);
      CHECK(wire == expected);
    }
  }
  FrameSlot slot;
  m.payload.index = 0;
  m.learning_rate = -1.0f;  // the same checks as the plain encoder
  CHECK(Encode(m, FrameLimits(), slot, PayloadMode::kCopy).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a frame slot in caller storage builds its frames there, the plain encoder's bytes, and a larger one on the heap") {
  // A model chunk of 40,000 bytes: the slot sized for it by FrameSlotStorageBytes.
  std::vector<uint8_t> model(40000);
  for (std::size_t i = 0; i < model.size(); ++i) model[i] = static_cast<uint8_t>(i * 7);
  RoundInstructionsMessage m;
  m.round_id = 3;
  m.model_parameters = 10000;
  m.codec_spec = "ndqsg:rho=5";
  m.payload = {0, 1, model.size(), 0, model.data(), model.size()};
  Result<OutFrame> plain = Encode(m, FrameLimits());
  REQUIRE(plain.ok());
  std::vector<uint8_t> expected;
  plain->AppendWireBytes(&expected);
  std::vector<unsigned char> storage(FrameSlotStorageBytes(model.size()));
  const auto in_storage = [&](const OutFrame& frame) {
    return frame.body() >= storage.data() && frame.body() + frame.body_size() <= storage.data() + storage.size();
  };
  FrameSlot slot(storage.data(), storage.size());
  for (int round = 0; round < 2; ++round) {  // and again in the same memory
    Result<OutFrame> out = Encode(m, FrameLimits(), slot, PayloadMode::kCopy);
    REQUIRE(out.ok());
    CHECK(in_storage(*out));
    std::vector<uint8_t> wire;
    out->AppendWireBytes(&wire);
    CHECK(wire == expected);
  }
  // Storage too small for the frame: it is built on the heap, the same bytes.
  std::vector<unsigned char> small(1024);
  FrameSlot too_small(small.data(), small.size());
  Result<OutFrame> out = Encode(m, FrameLimits(), too_small, PayloadMode::kCopy);
  REQUIRE(out.ok());
  CHECK_FALSE((out->body() >= small.data() && out->body() < small.data() + small.size()));
  std::vector<uint8_t> wire;
  out->AppendWireBytes(&wire);
  CHECK(wire == expected);
}

TEST_CASE("a frame slot is busy while its frame is alive and refuses a second frame") {
  std::vector<uint8_t> payload(64, 1);
  RingChunkMessage m;
  m.payload = {0, 1, payload.size(), 0, payload.data(), payload.size()};
  FrameSlot slot;
  CHECK_FALSE(slot.busy());
  {
    Result<OutFrame> first = Encode(m, FrameLimits(), slot, PayloadMode::kBorrow);
    REQUIRE(first.ok());
    OutFrame copy = *first;  // a connection's queue holds a copy
    CHECK(slot.busy());
    Result<OutFrame> second = Encode(m, FrameLimits(), slot, PayloadMode::kCopy);
    CHECK(second.status().code() == StatusCode::kFailedPrecondition);
  }
  CHECK_FALSE(slot.busy());
  // Reused: the next frame is built in the same memory and is still valid.
  payload.assign(64, 2);
  Result<OutFrame> again = Encode(m, FrameLimits(), slot, PayloadMode::kCopy);
  REQUIRE(again.ok());
  Frame frame = Reparse(*again);
  Result<RingChunkMessage> back = DecodeRingChunk(frame, FrameLimits());
  REQUIRE(back.ok());
  CHECK(back->payload.data[63] == 2);
}

TEST_CASE("a slot refuses a chunk larger than a frame can carry") {
  FrameLimits limits;
  limits.max_frame_bytes = kMinFrameBytes;
  std::vector<uint8_t> payload(limits.MaxChunkBytes() + 1, 0);
  RingChunkMessage m;
  m.payload = {0, 1, payload.size(), 0, payload.data(), payload.size()};
  FrameSlot slot;
  Result<OutFrame> out = Encode(m, limits, slot, PayloadMode::kBorrow);
  CHECK(out.status().code() == StatusCode::kResourceExhausted);
  CHECK_FALSE(slot.busy());
}

TEST_CASE("an update carries the device's compute time, and an update without it reads as zero") {
  UpdateMessage m;
  m.round_id = 2;
  m.num_samples = 10;
  m.codec_spec = "fp32";
  m.compute_ms = 1234;
  const uint8_t payload[4] = {1, 2, 3, 4};
  m.payload = ChunkView{0, 1, 4, 0, payload, 4};
  Result<UpdateMessage> got = DecodeUpdate(Reparse(*Encode(m, FrameLimits())), FrameLimits());
  REQUIRE(got.ok());
  CHECK(got->compute_ms == 1234);
  m.compute_ms = 0;  // a device that does not measure (an older one sends no field at all)
  got = DecodeUpdate(Reparse(*Encode(m, FrameLimits())), FrameLimits());
  REQUIRE(got.ok());
  CHECK(got->compute_ms == 0);
}

TEST_CASE("an update carries level statistics and a join the model round it holds") {
  UpdateMessage m;
  m.round_id = 3;
  m.num_samples = 100;
  m.codec_spec = "alq:bits=3";
  m.level_table_version = 7;
  LevelStatisticsMessage& ls = m.stats.level_statistics;
  ls.present = true;
  ls.count = 2048;
  ls.sum = 100.25;
  ls.sum_sq = 10.5;
  ls.bucket_norms = {3.0f, 2.0f};
  ls.largest_buckets = {{3.0f, 1024, 60, 6}, {2.0f, 1024, 40.25, 4.5}};
  const uint8_t payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  m.payload = ChunkView{0, 1, 8, 0, payload, 8};
  Result<OutFrame> out = Encode(m, FrameLimits());
  REQUIRE(out.ok());
  Frame frame = Reparse(*out);
  Result<UpdateMessage> got = DecodeUpdate(frame, FrameLimits());
  REQUIRE(got.ok());
  CHECK(got->level_table_version == 7);
  const LevelStatisticsMessage& back = got->stats.level_statistics;
  CHECK(back.present);
  CHECK(back.count == 2048);
  CHECK(back.sum == 100.25);
  CHECK(back.sum_sq == 10.5);
  CHECK(back.bucket_norms == ls.bucket_norms);
  REQUIRE(back.largest_buckets.size() == 2);
  CHECK(back.largest_buckets[1].norm == 2.0f);
  CHECK(back.largest_buckets[1].sum == 40.25);
  CHECK(back.largest_buckets[1].sum_sq == 4.5);

  // Without statistics the field stays absent.
  m.stats.level_statistics = LevelStatisticsMessage();
  Frame plain = Reparse(*Encode(m, FrameLimits()));
  CHECK_FALSE(DecodeUpdate(plain, FrameLimits())->stats.level_statistics.present);

  JoinMessage join;
  join.device_id = "dev-1";
  join.model_round = 12;
  Frame join_frame = Reparse(*Encode(join, FrameLimits()));
  CHECK(DecodeJoin(join_frame)->model_round == 12);
  join.model_round = -1;
  Frame none_frame = Reparse(*Encode(join, FrameLimits()));
  CHECK(DecodeJoin(none_frame)->model_round == -1);
  join.model_round = -2;
  CHECK(Encode(join, FrameLimits()).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("level statistics that are not finite, negative or too many are refused on both ends") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int k = 0; k < 5; ++k) {
    INFO("case " << k);
    LevelStatisticsMessage ls;
    ls.present = true;
    ls.count = 10;
    ls.sum = 1;
    ls.sum_sq = 0.5;
    if (k == 0) ls.count = nan;
    if (k == 1) ls.sum = -1;
    if (k == 2) ls.sum_sq = std::numeric_limits<double>::infinity();
    if (k == 3) ls.bucket_norms.assign(kMaxLevelStatisticsNorms + 1, 1.0f);
    if (k == 4) ls.largest_buckets = {{1.0f, nan, 0, 0}};
    UpdateMessage m;
    m.codec_spec = "alq";
    m.num_samples = 1;
    m.stats.level_statistics = ls;
    CHECK(Encode(m, FrameLimits()).status().code() == StatusCode::kInvalidArgument);

    // The same statistics built by hand reach the decoder, which refuses them.
    flatbuffers::FlatBufferBuilder b;
    std::vector<wire::BucketMoments> moments;
    for (const BucketMomentsMessage& bm : ls.largest_buckets) moments.emplace_back(bm.norm, bm.count, bm.sum, bm.sum_sq);
    auto stats = wire::CreateLevelStatistics(b, ls.count, ls.sum, ls.sum_sq, b.CreateVector(ls.bucket_norms),
                                             b.CreateVectorOfStructs(moments));
    auto codec_stats = wire::CreateCodecStats(b, 0, 0, 0, 0.0f, 0, stats);
    const uint8_t bytes[4] = {1, 2, 3, 4};
    auto chunk = wire::CreateChunk(b, 0, 1, 4, 0, b.CreateVector(bytes, 4));
    auto update = wire::CreateUpdate(b, 1, 10, 0.5f, b.CreateString("alq"), 0, codec_stats, chunk);
    wire::FinishEnvelopeBuffer(
        b, wire::CreateEnvelope(b, wire::ProtocolVersion::Current, wire::Message::Update, update.Union()));
    Frame frame = ReparseBody(b);
    CHECK(DecodeUpdate(frame, FrameLimits()).status().code() == StatusCode::kCorrupt);
  }
}

TEST_CASE("an update whose bucket moments sit off their alignment is refused, not read") {
  // Found by transport_frame_fuzzer: the FlatBuffers Verifier checks the
  // length of a vector of structs but not where its structs sit, so this
  // frame body puts the BucketMoments' doubles at 4 mod 8 (UBSan: misaligned
  // load; a fault on ARMv7). The body is the fuzzer's minimized input.
  const std::vector<uint8_t> body = {
    0x20, 0x00, 0x00, 0x00, 0x46, 0x44, 0x52, 0x54, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x0e, 0x00, 0x06, 0x00, 0x05, 0x00, 0x08, 0x00,
    0x0a, 0x00, 0x00, 0x00, 0x00, 0x06, 0x01, 0x00, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x12, 0x00,
    0x2c, 0x00, 0x18, 0x00, 0x20, 0x00, 0x04, 0x00, 0x08, 0x00, 0x0c, 0x00, 0x10, 0x00, 0x14, 0x00,
    0x12, 0x00, 0x00, 0x00, 0xcd, 0xcc, 0xcc, 0x3e, 0xbc, 0x00, 0x00, 0x00, 0x00, 0x02, 0x36, 0x00,
    0x2c, 0x00, 0x00, 0x00, 0xd0, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x4c, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x22, 0x00,
    0x0c, 0x00, 0x14, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x08, 0x00, 0x10, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x3f, 0x28, 0x00, 0x00, 0x00, 0x90, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x90, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0e, 0x00,
    0xb6, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x04, 0x00, 0x0e, 0x00, 0x00, 0x00,
    0x48, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40,
    0x00, 0xff, 0xff, 0xff, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0e, 0x00, 0x20, 0x00, 0x10, 0x00,
    0x04, 0x00, 0x08, 0x00, 0x18, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x3f, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f,
    0x00, 0x00, 0x00, 0x40, 0x0a, 0x00, 0x00, 0x00, 0x61, 0x6c, 0x71, 0x3a, 0x62, 0x69, 0x74, 0x73,
    0x3d, 0x33, 0x00, 0x00, 0x00, 0x00, 0x0e, 0x00, 0x18, 0x10, 0x00, 0x00, 0x04, 0x00, 0x0c, 0x00,
    0x00, 0x00, 0x08, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,
    0x90, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x04, 0x00, 0x00, 0x00,
    0x08, 0x00, 0x10, 0x00,
  };
  std::vector<uint8_t> wire(kFramePrefixBytes);
  WriteFramePrefix(static_cast<uint32_t>(body.size()), wire.data());
  wire.insert(wire.end(), body.begin(), body.end());
  FrameLimits limits;
  limits.max_frame_bytes = kMinFrameBytes;
  limits.max_payload_bytes = 1u << 20;
  Result<Frame> frame = ParseFrame(wire.data(), wire.size(), limits);
  REQUIRE(frame.ok());
  Result<UpdateMessage> update = DecodeUpdate(*frame, limits);
  CHECK(update.status().code() == StatusCode::kCorrupt);
  CHECK(update.status().message().find("misaligned") != std::string::npos);
}

}  // namespace
}  // namespace transport
}  // namespace fedrt
