// Protocol messages as plain C++ values, and their encoding into frames.
//
// Each message of the schema (transport/schema/fedrt.fbs) has a struct here,
// an Encode function that builds an OutFrame, and a Decode function that reads
// a verified Frame. The structs are views: strings are std::string_view and
// payloads are pointer + size.
//   - Encoding: the views point at the caller's data and are read during the
//     call only. Payload bytes are copied once, straight into the frame (the
//     FlatBuffer vector is created uninitialised and filled in place), or are
//     written there by the caller's PayloadFill, so a large update is never
//     staged in an intermediate buffer.
//   - Decoding: the views point into the Frame and live as long as it does.
//     Decode applies the semantic checks of the protocol (required fields,
//     string lengths, nonce sizes, chunk fields consistent, finite floats,
//     enum values in range) and returns kCorrupt with a reason otherwise.
//     Checks that need the session (model size, codec known, round current)
//     belong to the role that holds the session.
//
// Messages that carry a large payload (RoundInstructions, Update, RingChunk,
// GossipModel) carry it as chunks (chunking.h): chunk 0 carries every field,
// later chunks only the identifying fields and the payload.
//
// Thread-safety: free functions on values; safe from any thread.
#ifndef FEDRT_TRANSPORT_MESSAGES_H_
#define FEDRT_TRANSPORT_MESSAGES_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/transport/frame.h"

