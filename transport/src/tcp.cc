// TCP connections and listener on standalone Asio (contract in tcp.h and
// connection.h). Every object here lives on one loop thread: public methods
// called from elsewhere are dispatched there, so the only shared state is a
// few atomics, and the send lock under which a small frame sent from another
// thread goes straight into an idle socket (TcpConnection::TryDirectSend).
#include "fedrt/transport/tcp.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <asio.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "acceptor.h"
#include "impl_access.h"
#include "event_loop_impl.h"
#include "fedrt/platform/clock.h"
#include "fedrt/platform/log.h"
#include "fedrt/platform/memory.h"
#include "fedrt/transport/liveness.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/tls.h"
#if FEDRT_WITH_TLS
#include "tls_impl.h"
#endif
#include "wire.h"

namespace fedrt {
namespace transport {
namespace {

using asio::ip::tcp;
using Clock = asio::steady_timer::clock_type;

constexpr std::size_t kMaxFramesPerWrite = 16;
// Direct writes (TcpConnection::TryDirectSend) of frames up to this size go
// to the loop when the socket takes none of their bytes; larger ones (only
// with ConnectionOptions::direct_send_max_bytes raised) wait for room on the
// sending thread.
constexpr std::size_t kSmallDirectSendBytes = 64u << 10;
// ConnectionOptions::busy_poll_us: frames up to this size make the loop
// poll. After a larger one the next is milliseconds away, and polling on a
// machine with more busy threads than cores only takes CPU from them.
constexpr std::size_t kMaxBusyPollFrameBytes = 1u << 20;
// A direct write waiting for room looks this often whether the connection
// is being closed (the loop waits for it under send_mutex_).
constexpr int kDirectSendPollMs = 20;
// TLS: each SSL_write makes at least one record per buffer, so pieces below
// this size are copied together into one buffer before they are written.
constexpr std::size_t kTlsCoalesceBytes = 16u << 10;

#if FEDRT_WITH_TLS
using TlsStream = asio::ssl::stream<tcp::socket&>;
#endif

// Bytes read before asking the handler to place a payload: a raw ring
// chunk's head is about 120 bytes.
constexpr std::size_t kPeekBytes = 512;

// Completion condition for whole frames: Asio's default (transfer_all) hands
// the socket at most 64 KiB per system call; a megabyte chunk then costs
// sixteen sends and sixteen receives, each with its own wake-up. This lets
// every call move as much as the socket buffers take.
struct Whole {
  std::size_t operator()(const std::error_code& ec, std::size_t) const { return ec ? 0 : kMaxTransferBytes; }
  static constexpr std::size_t kMaxTransferBytes = std::size_t{1} << 30;
};

// The liveness timer's time: the port's monotonic clock, in milliseconds.
uint64_t NowMs() { return MonotonicNanos() / 1000000u; }

std::string Describe(const tcp::endpoint& endpoint) {
  return endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
}

class TcpConnection final : public Connection,
                            public LoopMember,
                            public std::enable_shared_from_this<TcpConnection> {
 public:
  TcpConnection(EventLoop::Impl& loop, tcp::socket socket, const ConnectionOptions& options,
                std::shared_ptr<ConnectionHandler> handler)
      : loop_(loop),
        socket_(std::move(socket)),
        read_timer_(loop.io),
        write_timer_(loop.io),
        liveness_timer_(loop.io),
        options_(options),
        handler_(std::move(handler)),
        id_(NextConnectionId()),
        receive_limit_(options.initial_max_frame_bytes != 0 ? options.initial_max_frame_bytes
                                                            : options.limits.max_frame_bytes),
        liveness_(options.heartbeat_interval_ms, options.idle_timeout_ms) {
    std::error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);
    const tcp::endpoint remote = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("unknown") : Describe(remote);
#if FEDRT_WITH_TLS
    if (options_.tls) tls_ = std::make_unique<TlsStream>(socket_, internal::ImplAccess::Of(*options_.tls).context);
#endif
  }

  // On the loop thread, once the owner holds a shared_ptr: a TLS connection
  // runs its handshake within `timeout_ms` (the listener's io_timeout_ms, the
  // dialler's connect deadline) and reports it to `done`; a plain one reports
  // OK at once. On failure the socket is closed and the handler never hears
  // of the connection. The owner calls Start() after an OK.
  void Handshake(bool as_server, const std::string& dialled_host, uint32_t timeout_ms,
                 std::function<void(Status)> done) {
#if FEDRT_WITH_TLS
    if (tls_) {
      AddToLoop();
      SSL* ssl = tls_->native_handle();
      std::error_code ec;
      if (as_server) {
        tls_->set_verify_mode(options_.tls->can_dial()
                                  ? asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert
                                  : asio::ssl::verify_none,
                              ec);
      } else {
        tls_->set_verify_mode(asio::ssl::verify_peer, ec);
        const std::string& name =
            options_.tls->config().server_name.empty() ? dialled_host : options_.tls->config().server_name;
        asio::ip::make_address(name, ec);
        if (!ec) {
          X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
        } else {
          SSL_set1_host(ssl, name.c_str());
          SSL_set_tlsext_host_name(ssl, name.c_str());
        }
      }
      if (timeout_ms != 0) {
        read_timer_.expires_after(std::chrono::milliseconds(timeout_ms));
        read_timer_.async_wait([self = shared_from_this()](const std::error_code& timer_ec) {
          if (timer_ec || self->state_ != State::kHandshake) return;
          self->handshake_timed_out_ = true;
          std::error_code ignored;
          self->socket_.close(ignored);  // completes the handshake with an error
        });
      }
      tls_->async_handshake(
          as_server ? asio::ssl::stream_base::server : asio::ssl::stream_base::client,
          [self = shared_from_this(), timeout_ms, done = std::move(done)](const std::error_code& handshake_ec) {
            self->read_timer_.cancel();
            Status status;
            const std::string what = "TLS handshake with " + self->peer_;
            if (self->state_ == State::kClosed) {
              status = Status(StatusCode::kCancelled, what + " cancelled: the connection was closed");
            } else if (self->handshake_timed_out_) {
              status = Status(StatusCode::kDeadlineExceeded,
                              what + " did not complete within " + std::to_string(timeout_ms) + " ms");
            } else if (handshake_ec) {
              status = TlsFailure(what + " failed", handshake_ec, self->tls_->native_handle());
            }
            if (!status.ok()) self->Finish(status);
            done(std::move(status));
          });
      return;
    }
#else
    (void)as_server;
    (void)dialled_host;
    (void)timeout_ms;
#endif
    done(Status::Ok());
  }

