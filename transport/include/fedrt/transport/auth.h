// Device authentication: pre-shared keys and the join challenge-response.
//
// Every device has its own key (16 to 64 random bytes) that it and the server
// (or its peers) hold. The join (transport/README.md, "Join") runs:
//
//   device -> server  Join { version, device_id, client_nonce }
//   server -> device  Challenge { server_nonce }        fresh random, per connection
//   device -> server  Authenticate { HMAC(key, transcript("client")) }
//   server -> device  JoinResponse { accepted, HMAC(key, transcript("server")) }
//
// transcript(role) = "fedrt-join-v1" 0x00 role 0x00 || version (2 bytes LE) ||
// len(device_id) (1 byte) || device_id || client_nonce || server_nonce.
// A device without the key cannot produce the proof; a recorded Authenticate
// replayed on another connection fails because the server nonce differs; the
// device checks the server's proof, so a server without the key is refused
// too. Proofs are compared in constant time. A server never says whether the
// device id or the key was wrong: an unknown device gets a challenge like any
// other and fails at the proof.
//
// Key files (KeyStore::LoadFile): text, one key per line,
//     <device-id> <key as 32 to 128 hexadecimal digits>
// blank lines and lines starting with '#' ignored, device ids unique. The file
// must not be accessible to other users (mode & 007 == 0). A device's file
// holds its own line; the server's holds every device. Keys are never taken
// from the command line.
//
// Thread-safety: KeyStore is immutable after loading (safe to share);
// handshakes are per connection, used by one thread.
#ifndef FEDRT_TRANSPORT_AUTH_H_
#define FEDRT_TRANSPORT_AUTH_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/messages.h"

namespace fedrt {
namespace transport {

inline constexpr std::size_t kMinKeyBytes = 16;
inline constexpr std::size_t kMaxKeyBytes = 64;

using Key = std::vector<uint8_t>;

class KeyStore {
 public:
  // kNotFound, kFailedPrecondition (file accessible to others) or kCorrupt
  // ("keys.txt:3: ...").
  static Result<KeyStore> LoadFile(const std::string& path);
  // The same format from memory (firmware, tests). `origin` names it in errors.
  static Result<KeyStore> Parse(std::string_view text, std::string_view origin = "keys");

  // The key of `device_id`, or nullptr.
  const Key* Find(std::string_view device_id) const;
  std::size_t size() const { return keys_.size(); }
  // The only entry of a device's own key file (nullptr unless size() == 1).
  const std::string* SingleDeviceId() const;

 private:
  std::map<std::string, Key, std::less<>> keys_;
};

// Server side of one connection's join.
class ServerHandshake {
 public:
  ServerHandshake(const KeyStore& keys, Crypto& crypto) : keys_(keys), crypto_(crypto) {}

  // Checks the protocol version and returns the Challenge to send (also for
  // unknown devices). kUnsupported for another version, kFailedPrecondition
  // when called twice.
  Result<ChallengeMessage> OnJoin(const JoinMessage& join);
  // Verifies the proof; on success returns the JoinResponse to send
  // (accepted, with the server's proof). kUnauthenticated when the proof is
  // wrong or the device unknown (one attempt per handshake), kFailedPrecondition
  // out of order.
  Result<JoinResponseMessage> OnAuthenticate(const AuthenticateMessage& auth);

  bool authenticated() const { return state_ == State::kDone; }
  const std::string& device_id() const { return device_id_; }

 private:
  enum class State { kAwaitJoin, kAwaitProof, kDone, kFailed };
  const KeyStore& keys_;
  Crypto& crypto_;
  State state_ = State::kAwaitJoin;
  std::string device_id_;
  uint16_t version_ = 0;
  Nonce client_nonce_{};
  Nonce server_nonce_{};
};

// Device side of a join.
class ClientHandshake {
 public:
  ClientHandshake(std::string device_id, Key key, Crypto& crypto);

  // The Join to send (fresh client nonce). Its device_id views this object;
  // add codecs and ISA before encoding.
  Result<JoinMessage> Start();
  // The Authenticate answering the server's challenge.
  Result<AuthenticateMessage> OnChallenge(const ChallengeMessage& challenge);
  // OK when the server accepted and proved it holds the key; kUnauthenticated
  // when it refused (with its reason) or its proof is wrong.
  Status OnJoinResponse(const JoinResponseMessage& response);

 private:
  enum class State { kIdle, kAwaitChallenge, kAwaitResponse, kDone, kFailed };
  std::string device_id_;
  Key key_;
  Crypto& crypto_;
  State state_ = State::kIdle;
  Nonce client_nonce_{};
  Nonce server_nonce_{};
};

// The MAC a side proves the join with; role is "client" or "server".
Result<Mac> JoinProof(Crypto& crypto, const Key& key, std::string_view role, uint16_t version,
                      std::string_view device_id, const Nonce& client_nonce, const Nonce& server_nonce);

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_AUTH_H_
