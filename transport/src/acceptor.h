// Private: opening a listening socket and the accept loop, shared by the
// frame listener (tcp.cc) and the HTTP responder (http.cc).
#ifndef FEDRT_TRANSPORT_SRC_ACCEPTOR_H_
#define FEDRT_TRANSPORT_SRC_ACCEPTOR_H_

#include <asio.hpp>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>

#include "event_loop_impl.h"
#include "fedrt/platform/status.h"

namespace fedrt {
namespace transport {

// Binds host:port (an IP address; port 0 picks a free one) with
// SO_REUSEADDR and listens. kInvalidArgument for a host that is not an IP
// address, kIoError naming host:port when it cannot be bound.
Status OpenAcceptor(const std::string& host, uint16_t port, asio::ip::tcp::acceptor* acceptor);

// The accept loop of a listener on an EventLoop: accepts until stopped and
// hands each socket to OnAccepted. Out of descriptors or kernel memory
// (EMFILE, ENFILE, ENOBUFS, ENOMEM) it logs once, backs off (50 ms doubling
// to 1 s) and retries, so open connections go on and new ones are served
// once descriptors free up; other accept errors are logged and accepting
// goes on. Everything runs on the loop thread except Close().
class AcceptLoop : public LoopMember, public std::enable_shared_from_this<AcceptLoop> {
 public:
  void ShutdownForLoopExit() override { Stop(); }

 protected:
  AcceptLoop(EventLoop::Impl& loop, asio::ip::tcp::acceptor acceptor);
  // After construction into a shared_ptr: joins the loop and accepts.
  void StartAccepting();
  // From any thread: Stop() on the loop thread.
  void CloseFromAnyThread();
  // Stops accepting; then OnStopped().
  void Stop();
  virtual void OnAccepted(asio::ip::tcp::socket socket) = 0;
  virtual void OnStopped() {}

  uint16_t bound_port() const { return port_; }
  EventLoop::Impl& loop_;
  std::atomic<uint64_t> accepted_{0}, exhaustions_{0}, other_errors_{0};

 private:
  void Accept();
  void OnAccept(const std::error_code& ec, asio::ip::tcp::socket socket);

  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer backoff_timer_;
  uint16_t port_ = 0;
  bool closed_ = false;
  uint32_t backoff_ms_ = 0;
};

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_SRC_ACCEPTOR_H_