  void Start() {
    AddToLoop();
    state_ = State::kOpen;
    liveness_.Start(NowMs());
    handler_->OnOpen(shared_from_this());
    if (state_ == State::kClosed) return;
    ReadHeader();
    if (state_ == State::kOpen) ScheduleLiveness();
  }

  Status Send(OutFrame frame) override {
    if (frame.empty()) return InvalidArgument("empty frame");
    if (send_closed_.load() || state_.load() != State::kOpen) {
      return Status(StatusCode::kUnavailable, "connection " + peer_ + " is closed");
    }
    const std::size_t size = frame.wire_size();
    if (size <= kMaxBusyPollFrameBytes) loop_.KeepPolling(options_.busy_poll_us);  // the reply may follow soon
    std::unique_lock<std::mutex> lock(send_mutex_);
    if (size <= options_.direct_send_max_bytes && !loop_.io.get_executor().running_in_this_thread()) {
      bool written = false;
      Status direct = TryDirectSend(frame, &written);
      if (!direct.ok() || written) return direct;
    }
    if (queued_bytes_.fetch_add(size) + size > options_.max_queued_bytes) {
      queued_bytes_.fetch_sub(size);
      return Status(StatusCode::kResourceExhausted, "send queue to " + peer_ + " is full");
    }
    ++pending_frames_;
    lock.unlock();
    asio::dispatch(loop_.io, [self = shared_from_this(), frame = std::move(frame)]() mutable {
      self->Enqueue(std::move(frame));
    });
    return Status::Ok();
  }

  Status Flush(uint32_t timeout_ms) override {
    return WaitForFlush(loop_, peer_, timeout_ms, [self = shared_from_this()](FlushPromise promise) {
      self->MarkFlush(std::move(promise));
    });
  }

  void Close() override {
    send_closed_ = true;
    asio::dispatch(loop_.io, [self = shared_from_this()] { self->BeginGracefulClose(); });
  }

  void Abort(Status reason, bool notify_peer) override {
    send_closed_ = true;
    asio::dispatch(loop_.io, [self = shared_from_this(), reason = std::move(reason), notify_peer]() mutable {
      self->Fail(std::move(reason), notify_peer);
    });
  }

  void ShutdownForLoopExit() override {
    Finish(Status(StatusCode::kCancelled, "event loop destroyed"));
  }

  void LiftInitialFrameLimit() override { receive_limit_.store(options_.limits.max_frame_bytes); }

