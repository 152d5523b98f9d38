// The Asio side of connections: the EventLoop that runs TCP, TLS and
// loopback connections (tcp.h, loopback.h), a thread to run it on, and
// FrameQueue, the handler a blocking client (a device host, a test) waits on.
// Builds with FEDRT_WITH_ASIO only; engines never include it.
//
// Thread-safety: EventLoop::Post/Stop are safe from any thread; FrameQueue's
// Pop and accessors from any thread (its callbacks run on the loop thread).
#ifndef FEDRT_TRANSPORT_EVENT_LOOP_H_
#define FEDRT_TRANSPORT_EVENT_LOOP_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "fedrt/platform/status.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/frame.h"

namespace fedrt {
namespace transport {

namespace internal {
struct ImplAccess;  // the transport library's own sources reach Impl through it
}  // namespace internal

// Runs I/O handlers. Not copyable; outlives every connection and listener
// created on it.
class EventLoop {
 public:
  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Runs handlers on the calling thread until Stop(). Returns at once if
  // stopped; call Restart() to run again.
  void Run();
  // Runs handlers for at most `ms` milliseconds (or until Stop()).
  void RunFor(uint32_t ms);
  void Stop();
  void Restart();
  // Queues `fn` to run on the loop's thread.
  void Post(std::function<void()> fn);
  // True on the thread currently running this loop.
  bool InLoopThread() const;


  struct Impl;  // defined in the library's sources; reached only through internal::ImplAccess

 private:
  friend struct internal::ImplAccess;
  std::unique_ptr<Impl> impl_;
};

// An EventLoop running on its own thread, for clients and tests. The
// destructor stops the loop and joins the thread.
class EventLoopThread {
 public:
  EventLoopThread();
  ~EventLoopThread();
  EventLoop& loop() { return loop_; }

 private:
  EventLoop loop_;
  std::thread thread_;
};

// A handler that queues frames for a thread that waits for them: the simple
// way to write a blocking client (a device) or a test.
class FrameQueue : public ConnectionHandler {
 public:
  void OnOpen(const std::shared_ptr<Connection>& connection) override;
  void OnFrame(Connection& connection, Frame frame) override;
  void OnClose(Connection& connection, const Status& reason) override;

  // The next frame, kDeadlineExceeded after `timeout_ms`, or the close reason
  // (kUnavailable if the close was graceful) once the connection is gone and
  // every frame has been taken.
  Result<Frame> Pop(uint32_t timeout_ms);
  // The connection while it is open (nullptr before OnOpen and after OnClose).
  std::shared_ptr<Connection> connection();
  // Waits until the connection is closed; false on timeout.
  bool WaitClosed(uint32_t timeout_ms);
  Status close_reason();

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Frame> frames_;
  std::shared_ptr<Connection> connection_;
  bool closed_ = false;
  Status close_reason_;
};

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_EVENT_LOOP_H_