namespace fedrt {
namespace transport {

namespace internal {
struct ImplAccess;  // the transport library's own sources reach Impl through it
}  // namespace internal

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kMacBytes = 32;
inline constexpr std::size_t kMaxDeviceIdBytes = 64;
inline constexpr std::size_t kMaxCodecSpecBytes = 256;
inline constexpr std::size_t kMaxCodecNameBytes = 64;
inline constexpr std::size_t kMaxCodecs = 64;
inline constexpr std::size_t kMaxIsaBytes = 16;
inline constexpr std::size_t kMaxReasonBytes = 1024;
// A Leave whose reason starts with this is a redirect, not the end of the
// training: the rest is HOST:PORT of the aggregator rank that serves the
// device (an aggregator tier, transport/README.md "Star protocol"); the
// device joins there instead.
inline constexpr const char kRedirectPrefix[] = "redirect ";
inline constexpr std::size_t kMaxLevelTableSize = 4096;
// Bounds of LevelStatisticsMessage (fedrt::kMaxBucketNorms and
// fedrt::kMaxMixtureBuckets of the codecs).
inline constexpr std::size_t kMaxLevelStatisticsNorms = 1024;
inline constexpr std::size_t kMaxLevelStatisticsBuckets = 64;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// One chunk of a payload (chunking.h has the rules that tie chunks together).
struct ChunkView {
  uint32_t index = 0;
  uint32_t count = 1;
  uint64_t total_size = 0;
  uint64_t offset = 0;
  const uint8_t* data = nullptr;  // encode: may be null when a PayloadFill writes it
  std::size_t size = 0;
};

// Writes exactly `size` payload bytes at `destination`, inside the frame
// being built. Called once, synchronously, during Encode.
using PayloadFill = std::function<void(uint8_t* destination, std::size_t size)>;

struct JoinMessage {
  uint16_t protocol_version = kProtocolVersion;
  std::string_view device_id;          // 1..64 of [A-Za-z0-9._-]
  std::vector<std::string_view> codecs;
  std::string_view isa;
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
  Nonce client_nonce{};
  uint64_t resume_round = 0;
  int64_t model_round = -1;  // round of the global model the device holds, -1 none
};

struct ChallengeMessage {
  Nonce server_nonce{};
};

struct AuthenticateMessage {
  Mac proof{};
};

struct JoinResponseMessage {
  bool accepted = false;
  std::string_view reason;
  Mac server_proof{};  // meaningful when accepted
  uint64_t current_round = 0;
  uint32_t heartbeat_interval_ms = 0;
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
};

enum class ModelEncoding : uint8_t { kFullModelFp32 = 0, kCompressedDelta = 1, kCompressedModel = 2 };
enum class AnchorRole : uint8_t { kNone = 0, kAnchor = 1, kNested = 2 };

struct RoundInstructionsMessage {
  uint64_t round_id = 0;
  ModelEncoding model_encoding = ModelEncoding::kFullModelFp32;
  uint64_t model_parameters = 0;
  std::string_view codec_spec;  // required in chunk 0
  uint64_t session_seed = 0;
  uint32_t local_epochs = 1;
  uint32_t local_steps = 0;
  float learning_rate = 0.0f;
  AnchorRole anchor_role = AnchorRole::kNone;
  uint32_t level_table_version = 0;
  const float* level_table = nullptr;  // non-decreasing, finite
  std::size_t level_table_size = 0;
  uint32_t deadline_ms = 0;
  ChunkView payload;
};

// ALQ / AMQ sufficient statistics (fedrt::LevelStatistics, copied: they are
// small). Decode checks sizes and that every value is finite and >= 0; the
// statistics' own invariants are the aggregator's to check.
struct BucketMomentsMessage {
  float norm = 0.0f;
  double count = 0;
  double sum = 0;
  double sum_sq = 0;
};

struct LevelStatisticsMessage {
  bool present = false;  // false: the update carries none
  double count = 0;
  double sum = 0;
  double sum_sq = 0;
  std::vector<float> bucket_norms;                   // <= kMaxLevelStatisticsNorms
  std::vector<BucketMomentsMessage> largest_buckets;  // <= kMaxLevelStatisticsBuckets
};

struct CodecStatsMessage {
  uint64_t encoded_bytes = 0;
  uint64_t raw_bytes = 0;
  uint64_t wrap_count = 0;
  float residual_norm = 0.0f;
  uint64_t clipped = 0;
  LevelStatisticsMessage level_statistics;
};

struct UpdateMessage {
  uint64_t round_id = 0;
  uint64_t num_samples = 0;
  float training_loss = 0.0f;  // finite
  std::string_view codec_spec;  // required in chunk 0
  uint32_t level_table_version = 0;
  CodecStatsMessage stats;
  ChunkView payload;
  // Chunk 0: how long the device trained and encoded (0: not measured), so
  // the aggregator can split a round's time into download, compute, upload.
  uint32_t compute_ms = 0;
};

struct AckMessage {
  uint64_t round_id = 0;
  MessageKind acked = MessageKind::kNone;
};

struct LeaveMessage {
  std::string_view reason;
};

struct ErrorMessage {
  StatusCode code = StatusCode::kInternal;  // never kOk
  std::string_view message;
};

struct HeartbeatMessage {
  uint64_t sequence = 0;
  uint64_t sent_ns = 0;
};

enum class RingPhase : uint8_t { kReduceScatter = 0, kAllGather = 1, kIndexBroadcast = 2 };

struct RingChunkMessage {
  uint64_t collective_id = 0;
  uint32_t step = 0;
  RingPhase phase = RingPhase::kReduceScatter;
  uint32_t source_rank = 0;
  uint32_t segment = 0;
  std::string_view codec_spec;  // empty: raw fp32
  ChunkView payload;
};

struct GossipModelMessage {
  uint64_t step = 0;
  uint32_t source_rank = 0;
  std::string_view codec_spec;
  uint64_t wrap_count = 0;
  ChunkView payload;
};

// Encoders. kInvalidArgument when a field breaks the rules Decode enforces, or
// kResourceExhausted when the frame would exceed limits.max_frame_bytes.
// For chunked messages, payload.data (payload.size bytes) is copied in place;
// the overloads with a PayloadFill let the caller write the bytes instead.
Result<OutFrame> Encode(const JoinMessage& m, const FrameLimits& limits);
Result<OutFrame> Encode(const ChallengeMessage& m, const FrameLimits& limits);
Result<OutFrame> Encode(const AuthenticateMessage& m, const FrameLimits& limits);
Result<OutFrame> Encode(const JoinResponseMessage& m, const FrameLimits& limits);
Result<OutFrame> Encode(const RoundInstructionsMessage& m, const FrameLimits& limits);
Result<OutFrame> Encode(const RoundInstructionsMessage& m, const FrameLimits& limits,
                        const PayloadFill& fill);
Result<OutFrame> Encode(const UpdateMessage& m, const FrameLimits& limits);
Result<OutFrame> Encode(const UpdateMessage& m, const FrameLimits& limits, const PayloadFill& fill);
Result<OutFrame> Encode(const AckMessage& m, const FrameLimits& limits);
Result<OutFrame> Encode(const LeaveMessage& m, const FrameLimits& limits);
Result<OutFrame> Encode(const ErrorMessage& m, const FrameLimits& limits);
Result<OutFrame> Encode(const HeartbeatMessage& m, const FrameLimits& limits);
Result<OutFrame> Encode(const RingChunkMessage& m, const FrameLimits& limits);
Result<OutFrame> Encode(const RingChunkMessage& m, const FrameLimits& limits, const PayloadFill& fill);
Result<OutFrame> Encode(const GossipModelMessage& m, const FrameLimits& limits);
Result<OutFrame> Encode(const GossipModelMessage& m, const FrameLimits& limits,
                        const PayloadFill& fill);

// Reusable encoding storage for ring, gossip and update chunks, so a collective's steady state
// allocates nothing per chunk: the FlatBuffer is built in memory kept from one
// frame to the next. A slot holds one frame at a time and is busy() while any
// copy of the frame encoded last is alive (queued on a connection or being
// written); a connection releases its copy once the bytes are in the socket
// (ConnectionHandler::OnSent) or when it closes.
// Thread-safety: one thread encodes and asks busy(); connections release the
// frame on their loop thread.
class FrameSlot {
 public:
  FrameSlot();
  // With `reserve_bytes` of building memory made at once (frames up to about
  // that size then allocate nothing, the first one included).
  explicit FrameSlot(std::size_t reserve_bytes);
  // Building in the caller's `storage` (`size` bytes, FrameSlotStorageBytes
  // for the largest chunk it will hold): frames that fit allocate no
  // building memory; a larger one builds on the heap. The storage must stay
  // valid while the slot or any copy of its frame is alive (a frame still
  // queued on a connection reads it).
  FrameSlot(void* storage, std::size_t size);
  ~FrameSlot();
  FrameSlot(const FrameSlot&) = delete;
  FrameSlot& operator=(const FrameSlot&) = delete;
  bool busy() const;