  uint64_t id() const override { return id_; }
  const std::string& peer() const override { return peer_; }
  bool closed() const override { return state_.load() == State::kClosed; }
  ConnectionStats stats() const override {
    ConnectionStats s;
    s.frames_sent = frames_sent_.load(std::memory_order_relaxed);
    s.frames_received = frames_received_.load(std::memory_order_relaxed);
    s.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
    s.bytes_received = bytes_received_.load(std::memory_order_relaxed);
    s.heartbeats_sent = heartbeats_sent_.load(std::memory_order_relaxed);
    s.heartbeats_received = heartbeats_received_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  enum class State { kHandshake, kOpen, kClosing, kClosed };

  void AddToLoop() {
    if (in_loop_) return;
    in_loop_ = true;
    loop_.AddMember(shared_from_this());
  }

  // Runs `fn` on the stream the frames travel on: the TLS stream or the socket.
  template <typename Fn>
  void WithStream(Fn&& fn) {
#if FEDRT_WITH_TLS
    if (tls_) return fn(*tls_);
#endif
    fn(socket_);
  }

  // ---- Reading: header -> body -> handler -> header ... ----------------------

  void ReadHeader() {
    // While open, the liveness timer watches the idle deadline; while
    // closing, the peer's end of stream is due within io_timeout_ms.
    liveness_.set_receiving(false);
    if (state_ == State::kClosing) {
      ArmTimer(read_timer_, options_.io_timeout_ms, ++read_sequence_, "no frame from the peer");
    }
    WithStream([this](auto& stream) {
      asio::async_read(stream, asio::buffer(header_),
                       [self = shared_from_this()](const std::error_code& ec, std::size_t n) {
                         self->OnHeader(ec, n);
                       });
    });
  }

  void OnHeader(const std::error_code& ec, std::size_t n) {
    ++read_sequence_;
    read_timer_.cancel();
    if (state_ == State::kClosed) return;
    if (ec) return OnReadError(ec, n == 0);
    // The body's reads have io_timeout_ms each; meanwhile the peer is not idle.
    liveness_.OnReceived(NowMs());
    liveness_.set_receiving(true);
    FrameLimits limits = options_.limits;
    limits.max_frame_bytes = receive_limit_.load();  // the initial limit until the owner lifts it
    Result<uint32_t> size = ParseFramePrefix(header_, limits);
    if (!size.ok()) return Fail(size.status(), true);
    Result<FrameBytes> body = loop_.frame_pool->Allocate(*size);
    if (!body.ok()) return Fail(body.status(), true);
    body_ = std::move(*body);
    if (*size >= kMinPlacedFrameBytes && handler_ && handler_->WantsPlacement(*this)) {
      // Head first: enough for a ring chunk's fields, then PlacePayload decides.
      peeked_ = std::min<std::size_t>(body_.size(), kPeekBytes);
      ArmTimer(read_timer_, options_.io_timeout_ms, ++read_sequence_, "frame body did not arrive in time");
      WithStream([this](auto& stream) {
        asio::async_read(stream, asio::buffer(body_.data(), peeked_),
                         [self = shared_from_this()](const std::error_code& peek_ec, std::size_t) {
                           self->OnPeek(peek_ec);
                         });
      });
      return;
    }
    ReadRest(0);
  }

  // Reads the body from byte `from` on into the body buffer.
  void ReadRest(std::size_t from) { ReadBody(asio::buffer(body_.data() + from, body_.size() - from)); }

  // Reads the rest of a frame body into `buffers`, then OnBody.
  template <typename Buffers>
  void ReadBody(const Buffers& buffers) {
    ArmTimer(read_timer_, options_.io_timeout_ms, ++read_sequence_, "frame body did not arrive in time");
    WithStream([this, &buffers](auto& stream) {
      asio::async_read(stream, buffers, Whole(), [self = shared_from_this()](const std::error_code& ec, std::size_t) {
        self->OnBody(ec);
      });
    });
  }

  void OnPeek(const std::error_code& ec) {
    ++read_sequence_;
    read_timer_.cancel();
    if (state_ == State::kClosed) return;
    if (ec) return OnReadError(ec, false);
    std::size_t offset = 0;
    Result<PayloadHead> head = PeekPayloadHead(body_.data(), body_.size(), peeked_, options_.limits, &offset);
    uint8_t* target = nullptr;
    bool consume = false;
    if (head.ok() && state_ == State::kOpen && peeked_ - offset <= head->size) {
      target = handler_->PlacePayload(*this, *head);
      if (target == nullptr) consume = handler_->ConsumesPayload(*this, *head);
    }
    // PeekPayloadHead checked that the payload lies within the body.
    const std::size_t size = head.ok() ? static_cast<std::size_t>(head->size) : 0;
    if (target != nullptr || consume) placed_kind_ = head->kind;
    if (consume) return StartConsume(offset, size);
    if (target == nullptr) {
      if (peeked_ == body_.size()) return OnBody(std::error_code());
      return ReadRest(peeked_);
    }
    // The payload's first bytes came with the head; the rest goes straight to
    // the target, the padding after it to the body.
    const std::size_t early = peeked_ - offset;
    if (early > 0) std::memcpy(target, body_.data() + offset, early);
    placed_ = target;
    placed_offset_ = offset;
    placed_size_ = size;
    const std::array<asio::mutable_buffer, 2> rest = {
        asio::buffer(target + early, size - early),
        asio::buffer(body_.data() + offset + size, body_.size() - offset - size)};
    ReadBody(rest);
  }

  // Consumption: the payload at body offset `offset` goes to the handler in
  // pieces through piece_; the bytes that came with the head start the first.
  void StartConsume(std::size_t offset, std::size_t size) {
    if (!piece_) {
      piece_.reset(static_cast<uint8_t*>(AlignedAlloc(kPayloadPieceBytes, 64)));
      if (!piece_) return Fail(Status(StatusCode::kResourceExhausted, "cannot allocate a receive buffer"), true);
    }
    const std::size_t early = peeked_ - offset;
    if (early > 0) std::memcpy(piece_.get(), body_.data() + offset, early);
    consumed_ = true;
    placed_offset_ = offset;
    placed_size_ = size;
    consumed_bytes_ = 0;
    piece_fill_ = early;
    ReadPiece();
  }

  void ReadPiece() {
    const std::size_t want = std::min(kPayloadPieceBytes, placed_size_ - consumed_bytes_);
    if (piece_fill_ == want) return OnPiece(std::error_code());  // a piece that came whole with the head
    ArmTimer(read_timer_, options_.io_timeout_ms, ++read_sequence_, "frame body did not arrive in time");
    WithStream([this, want](auto& stream) {
      asio::async_read(stream, asio::buffer(piece_.get() + piece_fill_, want - piece_fill_), Whole(),
                       [self = shared_from_this()](const std::error_code& ec, std::size_t) { self->OnPiece(ec); });
    });
  }

  void OnPiece(const std::error_code& ec) {
    ++read_sequence_;
    read_timer_.cancel();
    if (state_ == State::kClosed) return;
    if (ec) return OnReadError(ec, false);
    const std::size_t size = std::min(kPayloadPieceBytes, placed_size_ - consumed_bytes_);
    handler_->ConsumePayload(*this, piece_.get(), consumed_bytes_, size);
    consumed_bytes_ += size;
    piece_fill_ = 0;
    if (state_ == State::kClosed) return;
    if (consumed_bytes_ < placed_size_) return ReadPiece();
    const std::size_t tail = placed_offset_ + placed_size_;
    if (tail == body_.size()) return OnBody(std::error_code());
    ReadRest(tail);
  }

  void OnBody(const std::error_code& ec) {
    ++read_sequence_;
    read_timer_.cancel();
    if (state_ == State::kClosed) return;
    if (ec) return OnReadError(ec, false);
    liveness_.OnReceived(NowMs());
    if (body_.size() <= kMaxBusyPollFrameBytes) loop_.KeepPolling(options_.busy_poll_us);  // the next may follow soon
    bytes_received_.fetch_add(kFramePrefixBytes + body_.size(), std::memory_order_relaxed);
    frames_received_.fetch_add(1, std::memory_order_relaxed);
    Result<Frame> frame = VerifyFrame(std::move(body_), options_.limits);
    body_ = FrameBytes();
    uint8_t* placed = placed_;
    placed_ = nullptr;
    const bool consumed = consumed_;
    consumed_ = false;
    if (!frame.ok()) return Fail(frame.status(), true);
    if ((placed != nullptr || consumed) && frame->kind() != placed_kind_) {
      return Fail(Corrupt("frame changed kind after its head"), true);
    }
    if (placed != nullptr) internal::MarkPlaced(*frame, placed, placed_offset_, placed_size_);
    if (consumed) internal::MarkConsumed(*frame, placed_offset_, placed_size_);
    if (frame->kind() == MessageKind::kHeartbeat) {
      heartbeats_received_.fetch_add(1, std::memory_order_relaxed);
    } else if (state_ == State::kOpen) {
      handler_->OnFrame(*this, std::move(*frame));
    }
    if (state_ != State::kClosed) ReadHeader();
  }

  void OnReadError(const std::error_code& ec_in, bool at_frame_boundary) {
    std::error_code ec = ec_in;
    if (ec == asio::error::operation_aborted) return;  // Finish() cancelled the read
#if FEDRT_WITH_TLS
    // A TLS peer closes with a TCP half-close after its last frame, not with
    // close_notify (see ShutdownSending): the end of stream means what it
    // means without TLS. Other TLS errors (alerts, bad records) are failures.
    if (ec == asio::ssl::error::stream_truncated) ec = asio::error::eof;
    if (tls_ && ec.category() == asio::error::get_ssl_category()) {
      return Fail(TlsFailure("TLS read from " + peer_, ec, tls_->native_handle()), false);
    }
#endif
    if (ec == asio::error::eof && at_frame_boundary) {
      if (state_ == State::kClosing) return Finish(Status::Ok());
      return Finish(Status(StatusCode::kUnavailable, "peer " + peer_ + " closed the connection"));
    }
    if (ec == asio::error::eof) return Fail(Corrupt("peer " + peer_ + " closed in the middle of a frame"), false);
    Fail(Status(StatusCode::kUnavailable, "read from " + peer_ + ": " + ec.message()), false);
  }

  // ---- Writing: one write in flight, the rest queued --------------------------

  // Frames up to direct_send_max_bytes, from a thread other than the loop's,
  // under send_mutex_: when no frame is queued or being written
  // (pending_frames_ == 0), the frame goes into the socket from the calling
  // thread, which saves waking the loop for it (one of the four thread
  // hand-offs of a small message) and, for a large one, lets the send's copy
  // run beside the loop's receive copy. *written: it was (the frame is
  // released on return); false: the socket took none of a small frame, or
  // this connection cannot (TLS, not open), and the caller queues it. A
  // large frame, or one the socket took part of, gets the rest from here,
  // waiting for room up to io_timeout_ms; a close (send_closed_) ends the
  // wait within kDirectSendPollMs, since the loop thread then waits for
  // send_mutex_ (it never does otherwise: heartbeats skip a held lock). A
  // failure part-way closes the connection.
  Status TryDirectSend(const OutFrame& frame, bool* written) {
    *written = false;
#if FEDRT_WITH_TLS
    if (tls_) return Status::Ok();
#endif
    if (pending_frames_ != 0 || socket_closed_ || state_.load() != State::kOpen) return Status::Ok();
    std::array<iovec, 4> iov;  // the prefix and at most three body pieces
    std::size_t count = 0;
    iov[count++] = {const_cast<uint8_t*>(frame.prefix()), kFramePrefixBytes};
    for (std::size_t i = 0; i < frame.piece_count(); ++i) {
      if (frame.piece(i).size != 0) iov[count++] = {const_cast<uint8_t*>(frame.piece(i).data), frame.piece(i).size};
    }
    const int fd = socket_.native_handle();
    std::size_t total = frame.wire_size();
    std::size_t sent = 0;
    std::size_t first = 0;  // iov[first..count) still to write, iov[first] advanced
    const uint64_t deadline = NowMs() + options_.io_timeout_ms;
    for (;;) {
      msghdr message{};
      message.msg_iov = iov.data() + first;
      message.msg_iovlen = count - first;
      const ssize_t n = ::sendmsg(fd, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (sent == 0 && total <= kSmallDirectSendBytes) return Status::Ok();  // the loop writes it when there is room
        if (send_closed_.load()) {
          // Closing: the loop waits for send_mutex_. Nothing written yet
          // leaves the stream whole.
          if (sent == 0) return Status(StatusCode::kUnavailable, "connection " + peer_ + " is closed");
          return DirectSendFailed(Status(StatusCode::kCancelled, "closed during a write (" + peer_ + ")"));
        }
        pollfd p{};
        p.fd = fd;
        p.events = POLLOUT;
        const uint64_t now = NowMs();
        if (options_.io_timeout_ms != 0 && now >= deadline) {
          return DirectSendFailed(Status(StatusCode::kDeadlineExceeded, "write did not complete in time (" + peer_ + ")"));
        }
        const uint64_t left = options_.io_timeout_ms == 0 ? kDirectSendPollMs : deadline - now;
        (void)::poll(&p, 1, static_cast<int>(std::min<uint64_t>(left, kDirectSendPollMs)));
        continue;
      }
      if (n < 0) {
        return DirectSendFailed(Status(StatusCode::kUnavailable,
                                       "write to " + peer_ + ": " + std::error_code(errno, std::generic_category()).message()));
      }
      sent += static_cast<std::size_t>(n);
      if (sent == total) break;
      std::size_t advance = static_cast<std::size_t>(n);
      while (advance >= iov[first].iov_len) advance -= iov[first++].iov_len;
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + advance;
      iov[first].iov_len -= advance;
    }
    bytes_sent_.fetch_add(total, std::memory_order_relaxed);
    frames_sent_.fetch_add(1, std::memory_order_relaxed);
    *written = true;
    return Status::Ok();
  }

  // A direct write failed part-way: the stream is cut inside a frame, so the
  // connection closes (on the loop) and the send reports it.
  Status DirectSendFailed(Status reason) {
    send_closed_ = true;
    asio::dispatch(loop_.io, [self = shared_from_this(), reason]() mutable { self->Fail(std::move(reason), false); });
    return Status(StatusCode::kUnavailable, "connection " + peer_ + " is closed: " + reason.message());
  }

  // The loop is done with `n` frames it was handed (written or dropped).
  void FramesDone(std::size_t n) {
    std::lock_guard<std::mutex> lock(send_mutex_);
    pending_frames_ -= n;
  }

  void Enqueue(OutFrame frame) {
    if (state_ != State::kOpen) {
      queued_bytes_.fetch_sub(frame.wire_size());
      ++frames_lost_;
      FramesDone(1);
      return;
    }
    ++frames_enqueued_;
    queue_.push_back(std::move(frame));
    if (!writing_) Write();
  }

  void Write() {
    writing_ = true;
    in_flight_.clear();
    buffers_.clear();
    // Buffers point at the prefixes stored inside the in-flight frames: the
    // vector must not reallocate once the first is taken, nor while the
    // write is pending. Reserved here, not at construction: an idle
    // connection holds none of the write path's memory (ReleaseWriteMemory).
    in_flight_.reserve(std::min(queue_.size(), kMaxFramesPerWrite));
    std::size_t taken = 0;
    while (taken < queue_.size() && in_flight_.size() < kMaxFramesPerWrite) {
      in_flight_.push_back(std::move(queue_[taken++]));
      const OutFrame& f = in_flight_.back();
      buffers_.emplace_back(f.prefix(), kFramePrefixBytes);
      for (std::size_t i = 0; i < f.piece_count(); ++i) {
        if (f.piece(i).size != 0) buffers_.emplace_back(f.piece(i).data, f.piece(i).size);
      }
    }
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(taken));
    ArmTimer(write_timer_, options_.io_timeout_ms, ++write_sequence_, "write did not complete in time");
#if FEDRT_WITH_TLS
    if (tls_) {
      CoalesceSmallBuffers();
      asio::async_write(*tls_, tls_buffers_, Whole(),
                        [self = shared_from_this()](const std::error_code& ec, std::size_t) {
                          // Report the frame bytes, as a plain write does (TLS adds records).
                          std::size_t n = 0;
                          for (const asio::const_buffer& b : self->buffers_) n += b.size();
                          self->OnWrite(ec, ec ? 0 : n);
                        });
      return;
    }
#endif
    asio::async_write(socket_, buffers_, Whole(), [self = shared_from_this()](const std::error_code& ec, std::size_t n) {
      self->OnWrite(ec, n);
    });
  }

