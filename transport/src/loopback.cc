// The in-process loopback transport (contract in loopback.h).
#include "fedrt/transport/loopback.h"

#include <asio.hpp>
#include <atomic>
#include <string>
#include <vector>

#include "impl_access.h"
#include "event_loop_impl.h"
#include "fedrt/platform/log.h"

namespace fedrt {
namespace transport {
namespace {

class LoopbackConnection final : public Connection,
                                 public LoopMember,
                                 public std::enable_shared_from_this<LoopbackConnection> {
 public:
  LoopbackConnection(EventLoop::Impl& loop, std::shared_ptr<ConnectionHandler> handler, const FrameLimits& limits)
      : loop_(loop), handler_(std::move(handler)), limits_(limits), id_(NextConnectionId()),
        peer_("loopback:" + std::to_string(id_)) {}

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
    // The bytes a socket would carry; the other end parses them like TCP does.
    std::vector<uint8_t> wire;
    wire.reserve(frame.wire_size());
    frame.AppendWireBytes(&wire);
    frames_sent_.fetch_add(1, std::memory_order_relaxed);
    bytes_sent_.fetch_add(wire.size(), std::memory_order_relaxed);
    asio::post(loop_.io, [self = shared_from_this(), wire = std::move(wire)] {
      std::shared_ptr<LoopbackConnection> other = self->other_.lock();
      if (!other || other->closed_) {
        ++self->frames_lost_;
        return;
      }
      other->Deliver(wire);
    });
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
  void Deliver(const std::vector<uint8_t>& wire) {
    if (closed_) return;
    frames_received_.fetch_add(1, std::memory_order_relaxed);
    bytes_received_.fetch_add(wire.size(), std::memory_order_relaxed);
    Result<Frame> frame = ParseFrame(wire.data(), wire.size(), limits_);
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
