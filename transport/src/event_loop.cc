// EventLoop, EventLoopThread and FrameQueue.
#include <algorithm>
#include <atomic>
#include <chrono>

#include "event_loop_impl.h"
#include "fedrt/platform/clock.h"
#include "fedrt/transport/connection.h"

namespace fedrt {
namespace transport {

void EventLoop::Impl::AddMember(const std::shared_ptr<LoopMember>& member) {
  std::lock_guard<std::mutex> lock(members_mutex);
  members.erase(std::remove_if(members.begin(), members.end(),
                               [](const std::weak_ptr<LoopMember>& m) { return m.expired(); }),
                members.end());
  members.push_back(member);
}

void EventLoop::Impl::ShutdownMembers() {
  std::vector<std::weak_ptr<LoopMember>> taken;
  {
    std::lock_guard<std::mutex> lock(members_mutex);
    taken.swap(members);
  }
  for (const std::weak_ptr<LoopMember>& weak : taken) {
    if (std::shared_ptr<LoopMember> member = weak.lock()) member->ShutdownForLoopExit();
  }
  // Let the cancelled operations complete so they release what they hold.
  io.restart();
  io.poll();
}

EventLoop::EventLoop() : impl_(std::make_unique<Impl>()) {}

EventLoop::~EventLoop() {
  impl_->io.stop();
  impl_->ShutdownMembers();
}

void EventLoop::Impl::KeepPolling(uint32_t us) {
  if (us == 0) return;
  const uint64_t until = MonotonicNanos() + uint64_t{us} * 1000u;
  if (until > busy_until_ns.load(std::memory_order_relaxed)) busy_until_ns.store(until, std::memory_order_relaxed);
}

void EventLoop::Run() {
  impl_->running_thread = std::this_thread::get_id();
  // io.run(), one handler at a time, so that a connection's busy_poll_us is
  // seen: until busy_until_ns the loop runs what is ready without sleeping
  // in epoll_wait, and yields the CPU when nothing is. A frame that arrives
  // then is read at the next poll instead of after the kernel wakes this
  // thread (on a busy machine, or a virtual one, tens of microseconds).
  for (;;) {
    const uint64_t until = impl_->busy_until_ns.load(std::memory_order_relaxed);
    if (until != 0 && MonotonicNanos() < until) {
      const std::size_t ran = impl_->io.poll();
      if (impl_->io.stopped()) break;
      if (ran == 0) std::this_thread::yield();
      continue;
    }
    if (impl_->io.run_one() == 0) break;  // stopped
  }
  impl_->running_thread = std::thread::id();
}

void EventLoop::RunFor(uint32_t ms) {
  impl_->running_thread = std::this_thread::get_id();
  impl_->io.run_for(std::chrono::milliseconds(ms));
  impl_->running_thread = std::thread::id();
}

void EventLoop::Stop() { impl_->io.stop(); }
void EventLoop::Restart() { impl_->io.restart(); }
void EventLoop::Post(std::function<void()> fn) { asio::post(impl_->io, std::move(fn)); }
bool EventLoop::InLoopThread() const { return impl_->running_thread == std::this_thread::get_id(); }

void FlushWait::Resolve(Status s) {
  std::lock_guard<std::mutex> lock(mutex);
  if (done) return;
  done = true;
  status = std::move(s);
  done_cv.notify_all();
}

FlushPromise& FlushPromise::operator=(FlushPromise&& other) noexcept {
  if (this != &other) {
    Resolve(Status(StatusCode::kCancelled, "flush abandoned"));
    wait_ = std::move(other.wait_);
  }
  return *this;
}

FlushPromise::~FlushPromise() {
  Resolve(Status(StatusCode::kCancelled, "the event loop ended before the queued frames were written"));
}

void FlushPromise::Resolve(Status status) {
  if (!wait_) return;
  wait_->Resolve(std::move(status));
  wait_.reset();
}

Status WaitForFlush(EventLoop::Impl& loop, const std::string& peer, uint32_t timeout_ms,
                    std::function<void(FlushPromise)> mark) {
  if (loop.running_thread == std::this_thread::get_id()) {
    return Status(StatusCode::kFailedPrecondition,
                  "Flush of " + peer + " called on its event loop's thread, which writes the frames");
  }
  auto wait = std::make_shared<FlushWait>();
  asio::post(loop.io, [mark = std::move(mark), promise = FlushPromise(wait)]() mutable { mark(std::move(promise)); });
  std::unique_lock<std::mutex> lock(wait->mutex);
  const auto done = [&] { return wait->done; };
  if (timeout_ms == 0) {
    wait->done_cv.wait(lock, done);
  } else if (!wait->done_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), done)) {
    return Status(StatusCode::kDeadlineExceeded, "frames queued to " + peer + " were not written within " +
                                                     std::to_string(timeout_ms) + " ms");
  }
  return wait->status;
}

Status FramesLost(const std::string& peer, uint64_t lost, const Status& close_reason) {
  std::string text = "connection " + peer + " closed before " + std::to_string(lost) + " queued frame" +
                     (lost == 1 ? " was" : "s were") + " written";
  if (!close_reason.ok()) text += ": " + close_reason.ToString();
  return Status(StatusCode::kUnavailable, text);
}

EventLoopThread::EventLoopThread() : thread_([this] { loop_.Run(); }) {}

EventLoopThread::~EventLoopThread() {
  loop_.Stop();
  thread_.join();
}

void FrameQueue::OnOpen(const std::shared_ptr<Connection>& connection) {
  std::lock_guard<std::mutex> lock(mutex_);
  connection_ = connection;
  changed_.notify_all();
}

void FrameQueue::OnFrame(Connection& connection, Frame frame) {
  (void)connection;
  std::lock_guard<std::mutex> lock(mutex_);
  frames_.push_back(std::move(frame));
  changed_.notify_all();
}

void FrameQueue::OnClose(Connection& connection, const Status& reason) {
  (void)connection;
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
  close_reason_ = reason;
  connection_.reset();  // the connection holds this handler: break the cycle
  changed_.notify_all();
}

Result<Frame> FrameQueue::Pop(uint32_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool ready = changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                       [this] { return !frames_.empty() || closed_; });
  if (!frames_.empty()) {
    Frame frame = std::move(frames_.front());
    frames_.pop_front();
    return frame;
  }
  if (!ready) return Status(StatusCode::kDeadlineExceeded, "no frame within the deadline");
  if (close_reason_.ok()) return Status(StatusCode::kUnavailable, "connection closed");
  return close_reason_;
}

std::shared_ptr<Connection> FrameQueue::connection() {
  std::lock_guard<std::mutex> lock(mutex_);
  return connection_;
}

bool FrameQueue::WaitClosed(uint32_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return closed_; });
}

Status FrameQueue::close_reason() {
  std::lock_guard<std::mutex> lock(mutex_);
  return close_reason_;
}

}  // namespace transport
}  // namespace fedrt