  // A flush point: the frames enqueued so far (every Send that happened
  // before the Flush on its thread was dispatched before this) are written
  // once frames_written_ reaches frames_enqueued_.
  void MarkFlush(FlushPromise promise) {
    if (frames_lost_ != 0) return promise.Resolve(FramesLost(peer_, frames_lost_, close_reason_));
    if (frames_written_ == frames_enqueued_) return promise.Resolve(Status::Ok());
    flushes_.push_back({frames_enqueued_, std::move(promise)});
  }

  void ResolveFlushes() {
    std::size_t done = 0;
    while (done < flushes_.size() && flushes_[done].target <= frames_written_) {
      flushes_[done].promise.Resolve(Status::Ok());
      ++done;
    }
    flushes_.erase(flushes_.begin(), flushes_.begin() + static_cast<std::ptrdiff_t>(done));
  }

  // tls_buffers_ = buffers_ with every run of small pieces copied into one
  // piece of tls_staging_ (one TLS record instead of one per piece).
  void CoalesceSmallBuffers() {
    std::size_t staged = 0;
    for (const asio::const_buffer& b : buffers_) {
      if (b.size() < kTlsCoalesceBytes) staged += b.size();
    }
    tls_staging_.resize(staged);
    tls_buffers_.clear();
    uint8_t* out = tls_staging_.data();
    uint8_t* run = out;
    for (const asio::const_buffer& b : buffers_) {
      if (b.size() < kTlsCoalesceBytes) {
        std::memcpy(out, b.data(), b.size());
        out += b.size();
        continue;
      }
      if (out != run) tls_buffers_.emplace_back(run, static_cast<std::size_t>(out - run));
      run = out;
      tls_buffers_.push_back(b);
    }
    if (out != run) tls_buffers_.emplace_back(run, static_cast<std::size_t>(out - run));
  }

