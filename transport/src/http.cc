// The monitoring HTTP responder (contract in fedrt/transport/http.h): a
// request-head parser and, on the EventLoop, one exchange per connection:
// read the head, write the response, shut down the sending side, wait for the
// client to close, close. Every exchange has one deadline, from accept to
// close; nothing is kept between exchanges.
#include "fedrt/transport/http.h"

#include <asio.hpp>
#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "acceptor.h"
#include "event_loop_impl.h"
#include "fedrt/platform/log.h"
#include "impl_access.h"

namespace fedrt {
namespace transport {
namespace {

using asio::ip::tcp;

bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool IsVisible(char c) { return c > 0x20 && c < 0x7f; }

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

}  // namespace

Result<HttpRequest> ParseHttpRequestHead(std::string_view head) {
  const std::size_t line_end = head.find("\r\n");
  if (line_end == std::string_view::npos) return InvalidArgument("the request line does not end in CRLF");
  const std::string_view line = head.substr(0, line_end);
  // method SP request-target SP HTTP-version (RFC 9112, section 3).
  const std::size_t first = line.find(' ');
  const std::size_t second = first == std::string_view::npos ? first : line.find(' ', first + 1);
  if (second == std::string_view::npos || line.find(' ', second + 1) != std::string_view::npos) {
    return InvalidArgument("the request line is not 'METHOD TARGET VERSION'");
  }
  HttpRequest request;
  request.method = std::string(line.substr(0, first));
  const std::string_view target = line.substr(first + 1, second - first - 1);
  const std::string_view version = line.substr(second + 1);
  if (request.method.empty()) return InvalidArgument("no method");
  for (char c : request.method) {
    if (!IsTokenChar(c)) return InvalidArgument("the method is not a token");
  }
  if (target.empty() || target[0] != '/') return InvalidArgument("the target is not an absolute path");
  for (char c : target) {
    if (!IsVisible(c)) return InvalidArgument("the target holds a byte that is not visible ASCII");
  }
  request.path = std::string(target.substr(0, target.find('?')));
  if (version.size() != 8 || version.compare(0, 5, "HTTP/") != 0 || version[6] != '.' || version[5] < '0' ||
      version[5] > '9' || version[7] < '0' || version[7] > '9') {
    return InvalidArgument("the version is not HTTP/D.D");
  }
  if (version[5] != '1' || (version[7] != '0' && version[7] != '1')) {
    return Unsupported("HTTP version " + std::string(version.substr(5)) + "; this server speaks 1.0 and 1.1");
  }
  request.minor_version = version[7] - '0';
  // Header fields: name ":" OWS value OWS, up to the empty line.
  std::size_t at = line_end + 2;
  int hosts = 0;
  for (;;) {
    const std::size_t end = head.find("\r\n", at);
    if (end == std::string_view::npos) return InvalidArgument("the head does not end with an empty line");
    const std::string_view field = head.substr(at, end - at);
    at = end + 2;
    if (field.empty()) break;
    if (field[0] == ' ' || field[0] == '\t') return InvalidArgument("a folded header line");
    const std::size_t colon = field.find(':');
    if (colon == std::string_view::npos || colon == 0) return InvalidArgument("a header line without 'name:'");
    for (std::size_t i = 0; i < colon; ++i) {
      if (!IsTokenChar(field[i])) return InvalidArgument("a header name that is not a token");
    }
    for (char c : field.substr(colon + 1)) {
      if (c != ' ' && c != '\t' && !IsVisible(c) && static_cast<unsigned char>(c) < 0x80) {
        return InvalidArgument("a control character in a header value");
      }
    }
    if (EqualsIgnoringCase(field.substr(0, colon), "host")) hosts++;
  }
  if (at != head.size()) return InvalidArgument("bytes after the head");
  if (request.minor_version == 1 && hosts != 1) {
    return InvalidArgument("an HTTP/1.1 request needs exactly one Host header");
  }
  return request;
}

const char* HttpReasonPhrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

namespace {

std::string FormatResponse(const HttpResponse& response, bool allow_header) {
  std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " + HttpReasonPhrase(response.status) +
                    "\r\nContent-Type: " + response.content_type +
                    "\r\nContent-Length: " + std::to_string(response.body.size()) +
                    "\r\nCache-Control: no-store\r\nConnection: close\r\n";
  if (allow_header) out += "Allow: GET\r\n";
  out += "\r\n";
  out += response.body;
  return out;
}

HttpResponse ErrorResponse(int status, const std::string& reason) {
  HttpResponse response;
  response.status = status;
  response.body = reason + "\n";
  return response;
}

class HttpListenerImpl;

// One exchange. It holds itself (shared_from_this in every pending handler)
// and is held by the listener's set until it ends, so Close() can end it.
class HttpExchange : public std::enable_shared_from_this<HttpExchange> {
 public:
  HttpExchange(tcp::socket socket, std::shared_ptr<HttpListenerImpl> listener);
  void Start();
  void Stop();  // closes the socket; pending handlers see operation_aborted

 private:
  void Read();
  void OnHead();
  void Respond(const HttpResponse& response, bool allow_header = false);
  void Drain();
  void End();

  tcp::socket socket_;
  asio::steady_timer deadline_;
  std::shared_ptr<HttpListenerImpl> listener_;
  std::string head_;
  std::array<char, 1024> buffer_{};
  std::string response_;
  bool ended_ = false;
};

class HttpListenerImpl final : public HttpListener, public AcceptLoop {
 public:
  HttpListenerImpl(EventLoop::Impl& loop, tcp::acceptor acceptor, HttpHandler handler, const HttpOptions& options)
      : AcceptLoop(loop, std::move(acceptor)), handler_(std::move(handler)), options_(options) {}