  struct Impl;  // defined in the library's sources; reached only through internal::ImplAccess

 private:
  friend struct internal::ImplAccess;
  std::shared_ptr<Impl> impl_;
};

// The storage a FrameSlot(storage, size) needs to build, in place, any frame
// whose chunk carries up to `chunk_bytes` of payload (the frame's fields and
// the builder's working room included: kChunkOverheadBytes).
std::size_t FrameSlotStorageBytes(std::size_t chunk_bytes);

enum class PayloadMode : uint8_t {
  kCopy,    // payload.data is copied into the slot's frame
  kBorrow,  // the frame points at payload.data: those bytes must stay
            // unchanged until the slot is no longer busy()
};

// Encodes a ring chunk or a gossip model chunk in `slot` (kFailedPrecondition
// when it is busy). The frame's bytes are identical to Encode(m, limits)'s.
Result<OutFrame> Encode(const RingChunkMessage& m, const FrameLimits& limits, FrameSlot& slot,
                        PayloadMode mode);
Result<OutFrame> Encode(const GossipModelMessage& m, const FrameLimits& limits, FrameSlot& slot,
                        PayloadMode mode);
// An update chunk and an ack in `slot`, for a device that allocates nothing
// per round (EncodeChunked over slots); bytes as Encode(m, limits)'s.
Result<OutFrame> Encode(const UpdateMessage& m, const FrameLimits& limits, FrameSlot& slot, PayloadMode mode);
Result<OutFrame> Encode(const AckMessage& m, const FrameLimits& limits, FrameSlot& slot);
// A round instructions chunk in `slot`, for an aggregator that allocates
// nothing per round; bytes as Encode(m, limits)'s.
Result<OutFrame> Encode(const RoundInstructionsMessage& m, const FrameLimits& limits, FrameSlot& slot,
                        PayloadMode mode);

// Decoders: kFailedPrecondition when the frame holds another kind of message,
// kCorrupt when a semantic check fails. `limits` bounds chunk total sizes.
Result<JoinMessage> DecodeJoin(const Frame& frame);
Result<ChallengeMessage> DecodeChallenge(const Frame& frame);
Result<AuthenticateMessage> DecodeAuthenticate(const Frame& frame);
Result<JoinResponseMessage> DecodeJoinResponse(const Frame& frame);
Result<RoundInstructionsMessage> DecodeRoundInstructions(const Frame& frame, const FrameLimits& limits);
Result<UpdateMessage> DecodeUpdate(const Frame& frame, const FrameLimits& limits);
// The same into *out (overwritten), keeping its level statistics' vectors:
// with room for kMaxLevelStatisticsNorms and kMaxLevelStatisticsBuckets it
// allocates nothing (the aggregator decodes every update frame into one).
Status DecodeUpdate(const Frame& frame, const FrameLimits& limits, UpdateMessage* out);
Result<AckMessage> DecodeAck(const Frame& frame);
Result<LeaveMessage> DecodeLeave(const Frame& frame);
Result<ErrorMessage> DecodeError(const Frame& frame);
Result<HeartbeatMessage> DecodeHeartbeat(const Frame& frame);
Result<RingChunkMessage> DecodeRingChunk(const Frame& frame, const FrameLimits& limits);
Result<GossipModelMessage> DecodeGossipModel(const Frame& frame, const FrameLimits& limits);

// The Error message for a Status (code and message, truncated to fit).
Result<OutFrame> EncodeStatus(const Status& status, const FrameLimits& limits);
// The Status an Error message carries.
Status ToStatus(const ErrorMessage& m);

// True when `id` is a valid device id (1..64 of [A-Za-z0-9._-]).
bool IsValidDeviceId(std::string_view id);

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_MESSAGES_H_