  void OnWrite(const std::error_code& ec, std::size_t n) {
    ++write_sequence_;
    write_timer_.cancel();
    writing_ = false;
    if (state_ == State::kClosed || ec) {
      // The socket no longer reads these frames: release them (and the
      // payloads they borrow) now rather than when the connection dies.
      FramesDone(in_flight_.size());
      buffers_.clear();
      tls_buffers_.clear();
      in_flight_.clear();
      if (state_ == State::kClosed || ec == asio::error::operation_aborted) return;
      return Fail(Status(StatusCode::kUnavailable, "write to " + peer_ + ": " + ec.message()), false);
    }
    std::size_t frame_bytes = 0;
    for (const OutFrame& f : in_flight_) {
      frame_bytes += f.wire_size();
      if (f.kind() == MessageKind::kHeartbeat) heartbeats_sent_.fetch_add(1, std::memory_order_relaxed);
    }
    queued_bytes_.fetch_sub(frame_bytes);
    bytes_sent_.fetch_add(n, std::memory_order_relaxed);
    frames_sent_.fetch_add(in_flight_.size(), std::memory_order_relaxed);
    frames_written_ += in_flight_.size();
    FramesDone(in_flight_.size());
    buffers_.clear();
    tls_buffers_.clear();
    in_flight_.clear();
    ResolveFlushes();
    if (handler_) handler_->OnSent(*this);
    liveness_.OnSent(NowMs());
    // A Send from OnSent (on this thread) may have started the next write.
    if (writing_) return;
    if (!queue_.empty()) return Write();
    ReleaseWriteMemory();
    if (state_ == State::kClosing) ShutdownSending();
  }

  // Nothing left to write: the write path's vectors go back to the heap
  // (2.3 KiB with a full write's reservation, more after a long queue), so
  // thousands of idle connections (a fleet between rounds) hold none of it;
  // the next Write reserves what it needs again.
  void ReleaseWriteMemory() {
    std::vector<OutFrame>().swap(queue_);
    std::vector<OutFrame>().swap(in_flight_);
    std::vector<asio::const_buffer>().swap(buffers_);
    std::vector<asio::const_buffer>().swap(tls_buffers_);
    std::vector<uint8_t>().swap(tls_staging_);
  }

  // ---- Heartbeats and deadlines ------------------------------------------------

  // One timer for both liveness deadlines (liveness.h), re-armed for the
  // nearer one each time it fires.
  void ScheduleLiveness() {
    const uint64_t wait = liveness_.NextDeadlineMs(NowMs());
    if (wait == Liveness::kNever) return;
    liveness_timer_.expires_after(std::chrono::milliseconds(std::max<uint64_t>(wait, 1)));
    liveness_timer_.async_wait([self = shared_from_this()](const std::error_code& ec) {
      if (ec || self->state_ != State::kOpen) return;
      switch (self->liveness_.Poll(NowMs())) {
        case Liveness::Due::kIdle:
          return self->Fail(self->liveness_.IdleTimeout(self->peer_), false);
        case Liveness::Due::kHeartbeat:
          if (!self->writing_) {  // a write under way keeps the peer hearing bytes
            // So does a direct write holding send_mutex_: a large one may
            // wait for the peer's loop to read, which may itself wait here
            // for its own sender, so the loop never blocks on it.
            std::unique_lock<std::mutex> lock(self->send_mutex_, std::try_to_lock);
            if (!lock.owns_lock()) break;
            Result<OutFrame> frame = Encode(self->liveness_.NextHeartbeat(MonotonicNanos()), self->options_.limits);
            if (frame.ok()) {
              self->queued_bytes_.fetch_add(frame->wire_size());
              ++self->pending_frames_;
              lock.unlock();
              self->Enqueue(std::move(*frame));
            }
          }
          break;
        case Liveness::Due::kNothing:
          break;
      }
      self->ScheduleLiveness();
    });
  }

