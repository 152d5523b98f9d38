// The monitoring HTTP responder (transport/http.h): the request-head parser
// on its own, and the listener on a real loop with 127.0.0.1 port 0.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "fedrt/transport/event_loop.h"
#include "fedrt/transport/http.h"

namespace fedrt {
namespace transport {
namespace {

TEST_CASE("the http parser takes a GET with a Host and cuts the query off the path") {
  Result<HttpRequest> r = ParseHttpRequestHead("GET /metrics?x=1 HTTP/1.1\r\nHost: a:1\r\nAccept: */*\r\n\r\n");
  REQUIRE(r.ok());
  CHECK(r->method == "GET");
  CHECK(r->path == "/metrics");
  CHECK(r->minor_version == 1);
  Result<HttpRequest> old = ParseHttpRequestHead("GET / HTTP/1.0\r\n\r\n");  // 1.0 needs no Host
  REQUIRE(old.ok());
  CHECK(old->minor_version == 0);
  CHECK(ParseHttpRequestHead("HEAD /x HTTP/1.1\r\nhost: y\r\n\r\n")->method == "HEAD");
}

TEST_CASE("the http parser refuses malformed heads and names other versions unsupported") {
  const char* const malformed[] = {
      "",
      "GET /metrics HTTP/1.1",                                    // no CRLF
      "GET /metrics HTTP/1.1\r\nHost: a\r\n",                     // no empty line
      "GET  /metrics HTTP/1.1\r\nHost: a\r\n\r\n",                // two spaces
      "GET /metrics\r\nHost: a\r\n\r\n",                          // HTTP/0.9 style
      "GET metrics HTTP/1.1\r\nHost: a\r\n\r\n",                  // not a path
      "G(T /metrics HTTP/1.1\r\nHost: a\r\n\r\n",                 // method not a token
      "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",                     // space in the target
      "GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n",                    // DEL in the target
      "GET / HTTPS/1.1\r\nHost: a\r\n\r\n",
      "GET / HTTP/1.x\r\nHost: a\r\n\r\n",
      "GET / HTTP/1.1\r\n\r\n",                                   // no Host
      "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",             // two Hosts
      "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\n: empty name\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n",           // control character
      "GET / HTTP/1.1\r\nHost: a\r\n\r\nbody",                    // bytes after the head
  };
  for (const char* head : malformed) {
    INFO(head);
    const Result<HttpRequest> r = ParseHttpRequestHead(head);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
  }
  CHECK(ParseHttpRequestHead("GET / HTTP/2.0\r\nHost: a\r\n\r\n").status().code() == StatusCode::kUnsupported);
  CHECK(ParseHttpRequestHead("GET / HTTP/1.2\r\nHost: a\r\n\r\n").status().code() == StatusCode::kUnsupported);
}

// A blocking client socket to 127.0.0.1:port (reads time out after 30 s).
int Dial(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Everything the server sends until it closes (or the read times out).
std::string ReadAll(int fd) {
  std::string out;
  char buffer[1024];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) out.append(buffer, static_cast<std::size_t>(n));
  return out;
}

std::string Exchange(uint16_t port, const std::string& request) {
  const int fd = Dial(port);
  if (fd < 0) return "connect failed";
  (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  const std::string answer = ReadAll(fd);
  ::close(fd);
  return answer;
}

TEST_CASE("the http listener answers each request on its loop, times out a silent client with 408 and closes the rest") {
  EventLoopThread thread;
  std::atomic<int> handled{0};
  HttpOptions options;
  options.request_timeout_ms = 200;
  options.max_connections = 2;
  options.max_request_bytes = 64;
  Result<std::shared_ptr<HttpListener>> listener = HttpListener::Listen(
      thread.loop(), "127.0.0.1", 0,
      [&](const std::string& path) {
        handled++;
        HttpResponse response;
        response.status = path == "/a" ? 200 : 404;
        response.body = "path " + path + "\n";
        return response;
      },
      options);
  REQUIRE(listener.ok());
  const uint16_t port = (*listener)->port();
  REQUIRE(port != 0);

  const std::string a = Exchange(port, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(a.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(a.find("Content-Length: 8\r\n") != std::string::npos);
  CHECK(a.find("Connection: close\r\n") != std::string::npos);
  CHECK(a.substr(a.size() - 8) == "path /a\n");
  CHECK(Exchange(port, "GET /b HTTP/1.1\r\nHost: x\r\n\r\n").rfind("HTTP/1.1 404 Not Found\r\n", 0) == 0);
  CHECK(Exchange(port, "DELETE /a HTTP/1.1\r\nHost: x\r\n\r\n").find("\r\nAllow: GET\r\n") != std::string::npos);
  CHECK(Exchange(port, "GET /" + std::string(100, 'a') + " HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 431 ", 0) == 0);
  CHECK(handled == 2);

  // Silent clients: each gets 408 after the timeout; while two are open a
  // third connection is closed unanswered.
  const int silent1 = Dial(port);
  const int silent2 = Dial(port);
  REQUIRE(silent1 >= 0);
  REQUIRE(silent2 >= 0);
  CHECK(ReadAll(silent1).rfind("HTTP/1.1 408 Request Timeout\r\n", 0) == 0);
  CHECK(ReadAll(silent2).rfind("HTTP/1.1 408 Request Timeout\r\n", 0) == 0);
  ::close(silent1);
  ::close(silent2);
  CHECK(Exchange(port, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0);

  // Close() ends open exchanges and stops accepting.
  const int open = Dial(port);
  REQUIRE(open >= 0);
  (*listener)->Close();
  CHECK(ReadAll(open).empty());
  ::close(open);
  CHECK(Exchange(port, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n") == "connect failed");
  CHECK(handled == 3);
}

TEST_CASE("the http listener refuses a host that is not an IP address and a port in use") {
  EventLoopThread thread;
  const auto handler = [](const std::string&) { return HttpResponse(); };
  CHECK(HttpListener::Listen(thread.loop(), "localhost", 0, handler).status().code() == StatusCode::kInvalidArgument);
  Result<std::shared_ptr<HttpListener>> first = HttpListener::Listen(thread.loop(), "127.0.0.1", 0, handler);
  REQUIRE(first.ok());
  const Result<std::shared_ptr<HttpListener>> second =
      HttpListener::Listen(thread.loop(), "127.0.0.1", (*first)->port(), handler);
  CHECK(second.status().code() == StatusCode::kIoError);
  (*first)->Close();
}

}  // namespace
}  // namespace transport
}  // namespace fedrt
