// Connections: an ordered, framed, bidirectional message stream to one peer.
//
// This header is the interface engines see; it needs no Asio and no threads.
// Bindings: TCP and TLS (tcp.h) and the loopback (loopback.h) on an
// EventLoop (event_loop.h, Asio); StreamConnection and MemoryPipe
// (stream.h) on a byte stream the application moves itself.
//
// Layers (bottom up): an EventLoop runs every I/O operation; a Connection owns
// its socket (or loopback link) and buffers, reads frames with a
// read-header -> read-body chain and writes them from a send queue with one
// write in flight; a ConnectionHandler receives what arrives. Algorithms (the
// roles, ring all-reduce) see only Connection and ConnectionHandler, so they
// run unchanged over TCP (tcp.h) and over the in-process loopback (loopback.h);
// the connections know no algorithm (payload placement speaks of a neutral
// PayloadHead, not of any message an algorithm defines).
//
// Deadlines: while waiting for the next frame the connection allows
// idle_timeout_ms; once a frame's prefix has arrived its body must arrive
// within io_timeout_ms; every write must complete within io_timeout_ms. When a
// deadline passes the connection closes with kDeadlineExceeded. When nothing
// has been sent for heartbeat_interval_ms the connection sends a Heartbeat, so
// an idle but healthy peer never hits the other side's idle timeout; received
// heartbeats are consumed here and never reach the handler.
//
// Received frames are verified (frame.h) before the handler sees them; a frame
// that fails closes the connection with the reason, logged, after a
// best-effort Error message to the peer. Other connections are unaffected.
//
// Thread-safety: EventLoop::Post/Stop, Connection::Send/Close/Abort and the
// accessors are safe from any thread; Connection::Flush from any thread but
// the loop's. Handler callbacks run on the loop's
// thread, one at a time per loop; they must not block.
#ifndef FEDRT_TRANSPORT_CONNECTION_H_
#define FEDRT_TRANSPORT_CONNECTION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fedrt/platform/status.h"
#include "fedrt/transport/frame.h"

namespace fedrt {
namespace transport {

class TlsContext;

struct ConnectionOptions {
  FrameLimits limits;
  // The largest frame body received until the owner calls
  // Connection::LiftInitialFrameLimit(); 0: limits.max_frame_bytes from the
  // start. A server sets it for peers that have not authenticated yet, so
  // that a stranger's prefix cannot make it allocate a full-size frame (the
  // join's frames are small: join.h's kMaxJoinFrameBytes). Checked where the
  // prefix is parsed, before anything is allocated; a larger prefix closes
  // the connection (kResourceExhausted). At most limits.max_frame_bytes.
  // Frames the connection sends are not affected.
  uint32_t initial_max_frame_bytes = 0;
  uint32_t io_timeout_ms = 10000;          // body of a started frame, each write
  uint32_t idle_timeout_ms = 30000;        // waiting for the next frame; 0: forever
  uint32_t heartbeat_interval_ms = 5000;   // send a Heartbeat after this much silence; 0: never
  std::size_t max_queued_bytes = 256u << 20;  // Send() beyond this fails with kResourceExhausted
  // TCP without TLS: frames of up to this many bytes, sent from a thread
  // other than the loop's while nothing is queued before them, are written
  // by that thread (which saves the loop's wake-up, and lets the socket's
  // send copy run beside the loop's receive copy on another core). A frame
  // above 64 KiB then waits on the calling thread for room in the socket,
  // so raise it only for a connection whose senders may block (a
  // collective's own thread), not for a server that sends to many clients
  // from one thread.
  std::size_t direct_send_max_bytes = 64u << 10;
  // After this connection sends or receives a frame of up to 1 MiB, its
  // event loop keeps polling for this many microseconds instead of sleeping
  // in the kernel, yielding the CPU between empty polls (EventLoop::Run), so
  // a reply that arrives meanwhile is read without a wake-up (after a larger
  // frame the next one is milliseconds away). It trades CPU
  // for latency: for a collective's links, where the next frame follows
  // within microseconds; 0 (the default): the loop sleeps when idle.
  uint32_t busy_poll_us = 0;
  std::shared_ptr<const TlsContext> tls;   // TCP only: TLS on every connection (tls.h); null: plain TCP
  // Whether the connection logs the reason when an error closes it. An owner
  // that logs its OnClose reasons itself turns this off, so a dropped
  // connection makes one line, not two.
  bool log_errors = true;