  void ArmTimer(asio::steady_timer& timer, uint32_t ms, uint64_t sequence, const char* what) {
    if (ms == 0) return;
    timer.expires_after(std::chrono::milliseconds(ms));
    const bool is_read = &timer == &read_timer_;
    timer.async_wait([self = shared_from_this(), sequence, is_read, what](const std::error_code& ec) {
      if (ec) return;  // cancelled: the operation finished in time
      const uint64_t current = is_read ? self->read_sequence_ : self->write_sequence_;
      if (current != sequence || self->state_ == State::kClosed) return;
      if (is_read && self->state_ == State::kClosing) return self->Finish(Status::Ok());
      self->Fail(Status(StatusCode::kDeadlineExceeded, std::string(what) + " (" + self->peer_ + ")"), false);
    });
  }

  // ---- Closing -------------------------------------------------------------------

  void BeginGracefulClose() {
    if (state_ != State::kOpen) return;
    state_ = State::kClosing;
    liveness_timer_.cancel();
    if (!writing_ && queue_.empty()) ShutdownSending();
  }

  // Everything queued is sent: tell the peer, then wait (a bounded time) for
  // its end of the stream so no unread data turns our close into a reset.
  // With TLS this is the same TCP half-close, without a close_notify alert:
  // sending one needs OpenSSL to read the peer's in the same call, which
  // would race the pending frame read. Frames are length-prefixed and every
  // record is authenticated, so a cut stream can only end the connection
  // early, as a dropped connection does; a cut inside a frame is an error.
  void ShutdownSending() {
    std::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return Finish(Status::Ok());
    ++read_sequence_;
    read_timer_.cancel();
    ArmTimer(read_timer_, options_.io_timeout_ms, read_sequence_, "peer did not close");
  }

  void Fail(Status reason, bool notify_peer) {
    if (state_ == State::kClosed) return;
    send_closed_ = true;  // a direct write waiting for room gives up (TryDirectSend)
    if (options_.log_errors) {
      Log(LogLevel::kWarning, "connection %s closed: %s", peer_.c_str(), reason.ToString().c_str());
    }
    if (notify_peer && state_ == State::kOpen) {
      // Best effort, bounded: one synchronous write of a small frame on a
      // socket we are about to close anyway; never blocks (non-blocking mode).
      Result<OutFrame> error = EncodeStatus(reason, options_.limits);
      // send_mutex_: not in the middle of another thread's direct write.
      std::lock_guard<std::mutex> lock(send_mutex_);
      if (error.ok() && !writing_ && pending_frames_ == 0) {
        std::error_code ec;
        socket_.non_blocking(true, ec);
        const std::array<asio::const_buffer, 2> buffers = {
            asio::buffer(error->prefix(), kFramePrefixBytes), asio::buffer(error->body(), error->body_size())};
#if FEDRT_WITH_TLS
        if (tls_) {
          std::vector<uint8_t> bytes(kFramePrefixBytes + error->body_size());
          asio::buffer_copy(asio::buffer(bytes), buffers);
          asio::write(*tls_, asio::buffer(bytes), ec);
        } else {
          socket_.write_some(buffers, ec);
        }
#else
        socket_.write_some(buffers, ec);
#endif
      }
    }
    Finish(std::move(reason));
  }

  void Finish(Status reason) {
    if (state_ == State::kClosed) return;
    const bool opened = state_ != State::kHandshake;  // the handler knows of it
    state_ = State::kClosed;
    send_closed_ = true;  // a direct write waiting for room gives up (TryDirectSend)
    std::error_code ec;
    {
      // No direct write may use the descriptor once it is closed (and
      // perhaps reused).
      std::lock_guard<std::mutex> lock(send_mutex_);
      socket_closed_ = true;
      socket_.shutdown(tcp::socket::shutdown_both, ec);
      socket_.close(ec);
    }
    read_timer_.cancel();
    write_timer_.cancel();
    liveness_timer_.cancel();
    for (const OutFrame& f : queue_) queued_bytes_.fetch_sub(f.wire_size());
    queue_.clear();
    // Frames still queued or in flight are lost (a write that completes
    // after this is not counted).
    frames_lost_ += frames_enqueued_ - frames_written_;
    close_reason_ = reason;
    for (PendingFlush& f : flushes_) f.promise.Resolve(FramesLost(peer_, frames_lost_, close_reason_));
    flushes_.clear();
    std::shared_ptr<ConnectionHandler> handler = std::move(handler_);
    if (handler && opened) handler->OnClose(*this, reason);
  }

  EventLoop::Impl& loop_;
  tcp::socket socket_;
#if FEDRT_WITH_TLS
  std::unique_ptr<TlsStream> tls_;  // over socket_ when options_.tls is set
#endif
  std::vector<asio::const_buffer> tls_buffers_;
  std::vector<uint8_t> tls_staging_;
  bool handshake_timed_out_ = false;
  bool in_loop_ = false;
  asio::steady_timer read_timer_;
  asio::steady_timer write_timer_;
  asio::steady_timer liveness_timer_;
  const ConnectionOptions options_;
  std::shared_ptr<ConnectionHandler> handler_;
  const uint64_t id_;
  std::atomic<uint32_t> receive_limit_;  // largest body accepted from the next prefix on
  Liveness liveness_;                     // heartbeats and the idle deadline, on the loop thread
  std::string peer_;
  std::atomic<State> state_{State::kHandshake};
  std::atomic<bool> send_closed_{false};  // Close/Abort called: Send refuses at once

  uint8_t header_[kFramePrefixBytes] = {};
  FrameBytes body_;
  std::size_t peeked_ = 0;        // body bytes read before PlacePayload
  MessageKind placed_kind_ = MessageKind::kNone;  // the kind the placed or consumed frame's head had
  uint8_t* placed_ = nullptr;     // where the current frame's payload goes, or null
  std::size_t placed_offset_ = 0;
  std::size_t placed_size_ = 0;
  bool consumed_ = false;         // the current frame's payload goes to ConsumePayload
  std::size_t consumed_bytes_ = 0;  // handed over so far
  std::size_t piece_fill_ = 0;    // bytes in piece_ not handed over yet
  struct PieceFree {
    void operator()(uint8_t* p) const { AlignedFree(p); }
  };
  std::unique_ptr<uint8_t, PieceFree> piece_;  // kPayloadPieceBytes, allocated at the first consumption
  uint64_t read_sequence_ = 0;
  uint64_t write_sequence_ = 0;

