// The join, sans-IO (contract in join.h).
#include "fedrt/transport/join.h"

#include <utility>

namespace fedrt {
namespace transport {
namespace {

// An Error frame from the other side ends the join with what it says.
Status ErrorFrameStatus(const Frame& frame) {
  Result<ErrorMessage> error = DecodeError(frame);
  return error.ok() ? ToStatus(*error) : error.status();
}

Status Unexpected(const Frame& frame, const char* expected) {
  return Corrupt(std::string("expected ") + expected + " during the join, got " + MessageKindName(frame.kind()));
}

}  // namespace

// ---- Client -------------------------------------------------------------------

JoinClient::JoinClient(std::string device_id, Key key, Crypto& crypto, const FrameLimits& limits)
    : handshake_(std::move(device_id), std::move(key), crypto), limits_(limits) {}

Result<OutFrame> JoinClient::Start(const JoinRequest& request) {
  if (started_) return Status(StatusCode::kFailedPrecondition, "the join was started already");
  started_ = true;
  Result<JoinMessage> join = handshake_.Start();
  if (!join.ok()) {
    failed_ = true;
    return join.status();
  }
  for (const std::string& name : request.codecs) join->codecs.push_back(name);
  join->isa = request.isa;
  join->max_frame_bytes = request.max_frame_bytes;
  join->resume_round = request.resume_round;
  join->model_round = request.model_round;
  return Encode(*join, limits_);
}

Result<OutFrame> JoinClient::OnFrame(const Frame& frame) {
  if (!started_ || done_ || failed_) {
    return Status(StatusCode::kFailedPrecondition, "no join in progress");
  }
  // Any error below spends the join; only the successful steps clear this.
  failed_ = true;
  if (frame.kind() == MessageKind::kError) return ErrorFrameStatus(frame);
  if (frame.kind() == MessageKind::kChallenge) {
    Result<ChallengeMessage> challenge = DecodeChallenge(frame);
    if (!challenge.ok()) return challenge.status();
    Result<AuthenticateMessage> proof = handshake_.OnChallenge(*challenge);
    if (!proof.ok()) return proof.status();
    Result<OutFrame> out = Encode(*proof, limits_);
    if (out.ok()) failed_ = false;
    return out;
  }
  if (frame.kind() == MessageKind::kJoinResponse) {
    Result<JoinResponseMessage> response = DecodeJoinResponse(frame);
    if (!response.ok()) return response.status();
    FEDRT_RETURN_IF_ERROR(handshake_.OnJoinResponse(*response));
    result_.current_round = response->current_round;
    result_.heartbeat_interval_ms = response->heartbeat_interval_ms;
    result_.max_frame_bytes = response->max_frame_bytes;
    failed_ = false;
    done_ = true;
    return OutFrame();
  }
  return Unexpected(frame, "a challenge or a join response");
}

// ---- Server -------------------------------------------------------------------

JoinServer::JoinServer(const KeyStore& keys, Crypto& crypto, const FrameLimits& limits)
    : handshake_(keys, crypto), limits_(limits) {}

Result<OutFrame> JoinServer::OnFrame(const Frame& frame, const JoinResult& result) {
  if (failed_ || done()) return Status(StatusCode::kFailedPrecondition, "no join in progress");
  failed_ = true;
  if (frame.kind() == MessageKind::kJoin && !announced_) {
    Result<JoinMessage> join = DecodeJoin(frame);
    if (!join.ok()) return join.status();
    Result<ChallengeMessage> challenge = handshake_.OnJoin(*join);
    if (!challenge.ok()) return challenge.status();
    announcement_.device_id = std::string(join->device_id);
    announcement_.resume_round = join->resume_round;
    announcement_.model_round = join->model_round;
    announcement_.max_frame_bytes = join->max_frame_bytes;
    announced_ = true;
    Result<OutFrame> out = Encode(*challenge, limits_);
    if (out.ok()) failed_ = false;
    return out;
  }
  if (frame.kind() == MessageKind::kAuthenticate && announced_) {
    Result<AuthenticateMessage> auth = DecodeAuthenticate(frame);
    if (!auth.ok()) return auth.status();
    Result<JoinResponseMessage> response = handshake_.OnAuthenticate(*auth);
    if (!response.ok()) return response.status();
    response->current_round = result.current_round;
    response->heartbeat_interval_ms = result.heartbeat_interval_ms;
    response->max_frame_bytes = result.max_frame_bytes;
    Result<OutFrame> out = Encode(*response, limits_);
    if (out.ok()) failed_ = false;
    return out;
  }
  return Status(StatusCode::kUnauthenticated,
                std::string(MessageKindName(frame.kind())) + " before the join completed");
}

}  // namespace transport
}  // namespace fedrt
