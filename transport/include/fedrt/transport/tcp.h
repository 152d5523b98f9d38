// TCP connections on standalone Asio (hidden behind connection.h).
//
// A TcpListener accepts connections and hands each one to the handler
// (OnOpen, then OnFrame / OnClose). It keeps accepting when the process runs
// out of file descriptors (EMFILE, ENFILE) or kernel memory: it logs the
// condition once, backs off (50 ms doubling to 1 s) and retries, so existing
// connections keep working and new ones are served as soon as descriptors free
// up. TcpConnect dials with a deadline. Sockets use TCP_NODELAY.
//
// With ConnectionOptions::tls (tls.h) every accepted socket first completes a
// TLS server handshake within io_timeout_ms, and TcpConnect a client
// handshake within its connect deadline. A failed handshake closes that
// socket with a logged reason (counted in ListenerStats); the handler only
// ever sees connections whose handshake succeeded, and the listener keeps
// serving others.
//
// Thread-safety: Listen and TcpConnect may be called from any thread; the
// listener's methods too. Completion callbacks run on the loop thread.
#ifndef FEDRT_TRANSPORT_TCP_H_
#define FEDRT_TRANSPORT_TCP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "fedrt/platform/status.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/event_loop.h"

namespace fedrt {
namespace transport {

struct ListenerStats {
  uint64_t accepted = 0;
  uint64_t descriptor_exhaustions = 0;  // accepts that failed with EMFILE/ENFILE/ENOBUFS/ENOMEM
  uint64_t other_accept_errors = 0;
  uint64_t tls_handshake_failures = 0;  // TLS listeners: handshakes refused, failed or timed out
};

class TcpListener {
 public:
  // Binds host:port (port 0 picks a free port; tests use "127.0.0.1", 0) and
  // starts accepting on `loop`. Every accepted connection reports to `handler`.
  static Result<std::shared_ptr<TcpListener>> Listen(EventLoop& loop, const std::string& host,
                                                     uint16_t port, const ConnectionOptions& options,
                                                     std::shared_ptr<ConnectionHandler> handler);
  virtual ~TcpListener() = default;

  virtual uint16_t port() const = 0;
  // Stops accepting; accepted connections stay open.
  virtual void Close() = 0;
  virtual ListenerStats stats() const = 0;
};

using ConnectCallback = std::function<void(Result<std::shared_ptr<Connection>>)>;

// Resolves and connects to host:port within `timeout_ms`, then calls `done`
// on the loop thread with the open connection (its handler's OnOpen has run)
// or kDeadlineExceeded / kUnavailable.
void TcpConnect(EventLoop& loop, const std::string& host, uint16_t port,
                const ConnectionOptions& options, std::shared_ptr<ConnectionHandler> handler,
                uint32_t timeout_ms, ConnectCallback done);

// Blocking form for threads other than the loop's (the loop must be running,
// e.g. an EventLoopThread).
Result<std::shared_ptr<Connection>> TcpConnectAndWait(EventLoop& loop, const std::string& host,
                                                      uint16_t port, const ConnectionOptions& options,
                                                      std::shared_ptr<ConnectionHandler> handler,
                                                      uint32_t timeout_ms);

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_TCP_H_