  void Start() { StartAccepting(); }
  uint16_t port() const override { return bound_port(); }
  void Close() override { CloseFromAnyThread(); }

  const HttpOptions& options() const { return options_; }
  asio::io_context& io() { return loop_.io; }
  HttpResponse Handle(const std::string& path) { return handler_(path); }
  void Ended(const std::shared_ptr<HttpExchange>& exchange) { open_.erase(exchange); }

 private:
  void OnAccepted(tcp::socket socket) override {
    if (open_.size() >= options_.max_connections) {
      std::error_code ignored;
      socket.close(ignored);
      return;
    }
    auto exchange = std::make_shared<HttpExchange>(
        std::move(socket), std::static_pointer_cast<HttpListenerImpl>(shared_from_this()));
    open_.insert(exchange);
    exchange->Start();
  }

  void OnStopped() override {
    std::set<std::shared_ptr<HttpExchange>> open;
    open.swap(open_);
    for (const auto& exchange : open) exchange->Stop();
  }

  HttpHandler handler_;
  const HttpOptions options_;
  std::set<std::shared_ptr<HttpExchange>> open_;
};

HttpExchange::HttpExchange(tcp::socket socket, std::shared_ptr<HttpListenerImpl> listener)
    : socket_(std::move(socket)), deadline_(listener->io()), listener_(std::move(listener)) {}

void HttpExchange::Start() {
  deadline_.expires_after(std::chrono::milliseconds(listener_->options().request_timeout_ms));
  deadline_.async_wait([self = shared_from_this()](const std::error_code& ec) {
    if (ec) return;
    // Still reading the head: tell the client; otherwise just close.
    if (self->response_.empty()) {
      std::error_code ignored;
      self->socket_.cancel(ignored);  // the pending read returns without ending the exchange
      self->Respond(ErrorResponse(408, "the request did not arrive in time"));
      // The response gets one more timeout to be written.
      self->deadline_.expires_after(std::chrono::milliseconds(self->listener_->options().request_timeout_ms));
      self->deadline_.async_wait([self](const std::error_code& again) {
        if (!again) self->End();
      });
      return;
    }
    self->End();
  });
  Read();
}

void HttpExchange::Read() {
  socket_.async_read_some(asio::buffer(buffer_), [self = shared_from_this()](const std::error_code& ec,
                                                                            std::size_t n) {
    if (!self->response_.empty()) return;  // answered (a timeout) while this read was pending
    if (ec) return self->End();  // gone before its request was complete: nothing to answer
    self->head_.append(self->buffer_.data(), n);
    const std::size_t end = self->head_.find("\r\n\r\n");
    const std::size_t limit = self->listener_->options().max_request_bytes;
    if (end != std::string::npos && end + 4 <= limit) {
      // A GET has no body; bytes after the head are not read.
      self->head_.resize(end + 4);
      return self->OnHead();
    }
    if (self->head_.size() >= limit) {
      return self->Respond(ErrorResponse(431, "the request head is larger than " + std::to_string(limit) + " bytes"));
    }
    self->Read();
  });
}

void HttpExchange::OnHead() {
  Result<HttpRequest> request = ParseHttpRequestHead(head_);
  if (!request.ok()) {
    const int status = request.status().code() == StatusCode::kUnsupported ? 505 : 400;
    return Respond(ErrorResponse(status, request.status().message()));
  }
  if (request->method != "GET") {
    return Respond(ErrorResponse(405, "only GET is served"), /*allow_header=*/true);
  }
  Respond(listener_->Handle(request->path));
}

void HttpExchange::Respond(const HttpResponse& response, bool allow_header) {
  response_ = FormatResponse(response, allow_header);
  asio::async_write(socket_, asio::buffer(response_), [self = shared_from_this()](const std::error_code& ec,
                                                                                  std::size_t) {
    if (ec) return self->End();
    // Polite close: no more sending, then wait for the client's close, so a
    // request byte still in flight does not make the kernel reset the
    // connection before the client has read the response.
    std::error_code ignored;
    self->socket_.shutdown(tcp::socket::shutdown_send, ignored);
    self->Drain();
  });
}

void HttpExchange::Drain() {
  socket_.async_read_some(asio::buffer(buffer_), [self = shared_from_this()](const std::error_code& ec,
                                                                            std::size_t) {
    if (ec) return self->End();  // the client closed (or the deadline did)
    self->Drain();
  });
}

void HttpExchange::Stop() {
  ended_ = true;
  std::error_code ignored;
  deadline_.cancel();
  socket_.close(ignored);
}

void HttpExchange::End() {
  if (ended_) return;
  Stop();
  listener_->Ended(shared_from_this());
}

}  // namespace

Result<std::shared_ptr<HttpListener>> HttpListener::Listen(EventLoop& loop, const std::string& host, uint16_t port,
                                                           HttpHandler handler, const HttpOptions& options) {
  if (!handler) return InvalidArgument("an HTTP listener needs a handler");
  if (options.max_request_bytes < 16 || options.max_connections < 1 || options.request_timeout_ms < 1) {
    return InvalidArgument("HTTP options: a request of at least 16 bytes, 1 connection and 1 ms");
  }
  EventLoop::Impl& impl = internal::ImplAccess::Of(loop);
  tcp::acceptor acceptor(impl.io);
  FEDRT_RETURN_IF_ERROR(OpenAcceptor(host, port, &acceptor));
  auto listener = std::make_shared<HttpListenerImpl>(impl, std::move(acceptor), std::move(handler), options);
  listener->Start();
  return std::shared_ptr<HttpListener>(listener);
}

}  // namespace transport
}  // namespace fedrt
