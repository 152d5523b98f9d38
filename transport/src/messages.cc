// Encoding and decoding of protocol messages (messages.h), with the semantic
// checks that run on every received message after the FlatBuffers Verifier.
#include "fedrt/transport/messages.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "impl_access.h"
#include "wire.h"
#include "fedrt/platform/concat.h"

namespace fedrt {
namespace transport {
namespace {

namespace fb = flatbuffers;

// Chunk payloads start 16-byte aligned inside the frame (receive buffers are
// 16-byte aligned too), so float payloads can be read in place.
constexpr std::size_t kPayloadAlignment = 16;
constexpr std::size_t kBuilderSlack = 4096;

Status Wrong(std::string message) { return Status(StatusCode::kCorrupt, std::move(message)); }

// ---- Shared rules (encode and decode enforce the same ones) -------------------

// Empty string when the chunk's fields are consistent on their own.
std::string ChunkFieldProblem(const ChunkView& c, const FrameLimits& limits) {
  if (c.count == 0) return "chunk count is 0";
  if (c.index >= c.count) {
    return Concat({"chunk index ", c.index, " not below count ", c.count});
  }
  if (c.total_size > limits.max_payload_bytes) {
    return Concat({"payload of ", c.total_size, " bytes exceeds the limit of ", limits.max_payload_bytes});
  }
  if (c.offset > c.total_size || c.size > c.total_size - c.offset) {
    return Concat({"chunk [", c.offset, ", +", c.size, ") ends past the payload size ", c.total_size});
  }
  if (c.size == 0 && c.total_size != 0) return "empty chunk in a non-empty payload";
  if (c.total_size == 0 && c.count != 1) return "an empty payload must be one chunk";
  if (c.total_size != 0 && c.count > c.total_size) return "more chunks than payload bytes";
  return std::string();
}

bool IsFinite(float v) { return std::isfinite(v); }

// Empty string when the statistics have allowed sizes and finite values >= 0.
std::string LevelStatisticsProblem(const LevelStatisticsMessage& s) {
  if (!s.present) return std::string();
  const auto bad = [](double v) { return !std::isfinite(v) || v < 0; };
  if (bad(s.count) || bad(s.sum) || bad(s.sum_sq)) return "level statistics are not finite values >= 0";
  if (s.bucket_norms.size() > kMaxLevelStatisticsNorms) {
    return Concat({"level statistics carry ", s.bucket_norms.size(), " bucket norms"});
  }
  if (s.largest_buckets.size() > kMaxLevelStatisticsBuckets) {
    return Concat({"level statistics carry ", s.largest_buckets.size(), " bucket moments"});
  }
  for (float norm : s.bucket_norms) {
    if (bad(norm)) return "a level statistics bucket norm is not a finite value >= 0";
  }
  for (const BucketMomentsMessage& b : s.largest_buckets) {
    if (bad(b.norm) || bad(b.count) || bad(b.sum) || bad(b.sum_sq)) {
      return "level statistics bucket moments are not finite values >= 0";
    }
  }
  return std::string();
}

std::string LevelTableProblem(const float* table, std::size_t size) {
  if (size > kMaxLevelTableSize) return Concat({"level table of ", size, " entries"});
  for (std::size_t i = 0; i < size; ++i) {
    if (!IsFinite(table[i])) return Concat({"level table entry ", i, " is not finite"});
    if (i > 0 && table[i] < table[i - 1]) return "level table is not sorted";
  }
  return std::string();
}

// ---- Encoding ----------------------------------------------------------------

using Builder = fb::FlatBufferBuilder;

std::shared_ptr<Builder> NewBuilder(std::size_t expected_payload) {
  return std::make_shared<Builder>(expected_payload + kBuilderSlack);
}

Result<OutFrame> Finish(std::shared_ptr<Builder> b, wire::Message type, fb::Offset<void> message,
                        const FrameLimits& limits) {
  auto envelope = wire::CreateEnvelope(*b, wire::ProtocolVersion::Current, type, message);
  wire::FinishEnvelopeBuffer(*b, envelope);
  const std::size_t size = b->GetSize();
  if (size > limits.max_frame_bytes) {
    return Status(StatusCode::kResourceExhausted,
                  Concat({MessageKindName(static_cast<MessageKind>(type)), " frame of ", size,
                          " bytes exceeds the limit of ", limits.max_frame_bytes}));
  }
  const uint8_t* body = b->GetBufferPointer();
  return OutFrame(std::shared_ptr<const void>(std::move(b)), body, static_cast<uint32_t>(size),
                  static_cast<MessageKind>(type));
}

Status CheckString(std::string_view s, std::size_t max, const char* field) {
  if (s.size() > max) {
    return InvalidArgument(Concat({field, " of ", s.size(), " bytes exceeds ", max}));
  }
  return Status::Ok();
}

fb::Offset<fb::String> MaybeString(Builder& b, std::string_view s) {
  if (s.empty()) return 0;
  return b.CreateString(s.data(), s.size());
}

template <std::size_t N>
fb::Offset<fb::Vector<uint8_t>> Bytes(Builder& b, const std::array<uint8_t, N>& bytes) {
  return b.CreateVector(bytes.data(), bytes.size());
}

// Writes the chunk's payload in place (first, so the pointer into the builder
// is used before anything else can grow the buffer), then its table. With
// `borrowed_from_end`, the payload space is left unwritten (the frame will
// point at c.data instead) and its distance from the end of the buffer is
// stored there: the payload is the first thing built, so that distance never
// changes.
Result<fb::Offset<wire::Chunk>> BuildChunk(Builder& b, const ChunkView& c, const PayloadFill* fill,
                                           const FrameLimits& limits, std::size_t* borrowed_from_end = nullptr) {
  const std::string problem = ChunkFieldProblem(c, limits);
  if (!problem.empty()) return InvalidArgument(problem);
  if (c.size > limits.MaxChunkBytes()) {
    return Status(StatusCode::kResourceExhausted,
                  Concat({"chunk of ", c.size, " bytes exceeds the ", limits.MaxChunkBytes(),
                          " bytes a frame can carry"}));
  }
  if (fill == nullptr && c.data == nullptr && c.size != 0) {
    return InvalidArgument("chunk has no data and no fill function");
  }
  b.ForceVectorAlignment(c.size, 1, kPayloadAlignment);
  uint8_t* destination = nullptr;
  const auto data = fb::Offset<fb::Vector<uint8_t>>(b.CreateUninitializedVector(c.size, 1, &destination));
  if (borrowed_from_end != nullptr) {
    *borrowed_from_end = static_cast<std::size_t>(b.GetCurrentBufferPointer() + b.GetSize() - destination);
  } else if (c.size != 0) {
    if (fill != nullptr) {
      (*fill)(destination, c.size);
    } else {
      std::memcpy(destination, c.data, c.size);
    }
  }
  return wire::CreateChunk(b, c.index, c.count, c.total_size, c.offset, data);
}

// ---- Decoding ----------------------------------------------------------------

template <typename T>
Result<const T*> Root(const Frame& frame, MessageKind expected) {
  if (frame.kind() != expected) {
    return Status(StatusCode::kFailedPrecondition, std::string("expected a ") +
                                                       MessageKindName(expected) + " message, got " +
                                                       MessageKindName(frame.kind()));
  }
  const wire::Envelope* envelope = wire::GetEnvelope(frame.data());
  return static_cast<const T*>(envelope->message());
}

Result<std::string_view> ReadString(const fb::String* s, std::size_t max, bool required,
                                    const char* field) {
  if (s == nullptr) {
    if (required) return Wrong(std::string(field) + " is missing");
    return std::string_view();
  }
  if (s->size() > max) {
    return Wrong(Concat({field, " of ", s->size(), " bytes exceeds ", max}));
  }
  if (required && s->size() == 0) return Wrong(std::string(field) + " is empty");
  return std::string_view(s->c_str(), s->size());
}

template <std::size_t N>
Status ReadBytes(const fb::Vector<uint8_t>* v, std::array<uint8_t, N>* out, const char* field) {
  if (v == nullptr || v->size() != N) {
    return Wrong(Concat({field, " must be ", N, " bytes"}));
  }
  std::memcpy(out->data(), v->data(), N);
  return Status::Ok();
}

Status ReadChunk(const wire::Chunk* c, const FrameLimits& limits, ChunkView* out) {
  if (c == nullptr) return Wrong("payload chunk is missing");
  out->index = c->index();
  out->count = c->count();
  out->total_size = c->total_size();
  out->offset = c->offset();
  out->data = c->data() != nullptr ? c->data()->data() : nullptr;
  out->size = c->data() != nullptr ? c->data()->size() : 0;
  const std::string problem = ChunkFieldProblem(*out, limits);
  if (!problem.empty()) return Wrong(problem);
  if (out->size > limits.MaxChunkBytes()) return Wrong("chunk larger than a frame may carry");
  return Status::Ok();
}

template <typename Enum, typename Wire>
Status ReadEnum(Wire value, Wire max, Enum* out, const char* field) {
  if (static_cast<unsigned>(value) > static_cast<unsigned>(max)) {
    return Wrong(Concat({field, " has unknown value ", static_cast<unsigned>(value)}));
  }
  *out = static_cast<Enum>(value);
  return Status::Ok();
}

}  // namespace

bool IsValidDeviceId(std::string_view id) {
  if (id.empty() || id.size() > kMaxDeviceIdBytes) return false;
  for (char ch : id) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                    ch == '.' || ch == '_' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

// ---- Join ----------------------------------------------------------------------

Result<OutFrame> Encode(const JoinMessage& m, const FrameLimits& limits) {
  if (!IsValidDeviceId(m.device_id)) return InvalidArgument("invalid device id");
  if (m.codecs.size() > kMaxCodecs) return InvalidArgument("too many codecs");
  for (std::string_view codec : m.codecs) {
    FEDRT_RETURN_IF_ERROR(CheckString(codec, kMaxCodecNameBytes, "codec name"));
  }
  FEDRT_RETURN_IF_ERROR(CheckString(m.isa, kMaxIsaBytes, "isa"));
  auto b = NewBuilder(0);
  std::vector<fb::Offset<fb::String>> codecs;
  codecs.reserve(m.codecs.size());
  for (std::string_view codec : m.codecs) codecs.push_back(b->CreateString(codec.data(), codec.size()));
  auto codec_vector = b->CreateVector(codecs);
  auto capabilities = wire::CreateCapabilities(*b, codec_vector, MaybeString(*b, m.isa), m.max_frame_bytes);
  auto device_id = b->CreateString(m.device_id.data(), m.device_id.size());
  auto nonce = Bytes(*b, m.client_nonce);
  if (m.model_round < -1) return InvalidArgument("model round below -1");
  auto join = wire::CreateJoin(*b, static_cast<wire::ProtocolVersion>(m.protocol_version), device_id,
                               capabilities, nonce, m.resume_round, m.model_round);
  return Finish(std::move(b), wire::Message::Join, join.Union(), limits);
}

Result<JoinMessage> DecodeJoin(const Frame& frame) {
  Result<const wire::Join*> root = Root<wire::Join>(frame, MessageKind::kJoin);
  if (!root.ok()) return root.status();
  const wire::Join* j = *root;
  JoinMessage m;
  m.protocol_version = static_cast<uint16_t>(j->protocol_version());
  Result<std::string_view> id = ReadString(j->device_id(), kMaxDeviceIdBytes, true, "device id");
  if (!id.ok()) return id.status();
  if (!IsValidDeviceId(*id)) return Wrong("device id has characters outside [A-Za-z0-9._-]");
  m.device_id = *id;
  FEDRT_RETURN_IF_ERROR(ReadBytes(j->client_nonce(), &m.client_nonce, "client nonce"));
  m.resume_round = j->resume_round();
  m.model_round = j->model_round();
  if (m.model_round < -1) return Wrong("model round below -1");
  if (const wire::Capabilities* caps = j->capabilities()) {
    if (caps->codecs() != nullptr) {
      if (caps->codecs()->size() > kMaxCodecs) return Wrong("too many codecs");
      for (const fb::String* codec : *caps->codecs()) {
        Result<std::string_view> name = ReadString(codec, kMaxCodecNameBytes, true, "codec name");
        if (!name.ok()) return name.status();
        m.codecs.push_back(*name);
      }
    }
    Result<std::string_view> isa = ReadString(caps->isa(), kMaxIsaBytes, false, "isa");
    if (!isa.ok()) return isa.status();
    m.isa = *isa;
    m.max_frame_bytes = caps->max_frame_bytes();
  }
  return m;
}

// ---- Challenge, Authenticate, JoinResponse -----------------------------------------

Result<OutFrame> Encode(const ChallengeMessage& m, const FrameLimits& limits) {
  auto b = NewBuilder(0);
  auto nonce = Bytes(*b, m.server_nonce);
  return Finish(b, wire::Message::Challenge, wire::CreateChallenge(*b, nonce).Union(), limits);
}

Result<ChallengeMessage> DecodeChallenge(const Frame& frame) {
  Result<const wire::Challenge*> root = Root<wire::Challenge>(frame, MessageKind::kChallenge);
  if (!root.ok()) return root.status();
  ChallengeMessage m;
  FEDRT_RETURN_IF_ERROR(ReadBytes((*root)->server_nonce(), &m.server_nonce, "server nonce"));
  return m;
}

Result<OutFrame> Encode(const AuthenticateMessage& m, const FrameLimits& limits) {
  auto b = NewBuilder(0);
  auto proof = Bytes(*b, m.proof);
  return Finish(b, wire::Message::Authenticate, wire::CreateAuthenticate(*b, proof).Union(), limits);
}

Result<AuthenticateMessage> DecodeAuthenticate(const Frame& frame) {
  Result<const wire::Authenticate*> root = Root<wire::Authenticate>(frame, MessageKind::kAuthenticate);
  if (!root.ok()) return root.status();
  AuthenticateMessage m;
  FEDRT_RETURN_IF_ERROR(ReadBytes((*root)->proof(), &m.proof, "proof"));
  return m;
}

Result<OutFrame> Encode(const JoinResponseMessage& m, const FrameLimits& limits) {
  FEDRT_RETURN_IF_ERROR(CheckString(m.reason, kMaxReasonBytes, "reason"));
  auto b = NewBuilder(0);
  auto reason = MaybeString(*b, m.reason);
  fb::Offset<fb::Vector<uint8_t>> proof = 0;
  if (m.accepted) proof = Bytes(*b, m.server_proof);
  auto response = wire::CreateJoinResponse(*b, m.accepted, reason, proof, m.current_round,
                                           m.heartbeat_interval_ms, m.max_frame_bytes);
  return Finish(b, wire::Message::JoinResponse, response.Union(), limits);
}

Result<JoinResponseMessage> DecodeJoinResponse(const Frame& frame) {
  Result<const wire::JoinResponse*> root = Root<wire::JoinResponse>(frame, MessageKind::kJoinResponse);
  if (!root.ok()) return root.status();
  const wire::JoinResponse* r = *root;
  JoinResponseMessage m;
  m.accepted = r->accepted();
  Result<std::string_view> reason = ReadString(r->reason(), kMaxReasonBytes, false, "reason");
  if (!reason.ok()) return reason.status();
  m.reason = *reason;
  if (m.accepted) FEDRT_RETURN_IF_ERROR(ReadBytes(r->server_proof(), &m.server_proof, "server proof"));
  m.current_round = r->current_round();
  m.heartbeat_interval_ms = r->heartbeat_interval_ms();
  m.max_frame_bytes = r->max_frame_bytes();
  return m;
}

// ---- RoundInstructions ----------------------------------------------------------

namespace {

// What Decode enforces of a first chunk's fields, checked by both encoders.
Status CheckInstructions(const RoundInstructionsMessage& m) {
  if (m.payload.index != 0) return Status::Ok();
  if (m.codec_spec.empty()) return InvalidArgument("round instructions need a codec spec");
  if (!IsFinite(m.learning_rate) || m.learning_rate < 0) return InvalidArgument("learning rate must be finite and >= 0");
  const std::string problem = LevelTableProblem(m.level_table, m.level_table_size);
  if (!problem.empty()) return InvalidArgument(problem);
  return Status::Ok();
}

Result<OutFrame> EncodeInstructions(const RoundInstructionsMessage& m, const FrameLimits& limits,
                                    const PayloadFill* fill) {
  FEDRT_RETURN_IF_ERROR(CheckString(m.codec_spec, kMaxCodecSpecBytes, "codec spec"));
  const bool first = m.payload.index == 0;
  FEDRT_RETURN_IF_ERROR(CheckInstructions(m));
  auto b = NewBuilder(m.payload.size + (first ? m.level_table_size * sizeof(float) : 0));
  Result<fb::Offset<wire::Chunk>> chunk = BuildChunk(*b, m.payload, fill, limits);
  if (!chunk.ok()) return chunk.status();
  if (!first) {
    wire::RoundInstructionsBuilder rb(*b);
    rb.add_round_id(m.round_id);
    rb.add_payload(*chunk);
    return Finish(b, wire::Message::RoundInstructions, rb.Finish().Union(), limits);
  }
  auto spec = b->CreateString(m.codec_spec.data(), m.codec_spec.size());
  fb::Offset<fb::Vector<float>> table = 0;
  if (m.level_table_size != 0) table = b->CreateVector(m.level_table, m.level_table_size);
  auto instructions = wire::CreateRoundInstructions(
      *b, m.round_id, static_cast<wire::ModelEncoding>(m.model_encoding), m.model_parameters, spec,
      m.session_seed, m.local_epochs, m.local_steps, m.learning_rate,
      static_cast<wire::AnchorRole>(m.anchor_role), m.level_table_version, table, m.deadline_ms, *chunk);
  return Finish(b, wire::Message::RoundInstructions, instructions.Union(), limits);
}

}  // namespace

Result<OutFrame> Encode(const RoundInstructionsMessage& m, const FrameLimits& limits) {
  return EncodeInstructions(m, limits, nullptr);
}

Result<OutFrame> Encode(const RoundInstructionsMessage& m, const FrameLimits& limits,
                        const PayloadFill& fill) {
  return EncodeInstructions(m, limits, &fill);
}

Result<RoundInstructionsMessage> DecodeRoundInstructions(const Frame& frame, const FrameLimits& limits) {
  Result<const wire::RoundInstructions*> root =
      Root<wire::RoundInstructions>(frame, MessageKind::kRoundInstructions);
  if (!root.ok()) return root.status();
  const wire::RoundInstructions* r = *root;
  RoundInstructionsMessage m;
  m.round_id = r->round_id();
  FEDRT_RETURN_IF_ERROR(ReadChunk(r->payload(), limits, &m.payload));
  if (m.payload.index != 0) return m;  // continuation: round id and payload only
  FEDRT_RETURN_IF_ERROR(ReadEnum(r->model_encoding(), wire::ModelEncoding::MAX, &m.model_encoding, "model encoding"));
  FEDRT_RETURN_IF_ERROR(ReadEnum(r->anchor_role(), wire::AnchorRole::MAX, &m.anchor_role, "anchor role"));
  m.model_parameters = r->model_parameters();
  Result<std::string_view> spec = ReadString(r->codec_spec(), kMaxCodecSpecBytes, true, "codec spec");
  if (!spec.ok()) return spec.status();
  m.codec_spec = *spec;
  m.session_seed = r->session_seed();
  m.local_epochs = r->local_epochs();
  m.local_steps = r->local_steps();
  m.learning_rate = r->learning_rate();
  if (!IsFinite(m.learning_rate) || m.learning_rate < 0) return Wrong("learning rate is not a finite value >= 0");
  m.level_table_version = r->level_table_version();
  if (r->level_table() != nullptr) {
    m.level_table = r->level_table()->data();
    m.level_table_size = r->level_table()->size();
    const std::string problem = LevelTableProblem(m.level_table, m.level_table_size);
    if (!problem.empty()) return Wrong(problem);
  }
  m.deadline_ms = r->deadline_ms();
  return m;
}

// ---- Update ---------------------------------------------------------------------

namespace {

Status CheckUpdate(const UpdateMessage& m) {
  FEDRT_RETURN_IF_ERROR(CheckString(m.codec_spec, kMaxCodecSpecBytes, "codec spec"));
  if (m.payload.index != 0) return Status::Ok();
  if (m.codec_spec.empty()) return InvalidArgument("an update needs a codec spec");
  if (!IsFinite(m.training_loss)) return InvalidArgument("training loss is not finite");
  if (!IsFinite(m.stats.residual_norm)) return InvalidArgument("residual norm is not finite");
  const std::string problem = LevelStatisticsProblem(m.stats.level_statistics);
  if (!problem.empty()) return InvalidArgument(problem);
  return Status::Ok();
}

// The Update table around its chunk (and, in chunk 0, its codec spec), in
// the builder that holds them: the same bytes whether the builder is fresh
// or a FrameSlot's.
fb::Offset<void> BuildUpdate(Builder& b, const UpdateMessage& m, fb::Offset<wire::Chunk> chunk,
                             fb::Offset<fb::String> spec) {
  if (m.payload.index != 0) {
    wire::UpdateBuilder ub(b);
    ub.add_round_id(m.round_id);
    ub.add_payload(chunk);
    return ub.Finish().Union();
  }
  fb::Offset<wire::LevelStatistics> level_statistics = 0;
  const LevelStatisticsMessage& ls = m.stats.level_statistics;
  if (ls.present) {
    auto norms = b.CreateVector(ls.bucket_norms);
    wire::BucketMoments* moments_out = nullptr;
    auto moments = b.CreateUninitializedVectorOfStructs(ls.largest_buckets.size(), &moments_out);
    for (const BucketMomentsMessage& bm : ls.largest_buckets) {
      *moments_out++ = wire::BucketMoments(bm.norm, bm.count, bm.sum, bm.sum_sq);
    }
    level_statistics = wire::CreateLevelStatistics(b, ls.count, ls.sum, ls.sum_sq, norms, moments);
  }
  auto stats = wire::CreateCodecStats(b, m.stats.encoded_bytes, m.stats.raw_bytes, m.stats.wrap_count,
                                      m.stats.residual_norm, m.stats.clipped, level_statistics);
  return wire::CreateUpdate(b, m.round_id, m.num_samples, m.training_loss, spec, m.level_table_version, stats, chunk,
                            m.compute_ms)
      .Union();
}

Result<OutFrame> EncodeUpdate(const UpdateMessage& m, const FrameLimits& limits, const PayloadFill* fill) {
  FEDRT_RETURN_IF_ERROR(CheckUpdate(m));
  auto b = NewBuilder(m.payload.size);
  Result<fb::Offset<wire::Chunk>> chunk = BuildChunk(*b, m.payload, fill, limits);
  if (!chunk.ok()) return chunk.status();
  auto spec = m.payload.index == 0 ? b->CreateString(m.codec_spec.data(), m.codec_spec.size()) : 0;
  return Finish(b, wire::Message::Update, BuildUpdate(*b, m, *chunk, spec), limits);
}

}  // namespace

Result<OutFrame> Encode(const UpdateMessage& m, const FrameLimits& limits) {
  return EncodeUpdate(m, limits, nullptr);
}

Result<OutFrame> Encode(const UpdateMessage& m, const FrameLimits& limits, const PayloadFill& fill) {
  return EncodeUpdate(m, limits, &fill);
}

Result<UpdateMessage> DecodeUpdate(const Frame& frame, const FrameLimits& limits) {
  UpdateMessage m;
  FEDRT_RETURN_IF_ERROR(DecodeUpdate(frame, limits, &m));
  return m;
}

Status DecodeUpdate(const Frame& frame, const FrameLimits& limits, UpdateMessage* out) {
  Result<const wire::Update*> root = Root<wire::Update>(frame, MessageKind::kUpdate);
  if (!root.ok()) return root.status();
  const wire::Update* u = *root;
  // Emptied, keeping the statistics' vectors (and their memory).
  std::vector<float> kept_norms = std::move(out->stats.level_statistics.bucket_norms);
  std::vector<BucketMomentsMessage> kept_moments = std::move(out->stats.level_statistics.largest_buckets);
  kept_norms.clear();
  kept_moments.clear();
  *out = UpdateMessage();
  out->stats.level_statistics.bucket_norms = std::move(kept_norms);
  out->stats.level_statistics.largest_buckets = std::move(kept_moments);
  UpdateMessage& m = *out;
  m.round_id = u->round_id();
  FEDRT_RETURN_IF_ERROR(ReadChunk(u->payload(), limits, &m.payload));
  if (m.payload.index != 0) return Status::Ok();
  m.num_samples = u->num_samples();
  m.training_loss = u->training_loss();
  if (!IsFinite(m.training_loss)) return Wrong("training loss is not finite");
  Result<std::string_view> spec = ReadString(u->codec_spec(), kMaxCodecSpecBytes, true, "codec spec");
  if (!spec.ok()) return spec.status();
  m.codec_spec = *spec;
  m.level_table_version = u->level_table_version();
  m.compute_ms = u->compute_ms();
  if (const wire::CodecStats* s = u->stats()) {
    m.stats.encoded_bytes = s->encoded_bytes();
    m.stats.raw_bytes = s->raw_bytes();
    m.stats.wrap_count = s->wrap_count();
    m.stats.residual_norm = s->residual_norm();
    m.stats.clipped = s->clipped();
    if (!IsFinite(m.stats.residual_norm)) return Wrong("residual norm is not finite");
    if (const wire::LevelStatistics* ls = s->level_statistics()) {
      LevelStatisticsMessage& stats = m.stats.level_statistics;
      stats.present = true;
      stats.count = ls->count();
      stats.sum = ls->sum();
      stats.sum_sq = ls->sum_sq();
      const auto* norms = ls->bucket_norms();
      const auto* moments = ls->largest_buckets();
      if ((norms != nullptr && norms->size() > kMaxLevelStatisticsNorms) ||
          (moments != nullptr && moments->size() > kMaxLevelStatisticsBuckets)) {
        return Wrong("level statistics carry too many buckets");
      }
      // The Verifier checks a vector's length field, not that its structs
      // sit at their alignment: a crafted buffer can put these doubles at
      // 4 mod 8, which is undefined behaviour to read (and faults on ARMv7).
      // A FlatBufferBuilder always aligns them.
      if (moments != nullptr && moments->size() > 0 &&
          reinterpret_cast<std::uintptr_t>(moments->Data()) % alignof(wire::BucketMoments) != 0) {
        return Wrong("level statistics buckets are misaligned");
      }
      if (norms != nullptr) stats.bucket_norms.assign(norms->begin(), norms->end());
      if (moments != nullptr) {
        for (const wire::BucketMoments* bm : *moments) {
          stats.largest_buckets.push_back({bm->norm(), bm->count(), bm->sum(), bm->sum_sq()});
        }
      }
      const std::string problem = LevelStatisticsProblem(stats);
      if (!problem.empty()) return Wrong(problem);
    }
  }
  return Status::Ok();
}

// ---- Ack, Leave, Error, Heartbeat -------------------------------------------------

Result<OutFrame> Encode(const AckMessage& m, const FrameLimits& limits) {
  auto b = NewBuilder(0);
  auto ack = wire::CreateAck(*b, m.round_id, static_cast<wire::MessageKind>(m.acked));
  return Finish(b, wire::Message::Ack, ack.Union(), limits);
}

Result<AckMessage> DecodeAck(const Frame& frame) {
  Result<const wire::Ack*> root = Root<wire::Ack>(frame, MessageKind::kAck);
  if (!root.ok()) return root.status();
  AckMessage m;
  m.round_id = (*root)->round_id();
  FEDRT_RETURN_IF_ERROR(ReadEnum((*root)->acked(), wire::MessageKind::MAX, &m.acked, "acked kind"));
  return m;
}

Result<OutFrame> Encode(const LeaveMessage& m, const FrameLimits& limits) {
  FEDRT_RETURN_IF_ERROR(CheckString(m.reason, kMaxReasonBytes, "reason"));
  auto b = NewBuilder(0);
  auto reason = MaybeString(*b, m.reason);
  return Finish(b, wire::Message::Leave, wire::CreateLeave(*b, reason).Union(), limits);
}

Result<LeaveMessage> DecodeLeave(const Frame& frame) {
  Result<const wire::Leave*> root = Root<wire::Leave>(frame, MessageKind::kLeave);
  if (!root.ok()) return root.status();
  Result<std::string_view> reason = ReadString((*root)->reason(), kMaxReasonBytes, false, "reason");
  if (!reason.ok()) return reason.status();
  LeaveMessage m;
  m.reason = *reason;
  return m;
}

Result<OutFrame> Encode(const ErrorMessage& m, const FrameLimits& limits) {
  if (m.code == StatusCode::kOk) return InvalidArgument("an error message needs an error code");
  FEDRT_RETURN_IF_ERROR(CheckString(m.message, kMaxReasonBytes, "error message"));
  auto b = NewBuilder(0);
  auto text = MaybeString(*b, m.message);
  auto error = wire::CreateError(*b, static_cast<int32_t>(m.code), text);
  return Finish(b, wire::Message::Error, error.Union(), limits);
}

Result<ErrorMessage> DecodeError(const Frame& frame) {
  Result<const wire::Error*> root = Root<wire::Error>(frame, MessageKind::kError);
  if (!root.ok()) return root.status();
  const int32_t code = (*root)->code();
  if (code <= 0) return Wrong(Concat({"error message with code ", code}));
  ErrorMessage m;
  // Codes are only ever appended: one this build does not know is still an error.
  m.code = code <= static_cast<int32_t>(StatusCode::kCancelled) ? static_cast<StatusCode>(code)
                                                                : StatusCode::kInternal;
  Result<std::string_view> text = ReadString((*root)->message(), kMaxReasonBytes, false, "error message");
  if (!text.ok()) return text.status();
  m.message = *text;
  return m;
}

Result<OutFrame> EncodeStatus(const Status& status, const FrameLimits& limits) {
  ErrorMessage m;
  m.code = status.ok() ? StatusCode::kInternal : status.code();
  m.message = status.message();
  if (m.message.size() > kMaxReasonBytes) m.message = m.message.substr(0, kMaxReasonBytes);
  return Encode(m, limits);
}

Status ToStatus(const ErrorMessage& m) { return Status(m.code, std::string(m.message)); }

Result<OutFrame> Encode(const HeartbeatMessage& m, const FrameLimits& limits) {
  auto b = NewBuilder(0);
  return Finish(b, wire::Message::Heartbeat, wire::CreateHeartbeat(*b, m.sequence, m.sent_ns).Union(),
                limits);
}

Result<HeartbeatMessage> DecodeHeartbeat(const Frame& frame) {
  Result<const wire::Heartbeat*> root = Root<wire::Heartbeat>(frame, MessageKind::kHeartbeat);
  if (!root.ok()) return root.status();
  HeartbeatMessage m;
  m.sequence = (*root)->sequence();
  m.sent_ns = (*root)->sent_ns();
  return m;
}

// ---- Peer messages -----------------------------------------------------------------

namespace {

Result<OutFrame> EncodeRing(const RingChunkMessage& m, const FrameLimits& limits, const PayloadFill* fill) {
  FEDRT_RETURN_IF_ERROR(CheckString(m.codec_spec, kMaxCodecSpecBytes, "codec spec"));
  auto b = NewBuilder(m.payload.size);
  Result<fb::Offset<wire::Chunk>> chunk = BuildChunk(*b, m.payload, fill, limits);
  if (!chunk.ok()) return chunk.status();
  auto spec = MaybeString(*b, m.codec_spec);
  auto ring = wire::CreateRingChunk(*b, m.collective_id, m.step, static_cast<wire::RingPhase>(m.phase),
                                    m.source_rank, m.segment, spec, *chunk);
  return Finish(b, wire::Message::RingChunk, ring.Union(), limits);
}

Result<OutFrame> EncodeGossip(const GossipModelMessage& m, const FrameLimits& limits,
                              const PayloadFill* fill) {
  FEDRT_RETURN_IF_ERROR(CheckString(m.codec_spec, kMaxCodecSpecBytes, "codec spec"));
  auto b = NewBuilder(m.payload.size);
  Result<fb::Offset<wire::Chunk>> chunk = BuildChunk(*b, m.payload, fill, limits);
  if (!chunk.ok()) return chunk.status();
  auto spec = MaybeString(*b, m.codec_spec);
  auto gossip = wire::CreateGossipModel(*b, m.step, m.source_rank, spec, m.wrap_count, *chunk);
  return Finish(b, wire::Message::GossipModel, gossip.Union(), limits);
}

}  // namespace

namespace {

// A builder's memory in caller storage: the first allocation that fits is
// the storage, any other comes from the heap (a frame larger than the slot
// was sized for still builds).
class StorageAllocator final : public fb::Allocator {
 public:
  StorageAllocator(void* storage, std::size_t size) : storage_(static_cast<uint8_t*>(storage)), size_(size) {}
  uint8_t* allocate(std::size_t size) override {
    if (!in_use_ && storage_ != nullptr && size <= size_) {
      in_use_ = true;
      return storage_;
    }
    return new uint8_t[size];
  }
  void deallocate(uint8_t* p, std::size_t) override {
    if (p == storage_) {
      in_use_ = false;
    } else {
      delete[] p;
    }
  }

 private:
  uint8_t* storage_;
  std::size_t size_;
  bool in_use_ = false;
};

// The builder asks for its whole storage at once (a multiple of its
// alignment, so the request is exactly the storage).
constexpr std::size_t kSlotStorageAlignment = 8;

}  // namespace

struct FrameSlot::Impl {
  Impl() : builder(1024) {}
  Impl(void* storage, std::size_t size)
      : allocator(storage, size / kSlotStorageAlignment * kSlotStorageAlignment),
        builder(size / kSlotStorageAlignment * kSlotStorageAlignment, &allocator) {}
  StorageAllocator allocator{nullptr, 0};  // the slot's storage (none: the heap)
  Builder builder;
};

std::size_t FrameSlotStorageBytes(std::size_t chunk_bytes) {
  const std::size_t bytes = chunk_bytes + kChunkOverheadBytes;
  return (bytes + kSlotStorageAlignment - 1) / kSlotStorageAlignment * kSlotStorageAlignment;
}

FrameSlot::FrameSlot() : impl_(std::make_shared<Impl>()) {}

FrameSlot::FrameSlot(void* storage, std::size_t size) : impl_(std::make_shared<Impl>(storage, size)) {}

FrameSlot::FrameSlot(std::size_t reserve_bytes) : impl_(std::make_shared<Impl>()) {
  // The builder's memory is made now, not by the first frame.
  uint8_t* unused = nullptr;
  impl_->builder.CreateUninitializedVector(reserve_bytes, 1, &unused);
  impl_->builder.Clear();
}
FrameSlot::~FrameSlot() = default;

bool FrameSlot::busy() const {
  if (impl_.use_count() > 1) return true;
  // Pairs with the release of the last frame copy on a connection's thread:
  // that thread's last reads of the frame happen before our next writes.
  std::atomic_thread_fence(std::memory_order_acquire);
  return false;
}

namespace {

// Builds a message in `slot`: `build(builder, chunk, spec)` creates the
// message table around the chunk (none when `payload` is null) and the codec
// spec string.
template <typename Build>
Result<OutFrame> EncodeInSlot(FrameSlot& slot, PayloadMode mode, const ChunkView* payload,
                              std::string_view codec_spec, wire::Message type, const FrameLimits& limits,
                              Build build) {
  if (slot.busy()) return Status(StatusCode::kFailedPrecondition, "frame slot still in use");
  FEDRT_RETURN_IF_ERROR(CheckString(codec_spec, kMaxCodecSpecBytes, "codec spec"));
  Builder& b = internal::ImplAccess::Of(slot).builder;
  b.Clear();
  const bool borrow = payload != nullptr && mode == PayloadMode::kBorrow && payload->size != 0;
  std::size_t from_end = 0;
  fb::Offset<wire::Chunk> chunk = 0;
  if (payload != nullptr) {
    Result<fb::Offset<wire::Chunk>> built = BuildChunk(b, *payload, nullptr, limits, borrow ? &from_end : nullptr);
    if (!built.ok()) return built.status();
    chunk = *built;
  }
  auto spec = MaybeString(b, codec_spec);
  auto envelope = wire::CreateEnvelope(b, wire::ProtocolVersion::Current, type, build(b, chunk, spec));
  wire::FinishEnvelopeBuffer(b, envelope);
  const std::size_t size = b.GetSize();
  const auto kind = static_cast<MessageKind>(type);
  if (size > limits.max_frame_bytes) {
    return Status(StatusCode::kResourceExhausted, Concat({MessageKindName(kind), " frame of ", size,
                                                          " bytes exceeds the limit of ",
                                                          limits.max_frame_bytes}));
  }
  const uint8_t* body = b.GetBufferPointer();
  std::shared_ptr<const void> owner = internal::ImplAccess::Shared(slot);
  if (!borrow) return OutFrame(std::move(owner), body, static_cast<uint32_t>(size), kind);
  const std::size_t head = size - from_end;
  const std::size_t tail = from_end - payload->size;
  return OutFrame(std::move(owner), {body, static_cast<uint32_t>(head)},
                  {payload->data, static_cast<uint32_t>(payload->size)},
                  {body + head + payload->size, static_cast<uint32_t>(tail)}, kind);
}

}  // namespace

Result<OutFrame> Encode(const RingChunkMessage& m, const FrameLimits& limits, FrameSlot& slot,
                        PayloadMode mode) {
  return EncodeInSlot(slot, mode, &m.payload, m.codec_spec, wire::Message::RingChunk, limits,
                      [&](Builder& b, fb::Offset<wire::Chunk> chunk, fb::Offset<fb::String> spec) {
                        return wire::CreateRingChunk(b, m.collective_id, m.step,
                                                     static_cast<wire::RingPhase>(m.phase), m.source_rank,
                                                     m.segment, spec, chunk)
                            .Union();
                      });
}

Result<OutFrame> Encode(const GossipModelMessage& m, const FrameLimits& limits, FrameSlot& slot,
                        PayloadMode mode) {
  return EncodeInSlot(slot, mode, &m.payload, m.codec_spec, wire::Message::GossipModel, limits,
                      [&](Builder& b, fb::Offset<wire::Chunk> chunk, fb::Offset<fb::String> spec) {
                        return wire::CreateGossipModel(b, m.step, m.source_rank, spec, m.wrap_count, chunk)
                            .Union();
                      });
}

Result<OutFrame> Encode(const UpdateMessage& m, const FrameLimits& limits, FrameSlot& slot, PayloadMode mode) {
  FEDRT_RETURN_IF_ERROR(CheckUpdate(m));
  const std::string_view spec = m.payload.index == 0 ? std::string_view(m.codec_spec) : std::string_view();
  return EncodeInSlot(slot, mode, &m.payload, spec, wire::Message::Update, limits,
                      [&](Builder& b, fb::Offset<wire::Chunk> chunk, fb::Offset<fb::String> spec_string) {
                        return BuildUpdate(b, m, chunk, spec_string);
                      });
}

Result<OutFrame> Encode(const RoundInstructionsMessage& m, const FrameLimits& limits, FrameSlot& slot,
                        PayloadMode mode) {
  const bool first = m.payload.index == 0;
  FEDRT_RETURN_IF_ERROR(CheckInstructions(m));
  // Built in the order EncodeInstructions builds: chunk, spec, table, table
  // of fields, so the bytes are the same.
  return EncodeInSlot(slot, mode, &m.payload, first ? m.codec_spec : std::string_view(),
                      wire::Message::RoundInstructions, limits,
                      [&](Builder& b, fb::Offset<wire::Chunk> chunk, fb::Offset<fb::String> spec) {
                        if (!first) {
                          wire::RoundInstructionsBuilder rb(b);
                          rb.add_round_id(m.round_id);
                          rb.add_payload(chunk);
                          return rb.Finish().Union();
                        }
                        fb::Offset<fb::Vector<float>> table = 0;
                        if (m.level_table_size != 0) table = b.CreateVector(m.level_table, m.level_table_size);
                        return wire::CreateRoundInstructions(
                                   b, m.round_id, static_cast<wire::ModelEncoding>(m.model_encoding),
                                   m.model_parameters, spec, m.session_seed, m.local_epochs, m.local_steps,
                                   m.learning_rate, static_cast<wire::AnchorRole>(m.anchor_role),
                                   m.level_table_version, table, m.deadline_ms, chunk)
                            .Union();
                      });
}

Result<OutFrame> Encode(const AckMessage& m, const FrameLimits& limits, FrameSlot& slot) {
  return EncodeInSlot(slot, PayloadMode::kCopy, nullptr, std::string_view(), wire::Message::Ack, limits,
                      [&](Builder& b, fb::Offset<wire::Chunk>, fb::Offset<fb::String>) {
                        return wire::CreateAck(b, m.round_id, static_cast<wire::MessageKind>(m.acked)).Union();
                      });
}

Result<OutFrame> Encode(const RingChunkMessage& m, const FrameLimits& limits) {
  return EncodeRing(m, limits, nullptr);
}
Result<OutFrame> Encode(const RingChunkMessage& m, const FrameLimits& limits, const PayloadFill& fill) {
  return EncodeRing(m, limits, &fill);
}
Result<OutFrame> Encode(const GossipModelMessage& m, const FrameLimits& limits) {
  return EncodeGossip(m, limits, nullptr);
}
Result<OutFrame> Encode(const GossipModelMessage& m, const FrameLimits& limits,
                        const PayloadFill& fill) {
  return EncodeGossip(m, limits, &fill);
}

namespace {
Status ReadRingChunk(const wire::RingChunk* r, const FrameLimits& limits, RingChunkMessage* m) {
  m->collective_id = r->collective_id();
  m->step = r->step();
  FEDRT_RETURN_IF_ERROR(ReadEnum(r->phase(), wire::RingPhase::MAX, &m->phase, "ring phase"));
  m->source_rank = r->source_rank();
  m->segment = r->segment();
  Result<std::string_view> spec = ReadString(r->codec_spec(), kMaxCodecSpecBytes, false, "codec spec");
  if (!spec.ok()) return spec.status();
  m->codec_spec = *spec;
  return ReadChunk(r->payload(), limits, &m->payload);
}
}  // namespace

Result<RingChunkMessage> DecodeRingChunk(const Frame& frame, const FrameLimits& limits) {
  Result<const wire::RingChunk*> root = Root<wire::RingChunk>(frame, MessageKind::kRingChunk);
  if (!root.ok()) return root.status();
  RingChunkMessage m;
  FEDRT_RETURN_IF_ERROR(ReadRingChunk(*root, limits, &m));
  if (frame.placed_payload() != nullptr) {
    // The connection received these bytes elsewhere; the body's copy of
    // them was never written.
    if (m.payload.data != frame.data() + frame.placed_offset() || m.payload.size != frame.placed_size()) {
      return Wrong("ring chunk payload is not where its head said");
    }
    m.payload.data = frame.placed_payload();
  } else if (frame.payload_consumed()) {
    // Handed to the handler piece by piece: the bytes are nowhere to read.
    if (m.payload.data != frame.data() + frame.placed_offset() || m.payload.size != frame.placed_size()) {
      return Wrong("ring chunk payload is not where its head said");
    }
    m.payload.data = nullptr;
  }
  return m;
}

Result<PayloadHead> PeekPayloadHead(const uint8_t* body, std::size_t size, std::size_t received,
                                    const FrameLimits& limits, std::size_t* payload_offset) {
  if (size < 8 || received < 8 || received > size || size > limits.max_frame_bytes ||
      !wire::EnvelopeBufferHasIdentifier(body)) {
    return Corrupt("not a fedrt frame");
  }
  // Every byte the verifier reads of a well-formed ring chunk lies before its
  // payload (the builder writes the payload vector first, at the end). Bytes
  // not received yet are stale buffer contents: a malformed frame can only
  // make this peek fail or mislead it about the sender's own chunk, and the
  // whole frame is verified again once it has arrived.
  flatbuffers::Verifier::Options options;
  options.max_depth = 16;
  options.max_tables = 4096;
  flatbuffers::Verifier verifier(body, size, options);
  if (!wire::VerifyEnvelopeBuffer(verifier)) return Corrupt("frame head failed FlatBuffers verification");
  const wire::Envelope* envelope = wire::GetEnvelope(body);
  if (static_cast<uint16_t>(envelope->version()) != kProtocolVersion ||
      envelope->message_type() != wire::Message::RingChunk || envelope->message() == nullptr) {
    return Status(StatusCode::kFailedPrecondition, "not a ring chunk");
  }
  RingChunkMessage m;
  FEDRT_RETURN_IF_ERROR(ReadRingChunk(static_cast<const wire::RingChunk*>(envelope->message()), limits, &m));
  if (!m.codec_spec.empty()) return Status(StatusCode::kFailedPrecondition, "not a raw ring chunk");
  const std::size_t offset = static_cast<std::size_t>(m.payload.data - body);
  if (m.payload.data == nullptr || offset > received || offset + m.payload.size > size) {
    return Status(StatusCode::kFailedPrecondition, "payload not after the head");
  }
  *payload_offset = offset;
  PayloadHead head;
  head.kind = MessageKind::kRingChunk;
  head.tag = m.collective_id;
  head.stage = static_cast<uint32_t>(m.phase);
  head.source = m.source_rank;
  head.step = m.step;
  head.segment = m.segment;
  head.index = m.payload.index;
  head.offset = m.payload.offset;
  head.size = m.payload.size;
  return head;
}

Result<GossipModelMessage> DecodeGossipModel(const Frame& frame, const FrameLimits& limits) {
  Result<const wire::GossipModel*> root = Root<wire::GossipModel>(frame, MessageKind::kGossipModel);
  if (!root.ok()) return root.status();
  const wire::GossipModel* g = *root;
  GossipModelMessage m;
  m.step = g->step();
  m.source_rank = g->source_rank();
  Result<std::string_view> spec = ReadString(g->codec_spec(), kMaxCodecSpecBytes, false, "codec spec");
  if (!spec.ok()) return spec.status();
  m.codec_spec = *spec;
  m.wrap_count = g->wrap_count();
  FEDRT_RETURN_IF_ERROR(ReadChunk(g->payload(), limits, &m.payload));
  return m;
}

}  // namespace transport
}  // namespace fedrt
