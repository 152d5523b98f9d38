// Private: the Asio io_context behind an EventLoop.
#ifndef FEDRT_TRANSPORT_SRC_EVENT_LOOP_IMPL_H_
#define FEDRT_TRANSPORT_SRC_EVENT_LOOP_IMPL_H_

#include <asio.hpp>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>
#include <thread>

#include "fedrt/transport/connection.h"

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
  // Receive storage for the large frames of this loop's connections.
  static constexpr std::size_t kFramePoolBytes = 32u << 20;
  std::shared_ptr<FrameBytesPool> frame_pool = FrameBytesPool::Create(kFramePoolBytes);

  void AddMember(const std::shared_ptr<LoopMember>& member);
  void ShutdownMembers();

  std::mutex members_mutex;
  std::vector<std::weak_ptr<LoopMember>> members;
};

// Process-wide connection ids.
uint64_t NextConnectionId();

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_SRC_EVENT_LOOP_IMPL_H_
