// Private: the Asio io_context behind an EventLoop.
#ifndef FEDRT_TRANSPORT_SRC_EVENT_LOOP_IMPL_H_
#define FEDRT_TRANSPORT_SRC_EVENT_LOOP_IMPL_H_

#include <asio.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <thread>

#include "connection_id.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/event_loop.h"

namespace fedrt {
namespace transport {

// Something that owns Asio objects of a loop (a connection, a listener). The
// loop shuts its members down before it is destroyed, so no socket outlives
// the io_context and no connection <-> handler reference cycle leaks.
class LoopMember {
 public:
  virtual ~LoopMember() = default;
  // Called on the destroying thread after the loop has stopped running.
  virtual void ShutdownForLoopExit() = 0;
};

struct EventLoop::Impl {
  asio::io_context io{1};  // one thread runs a loop: no internal locking needed
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  std::atomic<std::thread::id> running_thread{};
  // Until this MonotonicNanos() time Run() polls instead of sleeping
  // (ConnectionOptions::busy_poll_us; 0: never asked).
  std::atomic<uint64_t> busy_until_ns{0};
  // Asks Run() to keep polling for `us` microseconds from now. From any
  // thread: two racing callers may leave the earlier of their two times,
  // which only shortens one poll.
  void KeepPolling(uint32_t us);
  // Receive storage for the large frames of this loop's connections.
  static constexpr std::size_t kFramePoolBytes = 32u << 20;
  std::shared_ptr<FrameBytesPool> frame_pool = FrameBytesPool::Create(kFramePoolBytes);

  void AddMember(const std::shared_ptr<LoopMember>& member);
  void ShutdownMembers();

  std::mutex members_mutex;
  std::vector<std::weak_ptr<LoopMember>> members;
};

// Connection::Flush, shared by the connection kinds. The waiting thread holds
// the FlushWait; the loop thread holds a FlushPromise and keeps it until the
// frames before the flush point are written (Resolve OK) or lost (Resolve the
// error). A promise dropped unresolved (its handler never ran: the loop was
// destroyed) resolves kCancelled, so no waiter is left hanging.
struct FlushWait {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  Status status;
  void Resolve(Status s);
};

class FlushPromise {
 public:
  FlushPromise() = default;
  explicit FlushPromise(std::shared_ptr<FlushWait> wait) : wait_(std::move(wait)) {}
  FlushPromise(FlushPromise&& other) noexcept = default;
  FlushPromise& operator=(FlushPromise&& other) noexcept;
  FlushPromise(const FlushPromise&) = delete;
  FlushPromise& operator=(const FlushPromise&) = delete;
  ~FlushPromise();
  void Resolve(Status status);

 private:
  std::shared_ptr<FlushWait> wait_;
};

// Blocks the calling thread until the promise handed to `mark` (run on the
// loop thread, after every handler the caller posted before) is resolved, or
// `timeout_ms` passes (0: no limit of its own). Refuses the loop's own thread,
// which would wait on itself.
Status WaitForFlush(EventLoop::Impl& loop, const std::string& peer, uint32_t timeout_ms,
                    std::function<void(FlushPromise)> mark);

// The error of a flush whose frames the connection lost: it closed (or was
// closing) before `lost` queued frames were written.
Status FramesLost(const std::string& peer, uint64_t lost, const Status& close_reason);

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_SRC_EVENT_LOOP_IMPL_H_