  // Direct writes (TryDirectSend): frames handed to the loop and not yet
  // written or dropped, and whether the socket is closed, under send_mutex_.
  std::mutex send_mutex_;
  std::size_t pending_frames_ = 0;
  bool socket_closed_ = false;

  // Frames waiting for the write in flight, oldest first. A vector, not a
  // deque: it holds no memory while empty (libstdc++'s deque allocates 512
  // bytes when constructed), and Write takes its front in one erase.
  std::vector<OutFrame> queue_;
  std::vector<OutFrame> in_flight_;
  std::vector<asio::const_buffer> buffers_;
  bool writing_ = false;
  std::atomic<std::size_t> queued_bytes_{0};

  // Flush bookkeeping, on the loop thread.
  struct PendingFlush {
    uint64_t target;  // frames_written_ that releases it
    FlushPromise promise;
  };
  uint64_t frames_enqueued_ = 0;
  uint64_t frames_written_ = 0;
  uint64_t frames_lost_ = 0;  // dropped by Enqueue or discarded by Finish
  Status close_reason_;
  std::vector<PendingFlush> flushes_;  // few are ever pending; a vector for queue_'s reason

  std::atomic<uint64_t> frames_sent_{0}, frames_received_{0}, bytes_sent_{0}, bytes_received_{0};
  std::atomic<uint64_t> heartbeats_sent_{0}, heartbeats_received_{0};
};

class TcpListenerImpl final : public TcpListener, public AcceptLoop {
 public:
  TcpListenerImpl(EventLoop::Impl& loop, tcp::acceptor acceptor, const ConnectionOptions& options,
                  std::shared_ptr<ConnectionHandler> handler)
      : AcceptLoop(loop, std::move(acceptor)), options_(options), handler_(std::move(handler)) {}

  void Start() { StartAccepting(); }
  uint16_t port() const override { return bound_port(); }
  void Close() override { CloseFromAnyThread(); }

  ListenerStats stats() const override {
    ListenerStats s;
    s.accepted = accepted_.load();
    s.descriptor_exhaustions = exhaustions_.load();
    s.other_accept_errors = other_errors_.load();
    s.tls_handshake_failures = tls_failures_.load();
    return s;
  }

 private:
  void OnAccepted(tcp::socket socket) override {
    auto connection = std::make_shared<TcpConnection>(loop_, std::move(socket), options_, handler_);
    auto self = std::static_pointer_cast<TcpListenerImpl>(shared_from_this());
    connection->Handshake(true, std::string(), options_.io_timeout_ms, [self, connection](const Status& status) {
      if (status.ok()) return connection->Start();
      if (status.code() == StatusCode::kCancelled) return;
      self->tls_failures_.fetch_add(1);
      Log(LogLevel::kWarning, "listener on port %u: %s; connection closed", unsigned{self->bound_port()},
          status.ToString().c_str());
    });
  }

  const ConnectionOptions options_;
  std::shared_ptr<ConnectionHandler> handler_;
  std::atomic<uint64_t> tls_failures_{0};
};

// One dial attempt: resolve, connect, or time out, whichever comes first.
struct Dial : std::enable_shared_from_this<Dial> {
  Dial(EventLoop::Impl& loop_impl, const ConnectionOptions& connection_options,
       std::shared_ptr<ConnectionHandler> connection_handler, ConnectCallback callback)
      : loop(loop_impl),
        resolver(loop_impl.io),
        socket(loop_impl.io),
        timer(loop_impl.io),
        options(connection_options),
        handler(std::move(connection_handler)),
        done(std::move(callback)) {}

  void Start(const std::string& host, uint16_t port, uint32_t timeout_ms) {
    dialled_host = host;
    timer.expires_after(std::chrono::milliseconds(timeout_ms));
    timer.async_wait([self = shared_from_this(), host, port](const std::error_code& ec) {
      if (ec) return;
      self->Complete(Status(StatusCode::kDeadlineExceeded,
                            "connecting to " + host + ":" + std::to_string(port) + " timed out" +
                                (self->connection ? " in the TLS handshake" : "")));
    });
    resolver.async_resolve(host, std::to_string(port),
                           [self = shared_from_this(), host](const std::error_code& ec,
                                                              const tcp::resolver::results_type& results) {
                             if (self->finished) return;
                             if (ec) {
                               return self->Complete(Status(StatusCode::kUnavailable,
                                                            "resolving " + host + ": " + ec.message()));
                             }
                             asio::async_connect(self->socket, results,
                                                 [self](const std::error_code& connect_ec, const tcp::endpoint&) {
                                                   self->OnConnect(connect_ec);
                                                 });
                           });
  }

  void OnConnect(const std::error_code& ec) {
    if (finished) return;
    if (ec) return Complete(Status(StatusCode::kUnavailable, "connect: " + ec.message()));
    connection = std::make_shared<TcpConnection>(loop, std::move(socket), options, handler);
    // The dial's timer bounds the TLS handshake too.
    connection->Handshake(false, dialled_host, 0, [self = shared_from_this()](Status status) {
      if (self->finished) return;
      if (!status.ok()) return self->Complete(std::move(status));
      self->finished = true;
      self->timer.cancel();
      std::shared_ptr<TcpConnection> opened = std::move(self->connection);
      opened->Start();
      self->done(std::shared_ptr<Connection>(opened));
    });
  }

  void Complete(Status status) {
    if (finished) return;
    finished = true;
    std::error_code ec;
    resolver.cancel();
    socket.close(ec);
    timer.cancel();
    if (connection) connection->Abort(status, false);  // a handshake in progress
    connection.reset();
    done(std::move(status));
  }