  // kInvalidArgument for limits that FrameLimits::Validate refuses or an
  // initial frame limit above limits.max_frame_bytes.
  Status Validate() const;
};

struct ConnectionStats {
  uint64_t frames_sent = 0;
  uint64_t frames_received = 0;  // heartbeats included
  uint64_t bytes_sent = 0;       // wire bytes, prefixes included
  uint64_t bytes_received = 0;
  uint64_t heartbeats_sent = 0;
  uint64_t heartbeats_received = 0;
};

class Connection;

// Frames with a body of at least this many bytes may have their payload
// placed (ConnectionHandler::PlacePayload); smaller ones never are.
inline constexpr std::size_t kMinPlacedFrameBytes = 64u << 10;
// Size of the pieces a consumed payload is handed over in (a multiple of 64,
// small enough to stay in a core's L2 cache with what the handler touches).
inline constexpr std::size_t kPayloadPieceBytes = 256u << 10;

// The fields of a chunked message whose payload has not arrived yet, as
// payload placement sees them: which message, the sender's identifiers for
// the chunk, and where its payload sits in the whole it belongs to. The
// connection fills them from the message's head without knowing what they
// mean to the algorithm that sent it; the handler compares them with what it
// expects. Today the raw (uncoded) chunks of kind kRingChunk are offered:
//   tag = collective id, stage = ring phase, source = source rank, step,
//   segment, index = chunk index, offset = the chunk's byte offset in its
//   segment, size = payload bytes.
struct PayloadHead {
  MessageKind kind = MessageKind::kNone;
  uint64_t tag = 0;      // the sender's collective / transfer id
  uint32_t stage = 0;    // a phase within it
  uint32_t source = 0;   // the sender's rank
  uint64_t step = 0;
  uint32_t segment = 0;
  uint32_t index = 0;    // chunk index within the segment
  uint64_t offset = 0;   // byte offset of the chunk within the segment
  uint64_t size = 0;     // payload bytes
};

// What a connection reports to its owner. Callbacks run on the loop thread.
class ConnectionHandler {
 public:
  virtual ~ConnectionHandler() = default;
  // The connection is established and reading. Keep the pointer to send later.
  virtual void OnOpen(const std::shared_ptr<Connection>& connection) { (void)connection; }
  // A verified frame that is not a heartbeat.
  virtual void OnFrame(Connection& connection, Frame frame) = 0;
  // Called exactly once when the connection is gone. `reason` is OK after a
  // local Close(); kUnavailable when the peer closed; the error otherwise.
  virtual void OnClose(Connection& connection, const Status& reason) = 0;
  // Queued frames were handed to the socket and released (frames that borrow
  // a payload no longer read it). For owners that wait for their sends.
  virtual void OnSent(Connection& connection) { (void)connection; }

