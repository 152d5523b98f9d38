// The in-process loopback transport (contract in loopback.h).
//
// Memory: a frame's bytes are parsed on Send into a buffer of the sending
// end's pool (FrameBytesPool, every size) and its delivery is posted in a
// kept block (PostBlocks), so the steady state allocates nothing per frame.
#include "fedrt/transport/loopback.h"

#include <asio.hpp>
#include <asio/bind_allocator.hpp>
#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <atomic>
#include <string>
#include <vector>

#include "impl_access.h"
#include "event_loop_impl.h"
#include "fedrt/platform/log.h"

namespace fedrt {
namespace transport {
namespace {

// Memory for the posted deliveries of one connection's frames. A post from
// a thread outside the loop (the sender's) allocates its operation every
// time with asio's default allocator; these blocks are kept and reused, so
// a steady stream of frames allocates nothing. Thread-safety: blocks are
// taken on the sending thread and given back on the loop's.
class PostBlocks {
 public:
  static constexpr std::size_t kBlockBytes = 256;  // a delivery's operation fits (larger ones: the heap)
  static constexpr std::size_t kMaxKept = 256;

  static constexpr std::size_t kReady = 16;  // blocks made at once: deliveries in flight at first

  PostBlocks() {
    free_.reserve(kMaxKept);
    for (std::size_t i = 0; i < kReady; ++i) free_.push_back(::operator new(kBlockBytes));
  }
  ~PostBlocks() {
    for (void* p : free_) ::operator delete(p);
  }
  PostBlocks(const PostBlocks&) = delete;
  PostBlocks& operator=(const PostBlocks&) = delete;

  void* Take(std::size_t bytes) {
    if (bytes <= kBlockBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        void* p = free_.back();
        free_.pop_back();
        return p;
      }
    }
    return ::operator new(std::max(bytes, kBlockBytes));
  }
  void Give(void* p, std::size_t bytes) {
    if (bytes <= kBlockBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (free_.size() < kMaxKept) {
        free_.push_back(p);
        return;
      }
    }
    ::operator delete(p);
  }

