// The join, sans-IO: the one implementation of the join protocol that every
// role uses (a star device and the aggregator, a peer dialling its neighbour
// and the peer accepting it). Frames in, frames out; no connection, no clock,
// no thread: the caller sends what these objects return and enforces the
// join deadline itself.
//
//   client                                  server
//   Start()            -> Join
//                                           OnFrame(Join)         -> Challenge
//   OnFrame(Challenge) -> Authenticate
//                                           OnFrame(Authenticate) -> JoinResponse (done)
//   OnFrame(JoinResponse)  (done)
//
// The cryptography is auth.h's (ClientHandshake / ServerHandshake); this
// layer adds the message encoding, the order of frames, and what an Error
// frame from the other side means. Errors: the other side's Error as its
// Status, kUnauthenticated for a refused or wrong proof, kCorrupt for a frame
// that is not the next step of the join. After an error the object is spent:
// the caller closes the connection (the server side with notify_peer, so the
// device learns why) and starts over on a new one.
//
// Thread-safety: none; one object per connection attempt, used by one thread.
#ifndef FEDRT_TRANSPORT_JOIN_H_
#define FEDRT_TRANSPORT_JOIN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/frame.h"
#include "fedrt/transport/messages.h"

namespace fedrt {
namespace transport {

// The largest frame body the join needs from either side: a Join naming
// kMaxCodecs codecs of kMaxCodecNameBytes each with the longest id and ISA
// (about 5 KiB), or an Error with the longest reason. A server receives
// nothing larger from a connection that has not joined yet
// (ConnectionOptions::initial_max_frame_bytes), so a stranger cannot make it
// allocate a full-size frame.
inline constexpr uint32_t kMaxJoinFrameBytes = 8u << 10;

// What a client announces in its Join besides its id and nonce.
struct JoinRequest {
  std::vector<std::string> codecs;  // codec names it can encode
  std::string isa;                  // kernel ISA in use ("avx2")
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
  uint64_t resume_round = 0;        // star: next round it expects; peer: ring generation
  int64_t model_round = -1;         // star: round of the global model it holds, -1 none
};

// What the server told a client that joined.
struct JoinResult {
  uint64_t current_round = 0;
  uint32_t heartbeat_interval_ms = 0;
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
};

class JoinClient {
 public:
  JoinClient(std::string device_id, Key key, Crypto& crypto, const FrameLimits& limits);

  // The Join frame, with a fresh client nonce. kFailedPrecondition if called twice.
  Result<OutFrame> Start(const JoinRequest& request);
  // A frame from the server while joining. Returns the frame to send next
  // (the Authenticate) or, once the server accepted and proved it holds the
  // key, an empty OutFrame with done() true.
  Result<OutFrame> OnFrame(const Frame& frame);

  bool done() const { return done_; }
  const JoinResult& result() const { return result_; }

 private:
  ClientHandshake handshake_;
  FrameLimits limits_;
  bool started_ = false;
  bool done_ = false;
  bool failed_ = false;
  JoinResult result_;
};

// What the server learned from a Join, before it decides to go on.
struct JoinAnnouncement {
  std::string device_id;
  uint64_t resume_round = 0;
  int64_t model_round = -1;
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
};

class JoinServer {
 public:
  // `keys` and `crypto` must outlive the object.
  JoinServer(const KeyStore& keys, Crypto& crypto, const FrameLimits& limits);

  // A frame from a connection that has not joined yet: the Join (answered
  // with the Challenge, also for unknown devices, which fail at the proof) or
  // the Authenticate (answered with the accepting JoinResponse, carrying
  // `result`'s round, heartbeat and frame limit; done() is then true). A
  // caller that admits only some devices (a peer expecting its neighbour)
  // looks at announcement() after the Join and refuses on its own.
  Result<OutFrame> OnFrame(const Frame& frame, const JoinResult& result);

  bool done() const { return handshake_.authenticated(); }
  // Meaningful once the Join has been received.
  const JoinAnnouncement& announcement() const { return announcement_; }
  bool announced() const { return announced_; }

 private:
  ServerHandshake handshake_;
  FrameLimits limits_;
  bool announced_ = false;
  bool failed_ = false;
  JoinAnnouncement announcement_;
};

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_JOIN_H_