  // Payload placement (TCP connections): a chunk's payload is received
  // straight into the handler's memory instead of the frame body, which saves
  // copying it out. While WantsPlacement() is true (it is asked from the loop
  // thread, so keep it cheap), a frame of at least kMinPlacedFrameBytes is
  // read head first; once the head (every byte before the payload) has passed
  // the FlatBuffers verifier, PlacePayload sees the chunk's PayloadHead and
  // returns where its head.size bytes go, or nullptr to receive the frame as
  // usual. That memory must stay writable until the frame reaches OnFrame (it
  // then has placed_payload()) or the connection reaches OnClose. A frame whose whole
  // body then fails verification closes the connection as usual; its bytes
  // may already have been written there.
  virtual bool WantsPlacement(Connection& connection) {
    (void)connection;
    return false;
  }
  virtual uint8_t* PlacePayload(Connection& connection, const PayloadHead& head) {
    (void)connection;
    (void)head;
    return nullptr;
  }
  // Payload consumption: asked for a chunk PlacePayload declined. True: the
  // payload is stored nowhere; the connection reads it into one small buffer
  // it reuses and hands it to ConsumePayload in order, piece by piece, as it
  // arrives (`offset` into the payload; every piece but the last is
  // kPayloadPieceBytes long), so the handler reads each piece while it is in
  // cache (a reduction adds it into its vector). The frame then reaches
  // OnFrame with payload_consumed() set (the message's decoder gives the
  // payload's fields with no data). The same rules as placement apply: what ConsumePayload writes must
  // stay writable until OnFrame or OnClose, and a frame whose whole body then
  // fails verification closes the connection after its pieces were handed over.
  virtual bool ConsumesPayload(Connection& connection, const PayloadHead& head) {
    (void)connection;
    (void)head;
    return false;
  }
  virtual void ConsumePayload(Connection& connection, const uint8_t* piece, std::size_t offset, std::size_t size) {
    (void)connection;
    (void)piece;
    (void)offset;
    (void)size;
  }

  // Lent receive storage (stream connections, stream.h): asked when a frame's
  // prefix has arrived, before its body. Return `size` bytes of the
  // handler's memory, 16-byte aligned, to read the body into instead of a
  // fresh allocation, or nullptr to allocate as usual. The memory is the
  // connection's until that frame has been handed to OnFrame and OnFrame has
  // returned (the handler keeps no copy of such a Frame), or until OnClose.
  // A microcontroller's device lends its idle gradient buffer, so a model
  // chunk costs no heap.
  virtual uint8_t* LendFrameStorage(Connection& connection, std::size_t size) {
    (void)connection;
    (void)size;
    return nullptr;
  }
};

class Connection {
 public:
  virtual ~Connection() = default;

  // Queues a frame. Frames are written in Send order, one write in flight.
  // Over plain TCP a frame of up to direct_send_max_bytes may instead be
  // written by the calling thread (ConnectionOptions), which then returns
  // once it is in the socket.
  // kUnavailable once the connection is closing or closed,
  // kResourceExhausted when the queue would exceed max_queued_bytes.
  virtual Status Send(OutFrame frame) = 0;
  // Waits until every frame this thread Sent before the call has left the
  // process: TCP: written to the socket (the kernel delivers it even if this
  // process stops or exits right after); loopback: handed to the peer's
  // handler. OK then, also when the connection has closed since, with every
  // such frame written. kUnavailable, naming the close reason, when the
  // connection closed (or was closing) before they were written;
  // kDeadlineExceeded after `timeout_ms` (the connection stays open; 0: no
  // limit of its own: each write is still bounded by io_timeout_ms, after
  // which the connection closes and the wait ends, as long as its loop runs);
  // kFailedPrecondition on the loop's own thread. Say "sent" after this, not
  // after Send.
  virtual Status Flush(uint32_t timeout_ms) = 0;
  // Graceful close: queued frames are sent, the sending side is shut down,
  // and the connection waits (io_timeout_ms at most) for the peer to close.
  // OnClose then reports OK.
  virtual void Close() = 0;
  // Closes at once, discarding queued frames; OnClose reports `reason`. When
  // `notify_peer`, an Error message carrying `reason` is attempted first.
  virtual void Abort(Status reason, bool notify_peer = false) = 0;
  // Ends ConnectionOptions::initial_max_frame_bytes: frames up to
  // limits.max_frame_bytes are received from the next prefix the connection
  // parses on. Called by the owner once the peer has authenticated,
  // typically from OnFrame (before it replies); idempotent, and a no-op
  // without an initial limit (loopback pairs have none).
  virtual void LiftInitialFrameLimit() = 0;

  virtual uint64_t id() const = 0;            // unique within the process
  virtual const std::string& peer() const = 0;  // "127.0.0.1:40312", "loopback:3"
  virtual bool closed() const = 0;
  virtual ConnectionStats stats() const = 0;
};

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_CONNECTION_H_
