// libFuzzer target: the join's two state machines (transport/join.h), the
// server's JoinServer and a device's JoinClient, fed the frames a socket
// would deliver while joining. The first byte picks the side; the rest is a
// sequence of length-prefixed frames (fuzz_support.h). The crypto is
// deterministic (FixedCrypto), so seeds recorded with the right proofs
// (make_seeds.cc) lead mutations into the states after the proof.
//
// Checked: no crash or sanitizer report; a side that failed stays spent
// (every later frame is refused); a server is done only after a Join and an
// Authenticate were both accepted, and then names the announced device; a
// client is done only after it answered a challenge.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fedrt/transport/join.h"
#include "fuzz_support.h"

namespace {

using namespace fedrt::transport;

const KeyStore& Keys() {
  static const KeyStore* keys = [] {
    auto parsed = KeyStore::Parse(std::string(fedrt::fuzz::kJoinDevice) + " " + fedrt::fuzz::kJoinKeyHex + "\n");
    if (!parsed.ok()) std::abort();
    return new KeyStore(std::move(*parsed));
  }();
  return *keys;
}

Key DeviceKey() { return *Keys().Find(fedrt::fuzz::kJoinDevice); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  fedrt::fuzz::FixedCrypto crypto;
  FrameLimits limits;
  limits.max_frame_bytes = kMinFrameBytes;  // the smallest valid limit; the join needs 8 KiB
  const bool client_side = (data[0] & 1) == fedrt::fuzz::kJoinClientSide;
  JoinServer server(Keys(), crypto, limits);
  JoinClient client(fedrt::fuzz::kJoinDevice, DeviceKey(), crypto, limits);
  JoinResult offer;
  offer.current_round = 7;
  offer.heartbeat_interval_ms = 1000;
  if (client_side) {
    JoinRequest request;
    request.codecs = {"fp32", "dqsg"};
    request.isa = "scalar";
    if (!client.Start(request).ok()) std::abort();
  }
  bool failed = false;
  int answered_challenges = 0;
  std::size_t at = 1;
  while (size - at >= kFramePrefixBytes) {
    auto body_size = ParseFramePrefix(data + at, limits);
    if (!body_size.ok() || *body_size > size - at - kFramePrefixBytes) break;
    auto frame = ParseFrame(data + at, kFramePrefixBytes + *body_size, limits);
    at += kFramePrefixBytes + *body_size;
    if (!frame.ok()) continue;  // a connection would have closed; the next frame tries the state machine again
    const MessageKind kind = frame->kind();
    if (client_side) {
      const bool was_done = client.done();
      auto out = client.OnFrame(*frame);
      if (out.ok() && (failed || was_done)) std::abort();  // spent or finished objects take nothing
      if (!out.ok()) failed = true;
      if (out.ok() && kind == MessageKind::kChallenge) answered_challenges++;
      if (client.done() && answered_challenges == 0) std::abort();
    } else {
      const bool was_done = server.done();
      auto out = server.OnFrame(*frame, offer);
      if (out.ok() && (failed || was_done)) std::abort();
      if (!out.ok()) failed = true;
      if (server.done() && (!server.announced() || server.announcement().device_id != fedrt::fuzz::kJoinDevice)) {
        std::abort();  // only the key's device can complete the join
      }
    }
  }
  return 0;
}
