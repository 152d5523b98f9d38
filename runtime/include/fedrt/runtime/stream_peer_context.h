// The collective context (collective_context.h) over byte streams the
// application moves itself: the peers' binding for links that are not Asio
// (lwIP, Zephyr, a UART, the C API's callbacks, in-process queues). Nothing
// here uses Asio, threads or the operating system; it is what
// fedrt/fedrt.h's peer trainer runs on.
//
// The application keeps one two-way byte stream to every neighbour of the
// formation (ring: the left and the right member; a graph: its
// neighbours(); one stream when the two are the same rank) and gives the
// context two functions: write bytes to rank r's stream, and read what has
// arrived from rank r's stream, waiting at most a timeout. Frames on the
// streams are transport/stream.h's (size prefix, FrameReader's verification,
// the same bytes the TCP binding carries), each stream a StreamConnection
// without heartbeats.
//
// The context pulls: Receive(from) reads rank `from`'s stream until a frame
// from it is complete (or the deadline on the context's clock passes, or the
// stream fails), so a collective runs on the caller's thread alone. Send
// writes the whole frame before it returns: `write` must take the bytes
// without waiting for the neighbour to read them (queue them; a socket's send
// buffer, or a queue behind it), since on a ring every member sends before it
// reads. Registered buffers are not placed (collectives take their copying
// path, as on the loopback).
//
// The join. With keys (StreamJoin), every stream starts with the join the
// TCP peers and star devices use (transport/join.h, HMAC-SHA256 challenge-
// response over pre-shared keys), run both ways: each end joins as its rank
// ("p<rank>") and answers the other's join, so each proves it holds the key
// and is the rank the application's stream says it is. A wrong key, another
// rank, a malformed or truncated handshake, or a neighbour without keys
// (whose first frame is not a join) is refused with an Error frame to it and
// fails the collective naming that rank (kUnauthenticated, or the stream's
// kCorrupt / kUnavailable / kDeadlineExceeded); a keyless peer that hears a
// join says so. The joins run at the first Send or Receive (Form() sends
// nothing), all streams at once, until each has joined or failed, within
// options.join_timeout_ms; nothing but the join is sent first, and a failure
// is reported only to the neighbours that joined. Without keys there is no
// join: the streams are trusted to connect the right ranks (authenticate
// them below this layer, or not at all).
//
// Differences from the TCP binding: Form() only sets the membership, and only
// once: a re-formation (ring repair) is kUnsupported, because nothing on a
// stream marks where the old formation's bytes end. Failure reports are sent
// both ways as the TCP binding does, and a received one fails the collective
// naming the same rank; suspicions after a step deadline are not exchanged
// (the peer that times out blames the neighbour it waited for). Close() sends
// Leave to the neighbours and returns without waiting for them.
//
// Ownership: the context owns its StreamConnections and receive buffer; the
// streams are the application's. Thread-safety: one thread.
#ifndef FEDRT_RUNTIME_STREAM_PEER_CONTEXT_H_
#define FEDRT_RUNTIME_STREAM_PEER_CONTEXT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/collective_context.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/frame.h"

namespace fedrt {
namespace peer {

struct PeerStreams {
  // Writes all `size` bytes to rank `to`'s stream, or fails (the stream is
  // then closed, and the collective fails naming `to`).
  std::function<Status(uint32_t to, const uint8_t* data, std::size_t size)> write;
  // Waits up to `timeout_ms` (0: not at all) for bytes from rank `from`'s
  // stream and puts up to `capacity` of them in `buffer`: how many (0: none
  // in time). kUnavailable when the neighbour closed the stream; any error
  // closes it.
  std::function<Result<std::size_t>(uint32_t from, uint8_t* buffer, std::size_t capacity, uint32_t timeout_ms)>
      read;
};

// The join on every stream (above). `keys` holds this peer's key under its
// id "p<rank>" and every neighbour's under theirs (one group key under every
// id is the C API's choice). Both must outlive the context.
struct StreamJoin {
  const transport::KeyStore* keys = nullptr;  // null: no join, the streams are trusted
  // Nonces and HMAC-SHA256. Null: transport::SystemCrypto() in builds with
  // OpenSSL; required without (the core preset, firmware).
  transport::Crypto* crypto = nullptr;
};

// Rank `rank` of `peer_count` peers (ids "p0", "p1", ...) over `streams`.
// options.join_timeout_ms bounds the join (unused without keys);
// options.clock, if set, must outlive the context. kInvalidArgument for a
// rank outside the peers, a missing function, limits that
// FrameLimits::Validate refuses, keys without this peer's id, or keys and no
// Crypto in a build without OpenSSL.
Result<std::unique_ptr<CollectiveContext>> CreateStreamPeerContext(uint32_t rank, uint32_t peer_count,
                                                                   PeerStreams streams,
                                                                   const ContextOptions& options,
                                                                   const transport::FrameLimits& limits = {},
                                                                   const StreamJoin& join = {});

}  // namespace peer
}  // namespace fedrt

#endif  // FEDRT_RUNTIME_STREAM_PEER_CONTEXT_H_
