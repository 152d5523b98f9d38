// Connections over a byte stream that the application moves itself: the
// binding for sockets that are not Asio (lwIP, Zephyr, a UART, plain POSIX
// sockets in a C program) and for in-memory pipes. Nothing here uses Asio,
// threads or the operating system.
//
//   FrameReader       bytes in, verified frames out (frame.h's trust
//                     boundary: prefix limit, then VerifyFrame), in any
//                     split: a frame may arrive one byte at a time.
//   StreamConnection  a Connection (connection.h) whose sends go to a write
//                     callback as wire bytes, and whose received bytes the
//                     application hands to Receive(). Poll() sends the
//                     heartbeat when one is due and closes the connection
//                     when nothing arrived for idle_timeout_ms; it returns
//                     how long the application may wait before calling it
//                     again. Time comes from the Clock it is given.
//   MemoryPipe        two StreamConnections joined in memory; Pump() moves
//                     what each side wrote to the other. Engines in one
//                     process (tests, examples/03_embed.cc) talk over it
//                     without sockets.
//
// Semantics as connection.h, with these differences: the write callback must
// take every byte it is given or fail (a failure closes the connection with
// its status), so Send has written the frame when it returns and Flush only
// reports whether the connection is still open; io_timeout_ms is the write
// callback's business; Close() is immediate (queued bytes were written
// already). Handler callbacks run inside Receive, Poll, Close and Abort.
//
// Thread-safety: none. A StreamConnection (and a MemoryPipe) is used by one
// thread, the one that drives it and the engine on top of it.
#ifndef FEDRT_TRANSPORT_STREAM_H_
#define FEDRT_TRANSPORT_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/platform/status.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/frame.h"
#include "fedrt/transport/liveness.h"

namespace fedrt {
namespace transport {

class FrameReader {
 public:
  explicit FrameReader(const FrameLimits& limits) : limits_(limits) {}

  // Consumes all `size` bytes, calling `on_frame` for every frame they
  // complete, in order. After an error (kCorrupt, kResourceExhausted,
  // kUnsupported: the stream is out of step or hostile) the reader is spent.
  Status Feed(const uint8_t* data, std::size_t size, const std::function<void(Frame)>& on_frame);

  // True between frames (no partial prefix or body buffered).
  bool idle() const { return prefix_filled_ == 0 && !in_body_; }
  // Asked for memory to read each frame's body into (`size` bytes, 16-byte
  // aligned; nullptr: allocate): ConnectionHandler::LendFrameStorage.
  void set_lender(std::function<uint8_t*(std::size_t size)> lender) { lender_ = std::move(lender); }
  // The largest body accepted from the next prefix on (at most the limit the
  // reader was made with is the caller's business: StreamConnection keeps
  // it within ConnectionOptions). Callable from `on_frame`.
  void set_max_frame_bytes(uint32_t max_frame_bytes) { limits_.max_frame_bytes = max_frame_bytes; }

 private:
  FrameLimits limits_;
  uint8_t prefix_[kFramePrefixBytes] = {0, 0, 0, 0};
  std::size_t prefix_filled_ = 0;
  bool in_body_ = false;
  FrameBytes body_;
  std::size_t body_filled_ = 0;
  bool failed_ = false;
  std::function<uint8_t*(std::size_t)> lender_;
};

// Writes `size` wire bytes to the stream, all of them, or fails.
using StreamWrite = std::function<Status(const uint8_t* data, std::size_t size)>;

class StreamConnection final : public Connection, public std::enable_shared_from_this<StreamConnection> {
 public:
  // `handler` hears the frames (OnOpen runs inside Open()); `clock` must
  // outlive the connection. options.tls must be null (TLS over a stream is
  // the application's: wrap it in `write` and before Receive).
  static Result<std::shared_ptr<StreamConnection>> Create(std::string peer, StreamWrite write,
                                                          std::shared_ptr<ConnectionHandler> handler,
                                                          const ConnectionOptions& options, const Clock& clock);

  // Calls the handler's OnOpen. Call once, before anything else.
  void Open();
  // Bytes that arrived from the peer. Frames go to the handler (heartbeats
  // are counted and dropped); a bad frame closes the connection (after a
  // best-effort Error to the peer) and returns the reason.
  Status Receive(const uint8_t* data, std::size_t size);
  // The stream below ended: the peer closed it (kUnavailable) or it failed.
  void OnStreamClosed(const Status& reason);
  // Heartbeat and idle deadline. Returns the milliseconds until the next
  // deadline (UINT32_MAX when none), 0 once closed.
  uint32_t Poll();

  // Connection.
  Status Send(OutFrame frame) override;
  Status Flush(uint32_t timeout_ms) override;
  void Close() override;
  void Abort(Status reason, bool notify_peer = false) override;
  void LiftInitialFrameLimit() override;
  uint64_t id() const override { return id_; }
  const std::string& peer() const override { return peer_; }
  bool closed() const override { return closed_; }
  ConnectionStats stats() const override { return stats_; }

 private:
  StreamConnection(std::string peer, StreamWrite write, std::shared_ptr<ConnectionHandler> handler,
                   const ConnectionOptions& options, const Clock& clock);
  Status Write(const OutFrame& frame);
  void Finish(const Status& reason);

  const std::string peer_;
  StreamWrite write_;
  std::shared_ptr<ConnectionHandler> handler_;
  ConnectionOptions options_;
  const Clock& clock_;
  FrameReader reader_;
  const uint64_t id_;
  bool opened_ = false;
  bool closed_ = false;
  Status close_reason_;
  Liveness liveness_;  // heartbeats and the idle deadline
  ConnectionStats stats_;
};

// Two stream connections joined in memory. Bytes written on one side wait
// until Pump() hands them to the other, so an engine that answers inside a
// handler callback never re-enters the other engine.
class MemoryPipe {
 public:
  // `a_handler` hears what side b sends, `b_handler` what side a sends.
  static Result<std::unique_ptr<MemoryPipe>> Create(std::shared_ptr<ConnectionHandler> a_handler,
                                                    std::shared_ptr<ConnectionHandler> b_handler,
                                                    const ConnectionOptions& options, const Clock& clock);
  StreamConnection& a() { return *a_; }
  StreamConnection& b() { return *b_; }
  // Delivers every byte written so far, both ways, until neither side has
  // anything left to deliver; also passes a close on to the other side.
  // Returns true if anything moved.
  bool Pump();
  // Makes room for `bytes` of written, undelivered bytes each way now, so
  // a test that counts an engine's allocations does not count the pipe's.
  void Reserve(std::size_t bytes);

 private:
  MemoryPipe() = default;
  struct Side {
    std::vector<uint8_t> written;     // by this side, for the other
    std::vector<uint8_t> delivering;  // what Pump hands over (the two swap, keeping their memory)
    bool closed_seen = false;
  };
  std::shared_ptr<StreamConnection> a_, b_;
  std::shared_ptr<Side> a_side_, b_side_;
};

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_STREAM_H_