 private:
  std::mutex mutex_;
  std::vector<void*> free_;
};

template <typename T>
class PostAllocator {
 public:
  using value_type = T;
  explicit PostAllocator(std::shared_ptr<PostBlocks> blocks) : blocks_(std::move(blocks)) {}
  template <typename U>
  PostAllocator(const PostAllocator<U>& other) : blocks_(other.blocks()) {}  // NOLINT: an allocator rebinds implicitly
  T* allocate(std::size_t n) { return static_cast<T*>(blocks_->Take(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) { blocks_->Give(p, n * sizeof(T)); }
  const std::shared_ptr<PostBlocks>& blocks() const { return blocks_; }
  template <typename U>
  bool operator==(const PostAllocator<U>& other) const { return blocks_ == other.blocks(); }
  template <typename U>
  bool operator!=(const PostAllocator<U>& other) const { return blocks_ != other.blocks(); }

 private:
  std::shared_ptr<PostBlocks> blocks_;
};

class LoopbackConnection final : public Connection,
                                 public LoopMember,
                                 public std::enable_shared_from_this<LoopbackConnection> {
 public:
  LoopbackConnection(EventLoop::Impl& loop, std::shared_ptr<ConnectionHandler> handler, const FrameLimits& limits)
      : loop_(loop), handler_(std::move(handler)), limits_(limits), id_(NextConnectionId()),
        peer_("loopback:" + std::to_string(id_)),
        bodies_(FrameBytesPool::Create(2 * std::size_t{limits.max_frame_bytes}, 0)),
        post_blocks_(std::make_shared<PostBlocks>()) {
    // Small frames (steps of small models, reports, agreements) find storage
    // from the first one on; larger ones are kept once seen.
    bodies_->Reserve(16, 4096);
  }

  void Link(const std::shared_ptr<LoopbackConnection>& other) { other_ = other; }

  void Open() {
    loop_.AddMember(shared_from_this());
    asio::post(loop_.io, [self = shared_from_this()] {
      if (self->handler_ && !self->closed_) self->handler_->OnOpen(self);
    });
  }

  Status Send(OutFrame frame) override {
    if (frame.empty()) return InvalidArgument("empty frame");
    if (closing_.load()) return Status(StatusCode::kUnavailable, "connection " + peer_ + " is closed");
    // The bytes a socket would carry, parsed and verified as a TCP reader
    // does (frame.h), now: into storage kept for the next frames, so the
    // frame borrows nothing once Send returns.
    Result<Frame> parsed = Parse(frame);
    const std::size_t wire_size = frame.wire_size();
    frames_sent_.fetch_add(1, std::memory_order_relaxed);
    bytes_sent_.fetch_add(wire_size, std::memory_order_relaxed);
    asio::post(loop_.io, asio::bind_allocator(PostAllocator<void>(post_blocks_), [self = shared_from_this(),
                                                                                   parsed = std::move(parsed),
                                                                                   wire_size]() mutable {
                 std::shared_ptr<LoopbackConnection> other = self->other_.lock();
                 if (!other || other->closed_) {
                   ++self->frames_lost_;
                   return;
                 }
                 other->Deliver(std::move(parsed), wire_size);
               }));
    return Status::Ok();
  }

  // Deliveries run in posting order: by the time the mark runs, every frame
  // this thread sent before has reached the peer's handler or been lost.
  Status Flush(uint32_t timeout_ms) override {
    return WaitForFlush(loop_, peer_, timeout_ms, [self = shared_from_this()](FlushPromise promise) {
      if (self->frames_lost_ == 0) return promise.Resolve(Status::Ok());
      promise.Resolve(FramesLost(self->peer_, self->frames_lost_, self->close_reason_));
    });
  }

  void Close() override {
    closing_ = true;
    asio::post(loop_.io, [self = shared_from_this()] {
      self->Finish(Status::Ok());
      if (std::shared_ptr<LoopbackConnection> other = self->other_.lock()) {
        other->Finish(Status(StatusCode::kUnavailable, "peer " + self->peer_ + " closed the connection"));
      }
    });
  }

  void Abort(Status reason, bool notify_peer) override {
    (void)notify_peer;
    closing_ = true;
    asio::post(loop_.io, [self = shared_from_this(), reason = std::move(reason)] { self->AbortNow(reason); });
  }

  void ShutdownForLoopExit() override { Finish(Status(StatusCode::kCancelled, "event loop destroyed")); }
  // A loopback pair takes FrameLimits only: there is no initial limit to lift.
  void LiftInitialFrameLimit() override {}

  uint64_t id() const override { return id_; }
  const std::string& peer() const override { return peer_; }
  bool closed() const override { return closed_.load(); }
  ConnectionStats stats() const override {
    ConnectionStats s;
    s.frames_sent = frames_sent_.load();
    s.frames_received = frames_received_.load();
    s.bytes_sent = bytes_sent_.load();
    s.bytes_received = bytes_received_.load();
    return s;
  }

 private:
  // Prefix and body of `frame` checked against the limits (both ends have
  // the same), the body copied into a kept buffer and verified.
  Result<Frame> Parse(const OutFrame& frame) {
    Result<uint32_t> body_size = ParseFramePrefix(frame.prefix(), limits_);
    if (!body_size.ok()) return body_size.status();
    Result<FrameBytes> body = bodies_->Allocate(*body_size);
    if (!body.ok()) return body.status();
    std::size_t at = 0;
    for (std::size_t i = 0; i < frame.piece_count(); ++i) {
      const OutFrame::Piece& piece = frame.piece(i);
      if (piece.size > 0) std::memcpy(body->data() + at, piece.data, piece.size);
      at += piece.size;
    }
    return VerifyFrame(std::move(*body), limits_);
  }

  void Deliver(Result<Frame> frame, std::size_t wire_size) {
    if (closed_) return;
    frames_received_.fetch_add(1, std::memory_order_relaxed);
    bytes_received_.fetch_add(wire_size, std::memory_order_relaxed);
    if (!frame.ok()) return AbortNow(frame.status());
    if (frame->kind() == MessageKind::kHeartbeat) return;
    if (handler_) handler_->OnFrame(*this, std::move(*frame));
  }

  void AbortNow(const Status& reason) {
    if (closed_) return;
    Log(LogLevel::kWarning, "connection %s closed: %s", peer_.c_str(), reason.ToString().c_str());
    Finish(reason);
    if (std::shared_ptr<LoopbackConnection> other = other_.lock()) {
      other->Finish(Status(StatusCode::kUnavailable, "peer " + peer_ + " dropped the connection"));
    }
  }

  void Finish(const Status& reason) {
    if (closed_.exchange(true)) return;
    closing_ = true;
    close_reason_ = reason;
    std::shared_ptr<ConnectionHandler> handler = std::move(handler_);
    if (handler) handler->OnClose(*this, reason);
  }

  EventLoop::Impl& loop_;
  std::shared_ptr<ConnectionHandler> handler_;
  const FrameLimits limits_;
  const uint64_t id_;
  const std::string peer_;
  std::weak_ptr<LoopbackConnection> other_;
  std::atomic<bool> closing_{false};
  std::atomic<bool> closed_{false};
  uint64_t frames_lost_ = 0;  // on the loop thread: sent, never delivered
  Status close_reason_;       // on the loop thread
  std::atomic<uint64_t> frames_sent_{0}, frames_received_{0}, bytes_sent_{0}, bytes_received_{0};
  std::shared_ptr<FrameBytesPool> bodies_;   // the storage of the frames this end sends
  std::shared_ptr<PostBlocks> post_blocks_;  // their deliveries' operations
};

}  // namespace

std::pair<std::shared_ptr<Connection>, std::shared_ptr<Connection>> MakeLoopbackPair(
    EventLoop& loop, std::shared_ptr<ConnectionHandler> a_handler, std::shared_ptr<ConnectionHandler> b_handler,
    const FrameLimits& limits) {
  auto a = std::make_shared<LoopbackConnection>(internal::ImplAccess::Of(loop), std::move(a_handler), limits);
  auto b = std::make_shared<LoopbackConnection>(internal::ImplAccess::Of(loop), std::move(b_handler), limits);
  a->Link(b);
  b->Link(a);
  a->Open();
  b->Open();
  return {a, b};
}

}  // namespace transport
}  // namespace fedrt
