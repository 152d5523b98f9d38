// A minimal HTTP/1.1 responder for monitoring endpoints (`/metrics`,
// `/healthz`) on the same EventLoop as the connections it reports on.
//
// It answers GET requests and nothing else, one request per connection
// ("Connection: close"): it reads the request head (at most
// HttpOptions::max_request_bytes, within request_timeout_ms), asks the
// handler for the response to the path, writes it, shuts its sending side
// down and closes once the client has closed too (or the timeout passes), so
// the client reads the whole response before the socket goes. A head that
// does not parse gets 400, another method 405, another HTTP version 505, a
// head that is too large 431 and a head that does not arrive in time 408;
// none of them disturbs the loop or other connections. Beyond
// max_connections open at once, new connections are closed unanswered.
//
// ParseHttpRequestHead is the parser on its own (no I/O), for tests and
// fuzzing. The listener is Asio-backed: it builds with FEDRT_WITH_ASIO only.
//
// Ownership: the listener keeps the handler; the caller keeps the listener
// (and the loop outlives it). Thread-safety: the handler runs on the loop
// thread, between other handlers, and must not block; Close() and port() may
// be called from any thread.
#ifndef FEDRT_TRANSPORT_HTTP_H_
#define FEDRT_TRANSPORT_HTTP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "fedrt/platform/status.h"

namespace fedrt {
namespace transport {

class EventLoop;

struct HttpRequest {
  std::string method;  // "GET", ...
  std::string path;    // the target up to '?', e.g. "/metrics"
  int minor_version = 1;  // HTTP/1.<minor_version>
};

// Parses a request head: the request line and the header lines, each ending
// in CRLF, up to and including the empty line. kInvalidArgument for anything
// malformed (a bad request line, a target that is not an absolute path of
// visible ASCII, a header line without a name and colon, a folded header, an
// HTTP/1.1 request without exactly one Host header); kUnsupported for a
// version other than HTTP/1.0 or 1.1.
Result<HttpRequest> ParseHttpRequestHead(std::string_view head);

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Called for every well-formed GET, with its path.
using HttpHandler = std::function<HttpResponse(const std::string& path)>;

struct HttpOptions {
  std::size_t max_request_bytes = 8192;  // request line and headers together
  uint32_t request_timeout_ms = 5000;    // the whole exchange, from accept to close
  std::size_t max_connections = 32;      // open at once
};

class HttpListener {
 public:
  // Binds host:port (port 0: a free one; see port()) and serves on `loop`.
  // kInvalidArgument for a host that is not an IP address, kIoError when the
  // address cannot be bound.
  static Result<std::shared_ptr<HttpListener>> Listen(EventLoop& loop, const std::string& host, uint16_t port,
                                                      HttpHandler handler, const HttpOptions& options = {});
  virtual ~HttpListener() = default;

  virtual uint16_t port() const = 0;
  // Stops accepting and closes the open connections.
  virtual void Close() = 0;
};

// "OK", "Not Found", ... for the status codes this responder sends.
const char* HttpReasonPhrase(int status);

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_HTTP_H_