  EventLoop::Impl& loop;
  tcp::resolver resolver;
  tcp::socket socket;
  asio::steady_timer timer;
  ConnectionOptions options;
  std::shared_ptr<ConnectionHandler> handler;
  ConnectCallback done;
  std::string dialled_host;
  std::shared_ptr<TcpConnection> connection;  // while its TLS handshake runs
  bool finished = false;
};

// TLS settings that cannot work for this end: refused before any I/O.
Status CheckTls(const ConnectionOptions& options, bool listening) {
  if (!options.tls) return Status::Ok();
  if (!TlsSupported()) return Unsupported("this fedrt was built without TLS (FEDRT_WITH_TLS=OFF)");
  if (listening && !options.tls->can_listen()) {
    return InvalidArgument("a TLS listener needs a certificate and key file");
  }
  if (!listening && !options.tls->can_dial()) {
    return InvalidArgument("a TLS client needs a CA file to verify the server");
  }
  return Status::Ok();
}

}  // namespace

Status OpenAcceptor(const std::string& host, uint16_t port, tcp::acceptor* acceptor) {
  std::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) return InvalidArgument("listen address '" + host + "' is not an IP address");
  const tcp::endpoint endpoint(address, port);
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status(StatusCode::kIoError,
                  "cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  }
  return Status::Ok();
}

bool IsDescriptorExhaustion(const std::error_code& ec) {
  return ec == asio::error::no_descriptors || ec == std::errc::too_many_files_open_in_system ||
         ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
}

AcceptLoop::AcceptLoop(EventLoop::Impl& loop, tcp::acceptor acceptor)
    : loop_(loop), acceptor_(std::move(acceptor)), backoff_timer_(loop.io) {
  std::error_code ec;
  port_ = acceptor_.local_endpoint(ec).port();
}

void AcceptLoop::StartAccepting() {
  loop_.AddMember(shared_from_this());
  asio::dispatch(loop_.io, [self = shared_from_this()] { self->Accept(); });
}

void AcceptLoop::CloseFromAnyThread() {
  asio::dispatch(loop_.io, [self = shared_from_this()] { self->Stop(); });
}

void AcceptLoop::Accept() {
  if (closed_) return;
  acceptor_.async_accept([self = shared_from_this()](const std::error_code& ec, tcp::socket socket) {
    self->OnAccept(ec, std::move(socket));
  });
}

void AcceptLoop::OnAccept(const std::error_code& ec, tcp::socket socket) {
  if (closed_ || ec == asio::error::operation_aborted) return;
  if (ec) {
    if (IsDescriptorExhaustion(ec)) {
      exhaustions_.fetch_add(1);
      if (backoff_ms_ == 0) {
        Log(LogLevel::kWarning, "listener on port %u: %s; backing off and retrying", unsigned{port_},
            ec.message().c_str());
      }
      backoff_ms_ = backoff_ms_ == 0 ? 50 : std::min<uint32_t>(backoff_ms_ * 2, 1000);
      backoff_timer_.expires_after(std::chrono::milliseconds(backoff_ms_));
      backoff_timer_.async_wait([self = shared_from_this()](const std::error_code& timer_ec) {
        if (!timer_ec) self->Accept();
      });
      return;
    }
    other_errors_.fetch_add(1);
    Log(LogLevel::kWarning, "listener on port %u: accept failed: %s", unsigned{port_}, ec.message().c_str());
    return Accept();
  }
  if (backoff_ms_ != 0) {
    Log(LogLevel::kInfo, "listener on port %u: accepting again", unsigned{port_});
    backoff_ms_ = 0;
  }
  accepted_.fetch_add(1);
  OnAccepted(std::move(socket));
  Accept();
}

void AcceptLoop::Stop() {
  if (closed_) return;
  closed_ = true;
  std::error_code ec;
  acceptor_.close(ec);
  backoff_timer_.cancel();
  OnStopped();
}

Result<std::shared_ptr<TcpListener>> TcpListener::Listen(EventLoop& loop, const std::string& host,
                                                         uint16_t port, const ConnectionOptions& options,
                                                         std::shared_ptr<ConnectionHandler> handler) {
  FEDRT_RETURN_IF_ERROR(options.Validate());
  FEDRT_RETURN_IF_ERROR(CheckTls(options, true));
  tcp::acceptor acceptor(internal::ImplAccess::Of(loop).io);
  FEDRT_RETURN_IF_ERROR(OpenAcceptor(host, port, &acceptor));
  auto listener = std::make_shared<TcpListenerImpl>(internal::ImplAccess::Of(loop), std::move(acceptor), options, std::move(handler));
  listener->Start();
  return std::shared_ptr<TcpListener>(listener);
}

void TcpConnect(EventLoop& loop, const std::string& host, uint16_t port, const ConnectionOptions& options,
                std::shared_ptr<ConnectionHandler> handler, uint32_t timeout_ms, ConnectCallback done) {
  Status valid = options.Validate();
  if (valid.ok()) valid = CheckTls(options, false);
  auto dial = std::make_shared<Dial>(internal::ImplAccess::Of(loop), options, std::move(handler), std::move(done));
  asio::dispatch(internal::ImplAccess::Of(loop).io, [dial, host, port, timeout_ms, valid]() {
    if (!valid.ok()) return dial->Complete(valid);
    dial->Start(host, port, timeout_ms);
  });
}

Result<std::shared_ptr<Connection>> TcpConnectAndWait(EventLoop& loop, const std::string& host, uint16_t port,
                                                      const ConnectionOptions& options,
                                                      std::shared_ptr<ConnectionHandler> handler,
                                                      uint32_t timeout_ms) {
  if (loop.InLoopThread()) return Internal("TcpConnectAndWait called on the loop thread");
  auto promise = std::make_shared<std::promise<Result<std::shared_ptr<Connection>>>>();
  std::future<Result<std::shared_ptr<Connection>>> future = promise->get_future();
  TcpConnect(loop, host, port, options, std::move(handler), timeout_ms,
             [promise](Result<std::shared_ptr<Connection>> result) { promise->set_value(std::move(result)); });
  // The dial itself is bounded by timeout_ms; the margin covers a loop that is
  // not running at all.
  if (future.wait_for(std::chrono::milliseconds(uint64_t{timeout_ms} + 2000)) != std::future_status::ready) {
    return Status(StatusCode::kDeadlineExceeded, "connect did not complete: is the event loop running?");
  }
  return future.get();
}

}  // namespace transport
}  // namespace fedrt
