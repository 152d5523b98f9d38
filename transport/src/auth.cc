// Key files and the join challenge-response (protocol in auth.h).
#include "fedrt/transport/auth.h"

#include <string>

#include "file_text.h"
#include "fedrt/platform/concat.h"

namespace fedrt {
namespace transport {
namespace {

constexpr std::string_view kTranscriptLabel = "fedrt-join-v1";

Status Refused(const char* why) { return Status(StatusCode::kUnauthenticated, why); }

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<KeyStore> KeyStore::Parse(std::string_view text, std::string_view origin) {
  KeyStore store;
  std::size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const std::size_t end = text.find('\n');
    std::string_view line = Trim(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (line.empty() || line.front() == '#') continue;
    const auto where = [&](const std::string& what) {
      return Corrupt(Concat({origin, ":", line_number, ": ", what}));
    };
    std::size_t split = 0;
    while (split < line.size() && !IsSpace(line[split])) ++split;
    const std::string_view id = line.substr(0, split);
    const std::string_view hex = Trim(line.substr(split));
    if (!IsValidDeviceId(id)) return where("invalid device id");
    if (hex.empty()) return where("missing key after the device id");
    if (hex.size() % 2 != 0 || hex.size() < 2 * kMinKeyBytes || hex.size() > 2 * kMaxKeyBytes) {
      return where(Concat({"key must be ", 2 * kMinKeyBytes, " to ", 2 * kMaxKeyBytes,
                           " hexadecimal digits (an even number)"}));
    }
    Key key(hex.size() / 2);
    for (std::size_t i = 0; i < key.size(); ++i) {
      const int high = HexDigit(hex[2 * i]);
      const int low = HexDigit(hex[2 * i + 1]);
      if (high < 0 || low < 0) return where("key has a character that is not a hexadecimal digit");
      key[i] = static_cast<uint8_t>(high * 16 + low);
    }
    if (!store.keys_.emplace(std::string(id), std::move(key)).second) {
      return where("device id '" + std::string(id) + "' appears twice");
    }
  }
  return store;
}

Result<KeyStore> KeyStore::LoadFile(const std::string& path) {
  Result<std::string> text = ReadFileText(path, "key file", /*secret=*/true, std::size_t{1} << 24);
  if (!text.ok()) return text.status();
  return Parse(*text, path);
}

const Key* KeyStore::Find(std::string_view device_id) const {
  auto it = keys_.find(device_id);
  return it == keys_.end() ? nullptr : &it->second;
}

const std::string* KeyStore::SingleDeviceId() const {
  return keys_.size() == 1 ? &keys_.begin()->first : nullptr;
}

Result<Mac> JoinProof(Crypto& crypto, const Key& key, std::string_view role, uint16_t version,
                      std::string_view device_id, const Nonce& client_nonce, const Nonce& server_nonce) {
  if (device_id.size() > kMaxDeviceIdBytes) return InvalidArgument("device id too long");
  std::vector<uint8_t> transcript;
  transcript.reserve(kTranscriptLabel.size() + role.size() + 5 + device_id.size() + 2 * kNonceBytes);
  transcript.insert(transcript.end(), kTranscriptLabel.begin(), kTranscriptLabel.end());
  transcript.push_back(0);
  transcript.insert(transcript.end(), role.begin(), role.end());
  transcript.push_back(0);
  transcript.push_back(static_cast<uint8_t>(version));
  transcript.push_back(static_cast<uint8_t>(version >> 8));
  transcript.push_back(static_cast<uint8_t>(device_id.size()));
  transcript.insert(transcript.end(), device_id.begin(), device_id.end());
  transcript.insert(transcript.end(), client_nonce.begin(), client_nonce.end());
  transcript.insert(transcript.end(), server_nonce.begin(), server_nonce.end());
  Mac mac{};
  FEDRT_RETURN_IF_ERROR(crypto.HmacSha256(key.data(), key.size(), transcript.data(), transcript.size(), &mac));
  return mac;
}

// ---- Server -------------------------------------------------------------------

Result<ChallengeMessage> ServerHandshake::OnJoin(const JoinMessage& join) {
  if (state_ != State::kAwaitJoin) {
    state_ = State::kFailed;
    return Status(StatusCode::kFailedPrecondition, "join received twice");
  }
  if (join.protocol_version != kProtocolVersion) {
    state_ = State::kFailed;
    return Unsupported(Concat({"device speaks protocol version ", join.protocol_version, ", this server speaks ",
                               kProtocolVersion}));
  }
  device_id_ = std::string(join.device_id);
  version_ = join.protocol_version;
  client_nonce_ = join.client_nonce;
  FEDRT_RETURN_IF_ERROR(crypto_.RandomBytes(server_nonce_.data(), server_nonce_.size()));
  state_ = State::kAwaitProof;
  return ChallengeMessage{server_nonce_};
}

Result<JoinResponseMessage> ServerHandshake::OnAuthenticate(const AuthenticateMessage& auth) {
  if (state_ != State::kAwaitProof) {
    state_ = State::kFailed;
    return Status(StatusCode::kFailedPrecondition, "authenticate received out of order");
  }
  state_ = State::kFailed;  // one attempt
  const Key* key = keys_.Find(device_id_);
  // Same work and the same answer whether the device is unknown or the key wrong.
  static const Key kNoKey(kMinKeyBytes, 0);
  Result<Mac> expected = JoinProof(crypto_, key != nullptr ? *key : kNoKey, "client", version_, device_id_,
                                   client_nonce_, server_nonce_);
  if (!expected.ok()) return expected.status();
  const bool match = crypto_.ConstantTimeEqual(expected->data(), auth.proof.data(), kMacBytes);
  if (!match || key == nullptr) return Refused("authentication failed");
  Result<Mac> server_proof =
      JoinProof(crypto_, *key, "server", version_, device_id_, client_nonce_, server_nonce_);
  if (!server_proof.ok()) return server_proof.status();
  state_ = State::kDone;
  JoinResponseMessage response;
  response.accepted = true;
  response.server_proof = *server_proof;
  return response;
}

// ---- Device -------------------------------------------------------------------

ClientHandshake::ClientHandshake(std::string device_id, Key key, Crypto& crypto)
    : device_id_(std::move(device_id)), key_(std::move(key)), crypto_(crypto) {}

Result<JoinMessage> ClientHandshake::Start() {
  if (!IsValidDeviceId(device_id_)) return InvalidArgument("invalid device id '" + device_id_ + "'");
  if (key_.size() < kMinKeyBytes || key_.size() > kMaxKeyBytes) return InvalidArgument("key has the wrong size");
  FEDRT_RETURN_IF_ERROR(crypto_.RandomBytes(client_nonce_.data(), client_nonce_.size()));
  state_ = State::kAwaitChallenge;
  JoinMessage join;
  join.device_id = device_id_;
  join.client_nonce = client_nonce_;
  return join;
}

Result<AuthenticateMessage> ClientHandshake::OnChallenge(const ChallengeMessage& challenge) {
  if (state_ != State::kAwaitChallenge) {
    state_ = State::kFailed;
    return Status(StatusCode::kFailedPrecondition, "challenge received out of order");
  }
  server_nonce_ = challenge.server_nonce;
  Result<Mac> proof =
      JoinProof(crypto_, key_, "client", kProtocolVersion, device_id_, client_nonce_, server_nonce_);
  if (!proof.ok()) return proof.status();
  state_ = State::kAwaitResponse;
  AuthenticateMessage auth;
  auth.proof = *proof;
  return auth;
}

Status ClientHandshake::OnJoinResponse(const JoinResponseMessage& response) {
  if (state_ != State::kAwaitResponse) {
    state_ = State::kFailed;
    return Status(StatusCode::kFailedPrecondition, "join response received out of order");
  }
  state_ = State::kFailed;
  if (!response.accepted) {
    return Status(StatusCode::kUnauthenticated, "server refused the join: " + std::string(response.reason));
  }
  Result<Mac> expected =
      JoinProof(crypto_, key_, "server", kProtocolVersion, device_id_, client_nonce_, server_nonce_);
  if (!expected.ok()) return expected.status();
  if (!crypto_.ConstantTimeEqual(expected->data(), response.server_proof.data(), kMacBytes)) {
    return Refused("the server could not prove it holds this device's key");
  }
  state_ = State::kDone;
  return Status::Ok();
}

}  // namespace transport
}  // namespace fedrt
