// Connections over an application-driven byte stream (contract in stream.h).
#include "fedrt/transport/stream.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <utility>

#include "connection_id.h"
#include "fedrt/platform/config.h"
#include "fedrt/platform/log.h"
#include "fedrt/transport/messages.h"
#include "fedrt/platform/concat.h"

namespace fedrt {
namespace transport {

uint64_t NextConnectionId() {
#if FEDRT_HAVE_THREADS
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
#else
  // One thread; and ARMv7-M has no 64-bit atomics (no __atomic_fetch_add_8).
  static uint64_t next = 1;
  return next++;
#endif
}

Status ConnectionOptions::Validate() const {
  FEDRT_RETURN_IF_ERROR(limits.Validate());
  if (initial_max_frame_bytes > limits.max_frame_bytes) {
    return InvalidArgument(Concat({"initial frame limit ", initial_max_frame_bytes, " is above the frame limit ",
                                   limits.max_frame_bytes}));
  }
  return Status::Ok();
}

// ---- FrameReader ----------------------------------------------------------------

Status FrameReader::Feed(const uint8_t* data, std::size_t size, const std::function<void(Frame)>& on_frame) {
  if (failed_) return Status(StatusCode::kFailedPrecondition, "the stream failed earlier");
  while (size > 0) {
    if (!in_body_) {
      const std::size_t take = std::min(size, kFramePrefixBytes - prefix_filled_);
      std::memcpy(prefix_ + prefix_filled_, data, take);
      prefix_filled_ += take;
      data += take;
      size -= take;
      if (prefix_filled_ < kFramePrefixBytes) break;
      // The size is checked against the limit before anything is allocated.
      Result<uint32_t> body_size = ParseFramePrefix(prefix_, limits_);
      if (!body_size.ok()) {
        failed_ = true;
        return body_size.status();
      }
      uint8_t* lent = lender_ ? lender_(*body_size) : nullptr;
      if (lent != nullptr) {
        body_ = FrameBytes::Lent(lent, *body_size);
      } else {
        Result<FrameBytes> body = FrameBytes::Allocate(*body_size);
        if (!body.ok()) {
          failed_ = true;
          return body.status();
        }
        body_ = std::move(*body);
      }
      body_filled_ = 0;
      prefix_filled_ = 0;
      in_body_ = true;
    }
    const std::size_t take = std::min(size, body_.size() - body_filled_);
    std::memcpy(body_.data() + body_filled_, data, take);
    body_filled_ += take;
    data += take;
    size -= take;
    if (body_filled_ < body_.size()) break;
    in_body_ = false;
    Result<Frame> frame = VerifyFrame(std::move(body_), limits_);
    body_ = FrameBytes();
    if (!frame.ok()) {
      failed_ = true;
      return frame.status();
    }
    on_frame(std::move(*frame));
  }
  return Status::Ok();
}

// ---- StreamConnection -------------------------------------------------------------

Result<std::shared_ptr<StreamConnection>> StreamConnection::Create(std::string peer, StreamWrite write,
                                                                   std::shared_ptr<ConnectionHandler> handler,
                                                                   const ConnectionOptions& options,
                                                                   const Clock& clock) {
  if (!write) return InvalidArgument("a stream connection needs a write function");
  if (options.tls) return InvalidArgument("TLS over an application stream is the application's to provide");
  FEDRT_RETURN_IF_ERROR(options.Validate());
  return std::shared_ptr<StreamConnection>(
      new StreamConnection(std::move(peer), std::move(write), std::move(handler), options, clock));
}

StreamConnection::StreamConnection(std::string peer, StreamWrite write, std::shared_ptr<ConnectionHandler> handler,
                                   const ConnectionOptions& options, const Clock& clock)
    : peer_(std::move(peer)), write_(std::move(write)), handler_(std::move(handler)), options_(options),
      clock_(clock), reader_(options.limits), id_(NextConnectionId()),
      liveness_(options.heartbeat_interval_ms, options.idle_timeout_ms) {
  if (options.initial_max_frame_bytes != 0) reader_.set_max_frame_bytes(options.initial_max_frame_bytes);
  if (handler_) {
    reader_.set_lender([this](std::size_t size) { return handler_->LendFrameStorage(*this, size); });
  }
}

void StreamConnection::LiftInitialFrameLimit() { reader_.set_max_frame_bytes(options_.limits.max_frame_bytes); }

void StreamConnection::Open() {
  if (opened_) return;
  opened_ = true;
  liveness_.Start(clock_.NowMs());
  if (handler_) handler_->OnOpen(shared_from_this());
}

Status StreamConnection::Write(const OutFrame& frame) {
  Status written = write_(frame.prefix(), kFramePrefixBytes);
  for (std::size_t i = 0; written.ok() && i < frame.piece_count(); ++i) {
    written = write_(frame.piece(i).data, frame.piece(i).size);
  }
  if (!written.ok()) {
    // A partly written frame leaves the stream out of step: nothing more can go.
    Finish(written);
    return written;
  }
  ++stats_.frames_sent;
  stats_.bytes_sent += frame.wire_size();
  if (frame.kind() == MessageKind::kHeartbeat) ++stats_.heartbeats_sent;
  liveness_.OnSent(clock_.NowMs());
  return Status::Ok();
}

Status StreamConnection::Send(OutFrame frame) {
  if (frame.empty()) return InvalidArgument("empty frame");
  if (closed_) return Status(StatusCode::kUnavailable, "connection " + peer_ + " is closed");
  return Write(frame);
}

Status StreamConnection::Flush(uint32_t timeout_ms) {
  (void)timeout_ms;  // Send wrote every frame before it returned
  if (closed_ && !close_reason_.ok()) {
    return Status(StatusCode::kUnavailable, "connection " + peer_ + " closed: " + close_reason_.ToString());
  }
  return Status::Ok();
}

Status StreamConnection::Receive(const uint8_t* data, std::size_t size) {
  if (closed_) return Status(StatusCode::kUnavailable, "connection " + peer_ + " is closed");
  stats_.bytes_received += size;
  liveness_.OnReceived(clock_.NowMs());
  // Each frame goes to the handler as soon as it is complete, so what the
  // handler does (LiftInitialFrameLimit) applies to the next prefix in these
  // bytes. A handler that closes the connection, or lets go of it, ends the
  // deliveries; the reader still takes the rest of the bytes.
  const std::shared_ptr<StreamConnection> self = shared_from_this();
  const Status fed = reader_.Feed(data, size, [this](Frame frame) {
    if (closed_) return;
    ++stats_.frames_received;
    if (frame.kind() == MessageKind::kHeartbeat) {
      ++stats_.heartbeats_received;
      return;
    }
    if (handler_) handler_->OnFrame(*this, std::move(frame));
  });
  if (!fed.ok() && !closed_) {
    if (options_.log_errors) Log(LogLevel::kWarning, "connection %s: %s", peer_.c_str(), fed.ToString().c_str());
    Abort(fed, /*notify_peer=*/true);
  }
  return fed;
}

void StreamConnection::OnStreamClosed(const Status& reason) {
  Finish(reason.ok() ? Status(StatusCode::kUnavailable, "peer " + peer_ + " closed the connection") : reason);
}

uint32_t StreamConnection::Poll() {
  if (closed_) return 0;
  const uint64_t now = clock_.NowMs();
  switch (liveness_.Poll(now)) {
    case Liveness::Due::kIdle:
      Finish(liveness_.IdleTimeout(peer_));
      return 0;
    case Liveness::Due::kHeartbeat: {
      Result<OutFrame> frame = Encode(liveness_.NextHeartbeat(clock_.NowNanos()), options_.limits);
      if (frame.ok() && !Write(*frame).ok()) return 0;
      break;
    }
    case Liveness::Due::kNothing:
      break;
  }
  const uint64_t wait = liveness_.NextDeadlineMs(now);
  return wait == Liveness::kNever ? std::numeric_limits<uint32_t>::max()
                                  : static_cast<uint32_t>(std::clamp<uint64_t>(wait, 1, UINT32_MAX - 1));
}

void StreamConnection::Close() { Finish(Status::Ok()); }

void StreamConnection::Abort(Status reason, bool notify_peer) {
  if (closed_) return;
  if (notify_peer) {
    Result<OutFrame> error = EncodeStatus(reason, options_.limits);
    if (error.ok()) (void)Write(*error);
  }
  Finish(reason);
}

void StreamConnection::Finish(const Status& reason) {
  if (closed_) return;
  closed_ = true;
  close_reason_ = reason;
  std::shared_ptr<ConnectionHandler> handler = std::move(handler_);
  if (handler) handler->OnClose(*this, reason);
}

// ---- MemoryPipe ---------------------------------------------------------------------

Result<std::unique_ptr<MemoryPipe>> MemoryPipe::Create(std::shared_ptr<ConnectionHandler> a_handler,
                                                       std::shared_ptr<ConnectionHandler> b_handler,
                                                       const ConnectionOptions& options, const Clock& clock) {
  std::unique_ptr<MemoryPipe> pipe(new MemoryPipe());
  pipe->a_side_ = std::make_shared<Side>();
  pipe->b_side_ = std::make_shared<Side>();
  const auto writer = [](std::shared_ptr<Side> side) {
    return [side](const uint8_t* data, std::size_t size) {
      side->written.insert(side->written.end(), data, data + size);
      return Status::Ok();
    };
  };
  Result<std::shared_ptr<StreamConnection>> a =
      StreamConnection::Create("memory:a", writer(pipe->a_side_), std::move(a_handler), options, clock);
  if (!a.ok()) return a.status();
  Result<std::shared_ptr<StreamConnection>> b =
      StreamConnection::Create("memory:b", writer(pipe->b_side_), std::move(b_handler), options, clock);
  if (!b.ok()) return b.status();
  pipe->a_ = std::move(*a);
  pipe->b_ = std::move(*b);
  pipe->a_->Open();
  pipe->b_->Open();
  return pipe;
}

void MemoryPipe::Reserve(std::size_t bytes) {
  for (Side* side : {a_side_.get(), b_side_.get()}) {
    side->written.reserve(bytes);
    side->delivering.reserve(bytes);
  }
}

bool MemoryPipe::Pump() {
  bool moved = false;
  for (bool again = true; again;) {
    again = false;
    // What a side wrote before it closed is still delivered, then the close.
    const auto deliver = [&](Side& from, StreamConnection& from_connection, StreamConnection& to) {
      if (!from.written.empty()) {
        // Both buffers keep their memory, so a steady exchange allocates
        // nothing here (an engine's no-allocation test runs over a pipe).
        from.delivering.swap(from.written);
        if (!to.closed()) (void)to.Receive(from.delivering.data(), from.delivering.size());
        from.delivering.clear();
        again = moved = true;
      }
      if (from_connection.closed() && !from.closed_seen) {
        from.closed_seen = true;
        to.OnStreamClosed(Status::Ok());
        again = moved = true;
      }
    };
    deliver(*a_side_, *a_, *b_);
    deliver(*b_side_, *b_, *a_);
  }
  return moved;
}

}  // namespace transport
}  // namespace fedrt
